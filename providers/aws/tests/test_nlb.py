"""NLBs against the emulator: target groups, listeners, node rules, type rules and deletion."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from polyccm.cloud import default_load_balancer_name
from polyccm.errors import ImplementedElsewhere, InvalidServiceSpec
from polyccm.objects import Service
from polyccm_aws import annotations as ann
from polyccm_aws.api import AwsApiError
from polyccm_aws.config import CloudConfig
from polyccm_aws.naming import target_group_name
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, CLUSTER_TAG, World

NLB = {ann.TYPE: "nlb"}


def nlb_service(world: World, annotations: dict[str, str] | None = None, **spec: Any) -> Service:
    return world.service(
        annotations={**NLB, **(annotations or {})},
        ports=[
            {"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080},
            {"name": "dns", "protocol": "TCP", "port": 53, "nodePort": 30053},
        ],
        **spec,
    )


def load_balancers(world: World) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = world.elbv2.describe_load_balancers()["LoadBalancers"]
    return found


def target_groups(world: World) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = world.elbv2.describe_target_groups()["TargetGroups"]
    return found


def node_rules(world: World) -> set[tuple[str, int, str, str]]:
    group = world.ec2.describe_security_groups(GroupIds=[world.node_group])["SecurityGroups"][0]
    return {
        (p["IpProtocol"], p.get("FromPort", -1), r["CidrIp"], r.get("Description", ""))
        for p in group["IpPermissions"]
        for r in p["IpRanges"]
    }


def test_creates_an_nlb_with_target_groups_per_port(world: World, provider: AwsProvider) -> None:
    instances = world.instances(2, "us-east-1a") + world.instances(1, "us-east-1b")
    service = nlb_service(world)
    name = default_load_balancer_name(service)

    status = provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(i) for i in instances]
    )

    (nlb,) = load_balancers(world)
    assert nlb["LoadBalancerName"] == name and nlb["Type"] == "network"
    assert status.ingress[0].hostname == nlb["DNSName"]
    assert sorted(z["SubnetId"] for z in nlb["AvailabilityZones"]) == sorted(world.public.values())
    listeners = world.elbv2.describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"])["Listeners"]
    assert sorted((listener["Port"], listener["Protocol"]) for listener in listeners) == [
        (53, "TCP"),
        (80, "TCP"),
    ]
    groups = {g["Port"]: g for g in target_groups(world)}
    assert sorted(groups) == [30053, 30080]
    assert groups[30080]["TargetGroupName"] == target_group_name(
        cluster_id=CLUSTER,
        namespace="default",
        name="web",
        service_port=80,
        node_port=30080,
        target_protocol="TCP",
        health_check_protocol="TCP",
        health_check_interval=30,
    )
    assert groups[30080]["TargetGroupName"].startswith("k8s-default-web-")
    assert groups[30080]["HealthCheckProtocol"] == "TCP"
    assert groups[30080]["HealthCheckPort"] == "traffic-port"
    targets = world.elbv2.describe_target_health(TargetGroupArn=groups[30080]["TargetGroupArn"])
    assert sorted(
        (d["Target"]["Id"], d["Target"]["Port"]) for d in targets["TargetHealthDescriptions"]
    ) == sorted((i["InstanceId"], 30080) for i in instances)
    rules = node_rules(world)
    client = f"kubernetes.io/rule/nlb/client={name}"
    assert ("tcp", 30080, "0.0.0.0/0", client) in rules
    assert ("tcp", 30053, "0.0.0.0/0", client) in rules
    assert ("icmp", 3, "0.0.0.0/0", "kubernetes.io/rule/nlb/mtu") in rules
    tags = world.elbv2.describe_tags(ResourceArns=[nlb["LoadBalancerArn"]])["TagDescriptions"][0]
    assert {"Key": CLUSTER_TAG, "Value": "owned"} in tags["Tags"]
    assert provider.load_balancer().get_load_balancer(CLUSTER, service) == status


def test_local_traffic_policy_health_checks_over_http(world: World, provider: AwsProvider) -> None:
    service = nlb_service(
        world,
        {ann.SOURCE_RANGES: "192.0.2.0/24"},
        externalTrafficPolicy="Local",
        healthCheckNodePort=32000,
    )
    name = default_load_balancer_name(service)

    provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(world.instances()[0])]
    )

    for group in target_groups(world):
        assert (group["HealthCheckProtocol"], group["HealthCheckPort"]) == ("HTTP", "32000")
        assert group["HealthCheckPath"] == "/healthz"
        assert group["HealthCheckIntervalSeconds"] == 10
    rules = node_rules(world)
    assert ("tcp", 30080, "192.0.2.0/24", f"kubernetes.io/rule/nlb/client={name}") in rules
    health = {r for r in rules if r[3] == f"kubernetes.io/rule/nlb/health={name}"}
    assert {(r[1], r[2]) for r in health} == {(32000, "10.0.0.0/24"), (32000, "10.0.1.0/24")}


def test_second_ensure_changes_nothing(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    nodes = [world.node(i) for i in world.instances(2)]
    service = nlb_service(world)
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, service, nodes)

    aws.reset_calls()
    lb.ensure_load_balancer(CLUSTER, service, nodes)

    changes = {
        action: count for action, count in aws.calls().items() if not action.startswith("Describe")
    }
    assert changes == {}


def test_load_balancers_reuse_the_instances_the_node_controller_just_read(
    world: World, aws: EmulatorControl
) -> None:
    # As after a burst of new nodes: their instances were read to initialise them a minute ago
    # (longer than the store's own 10 s).
    provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER)
    read, joined = world.instances(6), world.instances(1)[0]
    provider.instances_v2().instances_metadata([world.node(i, by_name=True) for i in read])
    now = provider.store._clock()
    provider.store._clock = lambda: now + 60.0
    service, lb = nlb_service(world), provider.load_balancer()

    aws.reset_calls()
    lb.ensure_load_balancer(CLUSTER, service, [world.node(i) for i in read])
    created = aws.calls().get("DescribeInstances", 0)
    lb.update_load_balancer(CLUSTER, service, [world.node(i) for i in [*read, joined]])

    assert created == 0
    assert aws.calls()["DescribeInstances"] == 1  # the instance of the node that joined
    for group in target_groups(world):
        health = world.elbv2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
        assert len(health["TargetHealthDescriptions"]) == 7


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # The node group's rules grow with each load balancer: one read of the cluster's groups
        # serves the burst (3 and 10 DescribeSecurityGroups before; 12 before that). A classic
        # ELB's own group is read once, by name, and not again to set its rules (7 before).
        ("nlb", {"DescribeSubnets": 1, "DescribeRouteTables": 1, "DescribeSecurityGroups": 1}),
        ("classic", {"DescribeSubnets": 1, "DescribeRouteTables": 1, "DescribeSecurityGroups": 4}),
    ],
)
def test_a_burst_of_load_balancers_lists_the_network_and_the_clusters_groups_once(
    world: World, aws: EmulatorControl, kind: str, expected: dict[str, int]
) -> None:
    provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER)
    nodes = [world.node(i) for i in world.instances(2)]
    lb = provider.load_balancer()

    aws.reset_calls()
    for name in ("first", "second", "third"):
        service = nlb_service(world, name=name) if kind == "nlb" else world.service(name=name)
        lb.ensure_load_balancer(CLUSTER, service, nodes)

    calls = aws.calls()
    assert {operation: calls[operation] for operation in expected} == expected
    assert calls["CreateLoadBalancer"] == 3


def test_a_burst_sharing_one_read_of_the_node_group_leaves_exactly_the_live_balancers_rules(
    world: World, aws: EmulatorControl
) -> None:
    """Classic ELBs and NLBs ensured and deleted in a burst share one read of the cluster's
    groups (each change made is applied to it): the node group ends up admitting exactly the
    remaining balancers, and the burst reads the groups' rules once, not once per balancer."""
    provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER)
    nodes = [world.node(i) for i in world.instances(2)]
    lb = provider.load_balancer()
    classic = [world.service(name=f"web{i}") for i in range(3)]
    network = [
        world.service(
            name=f"api{i}",
            annotations=NLB,
            ports=[{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30100 + i}],
        )
        for i in range(3)
    ]

    aws.reset_calls()
    for service in [*classic, *network]:
        lb.ensure_load_balancer(CLUSTER, service, nodes)
    lb.ensure_load_balancer_deleted(CLUSTER, classic[1])
    lb.ensure_load_balancer_deleted(CLUSTER, network[1])
    lb.ensure_load_balancer(CLUSTER, classic[2], nodes)
    lb.ensure_load_balancer(CLUSTER, network[2], nodes)

    (node_group,) = world.ec2.describe_security_groups(GroupIds=[world.node_group])[
        "SecurityGroups"
    ]
    sources = {
        pair["GroupId"]
        for permission in node_group["IpPermissions"]
        for pair in permission.get("UserIdGroupPairs") or ()
    }
    elbs = world.elb.describe_load_balancers()["LoadBalancerDescriptions"]
    assert sources == {elb["SecurityGroups"][0] for elb in elbs}
    assert len(sources) == 2
    labelled = {
        ip_range["Description"].split("=", 1)[1]
        for permission in node_group["IpPermissions"]
        for ip_range in permission.get("IpRanges") or ()
        if ip_range.get("Description", "").startswith("kubernetes.io/rule/nlb/client=")
    }
    nlbs = world.elbv2.describe_load_balancers()["LoadBalancers"]
    assert labelled == {nlb["LoadBalancerName"] for nlb in nlbs}
    assert len(labelled) == 2
    # One shared read of the cluster's groups serves the burst (22 reads before: one per
    # ensure); the rest are each classic ELB's read of its own group by name (not read again
    # to set its rules: 12 reads before), and its deletion's of its group by name and of the
    # groups it is a source in (4 reads before).
    assert aws.calls()["DescribeSecurityGroups"] == 8


