"""The provider conformance kit: test classes that prove a provider keeps the contract.

A provider's test module subclasses a class and gives it one fixture, ``cloud``: the provider
wired to its emulator, as a :class:`CloudUnderTest`::

    from polyccm_testing.conformance import CloudUnderTest, ProviderConformance

    class TestMyCloudConformance(ProviderConformance):
        @pytest.fixture
        def cloud(self, my_emulator) -> CloudUnderTest:
            return MyCloudUnderTest(my_emulator)

The test methods are inherited. They run against the emulator and the real control plane of
``polyccm_testing``'s pytest plugin (real Nodes, Services, informer caches and
``provider.initialize``). A capability the provider does not offer (its accessor returns
``None``) makes that class's tests skip, naming it. :class:`InstancesConformance`,
:class:`LoadBalancerConformance` and :class:`RoutesConformance` test one capability each;
:class:`ProviderConformance` is all three. :class:`OperatorToolsConformance` tests the
optional operator-tools contract (``polyccm plan`` and ``orphans``); add it to a provider's
test class's bases when the provider implements it. :class:`FakeCloudUnderTest` is the
adapter of the reference fake cloud, and shows what an adapter does.

:class:`FaultConformance` is what a provider must survive (processes killed mid-create, each
write failing once, a leader cut off from the API server); its ``cloud`` fixture returns a
:class:`FaultCloudUnderTest`, and :class:`DurableFakeCloudUnderTest` is the fake cloud's.
"""

from polyccm_testing.conformance.cloud_under_test import CloudUnderTest
from polyccm_testing.conformance.cluster import KitCluster
from polyccm_testing.conformance.fakecloud import DurableFakeCloudUnderTest, FakeCloudUnderTest
from polyccm_testing.conformance.faults import FaultCloudUnderTest, FaultConformance, Launch
from polyccm_testing.conformance.instances import InstancesConformance
from polyccm_testing.conformance.load_balancer import LoadBalancerConformance
from polyccm_testing.conformance.operator_tools import OperatorToolsConformance
from polyccm_testing.conformance.routes import RoutesConformance


class ProviderConformance(InstancesConformance, LoadBalancerConformance, RoutesConformance):
    """Every promise of the contract: instances, load balancers and routes."""


__all__ = [
    "CloudUnderTest",
    "DurableFakeCloudUnderTest",
    "FakeCloudUnderTest",
    "FaultCloudUnderTest",
    "FaultConformance",
    "InstancesConformance",
    "KitCluster",
    "Launch",
    "LoadBalancerConformance",
    "OperatorToolsConformance",
    "ProviderConformance",
    "RoutesConformance",
]
