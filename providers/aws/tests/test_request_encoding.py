"""The provider form-encodes each request body once, before signing, and what it sends is
byte for byte what botocore would have sent (``AWSRequestPreparer._prepare_body``)."""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest
from botocore.awsrequest import AWSRequest, AWSRequestPreparer
from botocore.serialize import create_serializer
from polyccm_aws.api import form_body
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World

ARN = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/k8s-web-0a1b2c3d4e/0f1e2d"

REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "elbv2",
        "RegisterTargets",
        {
            "TargetGroupArn": ARN,
            "Targets": [{"Id": f"i-{n:017x}", "Port": 30000 + n} for n in range(200)],
        },
    ),
    (
        "ec2",
        "AuthorizeSecurityGroupIngress",
        {
            "GroupId": "sg-0123",
            "IpPermissions": [
                {
                    "IpProtocol": "tcp",
                    "FromPort": 80,
                    "ToPort": 80,
                    "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": "web: é & ü+ ~x"}],
                }
            ],
        },
    ),
    (
        "elb",
        "CreateLoadBalancer",
        {
            "LoadBalancerName": "a0b1c2",
            "Listeners": [{"Protocol": "TCP", "LoadBalancerPort": 443, "InstancePort": 30443}],
            "Subnets": ["subnet-1", "subnet-2"],
            "Tags": [{"Key": "kubernetes.io/service-name", "Value": "shop/web"}],
        },
    ),
    ("ec2", "DescribeInstances", {"Filters": [{"Name": "tag:a b", "Values": ["*", "="]}]}),
]


@pytest.mark.parametrize(("service", "operation", "params"), REQUESTS)
def test_the_body_sent_is_botocores_encoding(
    service: str, operation: str, params: dict[str, Any]
) -> None:
    model = botocore.session.get_session().get_service_model(service)
    body = create_serializer(model.metadata["protocol"]).serialize_to_request(
        params, model.operation_model(operation)
    )["body"]

    botocores = AWSRequestPreparer()._prepare_body(AWSRequest(method="POST", data=body))

    assert form_body(body) == botocores


def test_a_large_registration_reaches_the_cloud_whole(
    aws: EmulatorControl, world: World, provider: AwsProvider
) -> None:
    # 300 instances: RegisterInstancesWithLoadBalancer carries them all in one body, which
    # the provider encodes itself (once, before signing); every one of them arrives.
    instances = world.instances(150, "us-east-1a") + world.instances(150, "us-east-1b")
    nodes = [world.node(instance) for instance in instances]
    service = world.service("many")

    provider.load_balancer().ensure_load_balancer(CLUSTER, service, nodes)

    name = provider.load_balancer().get_load_balancer_name(CLUSTER, service)
    described = world.elb.describe_load_balancers(LoadBalancerNames=[name])
    registered = {i["InstanceId"] for i in described["LoadBalancerDescriptions"][0]["Instances"]}
    assert registered == {instance["InstanceId"] for instance in instances}