def test_a_target_the_cloud_refuses_is_looked_up_afresh(world: World, aws: EmulatorControl) -> None:
    provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER)
    nodes = [world.node(i) for i in world.instances(2)]
    service = nlb_service(world)
    lb = provider.load_balancer()
    # AWS refuses an instance that stopped after it was cached as running.
    aws.inject("RegisterTargets", code="InvalidTarget", status=400)
    with pytest.raises(AwsApiError, match="InvalidTarget"):
        lb.ensure_load_balancer(CLUSTER, service, nodes)

    aws.reset_calls()
    lb.ensure_load_balancer(CLUSTER, service, nodes)

    assert aws.calls()["DescribeInstances"] == 1


def test_update_follows_the_backend_nodes(world: World, provider: AwsProvider) -> None:
    first, second, third = world.instances(3)
    service = nlb_service(world)
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, service, [world.node(first), world.node(second)])

    lb.update_load_balancer(CLUSTER, service, [world.node(second), world.node(third)])

    for group in target_groups(world):
        health = world.elbv2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
        assert sorted(d["Target"]["Id"] for d in health["TargetHealthDescriptions"]) == sorted(
            [second["InstanceId"], third["InstanceId"]]
        )


def test_port_changes_replace_listeners_and_target_groups(
    world: World, provider: AwsProvider
) -> None:
    nodes = [world.node(world.instances()[0])]
    service = nlb_service(world)
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, service, nodes)
    changed = world.service(
        annotations=NLB,
        uid=service.uid,
        ports=[{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 31080}],
    )

    lb.ensure_load_balancer(CLUSTER, changed, nodes)

    (nlb,) = load_balancers(world)
    listeners = world.elbv2.describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"])["Listeners"]
    assert [(listener["Port"]) for listener in listeners] == [80]
    assert [g["Port"] for g in target_groups(world)] == [31080]


