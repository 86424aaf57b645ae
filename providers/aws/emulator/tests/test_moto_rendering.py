"""The emulator renders moto's answers faster, never differently: each answer served here is
rendered a second time, on the same result, by moto's own serializer and xmltodict, and the two
must be the same bytes (headers and status too), for the reads and writes a CCM makes on a
fleet (a classic ELB with instances, a target group with targets, tagged instances, security
groups with rules, errors). The emulator runs in this process so that moto's code can be put
back for the second rendering."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
import xmltodict
from botocore.exceptions import ClientError
from polyccm_aws_emulator import moto_rendering
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import emulator_in_this_process, moto_code_put_back


def _moto_alone() -> Any:
    """moto's own serializer (and field-name lookup) and xmltodict, for the duration."""
    picker = ("moto.core.serialize.XFormedAttributePicker", "get_possible_keys")
    return moto_code_put_back([*moto_rendering.PATCHED, picker])


def _copy(answer: Any) -> dict[str, Any]:
    """An answer as rendered (moto adds headers to it afterwards)."""
    return {**answer, "headers": dict(answer["headers"])}


Rendering = tuple[str, dict[str, Any], dict[str, Any], float, float]


@contextmanager
def _rendered_twice() -> Iterator[list[Rendering]]:
    """Every answer rendered with the emulator's code, then by moto's on the same result:
    (operation, ours, moto's, our CPU seconds, moto's CPU seconds)."""
    from moto.core.serialize import ResponseSerializer

    serialize = ResponseSerializer.serialize
    renderings: list[Rendering] = []
    lock = threading.Lock()

    def twice(self: Any, result: Any) -> Any:
        with lock:
            started = time.thread_time()
            ours = serialize(self, result)
            middle = time.thread_time()
            with _moto_alone():
                moto = serialize(self, result)
            ended = time.thread_time()
            renderings.append(
                (self.operation_name, _copy(ours), _copy(moto), middle - started, ended - middle)
            )
            return ours

    ResponseSerializer.serialize = twice  # type: ignore[method-assign]
    try:
        yield renderings
    finally:
        ResponseSerializer.serialize = serialize  # type: ignore[method-assign]


def _fleet_and_calls(url: str) -> None:
    """A CCM's calls on a small fleet: tagged instances, groups with rules, a classic ELB and
    a target group with their instances, errors."""
    ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-1")
    elb = boto3.client("elb", endpoint_url=url, region_name="us-east-1")
    elbv2 = boto3.client("elbv2", endpoint_url=url, region_name="us-east-1")
    cluster = {"Key": "kubernetes.io/cluster/render", "Value": "owned"}
    vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.0.0/20")["Subnet"]["SubnetId"]
    nodes = ec2.create_security_group(
        GroupName="nodes", Description="nodes & <friends>", VpcId=vpc
    )["GroupId"]
    lb_group = ec2.create_security_group(GroupName="lb", Description="lb", VpcId=vpc)["GroupId"]
    ec2.authorize_security_group_ingress(
        GroupId=nodes,
        IpPermissions=[
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": lb_group}]},
            {"IpProtocol": "tcp", "FromPort": 30080, "ToPort": 30081,
             "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": 'a "quoted" <rule>'}]},
        ],
    )  # fmt: skip
    instances = [
        i["InstanceId"]
        for i in ec2.run_instances(
            ImageId="ami-12c6146b",
            MinCount=6,
            MaxCount=6,
            SubnetId=subnet,
            SecurityGroupIds=[nodes],
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": [cluster, {"Key": "Name", "Value": "a&b"}]}
            ],
        )["Instances"]
    ]
    ec2.describe_instances(InstanceIds=instances[:4])
    ec2.describe_instances(Filters=[{"Name": "tag:Name", "Values": ["a&b"]}])
    ec2.describe_security_groups(GroupIds=[nodes, lb_group])
    ec2.describe_security_groups()
    with pytest.raises(ClientError):
        ec2.describe_instances(InstanceIds=["i-0123456789abcdef0"])
    elb.create_load_balancer(
        LoadBalancerName="render-web",
        Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
        Subnets=[subnet],
        SecurityGroups=[lb_group],
        Tags=[cluster],
    )
    everyone = [{"InstanceId": i} for i in instances]
    elb.register_instances_with_load_balancer(LoadBalancerName="render-web", Instances=everyone)
    elb.describe_load_balancers(LoadBalancerNames=["render-web"])
    elb.deregister_instances_from_load_balancer(
        LoadBalancerName="render-web", Instances=everyone[:2]
    )
    elb.describe_load_balancers()
    with pytest.raises(ClientError):
        elb.describe_load_balancers(LoadBalancerNames=["nowhere"])
    group = elbv2.create_target_group(
        Name="render", Protocol="TCP", Port=30081, VpcId=vpc, TargetType="instance"
    )["TargetGroups"][0]["TargetGroupArn"]
    arn = elbv2.create_load_balancer(Name="render-api", Type="network", Subnets=[subnet])[
        "LoadBalancers"
    ][0]["LoadBalancerArn"]
    elbv2.create_listener(
        LoadBalancerArn=arn,
        Protocol="TCP",
        Port=80,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": group}],
    )
    elbv2.register_targets(TargetGroupArn=group, Targets=[{"Id": i} for i in instances])
    ec2.stop_instances(InstanceIds=instances[:1])
    elbv2.describe_target_health(TargetGroupArn=group)
    elbv2.describe_target_groups(LoadBalancerArn=arn)


