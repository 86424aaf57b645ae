"""The conformance adapter of the reference :class:`~polyccm_testing.fake.FakeCloud`.

The fake cloud is both the provider and its cloud, so the adapter reads the cloud's side from
its state: instances by name, load balancers by name, and :attr:`FakeCloud.writes`, the calls
that changed something.
"""

from __future__ import annotations

from polyccm.objects import Service

from polyccm_testing.fake import FakeCloud


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
