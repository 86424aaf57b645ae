"""``polyccm_cloud_api_calls_total`` counts what the AWS provider really sends: checked against
the emulator's own count of the requests it received, operation by operation."""

from __future__ import annotations

from collections import Counter

import boto3
import pytest
from polyccm import cloudcalls, metrics
from polyccm_aws.config import CloudConfig
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World
from prometheus_client import generate_latest


def counted_by_polyccm() -> Counter[str]:
    counts: Counter[str] = Counter()
    for family in metrics.REGISTRY.collect():
        if family.name != "polyccm_cloud_api_calls":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("provider") == "aws":
                counts[sample.labels["operation"]] += int(sample.value)
    return counts


def test_every_call_the_provider_sends_is_counted_by_operation(
    aws: EmulatorControl, world: World, provider: AwsProvider
) -> None:
    instances = world.instances(3)
    nodes = [world.node(instance) for instance in instances]
    service = world.service(
        "counted", annotations={"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
    )
    aws.reset_calls()
    before = counted_by_polyccm()

    provider.instances_v2().instances_metadata(nodes)
    balancer = provider.load_balancer()
    balancer.ensure_load_balancer(CLUSTER, service, nodes)
    balancer.ensure_load_balancer_deleted(CLUSTER, service)

    received = Counter({k: v for k, v in aws.calls(by_service=True).items() if v})
    counted = counted_by_polyccm() - before
    assert received, "the scenario reached the cloud"
    assert counted == received
    assert "elbv2:CreateLoadBalancer" in counted
    exposed = generate_latest(metrics.REGISTRY).decode()
    assert 'polyccm_cloud_api_calls_total{operation="ec2:DescribeInstances",provider="aws"}' in (
        exposed
    )
    assert cloudcalls.calls_made("aws", "elbv2:CreateLoadBalancer") >= 1


def test_the_emulator_tells_callers_apart_by_their_application_id(
    aws: EmulatorControl, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the HA end-to-end test relies on to say which polyccm process called the cloud:
    ``AWS_SDK_UA_APP_ID`` in a process's environment reaches the emulator in every request."""
    node = world.node(world.instances(1)[0])
    aws.reset_calls()
    monkeypatch.setenv("AWS_SDK_UA_APP_ID", "first")
    boto3.client("ec2").describe_instances()
    boto3.client("elb").describe_load_balancers()
    monkeypatch.setenv("AWS_SDK_UA_APP_ID", "second")
    provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER)
    provider.instances_v2().instances_metadata([node])
    monkeypatch.delenv("AWS_SDK_UA_APP_ID")
    boto3.client("ec2").describe_vpcs()

    callers = aws.calls_by_agent()
    assert callers["first"] == {"DescribeInstances": 1, "DescribeLoadBalancers": 1}
    assert callers["second"]["DescribeInstances"] >= 1
    assert set(callers) == {"first", "second", "-"}
    assert callers["-"] == {"DescribeVpcs": 1}, "no application id: '-'"


def test_the_clients_hold_their_models_without_documentation(
    aws: EmulatorControl, world: World, provider: AwsProvider
) -> None:
    # EC2's model with its documentation was 14 MiB of the process; the clients still answer
    # every operation, and what AWS sent comes back as sent (timestamps unparsed).
    (instance,) = world.instances(1)
    ec2 = provider.api.client("ec2")

    answer = provider.api.call("ec2", "describe_instances", InstanceIds=[instance["InstanceId"]])

    assert ec2.meta.service_model.operation_model("DescribeInstances").documentation == ""
    launched = answer["Reservations"][0]["Instances"][0]["LaunchTime"]
    assert isinstance(launched, str) and launched.endswith("Z")
