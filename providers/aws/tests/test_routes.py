"""Routes against the emulator: one route per pod CIDR, blackholes, and targeted deletion."""

from __future__ import annotations

from typing import Any

import pytest
from polyccm.cloud import Route
from polyccm.errors import CloudError
from polyccm_aws.config import CloudConfig
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World


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

    for node in nodes:
        routes.create_route(CLUSTER, node.uid, Route("", node.name, node.pod_cidrs[0]), target=node)
    routes.create_route(
        CLUSTER, nodes[0].uid, Route("", nodes[0].name, "100.64.1.0/24"), target=nodes[0]
    )

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
    routes.create_route(CLUSTER, node.uid, Route("", node.name, "100.64.9.0/24"), target=node)
    world.ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])

    (route,) = routes.list_routes(CLUSTER)

    assert route.blackhole
    assert route.destination_cidr == "100.64.9.0/24"


def test_delete_removes_only_the_route_asked_for(world: World, provider: AwsProvider) -> None:
    first, second = world.instances(2)
    routes = provider.routes()
    for instance, cidr in ((first, "100.64.1.0/24"), (second, "100.64.2.0/24")):
        node = world.node(instance)
        routes.create_route(CLUSTER, node.uid, Route("", node.name, cidr), target=node)

    routes.delete_route(CLUSTER, Route(f"{CLUSTER}-100.64.1.0/24", "", "100.64.1.0/24"))
    routes.delete_route(CLUSTER, Route(f"{CLUSTER}-100.64.1.0/24", "", "100.64.1.0/24"))

    in_table = table_routes(world)
    assert "100.64.1.0/24" not in in_table
    assert in_table["100.64.2.0/24"] == second["InstanceId"]
    assert "10.0.0.0/16" in in_table  # the VPC's local route is never touched


def test_node_found_by_name_when_nothing_else_is_known(world: World, provider: AwsProvider) -> None:
    instance = world.instances()[0]
    node = world.node(instance, by_name=True)  # no providerID yet

    provider.routes().create_route(
        CLUSTER, "uid", Route("", node.name, "100.64.5.0/24"), target=node
    )

    assert table_routes(world)["100.64.5.0/24"] == instance["InstanceId"]


def test_route_table_from_the_cloud_config(world: World) -> None:
    other = world.ec2.create_route_table(VpcId=world.vpc_id)["RouteTable"]["RouteTableId"]
    provider = AwsProvider(CloudConfig(route_table_id=other), cluster_name=CLUSTER, cache_ttl=0)
    node = world.node(world.instances()[0])

    provider.routes().create_route(
        CLUSTER, node.uid, Route("", node.name, "100.64.3.0/24"), target=node
    )

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
            CLUSTER, node.uid, Route("", node.name, f"100.64.{index}.0/24"), target=node
        )
    aws.reset_calls()

    listed = provider.routes().list_routes(CLUSTER)

    assert len(listed) == 30
    assert sum(aws.calls().values()) <= 2


# -- routes that are not ours, and the cost of a pass ------------------------------------------


def nat_gateway(world: World) -> str:
    allocation = world.ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat: str = world.ec2.create_nat_gateway(
        SubnetId=world.public["us-east-1a"], AllocationId=allocation
    )["NatGateway"]["NatGatewayId"]
    return nat


def peering(world: World) -> str:
    other = world.ec2.create_vpc(CidrBlock="172.31.0.0/16")["Vpc"]["VpcId"]
    connection: str = world.ec2.create_vpc_peering_connection(VpcId=world.vpc_id, PeerVpcId=other)[
        "VpcPeeringConnection"
    ]["VpcPeeringConnectionId"]
    return connection


def transit_gateway(world: World) -> str:
    gateway: str = world.ec2.create_transit_gateway()["TransitGateway"]["TransitGatewayId"]
    return gateway


TARGETS = {
    "nat": (nat_gateway, "NatGatewayId"),
    "peering": (peering, "VpcPeeringConnectionId"),
    "transit": (transit_gateway, "TransitGatewayId"),
}


def routed(world: World, cidr: str) -> dict[str, Any]:
    table = world.ec2.describe_route_tables(RouteTableIds=[world.route_table])["RouteTables"][0]
    found: dict[str, Any] = next(r for r in table["Routes"] if r["DestinationCidrBlock"] == cidr)
    return found


