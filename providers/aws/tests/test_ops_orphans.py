"""``polyccm orphans --provider aws`` on the emulator and the real kube-apiserver: leaked ELBs,
NLBs, target groups and security groups are found (and only they: a live service's, another
cluster's, an untagged one and kops' API load balancer are not), deleted in dependency order
with ``--delete --yes``, and listing makes no mutating call."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import pytest
from polyccm.kube.api import SERVICES, KubeApi
from polyccm.objects import Service
from polyccm_aws import annotations as ann
from polyccm_aws_emulator import upstream_made
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import World
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.kubeobjects import make_service
from polyccm_testing.opstools import CommandResult, listed_orphans, run_command

READS = ("Describe", "Get", "List")


class Leaks(NamedTuple):
    leaked: dict[str, set[str]]
    """Kind -> ids of what was leaked on purpose."""
    kept_elbs: set[str]
    """The classic ELBs that must survive."""


def orphans(control_plane: ControlPlane, cloud_config: Path, *extra: str) -> CommandResult:
    return run_command(
        "orphans",
        "aws",
        control_plane.kubeconfig,
        "--controllers=*,-route",
        *extra,
        cloud_config=cloud_config,
    )


def service(api: KubeApi, namespace: str, name: str, **annotations: str) -> Service:
    def annotate(body: dict[str, Any]) -> None:
        body["metadata"]["annotations"].update(annotations)

    return Service(make_service(api, namespace, name, annotate))


def group_named(world: World, name: str) -> str:
    groups = world.ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]}])[
        "SecurityGroups"
    ]
    return str(groups[0]["GroupId"])


@pytest.fixture
def leaks(aws: EmulatorControl, world: World, kube_api: KubeApi, namespace: str) -> Leaks:
    """Leaked on purpose: a classic ELB and an NLB whose Services were deleted (with the ELB's
    security group and the NLB's target group), and a k8s-elb group whose ELB is gone. Kept on
    purpose: a live Service's ELB, kops' API ELB (owned tag, no service tag), an ELB with
    upstream's name but no cluster tag, another cluster's k8s-elb group."""
    (instance,) = world.instances(1)
    live = service(kube_api, namespace, "live")
    kept = {upstream_made.classic_elb(world, live, [instance]), "api-kubernetes-example"}
    gone_elb = service(kube_api, namespace, "gone-elb")
    gone_nlb = service(kube_api, namespace, "gone-nlb", **{ann.TYPE: ann.NLB})
    elb = upstream_made.classic_elb(world, gone_elb, [instance])
    nlb = upstream_made.nlb(world, gone_nlb, [instance])
    for name in ("gone-elb", "gone-nlb"):
        kube_api.delete(SERVICES, name, namespace)
    stray = world.security_group(f"k8s-elb-a{'1' * 31}", "left by an interrupted deletion")
    world.security_group(f"k8s-elb-a{'2' * 31}", "another cluster's", "kubernetes.io/cluster/other")
    world.elb.create_load_balancer(
        LoadBalancerName="api-kubernetes-example",
        Listeners=[{"Protocol": "tcp", "LoadBalancerPort": 443, "InstancePort": 443}],
        Subnets=sorted(world.public.values()),
        Tags=[{"Key": world.cluster_tag, "Value": "owned"}],
    )
    world.elb.create_load_balancer(
        LoadBalancerName=f"a{'3' * 31}",
        Listeners=[{"Protocol": "tcp", "LoadBalancerPort": 80, "InstancePort": 30080}],
        Subnets=sorted(world.public.values()),
        Tags=[{"Key": "kubernetes.io/service-name", "Value": "default/web"}],
    )
    nlb_arn = world.elbv2.describe_load_balancers(Names=[nlb])["LoadBalancers"][0]
    groups = world.elbv2.describe_target_groups(LoadBalancerArn=nlb_arn["LoadBalancerArn"])
    leaked = {
        "classic-elb": {elb},
        "nlb": {nlb_arn["LoadBalancerArn"]},
        "target-group": {g["TargetGroupArn"] for g in groups["TargetGroups"]},
        "security-group": {group_named(world, f"k8s-elb-{elb}"), stray},
    }
    return Leaks(leaked, kept | {f"a{'3' * 31}"})


def found(result: CommandResult) -> dict[str, set[str]]:
    kinds: dict[str, set[str]] = {}
    for orphan in listed_orphans(result):
        kinds.setdefault(orphan["kind"], set()).add(orphan["id"])
    return kinds


def test_finds_exactly_the_leaked_resources_without_a_write(
    leaks: Leaks,
    aws: EmulatorControl,
    control_plane: ControlPlane,
    cloud_config: Path,
    namespace: str,
) -> None:
    aws.reset_calls()

    result = orphans(control_plane, cloud_config, "-o", "json")

    assert result.status == 1, result.stderr
    assert found(result) == leaks.leaked
    reasons = {o["kind"]: o["reason"] for o in listed_orphans(result)}
    assert reasons["classic-elb"] == f"service {namespace}/gone-elb no longer exists"
    assert reasons["target-group"] == "used only by orphaned load balancers"
    assert [a for a in aws.calls() if not a.startswith(READS)] == []


def test_delete_removes_exactly_those_in_dependency_order(
    leaks: Leaks,
    world: World,
    control_plane: ControlPlane,
    cloud_config: Path,
) -> None:
    result = orphans(control_plane, cloud_config, "--delete", "--yes")

    assert result.status == 0, result.stderr
    deleted = [
        line.split()[1:] for line in result.stdout.splitlines() if line.startswith("deleted")
    ]
    assert [kind for kind, _ in deleted] == (
        ["classic-elb", "nlb", "target-group", "security-group", "security-group"]
    )
    assert {kind: {i for k, i in deleted if k == kind} for kind, _ in deleted} == leaks.leaked
    described = world.elb.describe_load_balancers()["LoadBalancerDescriptions"]
    assert {lb["LoadBalancerName"] for lb in described} == leaks.kept_elbs
    assert world.elbv2.describe_load_balancers()["LoadBalancers"] == []
    assert world.elbv2.describe_target_groups()["TargetGroups"] == []
    names = {g["GroupName"] for g in world.ec2.describe_security_groups()["SecurityGroups"]}
    assert f"k8s-elb-a{'2' * 31}" in names  # another cluster's
    node_rules = world.ec2.describe_security_groups(GroupIds=[world.node_group])
    sources = {
        pair["GroupId"]
        for permission in node_rules["SecurityGroups"][0]["IpPermissions"]
        for pair in permission.get("UserIdGroupPairs", ())
    }
    assert not sources & leaks.leaked["security-group"], "rules naming deleted groups are revoked"
    descriptions = {
        r.get("Description", "")
        for permission in node_rules["SecurityGroups"][0]["IpPermissions"]
        for r in permission.get("IpRanges", ())
    }
    assert not any(d.startswith("kubernetes.io/rule/nlb/client") for d in descriptions)
    assert orphans(control_plane, cloud_config).status == 0
