"""The control plane's lower bound: a bare client that makes the writes a CCM must make and
nothing else, with the same client (polyccm's), QPS, burst and number of workers.

It learns of new nodes and services from a watch, as a CCM's informers do, and then, for each
node, sets providerID, labels and no taint (one patch) and its addresses (one status patch);
for each service, adds the cleanup finalizer (one patch) and an ingress (one status patch);
for each service being deleted, removes the finalizer (one patch). No cloud is called. It runs
as its own process, as a CCM does (``python -m bench.bound``, until SIGTERM); the harness times
it exactly as it times a CCM.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import signal
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from polyccm.kube.api import NODES, SERVICES, KubeApi

from bench.ccms import Knobs
from bench.cluster import NAMESPACE, Tracker, has_ingress, initialised

FINALIZER = "service.kubernetes.io/load-balancer-cleanup"

Work = Callable[[], object]


class BareClient:
    """The bound's workers; :meth:`stop` ends them."""

    def __init__(self, kubeconfig: Path, knobs: Knobs) -> None:
        self.api = KubeApi.from_kubeconfig(
            str(kubeconfig),
            qps=knobs.kube_api_qps,
            burst=knobs.kube_api_burst,
            user_agent="polyccm-bench-bound",
        )
        self._work: queue.Queue[Work | None] = queue.Queue()
        self._queued: set[str] = set()
        self._lock = threading.Lock()
        self._workers = [
            threading.Thread(target=self._run, daemon=True)
            for _ in range(max(knobs.node_workers, knobs.service_workers))
        ]
        for worker in self._workers:
            worker.start()
        self._nodes = Tracker(self.api, NODES, self._see_node)
        self._services = Tracker(self.api, SERVICES, self._see_service, NAMESPACE)

    def _run(self) -> None:
        while True:
            work = self._work.get()
            if work is None:
                return
            # An object deleted meanwhile leaves nothing to do.
            with contextlib.suppress(Exception):
                work()

    def _once(self, key: str, work: Work) -> None:
        with self._lock:
            if key in self._queued:
                return
            self._queued.add(key)
        self._work.put(work)

    def _see_node(self, node: Mapping[str, Any]) -> bool:
        name = str(node["metadata"]["name"])
        if not initialised(node):
            self._once(f"node/{name}/{node['metadata'].get('uid')}", lambda: self._node(name))
        return True

    def _node(self, name: str) -> None:
        self.api.patch(
            NODES,
            name,
            {
                "metadata": {
                    "labels": {
                        "topology.kubernetes.io/region": "bench-region",
                        "topology.kubernetes.io/zone": "bench-zone-a",
                        "node.kubernetes.io/instance-type": "bench.large",
                    }
                },
                "spec": {"providerID": f"bench://{name}", "taints": []},
            },
        )
        self.api.patch(
            NODES,
            name,
            {"status": {"addresses": [{"type": "InternalIP", "address": "10.1.2.3"}]}},
            subresource="status",
        )

    def _see_service(self, service: Mapping[str, Any]) -> bool:
        meta = service["metadata"]
        name = str(meta["name"])
        uid = meta.get("uid")
        if meta.get("deletionTimestamp"):
            if FINALIZER in (meta.get("finalizers") or ()):
                self._once(f"svc-del/{name}/{uid}", lambda: self._release(name))
        elif not has_ingress(service):
            self._once(f"svc/{name}/{uid}", lambda: self._serve(name))
        return True

    def _serve(self, name: str) -> None:
        self.api.patch(SERVICES, name, {"metadata": {"finalizers": [FINALIZER]}}, NAMESPACE)
        self.api.patch(
            SERVICES,
            name,
            {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}},
            NAMESPACE,
            subresource="status",
        )

    def _release(self, name: str) -> None:
        self.api.patch(SERVICES, name, {"metadata": {"finalizers": None}}, NAMESPACE)

    def stop(self) -> None:
        self._nodes.stop()
        self._services.stop()
        for _ in self._workers:
            self._work.put(None)
        for worker in self._workers:
            worker.join(timeout=10)
        self.api.close()


def main(argv: list[str] | None = None) -> int:
    """Run the bare client until SIGTERM; print ``ready`` once it watches."""
    parser = argparse.ArgumentParser(prog="python -m bench.bound", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--kube-api-qps", type=float, default=Knobs.kube_api_qps)
    parser.add_argument("--kube-api-burst", type=int, default=Knobs.kube_api_burst)
    parser.add_argument("--workers", type=int, default=Knobs.node_workers)
    args = parser.parse_args(argv)
    knobs = Knobs(
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst,
        node_workers=args.workers,
        service_workers=args.workers,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    client = BareClient(args.kubeconfig, knobs)
    print("ready", flush=True)
    stop.wait()
    client.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