def test_delete_leaves_nothing_behind(world: World, provider: AwsProvider) -> None:
    service = nlb_service(world)
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, service, [world.node(i) for i in world.instances(2)])

    lb.ensure_load_balancer_deleted(CLUSTER, service)
    lb.ensure_load_balancer_deleted(CLUSTER, service)

    assert load_balancers(world) == []
    assert target_groups(world) == []
    assert node_rules(world) == set()
    assert lb.get_load_balancer(CLUSTER, service) is None


def test_delete_finds_target_groups_left_by_an_interrupted_deletion(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    service = nlb_service(world)
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, service, [world.node(world.instances()[0])])
    aws.inject("DeleteTargetGroup", count=1, code="ResourceInUse", status=400)

    with pytest.raises(Exception, match="still in use"):
        lb.ensure_load_balancer_deleted(CLUSTER, service)
    assert load_balancers(world) == []
    assert len(target_groups(world)) == 2

    lb.ensure_load_balancer_deleted(CLUSTER, service)

    assert target_groups(world) == []


def test_adopts_an_nlb_created_by_cloud_provider_aws(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    service = nlb_service(world)
    name = default_load_balancer_name(service)
    nlb = world.elbv2.create_load_balancer(
        Name=name,
        Type="network",
        SubnetMappings=[{"SubnetId": s} for s in sorted(world.public.values())],
    )["LoadBalancers"][0]
    for port, node_port in ((80, 30080), (53, 30053)):
        group = world.elbv2.create_target_group(
            Name=target_group_name(
                cluster_id=CLUSTER,
                namespace="default",
                name="web",
                service_port=port,
                node_port=node_port,
                target_protocol="TCP",
                health_check_protocol="TCP",
                health_check_interval=30,
            ),
            Port=node_port,
            Protocol="TCP",
            VpcId=world.vpc_id,
            TargetType="instance",
            HealthCheckProtocol="TCP",
            HealthCheckPort="traffic-port",
            HealthCheckIntervalSeconds=30,
            HealthyThresholdCount=3,
            UnhealthyThresholdCount=3,
        )["TargetGroups"][0]
        world.elbv2.create_listener(
            LoadBalancerArn=nlb["LoadBalancerArn"],
            Port=port,
            Protocol="TCP",
            DefaultActions=[{"Type": "forward", "TargetGroupArn": group["TargetGroupArn"]}],
        )
    aws.reset_calls()

    provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(world.instances()[0])]
    )

    calls = aws.calls()
    assert [lb["LoadBalancerName"] for lb in load_balancers(world)] == [name]
    assert len(target_groups(world)) == 2
    assert "CreateLoadBalancer" not in calls and "CreateTargetGroup" not in calls
    assert calls.get("RegisterTargets") == 2


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({ann.EXTRA_SECURITY_GROUPS: "sg-0123456789abcdef0"}, "not supported on an NLB"),
        ({ann.TARGET_GROUP_ATTRIBUTES: "stickiness.enabled=true"}, "not supported"),
        ({ann.TARGET_GROUP_ATTRIBUTES: "proxy_protocol_v2.enabled=yes"}, "true or false"),
        ({ann.HC_PROTOCOL: "SSL"}, "TCP, HTTP or HTTPS"),
        ({ann.EIP_ALLOCATIONS: "eipalloc-1", ann.INTERNAL: "true"}, "internal NLB"),
    ],
)
def test_invalid_service_creates_nothing(
    world: World,
    provider: AwsProvider,
    aws: EmulatorControl,
    annotations: dict[str, str],
    message: str,
) -> None:
    node = world.node(world.instances()[0])
    aws.reset_calls()

    with pytest.raises(InvalidServiceSpec, match=message):
        provider.load_balancer().ensure_load_balancer(
            CLUSTER, nlb_service(world, annotations), [node]
        )

    assert aws.calls() == {}
    assert load_balancers(world) == []


