"""Routes against the emulator: one route per pod CIDR, blackholes, and targeted deletion."""

from __future__ import annotations

from typing import Any

import pytest
from polyccm.cloud import Route
from polyccm.errors import CloudError
from polyccm.objects import Node
from polyccm_aws.config import CloudConfig
from polyccm_aws.emulator import EmulatorControl
from polyccm_aws.provider import AwsProvider
from polyccm_aws.testing import CLUSTER, World


def table_routes(world: World, table: str | None = None) -> dict[str, str]:
    found = world.ec2.describe_route_tables(RouteTableIds=[table or world.route_table])
    return {
        r["DestinationCidrBlock"]: r.get("InstanceId", r.get("GatewayId", ""))
        for r in found["RouteTables"][0]["Routes"]
    }


def test_creates_a_route_per_node_and_disables_source_dest_check(
    world: World, provider: AwsProvider
) -> None:
    first, second = world.instances(2)
    nodes = [
        world.node(first, pod_cidr="100.64.1.0/24"),
        world.node(second, pod_cidr="100.64.2.0/24"),
    ]
    routes = provider.routes()
    provider.instances_v2().instances_metadata(nodes)  # the node controller saw them first

    for node in nodes:
        routes.create_route(CLUSTER, node.uid, Route("", node.name, node.pod_cidrs[0]))
    routes.create_route(CLUSTER, nodes[0].uid, Route("", nodes[0].name, "100.64.1.0/24"))

    in_table = table_routes(world)
    assert in_table["100.64.1.0/24"] == first["InstanceId"]
    assert in_table["100.64.2.0/24"] == second["InstanceId"]
    assert world.describe(first["InstanceId"])["SourceDestCheck"] is False
    assert sorted(routes.list_routes(CLUSTER), key=lambda r: r.destination_cidr) == [
        Route(f"{CLUSTER}-100.64.1.0/24", nodes[0].name, "100.64.1.0/24"),
        Route(f"{CLUSTER}-100.64.2.0/24", nodes[1].name, "100.64.2.0/24"),
    ]


def test_route_to_a_gone_instance_is_a_blackhole(world: World, provider: AwsProvider) -> None:
    instance = world.instances()[0]
    node = world.node(instance)
    routes = provider.routes()
    routes.create_route(CLUSTER, node.uid, Route("", node.name, "100.64.9.0/24"))
    world.ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])

    (route,) = routes.list_routes(CLUSTER)

    assert route.blackhole
    assert route.destination_cidr == "100.64.9.0/24"


def test_delete_removes_only_the_route_asked_for(world: World, provider: AwsProvider) -> None:
    first, second = world.instances(2)
    routes = provider.routes()
    for instance, cidr in ((first, "100.64.1.0/24"), (second, "100.64.2.0/24")):
        node = world.node(instance)
        routes.create_route(CLUSTER, node.uid, Route("", node.name, cidr))

    routes.delete_route(CLUSTER, Route(f"{CLUSTER}-100.64.1.0/24", "", "100.64.1.0/24"))
    routes.delete_route(CLUSTER, Route(f"{CLUSTER}-100.64.1.0/24", "", "100.64.1.0/24"))

    in_table = table_routes(world)
    assert "100.64.1.0/24" not in in_table
    assert in_table["100.64.2.0/24"] == second["InstanceId"]
    assert "10.0.0.0/16" in in_table  # the VPC's local route is never touched


def test_node_found_by_name_when_nothing_else_is_known(world: World, provider: AwsProvider) -> None:
    instance = world.instances()[0]

    provider.routes().create_route(
        CLUSTER, "uid", Route("", instance["PrivateDnsName"], "100.64.5.0/24")
    )

    assert table_routes(world)["100.64.5.0/24"] == instance["InstanceId"]


def test_route_table_from_the_cloud_config(world: World) -> None:
    other = world.ec2.create_route_table(VpcId=world.vpc_id)["RouteTable"]["RouteTableId"]
    provider = AwsProvider(CloudConfig(route_table_id=other), cluster_name=CLUSTER, cache_ttl=0)
    node = world.node(world.instances()[0])

    provider.routes().create_route(CLUSTER, node.uid, Route("", node.name, "100.64.3.0/24"))

    assert "100.64.3.0/24" in table_routes(world, other)
    assert "100.64.3.0/24" not in table_routes(world)


def test_missing_route_table_is_a_clear_error(world: World) -> None:
    provider = AwsProvider(CloudConfig(), cluster_name="another-cluster", cache_ttl=0)

    with pytest.raises(CloudError, match="RouteTableID"):
        provider.routes().list_routes("another-cluster")


def test_list_costs_two_calls_at_most(world: World, aws: EmulatorControl) -> None:
    provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=60)
    instances = world.instances(30)
    for index, instance in enumerate(instances):
        node = world.node(instance)
        provider.routes().create_route(
            CLUSTER, node.uid, Route("", node.name, f"100.64.{index}.0/24")
        )
    aws.reset_calls()

    listed = provider.routes().list_routes(CLUSTER)

    assert len(listed) == 30
    assert sum(aws.calls().values()) <= 2


class FakeKube:
    """Just enough of the core's Kubernetes client for the provider's node listing."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.lists = 0

    def list(
        self, resource: object, namespace: str | None = None, **query: object
    ) -> dict[str, Any]:
        self.lists += 1
        return {"items": [node.raw for node in self.nodes]}


def test_restarted_provider_names_route_targets_from_the_node_list(
    world: World, aws: EmulatorControl
) -> None:
    instance = world.instances()[0]
    node = Node(
        {
            "metadata": {"name": "worker-1"},
            "spec": {"providerID": f"aws:///us-east-1a/{instance['InstanceId']}"},
        }
    )
    before = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=0)
    before.instances_v2().instance_metadata(node)
    before.routes().create_route(CLUSTER, "uid", Route("", "worker-1", "100.64.7.0/24"))
    kube = FakeKube([node])

    restarted = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=0)
    restarted.initialize(kube)
    first = restarted.routes().list_routes(CLUSTER)
    second = restarted.routes().list_routes(CLUSTER)

    assert [r.target_node for r in first] == ["worker-1"]
    assert second == first
    assert kube.lists == 1  # listed once, then remembered
