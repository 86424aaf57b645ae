"""Conformance of the operator-tools contract (:mod:`polyccm.ops.contract`): what ``polyccm
plan`` and ``polyccm orphans`` rely on.

Proves, against the emulator, with real services and nodes: planning before ensure says
``create``, after ensure ``adopt`` with no difference, after a backend left ``update`` with a
``backends`` difference (skipped for a load balancer whose backends the cloud does not list,
such as an Elastic IP); planning never writes (the adapter's write counter stays, and every
call passes the core's read-only guard). A load balancer whose Service was deleted is found by
``find_orphans`` (a live one is not), and deleting what it found, in order, leaves the cloud as
it was before the leaked one was made. Tests skip when the provider offers no planner or no
orphans.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import NamedTuple

import pytest
from polyccm import cloudcalls
from polyccm.cloud import LoadBalancer
from polyccm.kube.api import SERVICES
from polyccm.objects import Node, Service
from polyccm.ops import orphans as orphan_tools
from polyccm.ops.contract import ADOPT, BACKENDS, CREATE, UPDATE, LoadBalancerPlanner, Orphans

from polyccm_testing.conformance.base import ConformanceBase, offered
from polyccm_testing.conformance.cloud_under_test import CloudUnderTest
from polyccm_testing.conformance.cluster import KitCluster


class Planned(NamedTuple):
    """What a plan test plans for."""

    service: Service
    nodes: list[Node]
    balancer: LoadBalancer


@contextmanager
def _reads_only(cloud: CloudUnderTest) -> Iterator[None]:
    """The guard ``polyccm plan`` runs the provider under, and no write seen by the cloud."""
    writes = cloud.write_calls()
    with cloudcalls.reads_only(cloud.provider.read_only_call):
        yield
    assert cloud.write_calls() == writes, "the cloud saw a write while polyccm only reads"


class OperatorToolsConformance(ConformanceBase):
    """The planner and orphans promises. Subclass it with a ``cloud`` fixture (it is not part
    of ``ProviderConformance``); override ``kit_service_annotations`` for another kind of load
    balancer, as for :class:`~polyccm_testing.conformance.LoadBalancerConformance`."""

    @pytest.fixture
    def kit_planner(self, cloud: CloudUnderTest) -> LoadBalancerPlanner:
        return offered(
            cloud.provider.load_balancer_planner(),
            cloud.provider,
            "a LoadBalancerPlanner",
            "load_balancer_planner()",
        )

    @pytest.fixture
    def kit_orphans(self, cloud: CloudUnderTest) -> Orphans:
        return offered(cloud.provider.orphans(), cloud.provider, "Orphans", "orphans()")

    @pytest.fixture
    def kit_service_annotations(self) -> Mapping[str, str]:
        """Annotations on every service the kit makes (none by default)."""
        return {}

    @pytest.fixture
    def kit_planned(
        self,
        kit_cluster: KitCluster,
        kit_service_annotations: Mapping[str, str],
        cloud: CloudUnderTest,
    ) -> Planned:
        """A service to plan for, two backend nodes, and the provider's load balancers."""
        balancer = cloud.provider.load_balancer()
        assert balancer is not None, "a planner without a LoadBalancer"
        service = kit_cluster.add_service("planned", annotations=kit_service_annotations)
        nodes = [kit_cluster.add_node("plan-a"), kit_cluster.add_node("plan-b")]
        return Planned(service, nodes, balancer)

    def test_plan_says_create_then_adopt_and_never_writes(
        self, kit_planned: Planned, kit_planner: LoadBalancerPlanner, cloud: CloudUnderTest
    ) -> None:
        service, nodes, balancer = kit_planned

        with _reads_only(cloud):
            before = kit_planner.plan_load_balancer(cloud.cluster_name, service, nodes)
        balancer.ensure_load_balancer(cloud.cluster_name, service, nodes)
        made = cloud.load_balancer_resources()
        with _reads_only(cloud):
            after = kit_planner.plan_load_balancer(cloud.cluster_name, service, nodes)

        assert before.action == CREATE, before
        assert (after.action, after.differences) == (ADOPT, ()), after
        assert after.name == balancer.get_load_balancer_name(cloud.cluster_name, service)
        assert cloud.load_balancer_resources() == made, "planning changed the load balancer"

    def test_plan_says_update_when_a_backend_left(
        self, kit_planned: Planned, kit_planner: LoadBalancerPlanner, cloud: CloudUnderTest
    ) -> None:
        service, nodes, balancer = kit_planned
        balancer.ensure_load_balancer(cloud.cluster_name, service, nodes)
        backends = cloud.backends(service)
        if not backends:
            pytest.skip(
                "the load balancer has no backends in the cloud (cloud.backends() is empty "
                "after ensure): ensure has no node set to change, plan none to compare"
            )

        with _reads_only(cloud):
            fewer = kit_planner.plan_load_balancer(cloud.cluster_name, service, nodes[:1])

        assert fewer.action == UPDATE, fewer
        assert BACKENDS in {d.aspect for d in fewer.differences}, fewer
        assert cloud.backends(service) == backends, "planning changed the backends"

    def test_orphans_finds_a_leaked_load_balancer_and_deleting_it_removes_what_it_made(
        self,
        kit_cluster: KitCluster,
        kit_orphans: Orphans,
        kit_service_annotations: Mapping[str, str],
        cloud: CloudUnderTest,
    ) -> None:
        balancer = cloud.provider.load_balancer()
        assert balancer is not None, "orphans without a LoadBalancer"
        nodes = [kit_cluster.add_node("orphan")]
        live = kit_cluster.add_service("live", annotations=kit_service_annotations)
        balancer.ensure_load_balancer(cloud.cluster_name, live, nodes)
        with_live = cloud.load_balancer_resources()
        leaked = kit_cluster.add_service("leaked", annotations=kit_service_annotations)
        balancer.ensure_load_balancer(cloud.cluster_name, leaked, nodes)
        kit_cluster.api.delete(SERVICES, leaked.name, leaked.namespace)
        services = [Service(s) for s in kit_cluster.api.list(SERVICES)["items"]]

        with _reads_only(cloud):
            found = orphan_tools.find(kit_orphans, cloud.cluster_name, services, nodes)
        assert found, "the leaked load balancer was not found"
        outcomes = orphan_tools.delete_all(kit_orphans, cloud.cluster_name, found)

        assert [o.error for o in outcomes if o.error] == []
        assert cloud.load_balancer_resources() == with_live
        assert balancer.get_load_balancer(cloud.cluster_name, live) is not None
        assert balancer.get_load_balancer(cloud.cluster_name, leaked) is None
        with _reads_only(cloud):
            assert kit_orphans.find_orphans(cloud.cluster_name, services, nodes) == []
