"""What routes cost on GCE at 1,000 nodes, measured with the emulator's call counter.

Runs the route controller's pass (list once, plan, create on 10 threads, as
``polyccm.controllers.route`` does) with the GCE provider against an in-process emulator:

1. 1,000 instances and their nodes; a first pass creates their 1,000 routes (not counted);
2. steady state: one more pass, counted: no write, and one filtered ``routes.list`` (one page per
   500 routes);
3. scale-up: 100 new instances and nodes, one pass, counted: 100 inserts, the same list, and
   the operation waits.

    uv run --no-sync python providers/gce/benchmarks/bench_routes.py [--nodes 1000 --new 100]
"""

from __future__ import annotations

import argparse
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from polyccm.cloud import Route
from polyccm.controllers.route import plan_routes
from polyccm_gce_emulator.testing import CLUSTER, emulator_thread, gce_provider, node_for

CLUSTER_CIDR = "10.64.0.0/10"


def pod_cidr(index: int) -> str:
    return f"10.{64 + index // 256}.{index % 256}.0/24"


def reconcile(provider: Any, nodes: list[Any], pool: ThreadPoolExecutor) -> None:
    routes = provider.routes()
    to_create, to_delete = plan_routes(nodes, routes.list_routes(CLUSTER), [CLUSTER_CIDR])
    assert not to_delete, to_delete
    futures = [
        pool.submit(routes.create_route, CLUSTER, n.uid, Route("", n.name, c), target=n)
        for n, c in to_create
    ]
    for future in futures:
        future.result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--new", type=int, default=100)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with emulator_thread() as emulator, ThreadPoolExecutor(10) as pool:
        emulator.control.configure(quotas={"ROUTES": 5000, "INSTANCES": 5000})
        api = emulator.api()
        total = args.nodes + args.new
        names = [f"node-{i:04d}" for i in range(total)]
        with ThreadPoolExecutor(32) as makers:
            list(makers.map(lambda n: api.create_instance(n, external_ip=False), names))
        nodes = [node_for(n, pod_cidr=pod_cidr(i)) for i, n in enumerate(names)]
        provider = gce_provider(emulator.endpoint)
        reconcile(provider, nodes[: args.nodes], pool)

        emulator.control.reset_calls()
        started = time.monotonic()
        reconcile(provider, nodes[: args.nodes], pool)
        steady, steady_s = dict(emulator.control.calls()), time.monotonic() - started

        emulator.control.reset_calls()
        started = time.monotonic()
        reconcile(provider, nodes, pool)
        scale, scale_s = dict(emulator.control.calls()), time.monotonic() - started

    print(f"steady state at {args.nodes} nodes ({steady_s:.2f} s): {steady}")
    print(f"scale-up of {args.new} nodes ({scale_s:.2f} s): {scale}")


if __name__ == "__main__":
    main()
