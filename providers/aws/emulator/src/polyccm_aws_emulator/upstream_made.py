"""Test support: load balancers made in the emulator the way cloud-provider-aws makes them.

What an operator switching from the upstream CCM has in the cloud, built with plain boto3
calls (never polyccm's code): upstream's names (``a<uid>``, ``k8s-elb-<name>``, target groups
``k8s-<ns>-<name>-<hash>``), tags (the cluster's ``owned`` tag and
``kubernetes.io/service-name``), listeners, health checks, security-group rules (including the
node group's, labelled as upstream labels NLB rules) and registered instances, for a Service
without annotations. ``polyccm plan`` should then say ``adopt`` for each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from polyccm.objects import Service
from polyccm_aws.naming import default_load_balancer_name, target_group_name

from polyccm_aws_emulator.testing import World

Instance = Mapping[str, Any]


def _tags(world: World, service: Service) -> list[dict[str, str]]:
    return [
        {"Key": world.cluster_tag, "Value": "owned"},
        {"Key": "kubernetes.io/service-name", "Value": service.key},
    ]


def classic_elb(world: World, service: Service, instances: Sequence[Instance]) -> str:
    """A classic ELB for ``service`` (TCP ports) as upstream's EnsureLoadBalancer makes it;
    its name."""
    name = default_load_balancer_name(service)
    group = world.security_group(
        f"k8s-elb-{name}", f"Security group for Kubernetes ELB {name} ({service.key})"
    )
    world.ec2.authorize_security_group_ingress(
        GroupId=group,
        IpPermissions=[
            *(
                {
                    "IpProtocol": "tcp",
                    "FromPort": port.port,
                    "ToPort": port.port,
                    "IpRanges": [{"CidrIp": "0.0.0.0/0"}],
                }
                for port in service.ports
            ),
            {
                "IpProtocol": "icmp",
                "FromPort": 3,
                "ToPort": 4,
                "IpRanges": [{"CidrIp": "0.0.0.0/0"}],
            },
        ],
    )
    world.elb.create_load_balancer(
        LoadBalancerName=name,
        Listeners=[
            {
                "Protocol": "tcp",
                "LoadBalancerPort": port.port,
                "InstanceProtocol": "tcp",
                "InstancePort": port.node_port,
            }
            for port in service.ports
        ],
        Subnets=sorted(world.public.values()),
        SecurityGroups=[group],
        Tags=_tags(world, service),
    )
    world.elb.configure_health_check(
        LoadBalancerName=name,
        HealthCheck={
            "Target": f"TCP:{service.ports[0].node_port}",
            "Interval": 10,
            "Timeout": 5,
            "HealthyThreshold": 2,
            "UnhealthyThreshold": 6,
        },
    )
    world.elb.modify_load_balancer_attributes(
        LoadBalancerName=name,
        LoadBalancerAttributes={
            "CrossZoneLoadBalancing": {"Enabled": False},
            "AccessLog": {"Enabled": False},
            "ConnectionDraining": {"Enabled": False},
            "ConnectionSettings": {"IdleTimeout": 60},
        },
    )
    world.ec2.authorize_security_group_ingress(
        GroupId=world.node_group,
        IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}],
    )
    world.elb.register_instances_with_load_balancer(
        LoadBalancerName=name, Instances=[{"InstanceId": i["InstanceId"]} for i in instances]
    )
    return name


def nlb(world: World, service: Service, instances: Sequence[Instance]) -> str:
    """An NLB for ``service`` (TCP ports, ``externalTrafficPolicy: Cluster``) as upstream's
    EnsureLoadBalancer makes it with ``aws-load-balancer-type: nlb``; its name."""
    name = default_load_balancer_name(service)
    created = world.elbv2.create_load_balancer(
        Name=name,
        Type="network",
        SubnetMappings=[{"SubnetId": s} for s in sorted(world.public.values())],
        Tags=_tags(world, service),
    )["LoadBalancers"][0]
    # Upstream sets the attributes it manages to their defaults where AWS reports otherwise.
    world.elbv2.modify_load_balancer_attributes(
        LoadBalancerArn=created["LoadBalancerArn"],
        Attributes=[
            {"Key": "load_balancing.cross_zone.enabled", "Value": "false"},
            {"Key": "access_logs.s3.enabled", "Value": "false"},
        ],
    )
    for port in service.ports:
        group = world.elbv2.create_target_group(
            Name=target_group_name(
                cluster_id=world.cluster_tag.rsplit("/", 1)[1],
                namespace=service.namespace,
                name=service.name,
                service_port=port.port,
                node_port=port.node_port,
                target_protocol="TCP",
                health_check_protocol="TCP",
                health_check_interval=30,
            ),
            Protocol="TCP",
            Port=port.node_port,
            VpcId=world.vpc_id,
            TargetType="instance",
            HealthCheckProtocol="TCP",
            HealthCheckPort="traffic-port",
            HealthCheckIntervalSeconds=30,
            HealthyThresholdCount=3,
            UnhealthyThresholdCount=3,
            Tags=_tags(world, service),
        )["TargetGroups"][0]
        world.elbv2.register_targets(
            TargetGroupArn=group["TargetGroupArn"],
            Targets=[{"Id": i["InstanceId"], "Port": port.node_port} for i in instances],
        )
        world.elbv2.create_listener(
            LoadBalancerArn=created["LoadBalancerArn"],
            Port=port.port,
            Protocol="TCP",
            DefaultActions=[{"Type": "forward", "TargetGroupArn": group["TargetGroupArn"]}],
            Tags=_tags(world, service),
        )
        world.ec2.authorize_security_group_ingress(
            GroupId=world.node_group,
            IpPermissions=[
                {
                    "IpProtocol": "tcp",
                    "FromPort": port.node_port,
                    "ToPort": port.node_port,
                    "IpRanges": [
                        {
                            "CidrIp": "0.0.0.0/0",
                            "Description": f"kubernetes.io/rule/nlb/client={name}",
                        }
                    ],
                }
            ],
        )
    world.ec2.authorize_security_group_ingress(
        GroupId=world.node_group,
        IpPermissions=[
            {
                "IpProtocol": "icmp",
                "FromPort": 3,
                "ToPort": 4,
                "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": "kubernetes.io/rule/nlb/mtu"}],
            }
        ],
    )
    return name