def test_eip_count_must_match_the_subnets(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    service = nlb_service(world, {ann.EIP_ALLOCATIONS: "eipalloc-0123456789abcdef0"})
    node = world.node(world.instances()[0])
    aws.reset_calls()

    with pytest.raises(InvalidServiceSpec, match="one entry per subnet"):
        provider.load_balancer().ensure_load_balancer(CLUSTER, service, [node])

    created = {a for a in aws.calls() if a.startswith("Create")}
    assert created == set()
    assert load_balancers(world) == []


def test_type_cannot_change_after_creation(world: World, provider: AwsProvider) -> None:
    node = world.node(world.instances()[0])
    classic = world.service()
    lb = provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, classic, [node])
    as_nlb = world.service(annotations=NLB, uid=classic.uid)

    with pytest.raises(InvalidServiceSpec, match="cannot change after creation"):
        lb.ensure_load_balancer(CLUSTER, as_nlb, [node])

    assert load_balancers(world) == []
    lb.ensure_load_balancer_deleted(CLUSTER, as_nlb)  # deletion still finds the classic ELB
    assert world.elb.describe_load_balancers()["LoadBalancerDescriptions"] == []


@pytest.mark.parametrize("kind", ["nlb-ip", "external"])
def test_load_balancer_controller_types_are_implemented_elsewhere(
    world: World, provider: AwsProvider, aws: EmulatorControl, kind: str
) -> None:
    service = world.service(annotations={ann.TYPE: kind})
    lb = provider.load_balancer()
    aws.reset_calls()

    with pytest.raises(ImplementedElsewhere):
        lb.ensure_load_balancer(CLUSTER, service, [])
    with pytest.raises(ImplementedElsewhere):
        lb.update_load_balancer(CLUSTER, service, [])
    lb.ensure_load_balancer_deleted(CLUSTER, service)
    assert lb.get_load_balancer(CLUSTER, service) is None

    assert aws.calls() == {}


