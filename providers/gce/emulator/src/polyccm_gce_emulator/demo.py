"""``make demo PROVIDER=gce``: nodes, routes and a network load balancer on GCE, on this machine.

Starts the local control plane (etcd + kube-apiserver) and the GCE emulator as ``polyccm-dev up
--cloud gce`` does (its metadata server, application-default credentials and gce.conf), creates
VMs through the compute API in two zones of one region and their Node objects as kubelets with
``--cloud-provider=external`` register them (tainted, no providerID; pod CIDRs as the node IPAM
controller gives them), runs ``polyccm --provider gce`` with cloud routes, prints the nodes and
their routes, serves a LoadBalancer Service, deletes it, and shows nothing left in the cloud.
Everything listens on 127.0.0.1; no real cloud is contacted.
"""

from __future__ import annotations

import sys
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from polyccm.kube.api import NAMESPACES, NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_testing.demo import register_node, running_polyccm, say, service_gone, table, wait
from polyccm_testing.devenv import controlplane

from polyccm_gce_emulator.testing import REGION, ComputeApi

CLUSTER = "demo"
ZONES = ("us-central1-a", "us-central1-b")
MACHINES = (
    ("demo-node-1", ZONES[0], "e2-standard-4"),
    ("demo-node-2", ZONES[0], "n2-standard-2"),
    ("demo-node-3", ZONES[1], "e2-medium"),
)
CLUSTER_CIDR = "10.64.0.0/14"
NAMESPACE = "demo"


def make_cloud(compute: ComputeApi) -> None:
    """Three VMs through instances.insert; polyccm "runs on" the first (the metadata server
    describes the VM labelled ``polyccm-ccm-host``, and polyccm reads its zone from there)."""
    for index, (name, zone, machine) in enumerate(MACHINES):
        labels = {"polyccm-ccm-host": "true"} if index == 0 else None
        compute.create_instance(
            name, zone=zone, machine_type=machine, labels=labels, tags=[f"{CLUSTER}-node"]
        )


def running_ccm(state: Path, env: dict[str, str], kubeconfig: Path) -> AbstractContextManager[Path]:
    config = Path(env["POLYCCM_GCE_CLOUD_CONFIG"])
    # Both zones of the region are the cluster's; the zone itself comes from the metadata server.
    config.write_text(config.read_text() + "multizone = true\n")
    return running_polyccm(
        "gce",
        state=state,
        env=env,
        kubeconfig=kubeconfig,
        args=[
            f"--cloud-config={config}",
            f"--cluster-name={CLUSTER}",
            f"--cluster-cidr={CLUSTER_CIDR}",
            "--configure-cloud-routes=true",
        ],
    )


def network_ready(node: Node) -> bool:
    conditions = node.raw.get("status", {}).get("conditions") or ()
    return any(c["type"] == "NetworkUnavailable" and c["status"] == "False" for c in conditions)


def show_nodes(api: KubeApi) -> None:
    rows = []
    for raw in sorted(api.list(NODES)["items"], key=lambda n: n["metadata"]["name"]):
        node = Node(raw)
        addresses = ", ".join(f"{t}={a}" for t, a in node.addresses if t != "Hostname")
        rows.append(
            [
                node.name,
                node.provider_id,
                node.labels.get("topology.kubernetes.io/zone", ""),
                node.labels.get("node.kubernetes.io/instance-type", ""),
                addresses,
            ]
        )
    print(table(["NODE", "PROVIDER ID", "ZONE", "TYPE", "ADDRESSES"], rows), flush=True)


def show_routes(compute: ComputeApi) -> None:
    routes = compute.list_all("global/routes", filter='description = "k8s-node-route"')
    rows = [
        [
            r["name"],
            r["destRange"],
            r["nextHopInstance"].split("/projects/", 1)[-1],
            str(r["priority"]),
        ]
        for r in sorted(routes, key=lambda r: r["destRange"])
    ]
    print(table(["ROUTE", "DEST RANGE", "NEXT HOP INSTANCE", "PRIORITY"], rows), flush=True)


