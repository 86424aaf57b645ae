"""Subnet discovery and security-group rule sets (pure functions)."""

from __future__ import annotations

from typing import Any

from polyccm_aws.network import choose_subnets
from polyccm_aws.sg_rules import (
    Rule,
    load_balancer_rules,
    mtu_rules_for,
    nlb_node_rules,
    permissions,
    ungroup,
)
from polyccm_aws.tagging import ClusterTagging

TAGGING = ClusterTagging("prod")
PUBLIC_TABLE = {
    "Associations": [
        {"SubnetId": "subnet-a1"},
        {"SubnetId": "subnet-a2"},
        {"SubnetId": "subnet-b1"},
    ],
    "Routes": [{"GatewayId": "igw-1"}],
}
MAIN_TABLE = {"Associations": [{"Main": True}], "Routes": [{"GatewayId": "local"}]}


def subnet(subnet_id: str, zone: str, **tags: str) -> dict[str, Any]:
    return {
        "SubnetId": subnet_id,
        "AvailabilityZone": zone,
        "Tags": [
            {"Key": k.replace("__", "/").replace("_", "-"), "Value": v} for k, v in tags.items()
        ],
    }


def test_one_public_subnet_per_zone_preferring_role_then_cluster_tag() -> None:
    subnets = [
        subnet("subnet-a1", "z-a"),
        subnet("subnet-a2", "z-a", **{"kubernetes.io/role/elb": "1"}),
        subnet("subnet-b1", "z-b"),
        subnet("subnet-b9", "z-b"),  # private: no internet gateway
    ]
    subnets[1]["Tags"] = [{"Key": "kubernetes.io/role/elb", "Value": "1"}]

    chosen = choose_subnets(
        subnets, [PUBLIC_TABLE, MAIN_TABLE], internal=False, tagging=TAGGING, zone_types={}
    )

    assert chosen == ["subnet-a2", "subnet-b1"]


def test_internal_load_balancers_may_use_private_subnets_and_skip_local_zones() -> None:
    subnets = [
        {"SubnetId": "subnet-b9", "AvailabilityZone": "z-b", "Tags": []},
        {"SubnetId": "subnet-l1", "AvailabilityZone": "z-local", "Tags": []},
        {
            "SubnetId": "subnet-x1",
            "AvailabilityZone": "z-c",
            "Tags": [{"Key": "kubernetes.io/cluster/other", "Value": "owned"}],
        },
    ]

    chosen = choose_subnets(
        subnets,
        [MAIN_TABLE],
        internal=True,
        tagging=TAGGING,
        zone_types={"z-local": "local-zone", "z-b": "availability-zone"},
    )

    assert chosen == ["subnet-b9"]


def test_ties_are_broken_by_cluster_tag_then_id() -> None:
    subnets = [
        {"SubnetId": "subnet-2", "AvailabilityZone": "z", "Tags": []},
        {
            "SubnetId": "subnet-3",
            "AvailabilityZone": "z",
            "Tags": [{"Key": "kubernetes.io/cluster/prod", "Value": "shared"}],
        },
        {"SubnetId": "subnet-1", "AvailabilityZone": "y", "Tags": []},
        {"SubnetId": "subnet-0", "AvailabilityZone": "y", "Tags": []},
    ]

    assert choose_subnets(subnets, [], internal=True, tagging=TAGGING, zone_types={}) == [
        "subnet-0",
        "subnet-3",
    ]


def test_permissions_round_trip_through_rules() -> None:
    rules = load_balancer_rules([("tcp", 80), ("tcp", 443)], ["0.0.0.0/0", "2001:db8::/32"])

    assert ungroup(permissions(rules)) == rules
    assert Rule("icmp", 3, 4, cidr="0.0.0.0/0") in rules
    assert Rule("icmpv6", 2, 0, cidr="2001:db8::/32") in rules


def test_grouped_permissions_are_split_per_source() -> None:
    described = [
        {
            "IpProtocol": "tcp",
            "FromPort": 80,
            "ToPort": 80,
            "IpRanges": [{"CidrIp": "10.0.0.0/8"}, {"CidrIp": "192.0.2.0/24", "Description": "x"}],
            "UserIdGroupPairs": [{"GroupId": "sg-1", "UserId": "123"}],
        },
        {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-2"}]},
    ]

    assert ungroup(described) == {
        Rule("tcp", 80, 80, cidr="10.0.0.0/8"),
        Rule("tcp", 80, 80, cidr="192.0.2.0/24", description="x"),
        Rule("tcp", 80, 80, group_id="sg-1"),
        Rule("-1", None, None, group_id="sg-2"),
    }


def test_nlb_health_rules_are_skipped_when_client_rules_cover_them() -> None:
    covered = nlb_node_rules(
        load_balancer_name="a1",
        protocol="tcp",
        traffic_ports=[30080],
        health_ports=[30080],
        client_cidrs=["0.0.0.0/0"],
        subnet_cidrs=["10.0.0.0/24"],
    )
    local = nlb_node_rules(
        load_balancer_name="a1",
        protocol="tcp",
        traffic_ports=[30080],
        health_ports=[32000],
        client_cidrs=["0.0.0.0/0"],
        subnet_cidrs=["10.0.0.0/24"],
    )

    assert covered == {
        Rule("tcp", 30080, 30080, "0.0.0.0/0", description="kubernetes.io/rule/nlb/client=a1")
    }
    assert (
        Rule("tcp", 32000, 32000, "10.0.0.0/24", description="kubernetes.io/rule/nlb/health=a1")
        in local
    )
    assert mtu_rules_for(local) == {
        Rule("icmp", 3, 4, "0.0.0.0/0", description="kubernetes.io/rule/nlb/mtu")
    }
