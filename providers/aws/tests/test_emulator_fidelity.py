"""The emulator answers as AWS does where moto alone would not, where that changes what a CCM
does: a classic ELB made without ConfigureHealthCheck already has AWS's default health check
(upstream's AWS CCM reads it and fails on a missing one), and DescribeInstanceTopology answers
(moto fails it, and upstream's CCM retries it for every node)."""

from __future__ import annotations

import boto3
from polyccm_aws.emulator import EmulatorControl
from polyccm_aws.testing import World


def _health_check(name: str) -> dict[str, object]:
    (balancer,) = boto3.client("elb").describe_load_balancers(LoadBalancerNames=[name])[
        "LoadBalancerDescriptions"
    ]
    check: dict[str, object] = balancer["HealthCheck"]
    return check


def test_a_new_classic_elb_has_the_default_tcp_health_check_on_its_first_instance_port(
    aws: EmulatorControl, world: World
) -> None:
    elb = boto3.client("elb")
    elb.create_load_balancer(
        LoadBalancerName="web",
        Listeners=[
            {"Protocol": "TCP", "LoadBalancerPort": 443, "InstanceProtocol": "TCP",
             "InstancePort": 31443},
            {"Protocol": "TCP", "LoadBalancerPort": 80, "InstanceProtocol": "TCP",
             "InstancePort": 31080},
        ],
        Subnets=[world.public["us-east-1a"]],
    )  # fmt: skip

    assert _health_check("web") == {
        "Target": "TCP:31443",
        "Interval": 30,
        "Timeout": 5,
        "UnhealthyThreshold": 2,
        "HealthyThreshold": 10,
    }
    assert aws.calls() == {
        "CreateVpc": 1, "CreateInternetGateway": 1, "AttachInternetGateway": 1,
        "CreateRouteTable": 2, "CreateRoute": 1, "CreateSubnet": 4, "AssociateRouteTable": 2,
        "CreateSecurityGroup": 1, "CreateLoadBalancer": 1, "DescribeLoadBalancers": 1,
    }, "the default costs the client no call"  # fmt: skip


def test_a_configured_health_check_replaces_the_default(aws: EmulatorControl, world: World) -> None:
    elb = boto3.client("elb")
    elb.create_load_balancer(
        LoadBalancerName="api",
        Listeners=[{"Protocol": "HTTP", "LoadBalancerPort": 80, "InstancePort": 30080}],
        Subnets=[world.public["us-east-1b"]],
    )
    elb.configure_health_check(
        LoadBalancerName="api",
        HealthCheck={"Target": "HTTP:30080/healthz", "Interval": 10, "Timeout": 3,
                     "UnhealthyThreshold": 3, "HealthyThreshold": 2},
    )  # fmt: skip

    assert _health_check("api") == {
        "Target": "HTTP:30080/healthz",
        "Interval": 10,
        "Timeout": 3,
        "UnhealthyThreshold": 3,
        "HealthyThreshold": 2,
    }


def test_instance_topology_lists_the_supported_types_only(
    aws: EmulatorControl, world: World
) -> None:
    """DescribeInstanceTopology (moto has none) describes instances of the types AWS lists
    (p4d, trn1, hpc...) and leaves the others out, so a client learns once that a type has no
    topology, as upstream's CCM does."""
    (general,) = world.instances(1, instance_type="m5.large")
    (accelerated,) = world.instances(1, instance_type="p4d.24xlarge")
    ec2 = boto3.client("ec2")

    both = ec2.describe_instance_topology(
        InstanceIds=[general["InstanceId"], accelerated["InstanceId"]]
    )["Instances"]
    alone = ec2.describe_instance_topology(InstanceIds=[general["InstanceId"]])["Instances"]

    assert [i["InstanceId"] for i in both] == [accelerated["InstanceId"]]
    assert both[0]["InstanceType"] == "p4d.24xlarge"
    assert both[0]["AvailabilityZone"] == "us-east-1a"
    assert len(both[0]["NetworkNodes"]) == 3
    assert alone == []