def test_target_group_attributes_and_internal_scheme(world: World, provider: AwsProvider) -> None:
    service = nlb_service(
        world,
        {
            ann.INTERNAL: "true",
            ann.TARGET_GROUP_ATTRIBUTES: "proxy_protocol_v2.enabled=true",
            ann.CROSS_ZONE: "true",
        },
    )

    provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(world.instances()[0])]
    )

    (nlb,) = load_balancers(world)
    assert nlb["Scheme"] == "internal"
    assert sorted(z["SubnetId"] for z in nlb["AvailabilityZones"]) == sorted(world.private.values())
    attributes = world.elbv2.describe_load_balancer_attributes(
        LoadBalancerArn=nlb["LoadBalancerArn"]
    )["Attributes"]
    assert {"Key": "load_balancing.cross_zone.enabled", "Value": "true"} in attributes
    for group in target_groups(world):
        values = world.elbv2.describe_target_group_attributes(
            TargetGroupArn=group["TargetGroupArn"]
        )["Attributes"]
        assert {"Key": "proxy_protocol_v2.enabled", "Value": "true"} in values


def test_managed_security_group_mode(world: World, aws: EmulatorControl) -> None:
    provider = AwsProvider(
        CloudConfig(nlb_security_group_mode="Managed"), cluster_name=CLUSTER, cache_ttl=0.0
    )
    service = nlb_service(world)
    lb = provider.load_balancer()

    lb.ensure_load_balancer(CLUSTER, service, [world.node(world.instances()[0])])

    (nlb,) = load_balancers(world)
    (group_id,) = nlb["SecurityGroups"]
    group = world.ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
    assert group["GroupName"].startswith("k8s-default-web-")
    assert {
        (p.get("FromPort"), r["CidrIp"]) for p in group["IpPermissions"] for r in p["IpRanges"]
    } >= {
        (80, "0.0.0.0/0"),
        (53, "0.0.0.0/0"),
    }

    lb.ensure_load_balancer_deleted(CLUSTER, service)

    remaining = world.ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [group["GroupName"]]}]
    )["SecurityGroups"]
    assert remaining == []


