"""Fault conformance: kube-apiserver restarted in the middle of a burst (:class:`ApiServerRestart`,
mixed into :class:`~polyccm_testing.conformance.FaultConformance`).

``test_fault_an_api_server_restart_mid_burst_serves_every_service_once``: instances are made
through the cloud's API, ``polyccm`` runs as a process, and a burst registers
:data:`NODE_COUNT` Nodes (as kubelets do: tainted, then Ready) and :data:`SERVICE_COUNT`
LoadBalancer Services on a few threads, each retrying until the API server takes it. Once part
of the burst is in and ``polyccm`` has written to the cloud (or most of the burst is in),
kube-apiserver is stopped and
started again on the same etcd, port and certificates (as an upgrade or a crash of the control
plane does: :func:`polyccm_testing.devenv.controlplane.apiserver_stopped`). Afterwards every
Node is initialised (providerID set, the uninitialized taint gone), every Service is served,
the cloud holds exactly one load balancer per Service (and never held two for one, polled all
along), and once the Services are deleted nothing of the cluster is left in the cloud.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import pytest
from polyccm.cloud import LoadBalancer
from polyccm.kube.api import NODES, SERVICES, ApiError, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node

from polyccm_testing.kubeobjects import make_node, make_service, wait_for

if TYPE_CHECKING:
    from polyccm_testing.conformance.faults import FaultCloudUnderTest, Processes

NODE_COUNT = 6
SERVICE_COUNT = 4
DOWN_AFTER = 0.4
"""Share of the burst registered when the API server goes down: once polyccm has written to the
cloud, or at the latest once :data:`LATEST` of it is registered."""
LATEST = 0.8
DOWN_SECONDS = 1.0
"""How long kube-apiserver stays down (its start then takes a few seconds more)."""
RETRY_FOR = 90.0
"""Seconds a registration keeps trying while the API server is away."""
SETTLE_TIMEOUT = 120.0
PACE = 1.0
"""Seconds between two registrations of the burst."""


@dataclass
class Burst:
    """Registers Nodes and Services from a pool of threads, each retrying until the API server
    takes it, as kubelets and users do."""

    api: KubeApi
    namespace: str
    nodes: list[str] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def registered(self) -> int:
        with self.lock:
            return len(self.nodes) + len(self.services)

    @staticmethod
    def _until_accepted(action: Callable[[], object]) -> None:
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                action()
                return
            except ApiError as error:
                if error.conflict:  # made by an attempt whose answer was lost
                    return
                if time.monotonic() > deadline:
                    raise
            except Exception:  # connection refused while it is down
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def node(self, name: str) -> None:
        self._until_accepted(lambda: make_node(self.api, name))
        with self.lock:
            self.nodes.append(name)

    def service(self, name: str) -> None:
        self._until_accepted(lambda: make_service(self.api, self.namespace, name))
        with self.lock:
            self.services.append(name)


def _after(delay: float, action: Callable[[], None]) -> None:
    time.sleep(delay)
    action()


def _initialised(api: KubeApi, names: set[str]) -> bool:
    nodes = {item["metadata"]["name"]: Node(item) for item in api.list(NODES)["items"]}
    return names <= set(nodes) and all(
        nodes[n].provider_id and not nodes[n].has_taint(UNINITIALIZED_TAINT) for n in names
    )


def _served(api: KubeApi, namespace: str, count: int) -> bool:
    services = api.list(SERVICES, namespace)["items"]
    ingress = [(s.get("status") or {}).get("loadBalancer", {}).get("ingress") for s in services]
    return len(services) == count and all(ingress)


def one_each(counts: Mapping[str, int], services: int) -> str:
    """What is wrong with the cloud's load balancers per Service (``""``: one each)."""
    held = {key: n for key, n in counts.items() if n}
    if len(held) != services or any(n != 1 for n in held.values()):
        return f"{services} Services, load balancers per Service in the cloud: {held}"
    return ""