@pytest.mark.parametrize("kind", sorted(TARGETS))
def test_a_gateway_or_peering_route_on_the_cidr_is_reported_never_replaced(
    world: World, provider: AwsProvider, aws: EmulatorControl, kind: str
) -> None:
    make, field = TARGETS[kind]
    target = make(world)
    world.ec2.create_route(
        RouteTableId=world.route_table, DestinationCidrBlock="100.64.4.0/24", **{field: target}
    )
    node = world.node(world.instances()[0])
    routes = provider.routes()
    routes.list_routes(CLUSTER)

    with pytest.raises(CloudError) as failure:
        routes.create_route(CLUSTER, node.uid, Route("", node.name, "100.64.4.0/24"), target=node)

    assert "100.64.4.0/24" in str(failure.value) and target in str(failure.value)
    assert routed(world, "100.64.4.0/24").get(field) == target
    assert "ReplaceRoute" not in aws.calls()


def test_a_route_someone_else_wrote_after_the_listing_is_reported(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    node = world.node(world.instances()[0])
    routes = provider.routes()
    routes.list_routes(CLUSTER)
    connection = peering(world)
    world.ec2.create_route(
        RouteTableId=world.route_table,
        DestinationCidrBlock="100.64.4.0/24",
        VpcPeeringConnectionId=connection,
    )
    aws.reset_calls()

    with pytest.raises(CloudError, match=connection):
        routes.create_route(CLUSTER, node.uid, Route("", node.name, "100.64.4.0/24"), target=node)

    assert aws.calls().get("DescribeRouteTables") == 1  # looked again only after the conflict
    assert routed(world, "100.64.4.0/24").get("VpcPeeringConnectionId") == connection


def test_a_route_to_the_same_instance_is_success_without_a_write(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    instance = world.instances()[0]
    node = world.node(instance)
    world.ec2.modify_instance_attribute(
        InstanceId=instance["InstanceId"], SourceDestCheck={"Value": False}
    )
    routes = provider.routes()
    routes.list_routes(CLUSTER)  # nothing yet: a route written after the listing...
    world.ec2.create_route(
        RouteTableId=world.route_table,
        DestinationCidrBlock="100.64.6.0/24",
        InstanceId=instance["InstanceId"],
    )
    aws.reset_calls()

    routes.create_route(CLUSTER, node.uid, Route("", node.name, "100.64.6.0/24"), target=node)
    routes.create_route(CLUSTER, node.uid, Route("", node.name, "100.64.6.0/24"), target=node)

    calls = aws.calls()
    assert routed(world, "100.64.6.0/24")["InstanceId"] == instance["InstanceId"]
    assert "ReplaceRoute" not in calls and "DeleteRoute" not in calls
    assert calls.get("DescribeRouteTables") == 1  # ...costs one look after RouteAlreadyExists


def test_a_blackholed_route_is_replaced(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    gone, successor = world.instances(2)
    routes = provider.routes()
    old = world.node(gone)
    routes.create_route(CLUSTER, old.uid, Route("", old.name, "100.64.8.0/24"), target=old)
    world.ec2.terminate_instances(InstanceIds=[gone["InstanceId"]])
    node = world.node(successor)
    (listed,) = routes.list_routes(CLUSTER)
    assert listed.blackhole

    routes.create_route(CLUSTER, node.uid, Route("", node.name, "100.64.8.0/24"), target=node)

    assert routed(world, "100.64.8.0/24")["InstanceId"] == successor["InstanceId"]


def test_a_pass_describes_the_route_table_once(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    instances = world.instances(12)
    nodes = [world.node(instance) for instance in instances]
    routes = provider.routes()
    for index, node in enumerate(nodes[:2]):
        routes.create_route(
            CLUSTER, node.uid, Route("", node.name, f"100.64.{index}.0/24"), target=node
        )
    aws.reset_calls()

    listed = routes.list_routes(CLUSTER)
    for index, node in enumerate(nodes[2:], start=2):
        routes.create_route(
            CLUSTER, node.uid, Route("", node.name, f"100.64.{index}.0/24"), target=node
        )
    for route in listed:
        routes.delete_route(CLUSTER, route)

    assert aws.calls().get("DescribeRouteTables") == 1
    in_table = table_routes(world)
    assert [f"100.64.{i}.0/24" in in_table for i in range(12)] == [False] * 2 + [True] * 10
