"""Routes against the emulator: upstream's shape, what they cost, and errors that are success."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from polyccm.cloud import Route
from polyccm.controllers.route import plan_routes
from polyccm_gce_emulator.testing import (
    CLUSTER,
    ZONE,
    ComputeApi,
    RunningEmulator,
    gce_provider,
    node_for,
)


@pytest.fixture
def provider(emulator: RunningEmulator) -> Any:
    return gce_provider(emulator.endpoint)


@pytest.fixture
def nodes(api: ComputeApi) -> Iterator[list[Any]]:
    names = [f"node-{i}" for i in range(4)]
    for name in names:
        api.create_instance(name)
    yield [node_for(name, pod_cidr=f"10.100.{i}.0/24") for i, name in enumerate(names)]


def reconcile(provider: Any, nodes: list[Any]) -> None:
    """One pass of the route controller: list once, create what is missing."""
    routes = provider.routes()
    to_create, _ = plan_routes(nodes, routes.list_routes(CLUSTER), ["10.100.0.0/16"])
    for node, cidr in to_create:
        routes.create_route(CLUSTER, node.uid, Route("", node.name, cidr), target=node)


def test_routes_have_upstream_names_next_hops_and_priority(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    reconcile(provider, nodes[:1])

    (route,) = api.list_all("global/routes", filter='description = "k8s-node-route"')
    assert route["name"] == f"{CLUSTER[:26]}-{nodes[0].uid}"
    assert route["nextHopInstance"].endswith(f"/zones/{ZONE}/instances/node-0")
    assert route["priority"] == 1000
    assert route["destRange"] == "10.100.0.0/24"
    assert route["network"].endswith("/global/networks/default")


def test_call_counts_steady_state_and_scale_up(
    provider: Any, nodes: list[Any], emulator: RunningEmulator, api: ComputeApi
) -> None:
    reconcile(provider, nodes[:2])
    emulator.control.reset_calls()

    reconcile(provider, nodes[:2])  # steady state
    steady = dict(emulator.control.calls())
    emulator.control.reset_calls()
    reconcile(provider, nodes)  # two new nodes
    scale_up = dict(emulator.control.calls())

    assert steady == {"compute.routes.list": 1}
    assert scale_up.get("compute.routes.list") == 1
    assert scale_up.get("compute.routes.insert") == 2
    assert set(scale_up) <= {
        "compute.routes.list",
        "compute.routes.insert",
        "compute.globalOperations.wait",
    }


def test_listing_ignores_other_clusters_and_routes_by_hand(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    reconcile(provider, nodes[:1])
    hop = f"zones/{ZONE}/instances/node-1"
    for name, description in (("other-cluster-x", "k8s-node-route"), (f"{CLUSTER}-manual", "mine")):
        body = {
            "name": name,
            "network": "global/networks/default",
            "destRange": "10.9.0.0/24",
            "nextHopInstance": hop,
            "description": description,
            "priority": 1000,
        }
        api.do("POST", "global/routes", body)

    listed = provider.routes().list_routes(CLUSTER)

    assert [(r.target_node, r.destination_cidr) for r in listed] == [("node-0", "10.100.0.0/24")]


def test_an_existing_route_and_a_rate_limit_are_not_failures(
    provider: Any, nodes: list[Any], emulator: RunningEmulator
) -> None:
    node = nodes[0]
    route = Route("", node.name, "10.100.0.0/24")
    provider.routes().create_route(CLUSTER, node.uid, route, target=node)
    emulator.control.inject(
        "compute.routes.insert", count=2, status=403, reason="rateLimitExceeded"
    )

    provider.routes().create_route(CLUSTER, node.uid, route, target=node)

    assert emulator.control.calls()["compute.routes.insert"] == 4  # 1, 2 refused, then 409


def test_a_quota_error_is_raised_with_what_happened(
    provider: Any, nodes: list[Any], emulator: RunningEmulator
) -> None:
    node = nodes[0]
    emulator.control.inject("compute.routes.insert", operation_error="QUOTA_EXCEEDED")

    with pytest.raises(Exception, match="quota exceeded") as raised:
        provider.routes().create_route(
            CLUSTER, node.uid, Route("", node.name, "10.100.0.0/24"), target=node
        )

    assert "QUOTA_EXCEEDED" in str(raised.value)


def test_a_route_to_a_deleted_instance_is_a_blackhole(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    reconcile(provider, nodes[:1])
    api.delete_instance("node-0")

    (route,) = provider.routes().list_routes(CLUSTER)

    assert route.blackhole
    provider.routes().delete_route(CLUSTER, route)
    provider.routes().delete_route(CLUSTER, route)
    assert provider.routes().list_routes(CLUSTER) == []
