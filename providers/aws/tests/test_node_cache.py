"""The provider on the core's shared node cache: route targets are named from the nodes the cache
holds, with no Kubernetes request of the provider's own, and a route finds its instance by the
target node's providerID (against the real API server and the emulator)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from polyccm.cloud import ProviderContext, Route
from polyccm.events import EventRecorder
from polyccm.kube.api import NODES, SERVICES, JsonObject, KubeApi, Resource, load_configuration
from polyccm.kube.informer import Informer, slim_node
from polyccm.objects import Node
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.testing import CLUSTER, World
from polyccm_testing.kubeobjects import make_node, wait_for


class CountingKubeApi(KubeApi):
    """The core's API client, noting every request it sends (watches included)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[str] = []

    def request(self, method: str, path: str, **kwargs: Any) -> JsonObject:
        self.sent.append(f"{method} {path}")
        return super().request(method, path, **kwargs)

    def watch(
        self, resource: Resource, namespace: str | None = None, **kwargs: Any
    ) -> Iterator[JsonObject]:
        self.sent.append(f"WATCH {resource.path(namespace)}")
        return super().watch(resource, namespace, **kwargs)


@pytest.fixture
def term(control_plane: Any, clean_nodes: None) -> Iterator[Callable[[], ProviderContext]]:
    """Builds what the manager hands ``initialize`` at the start of a term: one counting API
    client, and node and service caches on it, synced."""
    api = CountingKubeApi(load_configuration(str(control_plane.kubeconfig)), qps=0)
    caches = [
        Informer(api, NODES, slim=slim_node, name="nodes"),
        Informer(api, SERVICES, name="services"),
    ]

    def start() -> ProviderContext:
        for cache in caches:
            cache.start()
        for cache in caches:
            assert cache.wait_for_sync(30)
        nodes, services = caches
        return ProviderContext(
            api=api,
            nodes=nodes,
            services=services,
            recorder=EventRecorder(api, host="test"),
            stop=threading.Event(),
        )

    try:
        yield start
    finally:
        for cache in caches:
            cache.stop()
        api.close()


def provider_id(instance: dict[str, Any]) -> str:
    return f"aws:///{instance['Placement']['AvailabilityZone']}/{instance['InstanceId']}"


def test_route_targets_are_named_from_the_node_cache_without_a_request_of_its_own(
    world: World,
    provider: AwsProvider,
    kube_api: KubeApi,
    term: Callable[[], ProviderContext],
) -> None:
    first, second = world.instances(2)
    for cidr, instance in (("100.64.1.0/24", first), ("100.64.2.0/24", second)):
        world.ec2.create_route(  # routes an earlier polyccm made
            RouteTableId=world.route_table,
            DestinationCidrBlock=cidr,
            InstanceId=instance["InstanceId"],
        )
    make_node(kube_api, "worker-1", tainted=False, provider_id=provider_id(first))
    context = term()
    api = context.api
    assert isinstance(api, CountingKubeApi)
    api.sent.clear()

    provider.initialize(context)

    def targets() -> dict[str, str]:
        listed = provider.routes().list_routes(CLUSTER)
        return {route.destination_cidr: route.target_node for route in listed}

    assert targets() == {"100.64.1.0/24": "worker-1", "100.64.2.0/24": second["PrivateDnsName"]}
    make_node(kube_api, "worker-2", tainted=False, provider_id=provider_id(second))
    wait_for(lambda: targets()["100.64.2.0/24"] == "worker-2", 10, "the new node seen by the cache")
    kube_api.delete(NODES, "worker-1")
    wait_for(
        lambda: targets()["100.64.1.0/24"] == first["PrivateDnsName"], 10, "the node forgotten"
    )
    assert [sent for sent in api.sent if not sent.startswith("WATCH ")] == [], (
        "the provider sent no Kubernetes request: no node list, no get"
    )


def test_a_route_finds_its_instance_by_the_target_nodes_provider_id(
    world: World, provider: AwsProvider
) -> None:
    instance = world.instances()[0]
    # A node name that says nothing about the instance (not its private DNS name, not an id).
    node = Node(
        {
            "metadata": {"name": "gpu-worker-7", "uid": "uid-7"},
            "spec": {"providerID": provider_id(instance)},
        }
    )

    provider.routes().create_route(
        CLUSTER, node.uid, Route("", node.name, "100.64.3.0/24"), target=node
    )

    table = world.ec2.describe_route_tables(RouteTableIds=[world.route_table])["RouteTables"][0]
    routed = {r["DestinationCidrBlock"]: r.get("InstanceId") for r in table["Routes"]}
    assert routed["100.64.3.0/24"] == instance["InstanceId"]
    (listed,) = provider.routes().list_routes(CLUSTER)
    assert listed.target_node == "gpu-worker-7"
