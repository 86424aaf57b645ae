"""The emulator's speed-ups change how fast moto answers, never what it answers: on the same
fleet (tagged instances in several reservations, security groups holding many rules, a classic
ELB and an NLB with their instances), each read is answered identically with the emulator's
shortcuts (tags read by id, the serializer's field names and the backend of a host remembered)
and with moto's own code.

The emulator runs in this process here, so that moto's own code can be put back for a moment
and the same request asked again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import emulator_in_this_process, moto_code_put_back

#: The speed-ups this file checks, as the places moto's own code goes back to.
_SPEED_UPS = (
    ("moto.ec2.models.core.TaggedEC2Resource", "get_tags"),
    ("moto.core.serialize.XFormedAttributePicker", "get_possible_keys"),
    ("moto.moto_server.werkzeug_app.DomainDispatcherApplication", "get_backend_for_host"),
)


def _without_metadata(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "ResponseMetadata"}


def _fleet(ec2: Any) -> tuple[list[str], list[str]]:
    """Tagged instances in three reservations, a node group with a rule per load balancer
    group (and CIDR rules with descriptions), other tagged resources: ids of instances and
    load-balancer groups."""
    cluster = {"Key": "kubernetes.io/cluster/speed", "Value": "owned"}
    vpc = ec2.create_vpc(
        CidrBlock="10.0.0.0/16", TagSpecifications=[{"ResourceType": "vpc", "Tags": [cluster]}]
    )["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/20")["Subnet"]["SubnetId"]
    ec2.create_tags(
        Resources=[subnet], Tags=[cluster, {"Key": "kubernetes.io/role/elb", "Value": "1"}]
    )
    nodes = ec2.create_security_group(
        GroupName="nodes",
        Description="nodes",
        VpcId=vpc,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": [cluster]}],
    )["GroupId"]
    balancers = []
    for index in range(12):
        group = ec2.create_security_group(
            GroupName=f"k8s-elb-a{index}",
            Description=f"Security group for Kubernetes ELB a{index}",
            VpcId=vpc,
            TagSpecifications=[
                {
                    "ResourceType": "security-group",
                    "Tags": [cluster, {"Key": "n", "Value": f"{index}"}],
                }
            ],
        )["GroupId"]
        balancers.append(group)
        ec2.authorize_security_group_ingress(
            GroupId=nodes,
            IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}],
        )
    ec2.authorize_security_group_ingress(
        GroupId=nodes,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 30080, "ToPort": 30080,
             "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": "nlb/client=a1"}]},
        ],
    )  # fmt: skip
    instances = []
    for zone_index, count in enumerate((3, 4, 2)):
        reservation = ec2.run_instances(
            ImageId="ami-12c6146b",
            MinCount=count,
            MaxCount=count,
            SubnetId=subnet,
            SecurityGroupIds=[nodes],
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [cluster, {"Key": "Name", "Value": f"node-{zone_index}"}],
                }
            ],
        )
        instances += [i["InstanceId"] for i in reservation["Instances"]]
    ec2.create_tags(Resources=instances[:2], Tags=[{"Key": "extra", "Value": "x"}])
    ec2.delete_tags(Resources=[instances[3]], Tags=[{"Key": "Name"}])
    ec2.terminate_instances(InstanceIds=[instances[5]])
    elb = boto3.client("elb", endpoint_url=ec2.meta.endpoint_url, region_name="us-east-1")
    elb.create_load_balancer(
        LoadBalancerName="web",
        Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
        Subnets=[subnet],
        SecurityGroups=balancers[:1],
        Tags=[cluster],
    )
    elb.register_instances_with_load_balancer(
        LoadBalancerName="web", Instances=[{"InstanceId": i} for i in instances[:4]]
    )
    elbv2 = boto3.client("elbv2", endpoint_url=ec2.meta.endpoint_url, region_name="us-east-1")
    arn = elbv2.create_load_balancer(Name="api", Type="network", Subnets=[subnet], Tags=[cluster])[
        "LoadBalancers"
    ][0]["LoadBalancerArn"]
    group = elbv2.create_target_group(
        Name="k8s-api", Protocol="TCP", Port=30081, VpcId=vpc, TargetType="instance"
    )["TargetGroups"][0]["TargetGroupArn"]
    elbv2.create_listener(
        LoadBalancerArn=arn,
        Protocol="TCP",
        Port=80,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": group}],
    )
    elbv2.register_targets(TargetGroupArn=group, Targets=[{"Id": i} for i in instances[6:]])
    return instances, balancers


def test_reads_of_tagged_resources_answer_as_moto_alone_does(aws: EmulatorControl) -> None:
    """Instances, security groups and load balancers, read by id and by tag, answer (parsed) as
    moto's own code answers: its tag lookup scans every tag of the region for each resource,
    its serializer asks its alias providers for every field of every object."""
    del aws  # for its fake credentials and isolated boto3; the emulator here serves the reads
    with emulator_in_this_process() as url:
        ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-1")
        elb = boto3.client("elb", endpoint_url=url, region_name="us-east-1")
        elbv2 = boto3.client("elbv2", endpoint_url=url, region_name="us-east-1")
        instances, balancers = _fleet(ec2)
        (nlb,) = elbv2.describe_load_balancers()["LoadBalancers"]
        (group,) = elbv2.describe_target_groups()["TargetGroups"]
        reads: list[Callable[[], dict[str, Any]]] = [
            lambda: ec2.describe_instances(InstanceIds=instances),
            lambda: ec2.describe_instances(InstanceIds=instances[2:6]),
            lambda: ec2.describe_instances(
                Filters=[{"Name": "tag:kubernetes.io/cluster/speed", "Values": ["owned"]}]
            ),
            lambda: ec2.describe_instances(Filters=[{"Name": "tag-key", "Values": ["extra"]}]),
            lambda: ec2.describe_security_groups(
                Filters=[{"Name": "tag-key", "Values": ["kubernetes.io/cluster/speed"]}]
            ),
            lambda: ec2.describe_security_groups(
                Filters=[{"Name": "ip-permission.group-id", "Values": balancers[3:5]}]
            ),
            lambda: ec2.describe_security_groups(GroupIds=balancers[:4]),
            lambda: ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": instances[:3]}]),
            ec2.describe_vpcs,
            lambda: ec2.describe_subnets(Filters=[{"Name": "tag-key", "Values": ["n", "extra"]}]),
            elb.describe_load_balancers,
            lambda: elb.describe_instance_health(LoadBalancerName="web"),
            lambda: elb.describe_load_balancer_attributes(LoadBalancerName="web"),
            lambda: elb.describe_tags(LoadBalancerNames=["web"]),
            elbv2.describe_load_balancers,
            elbv2.describe_target_groups,
            lambda: elbv2.describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"]),
            lambda: elbv2.describe_target_health(TargetGroupArn=group["TargetGroupArn"]),
            lambda: elbv2.describe_load_balancer_attributes(LoadBalancerArn=nlb["LoadBalancerArn"]),
            lambda: elbv2.describe_tags(ResourceArns=[nlb["LoadBalancerArn"]]),
            ec2.describe_route_tables,
            ec2.describe_availability_zones,
        ]  # fmt: skip
        fast = [_without_metadata(read()) for read in reads]
        with moto_code_put_back(_SPEED_UPS):
            slow = [_without_metadata(read()) for read in reads]
    for index, (ours, moto) in enumerate(zip(fast, slow, strict=True)):
        assert ours == moto, f"read {index} differs"
    tags = {t["Key"] for r in fast[0]["Reservations"] for i in r["Instances"] for t in i["Tags"]}
    assert tags == {"kubernetes.io/cluster/speed", "Name", "extra"}, "the fleet is tagged"
    assert len(fast[4]["SecurityGroups"]) == 13, "every cluster group is found by its tag"
