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

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from polyccm.kube.api import NAMESPACES, NODES, SERVICES, ApiError, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_testing.devenv import controlplane

from polyccm_packet.bgp import ANNOTATION_PREFIX
from polyccm_packet.testing import MetalApi, MetalCloudUnderTest, control

NAMESPACE = "demo"
PLANS = ("c3.small.x86", "m3.large.x86", "c3.small.x86")
T = TypeVar("T")


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def wait(what: str, check: Callable[[], T | None], timeout: float = 45.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.25)
    raise SystemExit(f"demo: timed out waiting for {what}")


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])


def register_node(api: KubeApi, name: str) -> None:
    taint = {"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                       "spec": {"taints": [taint]}})  # fmt: skip


@contextmanager
def running_ccm(
    state: Path, env: Mapping[str, str], kubeconfig: Path, extra: Sequence[str] = ()
) -> Iterator[Path]:
    """``polyccm --provider packet`` with ``env`` (the ``METAL_*`` variables); yields its log."""
    log = state / "polyccm.log"
    command = [sys.executable, "-m", "polyccm.cli", "--provider=packet",
               f"--kubeconfig={kubeconfig}", "--leader-elect=false",
               "--configure-cloud-routes=false", "--bind-address=127.0.0.1", "--secure-port=0",
               "--node-monitor-period=2s", *extra]  # fmt: skip
    with log.open("w") as output:
        process = subprocess.Popen(
            command, env={**os.environ, **env}, stdout=output, stderr=subprocess.STDOUT
        )
        try:
            yield log
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def bgp_peers(raw: Mapping[str, Any]) -> dict[str, str]:
    annotations = raw["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k.startswith(ANNOTATION_PREFIX)}


def nodes_ready(api: KubeApi) -> bool:
    return all(
        not Node(n).has_taint(UNINITIALIZED_TAINT) and Node(n).addresses and bgp_peers(n)
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
                     labels.get("topology.kubernetes.io/zone", ""),
                     labels.get("node.kubernetes.io/instance-type", ""), addresses])  # fmt: skip
        for key in sorted(peers):
            print(f"{node.name}: {key}={peers[key]}")
    print(table(["NODE", "PROVIDER ID", "METRO", "FACILITY", "PLAN", "ADDRESSES"], rows))


def ingress_ip(api: KubeApi) -> str | None:
    status = api.get(SERVICES, "web", NAMESPACE).get("status", {})
    ingress = status.get("loadBalancer", {}).get("ingress") or [{}]
    return str(ingress[0].get("ip") or "") or None


def run_scenario(api: KubeApi, cloud: MetalCloudUnderTest) -> None:
    wait("nodes to be initialised and annotated with their BGP peers", lambda: nodes_ready(api))
    show_nodes(api)
    api.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    api.create(SERVICES, {"metadata": {"name": "web", "namespace": NAMESPACE},
                          "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                                   "ports": [{"port": 80, "targetPort": 8080}]}},
               NAMESPACE)  # fmt: skip
    say("created Service demo/web of type LoadBalancer")
    ip = wait("the Elastic IP", lambda: ingress_ip(api))
    print(f"Service demo/web: status.loadBalancer.ingress[0].ip = {ip}")
    rows = [[r["id"], f"{r['address']}/{r['cidr']}", r["metro"]["code"], " ".join(r["tags"])]
            for r in cloud.elastic_ips()]  # fmt: skip
    print(table(["RESERVATION", "ADDRESS", "METRO", "TAGS"], rows), flush=True)
    api.delete(SERVICES, "web", NAMESPACE)

    def gone() -> bool:
        try:
            api.get(SERVICES, "web", NAMESPACE)
        except ApiError as error:
            return error.not_found
        return False

    wait("the Service to be finalised", gone)
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