def run_scenario(api: KubeApi, compute: ComputeApi) -> None:
    """Wait for the nodes and their routes, serve a LoadBalancer Service, delete it."""
    wait(
        "nodes to be initialised and routed",
        lambda: all(
            not Node(n).has_taint(UNINITIALIZED_TAINT)
            and Node(n).addresses
            and network_ready(Node(n))
            for n in api.list(NODES)["items"]
        ),
    )
    show_nodes(api)
    show_routes(compute)
    api.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    api.create(
        SERVICES,
        {
            "metadata": {"name": "web", "namespace": NAMESPACE},
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        },
        NAMESPACE,
    )
    say("created Service demo/web of type LoadBalancer")

    def address() -> str | None:
        status = api.get(SERVICES, "web", NAMESPACE).get("status", {})
        ingress = status.get("loadBalancer", {}).get("ingress") or [{}]
        return str(ingress[0].get("ip") or "") or None

    ip = wait("the load balancer", address)
    print(f"Service demo/web: status.loadBalancer.ingress[0].ip = {ip}")
    rules = compute.list_all(f"regions/{REGION}/forwardingRules")
    pools = {p["name"]: p for p in compute.list_all(f"regions/{REGION}/targetPools")}
    rows = [
        [
            r["name"],
            r["IPAddress"],
            r["portRange"],
            str(len(pools.get(r["name"], {}).get("instances", ()))),
            pools.get(r["name"], {}).get("healthChecks", [""])[0].rsplit("/", 1)[-1],
        ]
        for r in rules
    ]
    print(table(["FORWARDING RULE", "IP", "PORTS", "INSTANCES", "HEALTH CHECK"], rows), flush=True)
    firewalls = sorted(
        f["name"] for f in compute.list_all("global/firewalls") if f["name"].startswith("k8s-")
    )
    print(f"firewalls: {', '.join(firewalls)}", flush=True)

    api.delete(SERVICES, "web", NAMESPACE)
    say("deleted the Service")
    wait("the Service to be finalised", lambda: service_gone(api, NAMESPACE, "web"))
    left = [
        *compute.list_all(f"regions/{REGION}/forwardingRules"),
        *compute.list_all(f"regions/{REGION}/targetPools"),
        *compute.list_all("global/httpHealthChecks"),
        *[f for f in compute.list_all("global/firewalls") if f["name"].startswith("k8s-")],
    ]
    print(f"load-balancer resources left in the cloud: {len(left)}")


def main() -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="polyccm-demo-") as directory:
        state = Path(directory)
        say("starting etcd, kube-apiserver and the GCE emulator on 127.0.0.1")
        plane = controlplane.start(state / "dev", clouds=("gce",), die_with_caller=True)
        try:
            api = plane.kube_api(qps=0)
            env: dict[str, Any] = dict(plane.env)
            compute = ComputeApi(env["POLYCCM_GCE_API_ENDPOINT"], env["GOOGLE_CLOUD_PROJECT"])
            make_cloud(compute)
            say(
                f"created {len(MACHINES)} VMs in {', '.join(ZONES)} with instances.insert; "
                f"polyccm runs on {MACHINES[0][0]}"
            )
            for index, (name, _, _) in enumerate(MACHINES):
                register_node(api, name, pod_cidr=f"10.64.{index}.0/24")
            say("registered their Nodes, tainted, with the pod CIDRs node IPAM gives them")
            with running_ccm(state, env, plane.kubeconfig) as log:
                say("running polyccm --provider gce")
                try:
                    run_scenario(api, compute)
                except SystemExit:
                    print("--- polyccm log (last lines) ---", file=sys.stderr)
                    print(log.read_text()[-4000:], file=sys.stderr)
                    raise
        finally:
            say("stopping everything")
            plane.stop()
    say(f"done in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
