"""A new load balancer's settings go out at once: once the load balancer exists, its attributes,
health check or listeners, node rules and instances each need only it, so they are asked for
side by side rather than one after another, and the Service gets its ingress after the slowest
one instead of after the sum of them all.

Upstream makes them one after the other, each once the one before succeeded (cloud-provider-aws
pkg/providers/v1/aws.go:2715-2806 for a classic ELB, 2494-2556 for an NLB, at 63ec440c). Each
test holds the calls it names at the cloud's door until all of them have arrived: made one
after another, the first would wait for the others for ever (the test fails after a generous
guard), made side by side they all go through.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from polyccm.cloud import default_load_balancer_name
from polyccm_aws import annotations as ann
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.testing import CLUSTER, World

GUARD = 60.0
"""Seconds a held call waits for the others before the test gives up (not a measurement)."""


@contextmanager
def held_until_all_arrive(provider: AwsProvider, *calls: tuple[str, str]) -> Iterator[None]:
    """Hold the first of each ``(client, operation)`` in ``calls`` until every one has been
    sent; a call still alone after :data:`GUARD` seconds fails."""
    barrier = threading.Barrier(len(calls), timeout=GUARD)
    waiting = set(calls)
    lock = threading.Lock()
    hooks: list[tuple[Any, Any]] = []
    for client_name in {client for client, _ in calls}:
        client = provider.api.client(client_name)

        def hold(event_name: str, _client: str = client_name, **_: Any) -> None:
            key = (_client, event_name.rsplit(".", 1)[-1])
            with lock:
                if key not in waiting:
                    return
                waiting.discard(key)
            barrier.wait()

        client.meta.events.register("before-send", hold)
        hooks.append((client, hold))
    try:
        yield
    finally:
        for client, hold in hooks:
            client.meta.events.unregister("before-send", hold)


def test_a_new_classic_elbs_attributes_health_check_and_instances_go_out_at_once(
    world: World, provider: AwsProvider
) -> None:
    nodes = [world.node(i) for i in world.instances(2)]
    service = world.service()

    with held_until_all_arrive(
        provider,
        ("elb", "DescribeLoadBalancerAttributes"),
        ("elb", "ConfigureHealthCheck"),
        ("elb", "RegisterInstancesWithLoadBalancer"),
    ):
        status = provider.load_balancer().ensure_load_balancer(CLUSTER, service, nodes)

    name = default_load_balancer_name(service)
    elb = world.elb.describe_load_balancers(LoadBalancerNames=[name])["LoadBalancerDescriptions"][0]
    assert status.ingress[0].hostname == elb["DNSName"]
    assert len(elb["Instances"]) == 2
    assert elb["HealthCheck"]["Target"] == "TCP:30080"


def test_a_new_nlbs_target_groups_attributes_and_node_rules_go_out_at_once(
    world: World, provider: AwsProvider
) -> None:
    nodes = [world.node(i) for i in world.instances(2)]
    service = world.service(annotations={ann.TYPE: ann.NLB})

    with held_until_all_arrive(
        provider,
        ("elbv2", "CreateTargetGroup"),
        ("elbv2", "DescribeLoadBalancerAttributes"),
        ("ec2", "AuthorizeSecurityGroupIngress"),
    ):
        status = provider.load_balancer().ensure_load_balancer(CLUSTER, service, nodes)

    (nlb,) = world.elbv2.describe_load_balancers()["LoadBalancers"]
    assert status.ingress[0].hostname == nlb["DNSName"]
    (group,) = world.elbv2.describe_target_groups(LoadBalancerArn=nlb["LoadBalancerArn"])[
        "TargetGroups"
    ]
    health = world.elbv2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
    assert len(health["TargetHealthDescriptions"]) == 2
    node_group = world.ec2.describe_security_groups(GroupIds=[world.node_group])["SecurityGroups"]
    assert any(
        r.get("Description", "").endswith(nlb["LoadBalancerName"])
        for p in node_group[0]["IpPermissions"]
        for r in p.get("IpRanges") or ()
    )