class ApiServerRestart:
    """The API-server restart promise (uses :class:`FaultConformance`'s fixtures)."""

    @pytest.mark.timeout(3 * SETTLE_TIMEOUT + 120)
    def test_fault_an_api_server_restart_mid_burst_serves_every_service_once(  # noqa: PLR0917
        self,
        cloud: FaultCloudUnderTest,
        kit_fault_load_balancer: LoadBalancer,
        kit_processes: Processes,
        control_plane: Any,
        kube_api: KubeApi,
        namespace: str,
        clean_nodes: None,
    ) -> None:
        from polyccm_testing.conformance.faults import START_TIMEOUT, DoubleWatch

        # Its imports done while the cloud is arranged (polyccm_testing.warm_start).
        process = kit_processes.prepare("restart", "--leader-elect=false")
        tag = secrets.token_hex(2)
        names = [cloud.create_instance(f"restart-{i}-{tag}") for i in range(NODE_COUNT)]
        baseline = cloud.cluster_resources()
        kit_processes.go(process)
        started_in_time = kit_processes.wait_started(process, 2 * START_TIMEOUT)
        assert started_in_time, f"polyccm did not start; log:\n{kit_processes.tail()}"
        burst = Burst(kube_api, namespace)
        work: list[Callable[[], None]] = [partial(burst.node, name) for name in names]
        for index in range(SERVICE_COUNT):  # spread among the nodes
            work.insert(2 * index + 1, partial(burst.service, f"restart-{index}"))
        writes = cloud.write_calls()
        started = time.monotonic()
        with DoubleWatch(cloud, getattr(cloud, "poll_interval", 0.2)) as watch:
            with ThreadPoolExecutor(len(work), "kubelet") as pool:
                # Paced, as a scale-up and a deployment arrive: the burst outlasts the restart.
                futures = [
                    pool.submit(_after, index * PACE, item) for index, item in enumerate(work)
                ]
                wait_for(
                    lambda: (
                        burst.registered >= DOWN_AFTER * len(work)
                        and (cloud.write_calls() > writes or burst.registered >= LATEST * len(work))
                    ),
                    60,
                    "the burst under way",
                )
                with control_plane.apiserver_stopped():
                    with burst.lock:
                        down_at = (len(burst.nodes), len(burst.services))
                    writing = cloud.write_calls() > writes
                    time.sleep(DOWN_SECONDS)
                back = time.monotonic() - started
                for future in futures:
                    future.result()
            wait_for(
                lambda: _initialised(kube_api, set(names)),
                SETTLE_TIMEOUT,
                f"every node initialised; log:\n{kit_processes.tail()}",
            )
            wait_for(
                lambda: _served(kube_api, namespace, SERVICE_COUNT),
                SETTLE_TIMEOUT,
                f"every Service served; log:\n{kit_processes.tail()}",
            )
            served = time.monotonic() - started
            wrong = one_each(cloud.load_balancers_per_service(), SERVICE_COUNT)
            for index in range(SERVICE_COUNT):
                kube_api.delete(SERVICES, f"restart-{index}", namespace)
            wait_for(
                lambda: not kube_api.list(SERVICES, namespace)["items"],
                SETTLE_TIMEOUT,
                f"every Service finalised; log:\n{kit_processes.tail()}",
            )
            time.sleep(1.0)  # one more look of the watch after the last delete
        kit_processes.close()
        left = cloud.cluster_resources() - baseline
        print(
            f"API server down after {down_at[0]} nodes and {down_at[1]} Services, back "
            f"{back:.1f}s into the burst (polyccm had {'' if writing else 'not yet '}written to "
            f"the cloud); {NODE_COUNT} nodes initialised and {SERVICE_COUNT} "
            f"Services served {served:.1f}s after it began"
        )
        assert down_at[0] + down_at[1] < len(work), "the API server went down after the burst"
        assert not wrong, wrong
        assert not watch.doubles, f"a Service had two load balancers at once: {watch.doubles[:3]}"
        assert not left, f"left in the cloud after the Services were deleted: {sorted(left)}"
