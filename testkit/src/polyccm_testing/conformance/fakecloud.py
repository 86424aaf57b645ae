"""The conformance adapter of the reference :class:`~polyccm_testing.fake.FakeCloud`.

The fake cloud is both the provider and its cloud, so the adapter reads the cloud's side from
its state: instances by name, load balancers by name, and :attr:`FakeCloud.writes`, the calls
that changed something. :class:`DurableFakeCloudUnderTest` is the fault tests' adapter: the
same fake cloud, kept in a file so that it outlives the ``polyccm`` processes the kit kills.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from polyccm.objects import Service

from polyccm_testing.broken_fakes import VARIANT_VARIABLE, VARIANTS
from polyccm_testing.conformance.faults import Launch
from polyccm_testing.durable_fake import STATE_VARIABLE
from polyccm_testing.fake import FakeCloud
from polyccm_testing.fake_main import CALL_LOG_VARIABLE, COMMAND


class FakeCloudUnderTest:
    """:class:`~polyccm_testing.conformance.CloudUnderTest` for a :class:`FakeCloud` (or a
    subclass of it)."""

    def __init__(self, fake: FakeCloud | None = None, *, cluster_name: str = "kubernetes") -> None:
        self.fake = fake if fake is not None else FakeCloud()
        self.cluster_name = cluster_name

    @property
    def provider(self) -> FakeCloud:
        return self.fake

    def create_instance(self, name: str) -> str:
        # In the fake cloud the instance name is the node name the kubelet registers.
        return self.fake.add_instance(name).name

    def delete_instance(self, name: str) -> None:
        self.fake.remove_instance(name)

    def stop_instance(self, name: str) -> None:
        self.fake.instances[name].shutdown = True

    def load_balancer_resources(self) -> frozenset[str]:
        return frozenset(self.fake.load_balancers)

    def write_calls(self) -> int:
        return self.fake.writes

    def delete_load_balancer_out_of_band(self, service: Service) -> None:
        name = self.fake.get_load_balancer_name(self.cluster_name, service)
        self.fake.load_balancers.pop(name, None)

    def backends(self, service: Service) -> frozenset[str]:
        balancer = self.fake.balancer_for(service.key)
        return frozenset(balancer.backends if balancer else ())


class DurableFakeCloudUnderTest(FakeCloudUnderTest):
    """The fault-conformance adapter of the reference fake cloud (a
    :class:`~polyccm_testing.conformance.faults.FaultCloudUnderTest`): a
    :class:`~polyccm_testing.durable_fake.DurableFakeCloud` on the file ``state``, shared with
    the ``polyccm`` processes the kit starts (``python -m polyccm_testing.fake_main``).
    ``variant`` names one of :mod:`polyccm_testing.broken_fakes` (``""``: the sound one)."""

    def __init__(self, state: Path, *, variant: str = "", cluster_name: str = "kubernetes") -> None:
        self.state = state
        self.variant = variant
        self.call_log = state.with_name(state.name + ".calls")
        self.call_log.touch()
        self.durable = VARIANTS[variant](state, call_log=self.call_log)
        super().__init__(self.durable, cluster_name=cluster_name)

    def stop_instance(self, name: str) -> None:
        self.durable.set_shutdown(name)

    def load_balancer_resources(self) -> frozenset[str]:
        balancers, _ = self.durable.snapshot()
        return frozenset(balancers)

    def write_calls(self) -> int:
        return self.durable.snapshot()[1]

    def delete_load_balancer_out_of_band(self, service: Service) -> None:
        self.durable.delete_out_of_band(
            self.fake.get_load_balancer_name(self.cluster_name, service)
        )

    # -- FaultCloudUnderTest ---------------------------------------------------------------

    def launch(self, workdir: Path) -> Launch:
        del workdir  # the fake needs no config file
        return Launch(
            argv=(*COMMAND, f"--cluster-name={self.cluster_name}"),
            env={
                **os.environ,
                STATE_VARIABLE: str(self.state),
                VARIANT_VARIABLE: self.variant,
                CALL_LOG_VARIABLE: str(self.call_log),
            },
        )

    def cluster_resources(self) -> frozenset[str]:
        """The fake cloud makes load balancers only."""
        balancers, _ = self.durable.snapshot()
        return frozenset(f"load-balancer:{name}" for name in balancers)

    def load_balancers_per_service(self) -> Mapping[str, int]:
        balancers, _ = self.durable.snapshot()
        return Counter(b.service_key for b in balancers.values())

    def fail_write(self, after: int) -> None:
        self.durable.fail_write(after)

    def clear_faults(self) -> None:
        self.durable.clear_faults()

    def throttle(self, seconds: float) -> None:
        self.durable.throttle(seconds)

    def all_calls(self) -> int:
        """The calls of the ``polyccm`` processes (throttled ones too), from the call log."""
        with self.call_log.open("rb") as log:
            return sum(1 for _ in log)

    def calls_by_process(self) -> list[tuple[float, str, str]]:
        """The calls of the ``polyccm`` processes, from the fake's call log: ``(unix time,
        the caller's leader-election identity, operation)``."""
        calls = []
        for line in self.call_log.read_text().splitlines():
            stamp, _pid, operation, identity = line.split(" ")
            calls.append((float(stamp), identity, operation))
        return calls
