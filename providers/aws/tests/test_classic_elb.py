"""Classic ELBs against the emulator: creation, adoption, backends, annotations and deletion."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from polyccm.cloud import default_load_balancer_name
from polyccm.errors import InvalidServiceSpec, RetryAfter
from polyccm.objects import Service
from polyccm_aws import annotations as ann
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, CLUSTER_TAG, World

MUTATIONS = (
    "CreateLoadBalancer",
    "CreateLoadBalancerListeners",
    "DeleteLoadBalancerListeners",
    "CreateSecurityGroup",
    "AuthorizeSecurityGroupIngress",
    "RevokeSecurityGroupIngress",
    "RegisterInstancesWithLoadBalancer",
    "DeregisterInstancesFromLoadBalancer",
    "ConfigureHealthCheck",
    "ModifyLoadBalancerAttributes",
    "ApplySecurityGroupsToLoadBalancer",
)


def describe_elb(world: World, name: str) -> dict[str, Any]:
    found: dict[str, Any] = world.elb.describe_load_balancers(LoadBalancerNames=[name])[
        "LoadBalancerDescriptions"
    ][0]
    return found


def group_named(world: World, name: str) -> dict[str, Any] | None:
    groups = world.ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]}])[
        "SecurityGroups"
    ]
    return groups[0] if groups else None


def node_group_sources(world: World) -> set[str]:
    group = world.ec2.describe_security_groups(GroupIds=[world.node_group])["SecurityGroups"][0]
    return {
        pair["GroupId"] for p in group["IpPermissions"] for pair in p.get("UserIdGroupPairs", [])
    }


def all_elbs(world: World) -> list[str]:
    return [
        d["LoadBalancerName"]
        for d in world.elb.describe_load_balancers()["LoadBalancerDescriptions"]
    ]


def two_port_service(world: World, **kwargs: Any) -> Service:
    return world.service(
        ports=[
            {"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080},
            {"name": "https", "protocol": "TCP", "port": 443, "nodePort": 30443},
        ],
        **kwargs,
    )


def test_creates_an_elb_with_listeners_health_check_and_security_group(
    world: World, provider: AwsProvider
) -> None:
    instances = world.instances(2, "us-east-1a") + world.instances(1, "us-east-1b")
    nodes = [world.node(i) for i in instances]
    service = two_port_service(world)
    name = default_load_balancer_name(service)

    status = provider.load_balancer().ensure_load_balancer(CLUSTER, service, nodes)

    elb = describe_elb(world, name)
    assert status.ingress[0].hostname == elb["DNSName"]
    assert sorted(
        (
            d["Listener"]["LoadBalancerPort"],
            d["Listener"]["InstancePort"],
            d["Listener"]["Protocol"],
        )
        for d in elb["ListenerDescriptions"]
    ) == [(80, 30080, "TCP"), (443, 30443, "TCP")]
    assert elb["HealthCheck"]["Target"] == "TCP:30080"
    assert (elb["HealthCheck"]["HealthyThreshold"], elb["HealthCheck"]["UnhealthyThreshold"]) == (
        2,
        6,
    )
    assert sorted(elb["Subnets"]) == sorted(world.public.values())
    assert sorted(i["InstanceId"] for i in elb["Instances"]) == sorted(
        i["InstanceId"] for i in instances
    )
    group = group_named(world, f"k8s-elb-{name}")
    assert group is not None and elb["SecurityGroups"] == [group["GroupId"]]
    assert {"Key": CLUSTER_TAG, "Value": "owned"} in group["Tags"]
    opened = {
        (p["IpProtocol"], p.get("FromPort"), r["CidrIp"])
        for p in group["IpPermissions"]
        for r in p["IpRanges"]
    }
    assert opened == {("tcp", 80, "0.0.0.0/0"), ("tcp", 443, "0.0.0.0/0"), ("icmp", 3, "0.0.0.0/0")}
    assert node_group_sources(world) == {group["GroupId"]}
    tags = world.elb.describe_tags(LoadBalancerNames=[name])["TagDescriptions"][0]["Tags"]
    assert {"Key": "kubernetes.io/service-name", "Value": "default/web"} in tags
    assert {"Key": CLUSTER_TAG, "Value": "owned"} in tags
    assert provider.load_balancer().get_load_balancer(CLUSTER, service) == status


def test_second_ensure_changes_nothing(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    nodes = [world.node(i) for i in world.instances(2)]
    service = two_port_service(world)
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, service, nodes)

    aws.reset_calls()
    lb.ensure_load_balancer(CLUSTER, service, nodes)

    calls = aws.calls()
    assert not {action: calls[action] for action in MUTATIONS if action in calls}
    assert all_elbs(world) == [default_load_balancer_name(service)]


def test_local_traffic_policy_health_checks_the_health_check_node_port(
    world: World, provider: AwsProvider
) -> None:
    service = world.service(externalTrafficPolicy="Local", healthCheckNodePort=32000)

    provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(world.instances()[0])]
    )

    elb = describe_elb(world, default_load_balancer_name(service))
    assert elb["HealthCheck"]["Target"] == "HTTP:32000/healthz"


def test_source_ranges_limit_the_security_group(world: World, provider: AwsProvider) -> None:
    service = world.service(loadBalancerSourceRanges=["192.0.2.0/24", "198.51.100.7/32"])

    provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(world.instances()[0])]
    )

    group = group_named(world, f"k8s-elb-{default_load_balancer_name(service)}")
    assert group is not None
    assert {r["CidrIp"] for p in group["IpPermissions"] for r in p["IpRanges"]} == {
        "192.0.2.0/24",
        "198.51.100.7/32",
    }


def test_update_follows_the_backend_nodes(world: World, provider: AwsProvider) -> None:
    first, second, third = world.instances(3)
    service = world.service()
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, service, [world.node(first), world.node(second)])

    lb.update_load_balancer(CLUSTER, service, [world.node(second), world.node(third)])

    elb = describe_elb(world, default_load_balancer_name(service))
    assert sorted(i["InstanceId"] for i in elb["Instances"]) == sorted(
        [second["InstanceId"], third["InstanceId"]]
    )


def test_adopts_an_elb_created_by_cloud_provider_aws(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    service = world.service()
    name = default_load_balancer_name(service)
    upstream_group = world.ec2.create_security_group(
        GroupName=f"k8s-elb-{name}",
        Description="made by cloud-provider-aws",
        VpcId=world.vpc_id,
        TagSpecifications=[
            {"ResourceType": "security-group", "Tags": [{"Key": CLUSTER_TAG, "Value": "owned"}]}
        ],
    )["GroupId"]
    world.elb.create_load_balancer(
        LoadBalancerName=name,
        Listeners=[
            {
                "Protocol": "tcp",
                "LoadBalancerPort": 80,
                "InstanceProtocol": "tcp",
                "InstancePort": 30080,
            }
        ],
        Subnets=sorted(world.public.values()),
        SecurityGroups=[upstream_group],
    )
    aws.reset_calls()

    status = provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(world.instances()[0])]
    )

    calls = aws.calls()
    assert all_elbs(world) == [name]
    assert "CreateLoadBalancer" not in calls and "CreateSecurityGroup" not in calls
    assert describe_elb(world, name)["SecurityGroups"] == [upstream_group]
    assert status.ingress[0].hostname == describe_elb(world, name)["DNSName"]


def test_delete_leaves_nothing_behind(world: World, provider: AwsProvider) -> None:
    service = two_port_service(world)
    name = default_load_balancer_name(service)
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, service, [world.node(i) for i in world.instances(2)])

    lb.ensure_load_balancer_deleted(CLUSTER, service)
    lb.ensure_load_balancer_deleted(CLUSTER, service)  # already gone: still fine

    assert all_elbs(world) == []
    assert group_named(world, f"k8s-elb-{name}") is None
    assert node_group_sources(world) == set()
    assert lb.get_load_balancer(CLUSTER, service) is None


def test_delete_finishes_a_deletion_interrupted_after_the_elb(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    service = world.service()
    name = default_load_balancer_name(service)
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, service, [world.node(world.instances()[0])])
    # AWS refuses to delete the group while the deleted ELB's interfaces are being released.
    aws.inject("DeleteSecurityGroup", count=1, code="DependencyViolation", status=400)

    with pytest.raises(RetryAfter, match="still in use") as retry:
        lb.ensure_load_balancer_deleted(CLUSTER, service)
    assert retry.value.delay > 0
    assert all_elbs(world) == []
    assert group_named(world, f"k8s-elb-{name}") is not None

    lb.ensure_load_balancer_deleted(CLUSTER, service)

    assert group_named(world, f"k8s-elb-{name}") is None


@pytest.mark.parametrize(
    ("annotations", "spec", "message"),
    [
        ({ann.HC_INTERVAL: "often"}, {}, "healthcheck-interval"),
        (
            {ann.TARGET_GROUP_ATTRIBUTES: "proxy_protocol_v2.enabled=true"},
            {},
            "only supported on an NLB",
        ),
        ({ann.PROXY_PROTOCOL: "yes"}, {}, "proxy-protocol"),
        ({ann.CONNECTION_DRAINING_ENABLED: "maybe"}, {}, "connection-draining-enabled"),
        ({ann.SECURITY_GROUPS: "default"}, {}, "security-groups"),
        ({}, {"loadBalancerIP": "203.0.113.10"}, "loadBalancerIP"),
    ],
)
def test_invalid_service_creates_nothing(
    world: World,
    provider: AwsProvider,
    aws: EmulatorControl,
    annotations: dict[str, str],
    spec: dict[str, Any],
    message: str,
) -> None:
    node = world.node(world.instances()[0])
    service = world.service(annotations=annotations, **spec)
    aws.reset_calls()

    with pytest.raises(InvalidServiceSpec, match=message):
        provider.load_balancer().ensure_load_balancer(CLUSTER, service, [node])

    assert aws.calls() == {}  # refused before any cloud call
    assert all_elbs(world) == []


def test_values_upstream_reads_as_defaults_make_an_elb_and_warnings(
    world: World, provider: AwsProvider
) -> None:
    """A service cloud-provider-aws served (its type and backend protocol mean nothing there)
    gets a classic ELB with TCP listeners, and the status names each annotation and value."""
    service = world.service(annotations={ann.TYPE: "alb", ann.BACKEND_PROTOCOL: "grpc"})
    lb = provider.load_balancer()

    status = lb.ensure_load_balancer(CLUSTER, service, [world.node(world.instances()[0])])

    elb = describe_elb(world, default_load_balancer_name(service))
    assert [
        (d["Listener"]["Protocol"], d["Listener"]["InstanceProtocol"])
        for d in elb["ListenerDescriptions"]
    ] == [("TCP", "TCP")]
    assert status.ingress[0].hostname == elb["DNSName"]
    assert len(status.warnings) == 2
    assert any(f"{ann.TYPE}='alb'" in w for w in status.warnings)
    assert any(f"{ann.BACKEND_PROTOCOL}='grpc'" in w for w in status.warnings)


def test_throttled_create_is_retried(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    service = world.service()
    aws.inject("CreateLoadBalancer", count=2, code="Throttling", service="elb")

    status = provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(world.instances()[0])]
    )

    assert status.ingress[0].hostname
    assert all_elbs(world) == [default_load_balancer_name(service)]


def test_annotations_shape_the_elb(world: World, provider: AwsProvider) -> None:
    web, batch = world.instances(2)
    nodes = [world.node(web, labels={"role": "web"}), world.node(batch, labels={"role": "batch"})]
    extra = world.ec2.create_security_group(
        GroupName="extra", Description="extra", VpcId=world.vpc_id
    )["GroupId"]
    certificate = boto3.client("acm").request_certificate(DomainName="web.example.com")[
        "CertificateArn"
    ]
    service = two_port_service(
        world,
        annotations={
            ann.SSL_CERT: certificate,
            ann.SSL_PORTS: "https",
            ann.BACKEND_PROTOCOL: "http",
            ann.CONNECTION_IDLE_TIMEOUT: "120",
            ann.CONNECTION_DRAINING_ENABLED: "true",
            ann.CONNECTION_DRAINING_TIMEOUT: "30",
            ann.CROSS_ZONE: "true",
            ann.ADDITIONAL_TAGS: "team=web,cost-center=42",
            ann.TARGET_NODE_LABELS: "role=web",
            ann.EXTRA_SECURITY_GROUPS: extra,
            ann.HC_HEALTHY: "3",
            ann.HC_INTERVAL: "20",
            ann.HC_PATH: "/ready",
            ann.HC_PROTOCOL: "HTTP",
        },
    )
    name = default_load_balancer_name(service)

    provider.load_balancer().ensure_load_balancer(CLUSTER, service, nodes)

    elb = describe_elb(world, name)
    listeners = {
        d["Listener"]["LoadBalancerPort"]: d["Listener"] for d in elb["ListenerDescriptions"]
    }
    assert listeners[443]["Protocol"] == "HTTPS"
    assert listeners[443]["SSLCertificateId"] == certificate
    assert listeners[80]["Protocol"] == "HTTP"
    assert elb["HealthCheck"]["Target"] == "HTTP:30080/ready"
    assert (elb["HealthCheck"]["HealthyThreshold"], elb["HealthCheck"]["Interval"]) == (3, 20)
    assert extra in elb["SecurityGroups"]
    assert [i["InstanceId"] for i in elb["Instances"]] == [web["InstanceId"]]
    attributes = world.elb.describe_load_balancer_attributes(LoadBalancerName=name)[
        "LoadBalancerAttributes"
    ]
    assert attributes["ConnectionSettings"]["IdleTimeout"] == 120
    assert attributes["ConnectionDraining"] == {"Enabled": True, "Timeout": 30}
    assert attributes["CrossZoneLoadBalancing"]["Enabled"] is True
    tags = world.elb.describe_tags(LoadBalancerNames=[name])["TagDescriptions"][0]["Tags"]
    assert {"Key": "team", "Value": "web"} in tags
    assert {"Key": "cost-center", "Value": "42"} in tags


def test_proxy_protocol_sets_the_backend_policy(world: World, provider: AwsProvider) -> None:
    service = world.service(annotations={ann.PROXY_PROTOCOL: "*"})
    name = default_load_balancer_name(service)

    provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(world.instances()[0])]
    )

    backends = describe_elb(world, name)["BackendServerDescriptions"]
    assert backends == [{"InstancePort": 30080, "PolicyNames": ["k8s-proxyprotocol-enabled"]}]


def test_internal_elb_uses_private_subnets(world: World, provider: AwsProvider) -> None:
    service = world.service(annotations={ann.INTERNAL: "true"})

    provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(world.instances()[0])]
    )

    elb = describe_elb(world, default_load_balancer_name(service))
    assert elb["Scheme"] == "internal"
    assert sorted(elb["Subnets"]) == sorted(world.private.values())


def test_subnets_and_security_groups_from_annotations(world: World, provider: AwsProvider) -> None:
    mine = world.ec2.create_security_group(
        GroupName="mine", Description="user group", VpcId=world.vpc_id
    )["GroupId"]
    subnet = world.public["us-east-1b"]
    service = world.service(annotations={ann.SUBNETS: subnet, ann.SECURITY_GROUPS: mine})
    name = default_load_balancer_name(service)
    lb = provider.load_balancer()

    lb.ensure_load_balancer(CLUSTER, service, [world.node(world.instances()[0])])

    elb = describe_elb(world, name)
    assert elb["Subnets"] == [subnet]
    assert elb["SecurityGroups"] == [mine]
    assert group_named(world, f"k8s-elb-{name}") is None
    lb.ensure_load_balancer_deleted(CLUSTER, service)
    assert group_named(world, "mine") is not None  # the user's group is never deleted


def test_ssl_negotiation_policy_and_access_logs(world: World, provider: AwsProvider) -> None:
    certificate = boto3.client("acm").request_certificate(DomainName="web.example.com")[
        "CertificateArn"
    ]
    service = two_port_service(
        world,
        annotations={
            ann.SSL_CERT: certificate,
            ann.SSL_PORTS: "443",
            ann.SSL_NEGOTIATION_POLICY: "ELBSecurityPolicy-TLS-1-2-2017-01",
            ann.ACCESS_LOG_ENABLED: "true",
            ann.ACCESS_LOG_BUCKET: "elb-logs",
            ann.ACCESS_LOG_PREFIX: "web",
            ann.ACCESS_LOG_EMIT_INTERVAL: "5",
        },
    )
    name = default_load_balancer_name(service)

    provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(world.instances()[0])]
    )

    elb = describe_elb(world, name)
    policy = "k8s-SSLNegotiationPolicy-ELBSecurityPolicy-TLS-1-2-2017-01"
    assert policy in elb["Policies"]["OtherPolicies"]
    by_port = {d["Listener"]["LoadBalancerPort"]: d for d in elb["ListenerDescriptions"]}
    assert by_port[443]["PolicyNames"] == [policy]
    assert by_port[80]["PolicyNames"] == []
    access_log = world.elb.describe_load_balancer_attributes(LoadBalancerName=name)[
        "LoadBalancerAttributes"
    ]["AccessLog"]
    assert access_log == {
        "Enabled": True,
        "S3BucketName": "elb-logs",
        "S3BucketPrefix": "web",
        "EmitInterval": 5,
    }


def test_listener_changes_follow_the_service_ports(world: World, provider: AwsProvider) -> None:
    node = world.node(world.instances()[0])
    service = two_port_service(world)
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, service, [node])
    changed = world.service(
        uid=service.uid,
        ports=[{"name": "http", "protocol": "TCP", "port": 8080, "nodePort": 31000}],
    )

    lb.ensure_load_balancer(CLUSTER, changed, [node])

    elb = describe_elb(world, default_load_balancer_name(service))
    assert [
        (d["Listener"]["LoadBalancerPort"], d["Listener"]["InstancePort"])
        for d in elb["ListenerDescriptions"]
    ] == [(8080, 31000)]
    assert elb["HealthCheck"]["Target"] == "TCP:31000"


def test_switching_to_annotated_groups_removes_the_managed_group(
    world: World, provider: AwsProvider
) -> None:
    node = world.node(world.instances()[0])
    service = world.service()
    name = default_load_balancer_name(service)
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, service, [node])
    mine = world.ec2.create_security_group(
        GroupName="mine", Description="user group", VpcId=world.vpc_id
    )["GroupId"]
    annotated = world.service(uid=service.uid, annotations={ann.SECURITY_GROUPS: mine})

    lb.ensure_load_balancer(CLUSTER, annotated, [node])

    assert describe_elb(world, name)["SecurityGroups"] == [mine]
    assert group_named(world, f"k8s-elb-{name}") is None
    assert node_group_sources(world) == {mine}
