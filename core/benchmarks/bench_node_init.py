"""Cloud calls and wall time to initialise N nodes registered at once (a scale-up, or a
controller restart in front of a backlog).

Starts a real control plane in a temporary directory, registers N nodes the way a kubelet with
``--cloud-provider=external`` does (tainted, no providerID), runs the manager against the fake
cloud, and reports how many cloud calls initialisation cost, once with a cloud that answers
lookups in bulk and once with one that answers one instance per call (upstream's shape).
Not a test: numbers, not assertions. Run from the workspace root:

    uv run python core/benchmarks/bench_node_init.py [--nodes 500]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from polyccm.app.manager import ControllerManager
from polyccm.app.options import LeaderElection, ManagerOptions
from polyccm.kube.api import NODES, KubeApi, load_configuration
from polyccm.objects import UNINITIALIZED_TAINT
from polyccm_testing.devenv import controlplane
from polyccm_testing.devenv.cleanup import delete_all_nodes
from polyccm_testing.fake import FakeCloud


def register_nodes(api: KubeApi, cloud: FakeCloud, count: int) -> None:
    for i in range(count):
        name = f"bench-{i:05d}"
        cloud.add_instance(name)
        api.create(
            NODES,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name},
                "spec": {
                    "taints": [
                        {"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
                    ]
                },
            },
        )


def tainted(api: KubeApi) -> int:
    items = api.list(NODES)["items"]
    return sum(
        any(t.get("key") == UNINITIALIZED_TAINT for t in n.get("spec", {}).get("taints") or ())
        for n in items
    )


def run(kubeconfig: Path, count: int, *, bulk: bool) -> tuple[float, dict[str, int]]:
    admin = KubeApi(load_configuration(str(kubeconfig)), qps=0)
    delete_all_nodes(admin)
    cloud = FakeCloud(bulk=bulk)
    register_nodes(admin, cloud, count)
    options = ManagerOptions(
        provider="fake",
        kubeconfig=str(kubeconfig),
        secure_port=0,
        configure_cloud_routes=False,
        leader_election=LeaderElection(enabled=False),
        kube_api_qps=0,
    )
    manager = ControllerManager(options, cloud, KubeApi(load_configuration(str(kubeconfig)), qps=0))
    stop = threading.Event()
    thread = threading.Thread(target=manager.run, args=(stop,), daemon=True)
    started = time.monotonic()
    thread.start()
    while tainted(admin):
        time.sleep(0.5)
    elapsed = time.monotonic() - started
    stop.set()
    thread.join(timeout=60)
    delete_all_nodes(admin)
    admin.close()
    return elapsed, dict(cloud.counts())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        plane = controlplane.start(Path(state))
        try:
            print(f"{'cloud':<12} {'nodes':>6} {'seconds':>8}  cloud calls")
            for bulk in (True, False):
                elapsed, calls = run(plane.kubeconfig, args.nodes, bulk=bulk)
                label = "bulk" if bulk else "one-by-one"
                print(f"{label:<12} {args.nodes:>6} {elapsed:>8.1f}  {calls}")
        finally:
            plane.stop()


if __name__ == "__main__":
    main()
