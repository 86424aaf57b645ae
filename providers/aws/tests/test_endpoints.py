"""Where calls go: ServiceOverride endpoints, AWS_ENDPOINT_URL, and an assumed RoleARN."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def test_signing_name_of_a_service_override_signs_every_request_for_that_name(
    aws: EmulatorControl, emulator: Mapping[str, str]
) -> None:
    # cloud-provider-aws v1.37.1 pkg/providers/v1/config/config.go:201-212, :268-279, :319-330:
    # an override's SigningName goes to the SDK's WithSigV4SigningName for EC2, ELB and ELBv2
    # (an empty one changes nothing: aws-sdk-go-v2 service/ec2 v1.249.0 auth.go:36);
    # SigningMethod is only declared (config.go:131), and read and unused here too. The ELBv2
    # override is the "Elastic Load Balancing v2" one (config.go:319-320) even though the
    # classic ELB's "Elastic Load Balancing" is SDK v1's name for both.
    url = emulator["AWS_ENDPOINT_URL"]
    text = (
        "[Global]\nRegion = us-east-1\n"
        f'[ServiceOverride "ec2"]\nService = EC2\nRegion = us-east-1\nURL = {url}\n'
        "SigningRegion = us-east-1\nSigningName = ec2-private\nSigningMethod = v4\n"
        f'[ServiceOverride "elb"]\nService = Elastic Load Balancing\nRegion = us-east-1\n'
        f"URL = {url}\nSigningRegion = us-east-1\nSigningName = elb-private\n"
        f'[ServiceOverride "elbv2"]\nService = Elastic Load Balancing v2\nRegion = us-east-1\n'
        f"URL = {url}\nSigningRegion = us-west-2\n"
    )
    provider = AwsProvider(parse_cloud_config(text), cluster_name=CLUSTER)
    scopes: dict[str, str] = {}

    class Sent(Exception):
        """Stops a request once signed: the emulator, like moto, routes by the signing name."""

    for service, operation in (
        ("ec2", "describe_instances"),
        ("elb", "describe_load_balancers"),
        ("elbv2", "describe_load_balancers"),
    ):

        def record(request: Any, service: str = service, **_: Any) -> None:
            credential = request.headers["Authorization"].decode().split("Credential=")[1]
            scopes[service] = credential.split(",")[0]
            raise Sent

        provider.api.client(service).meta.events.register("before-send", record)
        with pytest.raises(Sent):
            provider.api.call(service, operation)

    assert scopes["ec2"].endswith("/us-east-1/ec2-private/aws4_request")
    assert scopes["elb"].endswith("/us-east-1/elb-private/aws4_request")
    assert scopes["elbv2"].endswith("/us-west-2/elasticloadbalancing/aws4_request")
