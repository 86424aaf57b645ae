"""The emulator answers as AWS does where moto alone would not, where that changes what a CCM
does: a classic ELB made without ConfigureHealthCheck already has AWS's default health check
(upstream's AWS CCM reads it and fails on a missing one), and DescribeInstanceTopology answers
(moto fails it, and upstream's CCM retries it for every node); the quota of rules per security
group is AWS's default unless raised as an account's can be. Finding an instance by id (which
the emulator indexes, moto scans) answers as EC2 does."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.moto_fidelity import RULES_QUOTA_VARIABLE
from polyccm_aws_emulator.testing import World, point_boto3_at, running_emulator


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


def test_an_nlb_has_the_dns_name_form_of_network_load_balancers(
    aws: EmulatorControl, world: World
) -> None:
    # Upstream's AWS CCM tells a classic ELB from an NLB by the suffix of the Service's hostname
    # (k8s.io/cloud-provider-aws v1.37.1 pkg/providers/v1/aws_validations.go:59-67): with the
    # classic form on an NLB, it refused every later sync of the Service.
    elbv2 = boto3.client("elbv2")
    nlb = elbv2.create_load_balancer(
        Name="web", Type="network", Subnets=[world.public["us-east-1a"]]
    )["LoadBalancers"][0]
    alb = elbv2.create_load_balancer(
        Name="app", Type="application", Subnets=list(world.public.values())
    )["LoadBalancers"][0]

    identifier = nlb["LoadBalancerArn"].rsplit("/", 1)[-1]
    assert nlb["DNSName"] == f"web-{identifier}.elb.us-east-1.amazonaws.com"
    assert not nlb["DNSName"].endswith(".elb.amazonaws.com")
    assert alb["DNSName"].endswith(".us-east-1.elb.amazonaws.com")


CERTIFICATE = "arn:aws:iam::123456789012:server-certificate/x"


def test_a_classic_listener_keeps_its_instance_protocol(aws: EmulatorControl, world: World) -> None:
    # Upstream's listener for an ssl-cert port with backend-protocol http (cloud-provider-aws
    # v1.37.1 pkg/providers/v1/aws.go:2102-2131): moto answered "HTTPS" for its instance side,
    # and every CCM replaced the listener on every sync.
    elb = boto3.client("elb")
    elb.create_load_balancer(
        LoadBalancerName="tls",
        Listeners=[
            {"Protocol": "https", "LoadBalancerPort": 443, "InstanceProtocol": "http",
             "InstancePort": 30443, "SSLCertificateId": CERTIFICATE},
            {"Protocol": "tcp", "LoadBalancerPort": 80, "InstancePort": 30080},
        ],
        Subnets=[world.public["us-east-1a"]],
    )  # fmt: skip
    elb.create_load_balancer_listeners(
        LoadBalancerName="tls",
        Listeners=[{"Protocol": "ssl", "LoadBalancerPort": 8443, "InstanceProtocol": "tcp",
                    "InstancePort": 30843, "SSLCertificateId": CERTIFICATE}],
    )  # fmt: skip

    (described,) = elb.describe_load_balancers(LoadBalancerNames=["tls"])[
        "LoadBalancerDescriptions"
    ]
    sides = {
        d["Listener"]["LoadBalancerPort"]: (
            d["Listener"]["Protocol"],
            d["Listener"]["InstanceProtocol"],
        )
        for d in described["ListenerDescriptions"]
    }
    assert sides == {443: ("HTTPS", "HTTP"), 80: ("TCP", "TCP"), 8443: ("SSL", "TCP")}


def test_modifying_attributes_keeps_one_value_per_additional_attribute(
    aws: EmulatorControl, world: World
) -> None:
    elb = boto3.client("elb")
    elb.create_load_balancer(
        LoadBalancerName="web",
        Listeners=[{"Protocol": "tcp", "LoadBalancerPort": 80, "InstancePort": 30080}],
        Subnets=[world.public["us-east-1a"]],
    )
    for timeout in (60, 120, 300):
        elb.modify_load_balancer_attributes(
            LoadBalancerName="web",
            LoadBalancerAttributes={"ConnectionSettings": {"IdleTimeout": timeout}},
        )

    attributes = elb.describe_load_balancer_attributes(LoadBalancerName="web")[
        "LoadBalancerAttributes"
    ]
    assert attributes["AdditionalAttributes"] == [
        {"Key": "elb.http.desyncmitigationmode", "Value": "defensive"}
    ]
    assert attributes["ConnectionSettings"] == {"IdleTimeout": 300}


def test_only_a_tls_listener_has_an_ssl_policy(aws: EmulatorControl, world: World) -> None:
    # Upstream modifies a TCP listener with an SslPolicy on every sync (cloud-provider-aws
    # v1.37.1 pkg/providers/v1/aws_loadbalancer.go:296-303); moto gave every listener one.
    elbv2 = boto3.client("elbv2")
    nlb = elbv2.create_load_balancer(
        Name="web", Type="network", Subnets=[world.public["us-east-1a"]]
    )["LoadBalancers"][0]
    group = elbv2.create_target_group(
        Name="web", Protocol="TCP", Port=30080, VpcId=world.vpc_id, TargetType="instance"
    )["TargetGroups"][0]
    forward = [{"Type": "forward", "TargetGroupArn": group["TargetGroupArn"]}]
    certificate = boto3.client("acm").request_certificate(DomainName="web.example.com")
    elbv2.create_listener(
        LoadBalancerArn=nlb["LoadBalancerArn"], Protocol="TCP", Port=80, DefaultActions=forward
    )
    elbv2.create_listener(
        LoadBalancerArn=nlb["LoadBalancerArn"],
        Protocol="TLS",
        Port=443,
        DefaultActions=forward,
        Certificates=[{"CertificateArn": certificate["CertificateArn"]}],
    )

    listeners = elbv2.describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"])["Listeners"]
    policies = {listener["Port"]: listener.get("SslPolicy") for listener in listeners}
    assert policies == {80: None, 443: "ELBSecurityPolicy-2016-08"}


def test_a_network_target_group_lists_client_ip_and_proxy_protocol_attributes(
    aws: EmulatorControl, world: World
) -> None:
    # Upstream skips a target-group-attributes entry the group does not list (cloud-provider-aws
    # v1.37.1 pkg/providers/v1/aws_loadbalancer.go:659-663): with moto's list it set none.
    elbv2 = boto3.client("elbv2")

    def attributes(name: str, protocol: str, target_type: str) -> dict[str, str]:
        group = elbv2.create_target_group(
            Name=name, Protocol=protocol, Port=30080, VpcId=world.vpc_id, TargetType=target_type
        )["TargetGroups"][0]
        listed = elbv2.describe_target_group_attributes(TargetGroupArn=group["TargetGroupArn"])
        return {a["Key"]: a["Value"] for a in listed["Attributes"]}

    instance_tcp = attributes("instances", "TCP", "instance")
    ip_tls = attributes("addresses", "TLS", "ip")
    http = attributes("web", "HTTP", "instance")

    assert instance_tcp["preserve_client_ip.enabled"] == "true"
    assert instance_tcp["proxy_protocol_v2.enabled"] == "false"
    assert ip_tls["preserve_client_ip.enabled"] == "false"
    assert "preserve_client_ip.enabled" not in http


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


def test_instance_topology_pages_as_aws_documents(aws: EmulatorControl, world: World) -> None:
    """DescribeInstanceTopology pages its answer (20 items by default, instance ids given or
    not), takes at most 100 instance ids, and refuses MaxResults beside them (EC2 API
    reference, DescribeInstanceTopology: InstanceIds, MaxResults, NextToken)."""
    ids = [i["InstanceId"] for i in world.instances(25, instance_type="trn1.32xlarge")]
    ec2 = boto3.client("ec2")

    first = ec2.describe_instance_topology(InstanceIds=ids)
    second = ec2.describe_instance_topology(InstanceIds=ids, NextToken=first["NextToken"])

    assert len(first["Instances"]) == 20 and len(second["Instances"]) == 5
    assert "NextToken" not in second
    pages = {i["InstanceId"] for page in (first, second) for i in page["Instances"]}
    assert pages == set(ids)
    with pytest.raises(ClientError, match="InvalidParameterValue"):
        ec2.describe_instance_topology(InstanceIds=ids * 5)
    with pytest.raises(ClientError, match="InvalidParameterCombination"):
        ec2.describe_instance_topology(InstanceIds=ids[:2], MaxResults=5)
    paged = ec2.describe_instance_topology(MaxResults=5)
    assert len(paged["Instances"]) == 5 and paged["NextToken"]


def test_instances_found_by_id_answer_as_ec2_does(aws: EmulatorControl, world: World) -> None:
    """DescribeInstances by id, RegisterTargets and a classic ELB's instance health find
        instances through the emulator's index: each reservation shows only the instances asked
        for, in launch order; a terminated instance is still described but not running; an unknown
        id is InvalidInstanceID.NotFound. An instance takes its image's details (the emulator looks
    the image up directly)."""
    first = [i["InstanceId"] for i in world.instances(3)]
    second = [i["InstanceId"] for i in world.instances(2, zone="us-east-1b")]
    ec2, elb, elbv2 = boto3.client("ec2"), boto3.client("elb"), boto3.client("elbv2")
    ec2.terminate_instances(InstanceIds=[first[1]])

    reservations = ec2.describe_instances(InstanceIds=[second[0], first[2], first[1]])
    shown = [[i["InstanceId"] for i in r["Instances"]] for r in reservations["Reservations"]]
    assert shown == [[first[1], first[2]], [second[0]]]
    states = {
        i["InstanceId"]: i["State"]["Name"] for i in reservations["Reservations"][0]["Instances"]
    }
    assert states == {first[1]: "terminated", first[2]: "running"}
    (image,) = ec2.describe_images(ImageIds=["ami-12c6146b"])["Images"]
    launched = reservations["Reservations"][1]["Instances"][0]
    assert (launched["Architecture"], launched["RootDeviceName"]) == (
        image["Architecture"],
        image["RootDeviceName"],
    ), "an instance takes its image's details"
    with pytest.raises(ClientError, match=r"InvalidInstanceID\.NotFound"):
        ec2.describe_instances(InstanceIds=[first[0], "i-0123456789abcdef0"])

    group = elbv2.create_target_group(
        Name="nodes", Protocol="TCP", Port=30080, VpcId=world.vpc_id, TargetType="instance"
    )["TargetGroups"][0]["TargetGroupArn"]
    elbv2.register_targets(TargetGroupArn=group, Targets=[{"Id": second[1]}, {"Id": first[0]}])
    with pytest.raises(ClientError, match="not in a running state"):
        elbv2.register_targets(TargetGroupArn=group, Targets=[{"Id": first[1]}])
    health = elbv2.describe_target_health(TargetGroupArn=group)["TargetHealthDescriptions"]
    assert sorted(h["Target"]["Id"] for h in health) == sorted([second[1], first[0]])

    elb.create_load_balancer(
        LoadBalancerName="web",
        Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
        Subnets=[world.public["us-east-1a"]],
    )
    elb.register_instances_with_load_balancer(
        LoadBalancerName="web", Instances=[{"InstanceId": i} for i in (first[0], first[1])]
    )
    health = elb.describe_instance_health(LoadBalancerName="web")["InstanceStates"]
    assert {h["InstanceId"]: h["State"] for h in health} == {
        first[0]: "InService",
        first[1]: "OutOfService",
    }


def _add_rules(group: str, first: int, count: int) -> None:
    ec2 = boto3.client("ec2")
    for port in range(first, first + count):
        ec2.authorize_security_group_ingress(
            GroupId=group,
            IpPermissions=[{"IpProtocol": "tcp", "FromPort": port, "ToPort": port,
                            "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
        )  # fmt: skip


def test_a_security_group_holds_60_rules_by_default(aws: EmulatorControl, world: World) -> None:
    _add_rules(world.node_group, 30000, 60)
    with pytest.raises(ClientError, match="RulesPerSecurityGroupLimitExceeded"):
        _add_rules(world.node_group, 30060, 1)


def test_a_raised_quota_of_rules_per_security_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An account whose quota was raised (a benchmark with hundreds of load balancers needs
    it): POLYCCM_AWS_RULES_PER_SECURITY_GROUP in the emulator's environment."""
    monkeypatch.setenv(RULES_QUOTA_VARIABLE, "100")
    with running_emulator(tmp_path) as env:
        point_boto3_at(env, monkeypatch.setenv, lambda n: monkeypatch.delenv(n, raising=False))
        world = World()
        _add_rules(world.node_group, 30000, 100)
        with pytest.raises(ClientError, match="RulesPerSecurityGroupLimitExceeded"):
            _add_rules(world.node_group, 30100, 1)
