"""``make demo PROVIDER=packet``: polyccm on the Equinix Metal API, on this machine.

Starts the local control plane (etcd + kube-apiserver) and the Metal emulator, creates devices
through ``POST /projects/{id}/devices`` and their Node objects as kubelets with
``--cloud-provider=external`` register them (tainted, no providerID), runs
``polyccm --provider packet`` in the ``kube-vip://`` mode with the variables upstream's CCM
reads, shows the nodes and their BGP peer annotations, creates a LoadBalancer Service and shows
the Elastic IP reserved for it, then deletes the Service and shows the address released.
Everything listens on 127.0.0.1.
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
from polyccm_packet.bgp import ANNOTATION_PREFIX
from polyccm_testing.demo import register_node, running_polyccm, say, service_gone, table, wait
from polyccm_testing.devenv import controlplane

from polyccm_packet_emulator.testing import MetalApi, MetalCloudUnderTest, control

NAMESPACE = "demo"
PLANS = ("c3.small.x86", "m3.large.x86", "c3.small.x86")


def running_ccm(
    state: Path, env: Mapping[str, str], kubeconfig: Path, extra: Sequence[str] = ()
) -> AbstractContextManager[Path]:
    """``polyccm --provider packet`` with ``env`` (no cloud config: upstream reads the
    environment); yields its log file."""
    return running_polyccm(
        "packet",
        state=state,
        env=env,
        kubeconfig=kubeconfig,
        args=["--configure-cloud-routes=false", *extra],
    )


def bgp_peers(raw: Mapping[str, Any]) -> dict[str, str]:
    annotations = raw["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k.startswith(ANNOTATION_PREFIX)}


def nodes_ready(api: KubeApi) -> bool:
    return all(
        not Node(n).has_taint(UNINITIALIZED_TAINT) and Node(n).addresses
        for n in api.list(NODES)["items"]
    )


def show_nodes(api: KubeApi) -> None:
    rows = []
    for raw in sorted(api.list(NODES)["items"], key=lambda n: n["metadata"]["name"]):
        node = Node(raw)
        labels = node.labels
        peers = bgp_peers(raw)
        addresses = ", ".join(f"{t}={a}" for t, a in node.addresses if t != "Hostname")
        rows.append([node.name, node.provider_id, labels.get("topology.kubernetes.io/region", ""),
                     labels.get("node.kubernetes.io/instance-type", ""), addresses])  # fmt: skip
        for key in sorted(peers):
            print(f"{node.name}: {key}={peers[key]}")
    print(table(["NODE", "PROVIDER ID", "METRO", "PLAN", "ADDRESSES"], rows))


def ingress_ip(api: KubeApi) -> str | None:
    status = api.get(SERVICES, "web", NAMESPACE).get("status", {})
    ingress = status.get("loadBalancer", {}).get("ingress") or [{}]
    return str(ingress[0].get("ip") or "") or None


def run_scenario(api: KubeApi, cloud: MetalCloudUnderTest) -> None:
    wait("nodes to be initialised", lambda: nodes_ready(api))
    api.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    api.create(SERVICES, {"metadata": {"name": "web", "namespace": NAMESPACE},
                          "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                                   "ports": [{"port": 80, "targetPort": 8080}]}},
               NAMESPACE)  # fmt: skip
    say("created Service demo/web of type LoadBalancer (BGP sessions and peers follow it)")
    wait("the nodes' BGP peers", lambda: all(bgp_peers(n) for n in api.list(NODES)["items"]))
    show_nodes(api)
    ip = wait("the Elastic IP", lambda: ingress_ip(api))
    print(f"Service demo/web: status.loadBalancer.ingress[0].ip = {ip}")
    rows = [[r["id"], f"{r['address']}/{r['cidr']}", r["metro"]["code"], " ".join(r["tags"])]
            for r in cloud.elastic_ips()]  # fmt: skip
    print(table(["RESERVATION", "ADDRESS", "METRO", "TAGS"], rows), flush=True)
    api.delete(SERVICES, "web", NAMESPACE)

    wait("the Service to be finalised", lambda: service_gone(api, NAMESPACE, "web"))
    say("deleted the Service")
    print(f"Elastic IPs left in the project: {len(cloud.elastic_ips())}")


def main() -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="polyccm-demo-") as directory:
        state = Path(directory)
        say("starting etcd, kube-apiserver and the Equinix Metal emulator on 127.0.0.1")
        plane = controlplane.start(state / "dev", clouds=("packet",), die_with_caller=True)
        try:
            api = plane.kube_api(qps=0)
            env = {**plane.env, "METAL_LOAD_BALANCER": "kube-vip://", "METAL_LOCAL_ASN": "65000"}
            metal = MetalApi(env)
            devices = []
            for index, plan in enumerate(PLANS):
                devices += metal.create_devices(1, prefix=f"worker-{index}", plan=plan)
            say(f"created {len(devices)} devices with POST /projects/{{id}}/devices in metro da")
            for device in devices:
                register_node(api, device["hostname"])
            say("registered their Nodes, tainted as `kubelet --cloud-provider=external` does")
            with running_ccm(state, env, plane.kubeconfig) as log:
                say("running polyccm --provider packet (METAL_LOAD_BALANCER=kube-vip://)")
                try:
                    run_scenario(api, MetalCloudUnderTest(env))
                except SystemExit:
                    print("--- polyccm log (last lines) ---", file=sys.stderr)
                    print(log.read_text()[-4000:], file=sys.stderr)
                    raise
            calls = control(env).calls()
            print("Metal API calls:", ", ".join(f"{k}={v}" for k, v in sorted(calls.items())))
        finally:
            say("stopping everything")
            plane.stop()
    say(f"done in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
