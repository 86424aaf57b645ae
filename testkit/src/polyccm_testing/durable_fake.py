"""A :class:`~polyccm_testing.fake.FakeCloud` whose cloud outlives the process: its instances,
load balancers, write counter and pending write faults live in one JSON file.

The fault conformance kit SIGKILLs ``polyccm`` processes and restarts them; an in-memory cloud
would die with each of them. :class:`DurableFakeCloud` keeps the cloud's side in ``state`` (a
file every process and the test share, guarded by an exclusive ``flock``): each call loads it,
acts, and writes it back when something changed, so a call is as atomic as one API request of
a real cloud. ``python -m polyccm_testing.fake_main`` builds one when :data:`STATE_VARIABLE`
names the file.

:meth:`DurableFakeCloud.fail_write` is the cloud's fault injection: it lets ``after`` writes
through and fails the next one once. :meth:`DurableFakeCloud.throttle` throttles every call for a
stretch, as a cloud's rate limit does: each is refused with :class:`FakeThrottled`, which asks
to be called again after :data:`THROTTLE_RETRY_AFTER` seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from polyccm.cloud import LoadBalancerStatus, NodeAddress, Route
from polyccm.errors import CloudError, Throttled
from polyccm.objects import Node, Service

from polyccm_testing.fake import FakeCloud, FakeInstance, FakeLoadBalancer

STATE_VARIABLE = "POLYCCM_FAKE_STATE"
"""The state file of the durable fake cloud (``fake_main`` builds one when set)."""


THROTTLE_RETRY_AFTER = 1.0
"""Seconds a throttled call asks the caller to wait (as Metal's ``Retry-After: 1``)."""


class InjectedWriteFailure(CloudError):
    """The write the test asked the cloud to fail."""


class FakeThrottled(Throttled):
    """The fake cloud's rate limit: come back after :data:`THROTTLE_RETRY_AFTER` seconds."""

    def __init__(self, operation: str) -> None:
        super().__init__(
            f"fake cloud {operation}: rate limit exceeded (429), retry after "
            f"{THROTTLE_RETRY_AFTER:.0f}s",
            THROTTLE_RETRY_AFTER,
        )


class DurableFakeCloud(FakeCloud):
    """The fake cloud with its state in ``state`` (created empty when missing)."""

    def __init__(self, state: Path, **options: Any) -> None:
        super().__init__(**options)
        self.state = state
        self._lock_path = state.with_name(state.name + ".lock")
        self._fault: dict[str, int] = {}
        self._throttled_until = 0.0
        if not state.exists():
            with self._stored():
                pass

    # -- the file ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _stored(self) -> Iterator[None]:
        """Hold the file's lock, with the cloud's state loaded; write it back after."""
        with self._lock, self._lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._load()
                before = self._dump()
                yield
                after = self._dump()
                if after != before:
                    temporary = self.state.with_name(f"{self.state.name}.{os.getpid()}")
                    temporary.write_text(after)
                    temporary.replace(self.state)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> None:
        try:
            data = json.loads(self.state.read_text())
        except FileNotFoundError:
            data = {}
        self.instances = {
            name: FakeInstance(
                **{**raw, "addresses": tuple(NodeAddress(*a) for a in raw["addresses"])}
            )
            for name, raw in data.get("instances", {}).items()
        }
        self.load_balancers = {
            name: FakeLoadBalancer(
                **{**raw, "ports": tuple(raw["ports"]), "backends": tuple(raw["backends"])}
            )
            for name, raw in data.get("load_balancers", {}).items()
        }
        self.writes = int(data.get("writes", 0))
        self._next_ip = int(data.get("next_ip", 1))
        self._fault = dict(data.get("fault", {}))
        self._throttled_until = float(data.get("throttled_until", 0.0))

    def _dump(self) -> str:
        return json.dumps(
            {
                "instances": {
                    name: {
                        **dataclasses.asdict(i),
                        "addresses": [[a.type, a.address] for a in i.addresses],
                    }
                    for name, i in self.instances.items()
                },
                "load_balancers": {
                    name: dataclasses.asdict(b) for name, b in self.load_balancers.items()
                },
                "writes": self.writes,
                "next_ip": self._next_ip,
                "fault": self._fault,
                "throttled_until": self._throttled_until,
            },
            sort_keys=True,
        )

    def _writing(self) -> None:
        """A write is about to change the cloud: fail it if the test asked so."""
        if not self._fault:
            return
        if self._fault["after"] > 0:
            self._fault["after"] -= 1
            return
        self._fault = {}
        raise InjectedWriteFailure("injected by the fault conformance kit: write refused once")

    def _enter(self, operation: str, *subjects: str) -> None:
        """Every call of the provider: counted, then refused while the cloud throttles."""
        super()._enter(operation, *subjects)
        if time.time() < self._throttled_until:
            raise FakeThrottled(operation)

    # -- fault injection and the cloud's side, for tests -------------------------------------

    def fail_write(self, after: int) -> None:
        """Let ``after`` writes through, then fail the next one once."""
        with self._stored():
            self._fault = {"after": after}

    def throttle(self, seconds: float) -> None:
        """Refuse every call of the provider with :class:`FakeThrottled` for ``seconds``."""
        with self._stored():
            self._throttled_until = time.time() + seconds

    def clear_faults(self) -> None:
        with self._stored():
            self._fault = {}
            self._throttled_until = 0.0

    def delete_out_of_band(self, name: str) -> None:
        """Delete load balancer ``name`` behind the provider's back."""
        with self._stored():
            self.load_balancers.pop(name, None)

    def snapshot(self) -> tuple[dict[str, FakeLoadBalancer], int]:
        """The load balancers and the write counter, as the file holds them now."""
        with self._stored():
            return dict(self.load_balancers), self.writes

    # -- arranging ----------------------------------------------------------------------------

    def add_instance(self, name: str, **details: object) -> FakeInstance:
        with self._stored():
            return super().add_instance(name, **details)

    def remove_instance(self, name: str) -> None:
        with self._stored():
            super().remove_instance(name)

    def set_shutdown(self, name: str) -> None:
        with self._stored():
            self.instances[name].shutdown = True

    # -- every call reads the file; writes write it back ----------------------------------------

    def instance_exists(self, node: Node) -> bool:
        with self._stored():
            return super().instance_exists(node)

    def instance_shutdown(self, node: Node) -> bool:
        with self._stored():
            return super().instance_shutdown(node)

    def instance_metadata(self, node: Node) -> Any:
        with self._stored():
            return super().instance_metadata(node)

    def instances_metadata(self, nodes: Sequence[Node]) -> Any:
        with self._stored():
            return super().instances_metadata(nodes)

    def instances_exist(self, nodes: Sequence[Node]) -> Any:
        with self._stored():
            return super().instances_exist(nodes)

    def instances_shutdown(self, nodes: Sequence[Node]) -> Any:
        with self._stored():
            return super().instances_shutdown(nodes)

    def get_load_balancer(self, cluster_name: str, service: Service) -> LoadBalancerStatus | None:
        with self._stored():
            return super().get_load_balancer(cluster_name, service)

    def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        with self._stored():
            name = self.get_load_balancer_name(cluster_name, service)
            existing = self.load_balancers.get(name)
            if existing is None or existing != self._wanted(
                cluster_name, service, nodes, existing.ip
            ):
                self._writing()
            return super().ensure_load_balancer(cluster_name, service, nodes)

    def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        with self._stored():
            balancer = self.load_balancers.get(self.get_load_balancer_name(cluster_name, service))
            if balancer is not None and balancer.backends != tuple(sorted(n.name for n in nodes)):
                self._writing()
            super().update_load_balancer(cluster_name, service, nodes)

    def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        with self._stored():
            if self.get_load_balancer_name(cluster_name, service) in self.load_balancers:
                self._writing()
            super().ensure_load_balancer_deleted(cluster_name, service)

    def balancer_for(self, service_key: str) -> FakeLoadBalancer | None:
        with self._stored():
            return super().balancer_for(service_key)

    def list_routes(self, cluster_name: str) -> list[Route]:
        with self._stored():
            return super().list_routes(cluster_name)
