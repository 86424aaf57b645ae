"""Where calls go: ServiceOverride endpoints, AWS_ENDPOINT_URL, and an assumed RoleARN."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from polyccm_aws.config import parse_cloud_config
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World


def overrides(endpoint: str) -> str:
    sections = []
    for index, service in enumerate(
        ("EC2", "Elastic Load Balancing", "Elastic Load Balancing v2", "sts")
    ):
        sections.append(
            f'[ServiceOverride "{index}"]\nService = {service}\nRegion = us-east-1\n'
            f"URL = {endpoint}\nSigningRegion = us-east-1\n"
        )
    return "[Global]\nRegion = us-east-1\n" + "\n".join(sections)


def test_service_overrides_route_calls_without_aws_endpoint_url(
    world: World,
    aws: EmulatorControl,
    emulator: Mapping[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    instance = world.instances()[0]
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    provider = AwsProvider(
        parse_cloud_config(overrides(emulator["AWS_ENDPOINT_URL"])), cluster_name=CLUSTER
    )
    aws.reset_calls()

    assert provider.instances_v2().instance_exists(world.node(instance))
    assert provider.load_balancer().get_load_balancer(CLUSTER, world.service()) is None

    assert aws.calls()["DescribeInstances"] == 1
    assert aws.calls()["DescribeLoadBalancers"] == 1


def test_role_arn_is_assumed_through_sts(world: World, aws: EmulatorControl) -> None:
    instance = world.instances()[0]
    config = parse_cloud_config(
        "[Global]\nRoleARN = arn:aws:iam::123456789012:role/ccm\n"
        "SourceARN = arn:aws:eks:us-east-1:123456789012:cluster/prod\n"
    )
    provider = AwsProvider(config, cluster_name=CLUSTER)
    aws.reset_calls()

    assert provider.instances_v2().instance_exists(world.node(instance))

    assert aws.calls(by_service=True).get("sts:AssumeRole") == 1
