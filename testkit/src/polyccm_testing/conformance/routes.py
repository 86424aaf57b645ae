"""Conformance of :class:`~polyccm.cloud.Routes`: what the route controller relies on.

Proves, against the emulator, with real nodes carrying pod CIDRs: creating a route twice
succeeds and lists it once; the listing returns each created route with its target node and
CIDR; deleting a missing route succeeds; a route whose instance is gone is listed as a
blackhole, or no longer listed. Routes are made as the route controller makes them: an unnamed
:class:`~polyccm.cloud.Route`, the node UID as name hint and the node as ``target``.
"""

from __future__ import annotations

import pytest
from polyccm.cloud import Route, Routes
from polyccm.objects import Node

from polyccm_testing.conformance.base import ConformanceBase, offered
from polyccm_testing.conformance.cloud_under_test import CloudUnderTest
from polyccm_testing.conformance.cluster import KitCluster

#: Pod CIDRs outside any emulator's instance network (RFC 6598 shared space).
POD_CIDRS = tuple(f"100.64.{index}.0/24" for index in range(1, 8))


class RoutesConformance(ConformanceBase):
    """The Routes promises. Subclass it (or :class:`ProviderConformance`) and give a ``cloud``
    fixture."""

    @pytest.fixture
    def kit_routes(self, cloud: CloudUnderTest) -> Routes:
        return offered(cloud.provider.routes(), cloud.provider, "Routes", "routes()")

    def test_routes_create_twice_succeeds_and_lists_one_route(
        self, kit_cluster: KitCluster, kit_routes: Routes, cloud: CloudUnderTest
    ) -> None:
        node = kit_cluster.add_node("route-twice", pod_cidr=POD_CIDRS[0])

        _create(kit_routes, cloud, node)
        _create(kit_routes, cloud, node)

        assert _listed(kit_routes, cloud, POD_CIDRS[0]) == [(node.name, POD_CIDRS[0], False)]

    def test_routes_list_returns_what_was_created(
        self, kit_cluster: KitCluster, kit_routes: Routes, cloud: CloudUnderTest
    ) -> None:
        first = kit_cluster.add_node("route-list-a", pod_cidr=POD_CIDRS[1])
        second = kit_cluster.add_node("route-list-b", pod_cidr=POD_CIDRS[2])

        _create(kit_routes, cloud, first)
        _create(kit_routes, cloud, second)

        listed = {
            (r.target_node, r.destination_cidr, r.blackhole)
            for r in kit_routes.list_routes(cloud.cluster_name)
        }
        assert (first.name, POD_CIDRS[1], False) in listed
        assert (second.name, POD_CIDRS[2], False) in listed

    def test_routes_delete_of_a_missing_route_succeeds(
        self, kit_cluster: KitCluster, kit_routes: Routes, cloud: CloudUnderTest
    ) -> None:
        node = kit_cluster.add_node("route-delete", pod_cidr=POD_CIDRS[3])
        _create(kit_routes, cloud, node)
        (route,) = _routes_for(kit_routes, cloud, POD_CIDRS[3])

        kit_routes.delete_route(cloud.cluster_name, route)
        kit_routes.delete_route(cloud.cluster_name, route)
        never_made = Route(f"{cloud.cluster_name}-never-made", node.name, POD_CIDRS[4])
        kit_routes.delete_route(cloud.cluster_name, never_made)

        assert _routes_for(kit_routes, cloud, POD_CIDRS[3]) == []

    def test_routes_a_route_to_a_gone_instance_is_blackholed_or_gone(
        self, kit_cluster: KitCluster, kit_routes: Routes, cloud: CloudUnderTest
    ) -> None:
        node = kit_cluster.add_node("route-gone", pod_cidr=POD_CIDRS[5])
        _create(kit_routes, cloud, node)

        cloud.delete_instance(node.name)

        left = _routes_for(kit_routes, cloud, POD_CIDRS[5])
        assert all(r.blackhole for r in left), f"a route to a gone instance is live: {left}"


def _create(routes: Routes, cloud: CloudUnderTest, node: Node) -> None:
    """Create the node's route as the route controller does."""
    (cidr,) = node.pod_cidrs
    route = Route(name="", target_node=node.name, destination_cidr=cidr)
    routes.create_route(cloud.cluster_name, node.uid, route, target=node)


def _routes_for(routes: Routes, cloud: CloudUnderTest, cidr: str) -> list[Route]:
    return [r for r in routes.list_routes(cloud.cluster_name) if r.destination_cidr == cidr]


def _listed(routes: Routes, cloud: CloudUnderTest, cidr: str) -> list[tuple[str, str, bool]]:
    return [
        (r.target_node, r.destination_cidr, r.blackhole) for r in _routes_for(routes, cloud, cidr)
    ]
