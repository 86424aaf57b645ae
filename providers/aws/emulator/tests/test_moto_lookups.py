"""The emulator's direct lookups in moto's backends answer what moto's scans answer: a volume
read by its id (with and without filters, unknown), the instances left on a classic ELB after a
deregistration (repeated, unknown and still registered ids, their order), and a target group's
health (running, stopped, unregistered and unknown targets; an unknown group)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from polyccm_aws_emulator import moto_lookups
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import emulator_in_this_process, moto_code_put_back


def _volume_reads(ec2: Any, volume: str) -> list[Any]:
    answers: list[Any] = [
        ec2.describe_volumes(VolumeIds=[volume])["Volumes"],
        ec2.describe_volumes(
            VolumeIds=[volume], Filters=[{"Name": "status", "Values": ["in-use"]}]
        )["Volumes"],
        ec2.describe_volumes(
            VolumeIds=[volume], Filters=[{"Name": "status", "Values": ["available"]}]
        )["Volumes"],
    ]
    with pytest.raises(ClientError) as unknown:
        ec2.describe_volumes(VolumeIds=["vol-0123456789abcdef0"])
    answers.append(unknown.value.response["Error"])
    return answers


def elbv2_group(url: str, vpc: str, ids: list[str]) -> str:
    """A target group of ``ids`` but the last, the first of them stopped."""
    ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-1")
    elbv2 = boto3.client("elbv2", endpoint_url=url, region_name="us-east-1")
    group = elbv2.create_target_group(
        Name="lookup-health", Protocol="TCP", Port=30083, VpcId=vpc, TargetType="instance"
    )["TargetGroups"][0]["TargetGroupArn"]
    elbv2.register_targets(TargetGroupArn=group, Targets=[{"Id": i} for i in ids[:-1]])
    ec2.stop_instances(InstanceIds=ids[:1])
    return str(group)


def _health_reads(url: str, group: str, ids: list[str]) -> list[Any]:
    elbv2 = boto3.client("elbv2", endpoint_url=url, region_name="us-east-1")
    answers: list[Any] = [
        elbv2.describe_target_health(TargetGroupArn=group)["TargetHealthDescriptions"],
        elbv2.describe_target_health(
            TargetGroupArn=group, Targets=[{"Id": ids[-1]}, {"Id": ids[0]}, {"Id": "i-0000000f"}]
        )["TargetHealthDescriptions"],
    ]
    with pytest.raises(ClientError) as unknown:
        elbv2.describe_target_health(TargetGroupArn=group.replace("lookup-health", "nowhere"))
    answers.append(unknown.value.response["Error"])
    return answers


def test_lookups_answer_as_moto_scans(aws: EmulatorControl) -> None:
    """Volumes read by id and classic ELBs after deregistrations are what moto's code gives."""
    del aws  # for its fake credentials and isolated boto3; the emulator here serves the calls
    with emulator_in_this_process() as url:
        ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-1")
        elb = boto3.client("elb", endpoint_url=url, region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.3.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.3.0.0/20")["Subnet"]["SubnetId"]
        instances = ec2.run_instances(
            ImageId="ami-12c6146b", MinCount=8, MaxCount=8, SubnetId=subnet
        )["Instances"]
        ids = [i["InstanceId"] for i in instances]
        volume = instances[3]["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]
        fast = _volume_reads(ec2, volume)
        with moto_code_put_back(moto_lookups.PATCHED):
            slow = _volume_reads(ec2, volume)
        assert fast == slow
        assert [v["VolumeId"] for v in fast[0]] == [volume] and fast[2] == []

        registered = [{"InstanceId": i} for i in [*ids, *ids[:3]]]  # some twice, as moto keeps
        leaving = [{"InstanceId": i} for i in [ids[1], ids[5], ids[1], "i-0000000000000000f"]]
        kept = []
        for name, fast_code in (("lookup-fast", True), ("lookup-moto", False)):
            elb.create_load_balancer(
                LoadBalancerName=name,
                Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
                Subnets=[subnet],
            )
            elb.register_instances_with_load_balancer(LoadBalancerName=name, Instances=registered)
            if fast_code:
                answer = elb.deregister_instances_from_load_balancer(
                    LoadBalancerName=name, Instances=leaving
                )
            else:
                with moto_code_put_back(moto_lookups.PATCHED):
                    answer = elb.deregister_instances_from_load_balancer(
                        LoadBalancerName=name, Instances=leaving
                    )
            (described,) = elb.describe_load_balancers(LoadBalancerNames=[name])[
                "LoadBalancerDescriptions"
            ]
            kept.append((answer["Instances"], described["Instances"]))
        group = elbv2_group(url, vpc, ids)
        fast_health = _health_reads(url, group, ids)
        with moto_code_put_back(moto_lookups.PATCHED):
            slow_health = _health_reads(url, group, ids)
    assert fast_health == slow_health
    states = {h["Target"]["Id"]: h["TargetHealth"]["State"] for h in fast_health[0]}
    assert states[ids[0]] == "unused" and states[ids[1]] == "healthy", "one stopped, one running"
    assert kept[0] == kept[1]
    left = [i["InstanceId"] for i in kept[0][1]]
    assert left == [i for i in [*ids, *ids[:3]] if i not in (ids[1], ids[5])]


def test_the_lookups_are_installed(aws: EmulatorControl) -> None:
    """The emulator's app looks volumes and leaving instances up directly."""
    del aws
    with emulator_in_this_process():
        for path, name in moto_lookups.PATCHED:
            module, _, owner = path.rpartition(".")
            patched = getattr(__import__(module, fromlist=[owner]), owner).__dict__[name]
            assert getattr(patched, moto_lookups.MARKER, False), path
