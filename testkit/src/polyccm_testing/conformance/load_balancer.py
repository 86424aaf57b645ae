"""Conformance of :class:`~polyccm.cloud.LoadBalancer`: what the service controller relies on.

Proves, against the emulator, with real services and nodes: ``get`` answers ``None`` before
``ensure`` and the status after; ensuring twice makes nothing more and writes nothing the second
time; a load balancer deleted behind the controller's back is made again by the next ensure;
``update`` changes only the backends, which follow the node set; delete removes everything
ensure made and succeeds when there is nothing to delete. Resources and write calls are read
from the cloud through the adapter, never from the provider.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest
from polyccm.cloud import LoadBalancer
from polyccm.objects import Node, Service

from polyccm_testing.conformance.base import ConformanceBase, offered
from polyccm_testing.conformance.cloud_under_test import CloudUnderTest
from polyccm_testing.conformance.cluster import KitCluster


class LoadBalancerConformance(ConformanceBase):
    """The LoadBalancer promises. Subclass it (or :class:`ProviderConformance`) and give a
    ``cloud`` fixture; override ``kit_service_annotations`` to test another kind of load
    balancer of the same provider (an NLB on AWS, say)."""

    @pytest.fixture
    def kit_load_balancer(self, cloud: CloudUnderTest) -> LoadBalancer:
        return offered(
            cloud.provider.load_balancer(), cloud.provider, "LoadBalancer", "load_balancer()"
        )

    @pytest.fixture
    def kit_service_annotations(self) -> Mapping[str, str]:
        """Annotations on every service the kit makes (none by default)."""
        return {}

    @pytest.fixture
    def kit_service(
        self, kit_cluster: KitCluster, kit_service_annotations: Mapping[str, str]
    ) -> Service:
        return kit_cluster.add_service("web", annotations=kit_service_annotations)

    def test_load_balancer_get_is_none_before_ensure_and_the_status_after(
        self,
        kit_cluster: KitCluster,
        kit_load_balancer: LoadBalancer,
        kit_service: Service,
        cloud: CloudUnderTest,
    ) -> None:
        nodes = [kit_cluster.add_node("lb-get")]

        assert kit_load_balancer.get_load_balancer(cloud.cluster_name, kit_service) is None
        status = kit_load_balancer.ensure_load_balancer(cloud.cluster_name, kit_service, nodes)
        found = kit_load_balancer.get_load_balancer(cloud.cluster_name, kit_service)

        assert status.ingress, "ensure returned no ingress"
        assert found is not None, "get finds no load balancer after ensure"
        assert found.ingress == status.ingress

    def test_load_balancer_ensure_twice_makes_nothing_more_and_writes_nothing(
        self,
        kit_cluster: KitCluster,
        kit_load_balancer: LoadBalancer,
        kit_service: Service,
        cloud: CloudUnderTest,
    ) -> None:
        nodes = [kit_cluster.add_node("lb-twice-a"), kit_cluster.add_node("lb-twice-b")]
        before = cloud.load_balancer_resources()
        writes_before = cloud.write_calls()

        first = kit_load_balancer.ensure_load_balancer(cloud.cluster_name, kit_service, nodes)
        made = cloud.load_balancer_resources()
        writes = cloud.write_calls()
        second = kit_load_balancer.ensure_load_balancer(cloud.cluster_name, kit_service, nodes)

        assert made - before, "the first ensure made no resource the adapter can see"
        assert writes > writes_before, "the adapter counted no write call for the first ensure"
        assert cloud.load_balancer_resources() == made, "the second ensure changed resources"
        assert cloud.write_calls() == writes, "the second ensure wrote to the cloud"
        assert second.ingress == first.ingress
        _assert_backends(cloud, kit_service, nodes)

    def test_load_balancer_ensure_recreates_one_deleted_behind_its_back(
        self,
        kit_cluster: KitCluster,
        kit_load_balancer: LoadBalancer,
        kit_service: Service,
        cloud: CloudUnderTest,
    ) -> None:
        nodes = [kit_cluster.add_node("lb-again")]
        kit_load_balancer.ensure_load_balancer(cloud.cluster_name, kit_service, nodes)
        made = cloud.load_balancer_resources()

        cloud.delete_load_balancer_out_of_band(kit_service)
        assert cloud.load_balancer_resources() != made, "the adapter deleted nothing"
        assert kit_load_balancer.get_load_balancer(cloud.cluster_name, kit_service) is None
        status = kit_load_balancer.ensure_load_balancer(cloud.cluster_name, kit_service, nodes)

        assert status.ingress
        assert kit_load_balancer.get_load_balancer(cloud.cluster_name, kit_service) is not None
        # Identifiers may be new (an ARN), but nothing is missing and nothing is doubled.
        assert len(cloud.load_balancer_resources()) == len(made)
        _assert_backends(cloud, kit_service, nodes)

    def test_load_balancer_update_changes_only_the_backends(
        self,
        kit_cluster: KitCluster,
        kit_load_balancer: LoadBalancer,
        kit_service: Service,
        cloud: CloudUnderTest,
    ) -> None:
        first = kit_cluster.add_node("lb-update-a")
        second = kit_cluster.add_node("lb-update-b")
        status = kit_load_balancer.ensure_load_balancer(
            cloud.cluster_name, kit_service, [first, second]
        )
        made = cloud.load_balancer_resources()

        kit_load_balancer.update_load_balancer(cloud.cluster_name, kit_service, [first])
        _assert_backends(cloud, kit_service, [first])
        assert cloud.load_balancer_resources() == made, "removing a backend changed resources"

        third = kit_cluster.add_node("lb-update-c")
        kit_load_balancer.update_load_balancer(cloud.cluster_name, kit_service, [first, third])
        _assert_backends(cloud, kit_service, [first, third])
        assert cloud.load_balancer_resources() == made, "adding a backend changed resources"
        found = kit_load_balancer.get_load_balancer(cloud.cluster_name, kit_service)
        assert found is not None
        assert found.ingress == status.ingress

    def test_load_balancer_delete_removes_everything_ensure_made(
        self,
        kit_cluster: KitCluster,
        kit_load_balancer: LoadBalancer,
        kit_service: Service,
        cloud: CloudUnderTest,
    ) -> None:
        nodes = [kit_cluster.add_node("lb-delete")]
        before = cloud.load_balancer_resources()
        kit_load_balancer.ensure_load_balancer(cloud.cluster_name, kit_service, nodes)

        kit_load_balancer.ensure_load_balancer_deleted(cloud.cluster_name, kit_service)

        left = cloud.load_balancer_resources() - before
        assert not left, f"left behind: {sorted(left)}"
        assert cloud.load_balancer_resources() == before
        assert kit_load_balancer.get_load_balancer(cloud.cluster_name, kit_service) is None
        kit_load_balancer.ensure_load_balancer_deleted(cloud.cluster_name, kit_service)

    def test_load_balancer_delete_of_a_missing_one_succeeds(
        self,
        kit_cluster: KitCluster,
        kit_load_balancer: LoadBalancer,
        kit_service: Service,
        cloud: CloudUnderTest,
    ) -> None:
        before = cloud.load_balancer_resources()

        kit_load_balancer.ensure_load_balancer_deleted(cloud.cluster_name, kit_service)

        assert cloud.load_balancer_resources() == before


def _assert_backends(cloud: CloudUnderTest, service: Service, nodes: Iterable[Node]) -> None:
    """The cloud sends the service's traffic to exactly ``nodes`` (named by node name,
    providerID or instance id, as the adapter reports them)."""
    nodes = list(nodes)
    actual = cloud.backends(service)
    accepted = [
        frozenset(n.name for n in nodes),
        frozenset(n.provider_id for n in nodes),
        frozenset(n.provider_id.rsplit("/", 1)[-1] for n in nodes),
    ]
    assert actual in accepted, (
        f"backends {sorted(actual)}; expected the nodes {sorted(n.name for n in nodes)}"
    )
