"""What polyccm learns from the EC2 instance it runs on when the cloud config leaves it open, as
cloud-provider-aws v1.37.1 does: the region, the VPC and the fallback subnet, on the instance
metadata service (the emulator's, for the instance tagged ``polyccm.dev/ccm-host=true``,
reached through ``AWS_EC2_METADATA_SERVICE_ENDPOINT``); and ``Zone`` overriding ``Region``."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from typing import Any

import boto3
import pytest
from polyccm.errors import ConfigError
from polyccm_aws.api import resolve_region
from polyccm_aws.config import CloudConfig, parse_cloud_config
from polyccm_aws.imds import InstanceMetadata
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World


@pytest.fixture
def no_region_variable(aws: EmulatorControl, monkeypatch: pytest.MonkeyPatch) -> None:
    """boto3 (and so polyccm) without a region: as upstream's Helm chart runs its CCM."""
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)


def test_zone_overrides_region_as_upstream() -> None:
    # cloud-provider-aws v1.37.1 pkg/providers/v1/aws.go:3748-3759 (getRegionFromMetadata):
    # a Zone in the cloud config gives the region before Region is looked at.
    config = parse_cloud_config("[Global]\nRegion = us-west-2\nZone = eu-west-1a\n")

    assert resolve_region(config) == "eu-west-1"


def test_without_region_anywhere_the_region_comes_from_the_instance_identity_document(
    world: World, no_region_variable: None
) -> None:
    # aws.go:514 and :583 call getRegionFromMetadata, whose config.GetRegion
    # (config/config.go:145-157) asks the metadata service: the SDK's imds.GetRegion reads the
    # identity document (aws-sdk-go-v2 feature/ec2/imds v1.16.31 api_op_GetRegion.go:45-71).
    (host,) = world.instances(1, "us-east-1b", ccm_host=True)
    (node,) = world.instances(1, "us-east-1a")

    provider = AwsProvider.discover(CloudConfig())

    metadata = provider.instances_v2().instance_metadata(world.node(node))
    assert metadata.region == "us-east-1"
    assert metadata.zone == "us-east-1a"
    assert provider.tagging.tag_key == f"kubernetes.io/cluster/{CLUSTER}"  # from host's tags
    assert host["InstanceId"] != node["InstanceId"]


def test_without_region_nor_metadata_the_start_is_one_line(
    aws: EmulatorControl, no_region_variable: None
) -> None:
    # No instance is the CCM host: the metadata service answers 404.
    with pytest.raises(ConfigError, match=r"no AWS region: .*instance metadata service"):
        AwsProvider.discover(CloudConfig(kubernetes_cluster_id=CLUSTER))


def own_vpc(cluster_tag: str) -> tuple[str, str, dict[str, Any]]:
    """A second VPC with one public subnet tagged for no cluster and the CCM host in it; its
    VPC id, subnet id and the host."""
    ec2 = boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway)
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24", AvailabilityZone="us-east-1b")
    subnet_id = subnet["Subnet"]["SubnetId"]
    ec2.associate_route_table(RouteTableId=table, SubnetId=subnet_id)
    host = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        InstanceType="m5.large",
        SubnetId=subnet_id,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": cluster_tag, "Value": "owned"},
                    {"Key": "polyccm.dev/ccm-host", "Value": "true"},
                ],
            }
        ],
    )["Instances"][0]
    return vpc, subnet_id, host


def test_the_load_balancer_goes_into_the_vpc_and_subnet_of_the_ccms_instance(
    world: World,
) -> None:
    # Upstream's VPC is its own instance's (aws.go:636-642, aws_instance.go:63-64), and with
    # no subnet tagged in it, the ELB takes the instance's subnet (aws.go:1672-1680). Here
    # another VPC has subnets tagged for the cluster, and the Service has no node yet: without
    # the metadata, polyccm could not tell the VPC ("cannot tell the cluster's VPC").
    vpc, subnet, _host = own_vpc(world.cluster_tag)
    assert InstanceMetadata().network() is not None

    provider = AwsProvider.discover(CloudConfig())
    provider.load_balancer().ensure_load_balancer(CLUSTER, world.service(), [])

    (elb,) = boto3.client("elb").describe_load_balancers()["LoadBalancerDescriptions"]
    assert elb["VPCId"] == vpc
    assert elb["Subnets"] == [subnet]


def test_a_configured_vpc_still_wins(world: World) -> None:
    vpc, _subnet, _host = own_vpc(world.cluster_tag)

    provider = AwsProvider.discover(CloudConfig(vpc=world.vpc_id))

    assert provider.config.vpc == world.vpc_id != vpc
    assert provider.config.subnet_id == ""  # the instance's subnet is not in that VPC


def test_the_emulated_metadata_service_answers_the_go_sdk_as_ec2_does(
    world: World, emulator: Mapping[str, str]
) -> None:
    # The Go SDK (aws-sdk-go-v2 feature/ec2/imds v1.16.31 api_op_GetToken.go:81-84) refuses a
    # token answer without its TTL header, falls back to IMDSv1 and gets 401: upstream's binary
    # could not start on the emulator. It reads the region from the identity document
    # (api_op_GetRegion.go:45-71, api_op_GetInstanceIdentityDocument.go:94-110).
    endpoint = emulator["AWS_EC2_METADATA_SERVICE_ENDPOINT"]
    (host,) = world.instances(1, "us-east-1b", "c5.large", ccm_host=True)
    request = urllib.request.Request(
        f"{endpoint}latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        token = response.read().decode()
        assert response.headers["X-Aws-Ec2-Metadata-Token-Ttl-Seconds"] == "21600"
    document = urllib.request.Request(
        f"{endpoint}latest/dynamic/instance-identity/document",
        headers={"X-aws-ec2-metadata-token": token},
    )
    with urllib.request.urlopen(document, timeout=5) as response:
        identity = json.loads(response.read())

    assert identity["region"] == "us-east-1"
    assert identity["availabilityZone"] == "us-east-1b"
    assert identity["instanceId"] == host["InstanceId"]
    assert identity["instanceType"] == "c5.large"