def test_answers_are_the_bytes_moto_renders(aws: EmulatorControl) -> None:
    """Each answer, successes and errors of EC2, ELB and ELBv2, is rendered byte for byte as
    moto's own serializer and xmltodict render the same result."""
    del aws  # for its fake credentials and isolated boto3; the emulator here serves the calls
    with emulator_in_this_process() as url, _rendered_twice() as renderings:
        _fleet_and_calls(url)
    operations = {operation for operation, *_ in renderings}
    assert {
        "RunInstances",
        "DescribeInstances",
        "DescribeSecurityGroups",
        "RegisterInstancesWithLoadBalancer",
        "DeregisterInstancesFromLoadBalancer",
        "DescribeLoadBalancers",
        "DescribeTargetHealth",
    } <= operations
    errors = [r for r in renderings if r[1]["status_code"] >= 400]
    assert {operation for operation, *_ in errors} >= {"DescribeInstances", "DescribeLoadBalancers"}
    for operation, ours, moto, *_ in renderings:
        assert ours == moto, f"{operation} is not rendered as moto renders it"
    health = next(r[1]["body"] for r in renderings if r[0] == "DescribeTargetHealth")
    assert health.count("<TargetHealthDescription>") == 0 and health.count("<member>") >= 6


@pytest.mark.parametrize(
    ("body", "known"),
    [
        (
            {"A": {"@xmlns": "urn:x", "b": ["1", "", None, {"c": "x&<y>"}], "d": [], "e": None}},
            True,
        ),
        ({"A": {"#text": "t", "b": True, "c": 1.5, "d": {"#text": "", "@k": "q\"\n'"}}}, True),
        ({"A": {"@a": None, "@b": 3, "#text": None, "c": [{}, {"#text": "z"}, 0, False]}}, True),
        ({"A": {"b": b"bytes", "c": (1, 2)}}, False),
        ({"A": {"#comment": "note", "b": "x"}}, False),
    ],
)
def test_the_xml_is_xmltodicts(body: dict[str, Any], known: bool) -> None:
    """Escaping, attributes, empty elements and text after children come out as xmltodict
    writes them, as a document or a fragment; what the emitter does not know is left to it."""
    for full in (True, False):
        expected = xmltodict.unparse(body, full_document=full, short_empty_elements=True)
        rendered = moto_rendering.render_xml(body, full_document=full)
        assert rendered == (expected if known else None)


def test_the_speed_ups_apply_and_pay(aws: EmulatorControl) -> None:
    """The emulator's app renders with these patches, and a large answer (a target group of
    200 targets) costs well under half the CPU moto's own rendering does."""
    del aws
    with emulator_in_this_process() as url, _rendered_twice() as renderings:
        for owner, name in moto_rendering.PATCHED:
            module, _, cls = owner.rpartition(".")
            patched = getattr(importlib.import_module(module), cls).__dict__[name]
            assert getattr(patched, moto_rendering.MARKER, False), name
        ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-1")
        elbv2 = boto3.client("elbv2", endpoint_url=url, region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.2.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.2.0.0/20")["Subnet"]["SubnetId"]
        instances = [
            i["InstanceId"]
            for i in ec2.run_instances(
                ImageId="ami-12c6146b", MinCount=200, MaxCount=200, SubnetId=subnet
            )["Instances"]
        ]
        group = elbv2.create_target_group(
            Name="speed", Protocol="TCP", Port=30082, VpcId=vpc, TargetType="instance"
        )["TargetGroups"][0]["TargetGroupArn"]
        elbv2.register_targets(TargetGroupArn=group, Targets=[{"Id": i} for i in instances])
        for _ in range(3):
            elbv2.describe_target_health(TargetGroupArn=group)
    for operation, ours, moto, *_ in renderings:
        assert ours == moto, f"{operation} is not rendered as moto renders it"
    timed = [r for r in renderings if r[0] == "DescribeTargetHealth"]
    ours, moto = sum(r[3] for r in timed), sum(r[4] for r in timed)
    assert ours < moto / 2, f"rendering took {ours:.3f} s of CPU, moto's own {moto:.3f} s"