def test_tls_listener_with_certificate_and_policy(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    certificate = boto3.client("acm").request_certificate(DomainName="web.example.com")[
        "CertificateArn"
    ]
    service = world.service(
        annotations={
            **NLB,
            ann.SSL_CERT: certificate,
            ann.SSL_NEGOTIATION_POLICY: "ELBSecurityPolicy-TLS13-1-2-2021-06",
            ann.BACKEND_PROTOCOL: "ssl",
        },
        ports=[{"name": "https", "protocol": "TCP", "port": 443, "nodePort": 30443}],
    )
    nodes = [world.node(world.instances()[0])]
    lb = provider.load_balancer()

    lb.ensure_load_balancer(CLUSTER, service, nodes)

    (nlb,) = load_balancers(world)
    (listener,) = world.elbv2.describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"])[
        "Listeners"
    ]
    assert (listener["Port"], listener["Protocol"]) == (443, "TLS")
    assert listener["Certificates"] == [{"CertificateArn": certificate}]
    assert listener["SslPolicy"] == "ELBSecurityPolicy-TLS13-1-2-2021-06"
    assert [g["Protocol"] for g in target_groups(world)] == ["TLS"]
    aws.reset_calls()
    lb.ensure_load_balancer(CLUSTER, service, nodes)
    assert "ModifyListener" not in aws.calls()


def test_annotations_an_nlb_ignores_are_warned(world: World, provider: AwsProvider) -> None:
    service = nlb_service(world, {ann.SECURITY_GROUPS: "web-sg", ann.BACKEND_PROTOCOL: "http"})

    status = provider.load_balancer().ensure_load_balancer(
        CLUSTER, service, [world.node(world.instances()[0])]
    )

    (nlb,) = load_balancers(world)
    assert not nlb.get("SecurityGroups")
    assert [g["Protocol"] for g in target_groups(world)] == ["TCP", "TCP"]
    assert status.ingress[0].hostname == nlb["DNSName"]
    assert any(f"{ann.SECURITY_GROUPS}='web-sg'" in w for w in status.warnings)
    assert any(f"{ann.BACKEND_PROTOCOL}='http'" in w for w in status.warnings)


def test_healthcheck_timeout_is_parsed_and_never_sent(world: World, provider: AwsProvider) -> None:
    # Upstream reads healthcheck-timeout into an NLB's health-check config, refusing a
    # non-integer (cloud-provider-aws v1.37.1 pkg/providers/v1/aws.go:2244-2246), and creates
    # its target groups without a timeout (aws_loadbalancer.go:789): AWS's default stays.
    instances = world.instances(1)
    plain = provider.load_balancer()
    plain.ensure_load_balancer(CLUSTER, nlb_service(world), [world.node(i) for i in instances])
    defaults = {g["HealthCheckTimeoutSeconds"] for g in target_groups(world)}
    timed = nlb_service(world, {ann.HC_TIMEOUT: "7"}, name="timed")

    status = provider.load_balancer().ensure_load_balancer(
        CLUSTER, timed, [world.node(i) for i in instances]
    )

    assert status.ingress
    timeouts = {g["HealthCheckTimeoutSeconds"] for g in target_groups(world)}
    assert 7 not in timeouts and timeouts == defaults
    with pytest.raises(InvalidServiceSpec, match="integer"):
        provider.load_balancer().ensure_load_balancer(
            CLUSTER, nlb_service(world, {ann.HC_TIMEOUT: "7s"}, name="bad"), []
        )
