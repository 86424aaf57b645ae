"""``make demo PROVIDER=digitalocean``: polyccm on DigitalOcean's API, on this machine.

Starts the local control plane (etcd + kube-apiserver) and the DigitalOcean emulator (over TLS,
with the control plane's CA), creates droplets through ``POST /v2/droplets`` and their Node
objects as kubelets with ``--cloud-provider=external`` register them (tainted, no providerID),
runs ``polyccm --provider digitalocean`` with the variables upstream's CCM reads, creates a
LoadBalancer Service, shows the load balancer and the id annotation written back, then deletes
the Service and shows nothing left. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from polyccm.kube.api import NAMESPACES, NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_digitalocean.annotations import LOAD_BALANCER_ID
from polyccm_testing.demo import register_node, running_polyccm, say, service_gone, table, wait
from polyccm_testing.devenv import controlplane

from polyccm_digitalocean_emulator.testing import DigitalOceanApi, control

NAMESPACE = "demo"
SIZES = ("s-2vcpu-4gb", "s-1vcpu-2gb", "s-1vcpu-1gb")


def make_droplets(cloud: DigitalOceanApi) -> list[dict[str, Any]]:
    """Three droplets of different sizes, one with IPv6, made through the API."""
    droplets: list[dict[str, Any]] = []
    for index, size in enumerate(SIZES):
        droplets += cloud.create_droplets(1, prefix=f"worker-{index}", size=size,
                                          ipv6=index == 0, tags=["k8s"])  # fmt: skip
    return droplets


def running_ccm(
    state: Path, env: Mapping[str, str], kubeconfig: Path, extra: Sequence[str] = ()
) -> AbstractContextManager[Path]:
    """``polyccm --provider digitalocean`` with ``env`` (no cloud config: upstream reads the
    environment); yields its log file."""
    return running_polyccm(
        "digitalocean",
        state=state,
        env=env,
        kubeconfig=kubeconfig,
        args=["--configure-cloud-routes=false", *extra],
    )


def show_nodes(api: KubeApi) -> None:
    rows = []
    for raw in sorted(api.list(NODES)["items"], key=lambda n: n["metadata"]["name"]):
        node = Node(raw)
        addresses = ", ".join(f"{t}={a}" for t, a in node.addresses if t != "Hostname")
        labels = node.labels
        rows.append([node.name, node.provider_id, labels.get("topology.kubernetes.io/region", ""),
                     labels.get("node.kubernetes.io/instance-type", ""), addresses])  # fmt: skip
    print(table(["NODE", "PROVIDER ID", "REGION", "SIZE", "ADDRESSES"], rows), flush=True)


def nodes_initialised(api: KubeApi) -> bool:
    return all(
        not Node(n).has_taint(UNINITIALIZED_TAINT) and Node(n).addresses
        for n in api.list(NODES)["items"]
    )


def create_service(api: KubeApi) -> None:
    api.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    api.create(SERVICES, {
        "metadata": {"name": "web", "namespace": NAMESPACE, "annotations": {
            "service.beta.kubernetes.io/do-loadbalancer-http-ports": "80",
            "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol": "true"}},
        "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }, NAMESPACE)  # fmt: skip


def ingress_ip(api: KubeApi) -> str | None:
    status = api.get(SERVICES, "web", NAMESPACE).get("status", {})
    ingress = status.get("loadBalancer", {}).get("ingress") or [{}]
    return str(ingress[0].get("ip") or "") or None


def delete_service(api: KubeApi) -> None:
    api.delete(SERVICES, "web", NAMESPACE)

    wait("the Service to be finalised", lambda: service_gone(api, NAMESPACE, "web"))


def run_scenario(api: KubeApi, cloud: DigitalOceanApi) -> None:
    """Wait for the nodes, serve a LoadBalancer Service, delete it, and show what is left."""
    wait("nodes to be initialised", lambda: nodes_initialised(api))
    show_nodes(api)
    create_service(api)
    say("created Service demo/web of type LoadBalancer (http on port 80, proxy protocol)")
    ip = wait("the load balancer", lambda: ingress_ip(api))
    annotation = api.get(SERVICES, "web", NAMESPACE)["metadata"]["annotations"][LOAD_BALANCER_ID]
    balancers = cloud.ok("GET", "/v2/load_balancers")["load_balancers"]
    rows = [[b["id"], b["name"], b["status"], b["ip"], str(len(b["droplet_ids"])),
             ", ".join(f"{r['entry_protocol']}:{r['entry_port']}->{r['target_port']}"
                       for r in b["forwarding_rules"])] for b in balancers]  # fmt: skip
    print(f"Service demo/web: status.loadBalancer.ingress[0].ip = {ip}")
    print(f"Service demo/web: {LOAD_BALANCER_ID} = {annotation}")
    print(table(["LB ID", "NAME", "STATUS", "IP", "DROPLETS", "RULES"], rows), flush=True)
    delete_service(api)
    say("deleted the Service")
    left = cloud.ok("GET", "/v2/load_balancers")["load_balancers"]
    print(f"load balancers left in the cloud: {len(left)}")


def main() -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="polyccm-demo-") as directory:
        state = Path(directory)
        say("starting etcd, kube-apiserver and the DigitalOcean emulator on 127.0.0.1")
        plane = controlplane.start(state / "dev", clouds=("digitalocean",), die_with_caller=True)
        try:
            api = plane.kube_api(qps=0)
            env = dict(plane.env)
            control(env).configure(lb_active_delay=1.0)
            cloud = DigitalOceanApi(env)
            droplets = make_droplets(cloud)
            say(f"created {len(droplets)} droplets with POST /v2/droplets in nyc3")
            for droplet in droplets:
                register_node(api, droplet["name"])
            say(
                "registered their Nodes, tainted as `kubelet --cloud-provider=external` leaves them"
            )
            with running_ccm(state, {**env, "REGION": "nyc3"}, plane.kubeconfig) as log:
                say("running polyccm --provider digitalocean (DO_OVERRIDE_URL, DO_ACCESS_TOKEN)")
                try:
                    run_scenario(api, cloud)
                except SystemExit:
                    print("--- polyccm log (last lines) ---", file=sys.stderr)
                    print(log.read_text()[-4000:], file=sys.stderr)
                    raise
            calls = control(env).calls()
            print(
                "DigitalOcean API calls:", ", ".join(f"{k}={v}" for k, v in sorted(calls.items()))
            )
        finally:
            say("stopping everything")
            plane.stop()
    say(f"done in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
