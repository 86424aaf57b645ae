"""Load balancers that never break or leak: stopped backends, interrupted creates, backend updates
that outlive a bad annotation, and call counts that do not grow with the backends.

A create is a fixed set of mutating AWS calls; :data:`KINDS` pins it per kind (in the order of
upstream's create; those that need only the load balancer go out side by side, so they may
arrive in any order) and ``test_a_create_makes_these_mutating_calls`` checks it with the
emulator's call counter. The parametrised tests make call k of that list fail (k = 1..K: the
n-th call of its operation, through the emulator's fault injection, positioned by watching
:meth:`AwsApi.call`), then either ensure again or delete, and look at what the cloud holds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from polyccm.cloud import default_load_balancer_name
from polyccm.errors import CloudError
from polyccm.objects import Node, Service
from polyccm_aws import annotations as ann
from polyccm_aws.api import AwsApi, AwsApiError
from polyccm_aws.config import CloudConfig
from polyccm_aws.naming import target_group_name
from polyccm_aws.nlb import TARGETS_PER_CALL
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World

READS = ("describe_", "get_", "list_")
READ_ACTIONS = ("Describe", "Get", "List")
PORTS = [
    {"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080},
    {"name": "dns", "protocol": "TCP", "port": 53, "nodePort": 30053},
]


@dataclass(frozen=True)
class Kind:
    annotations: dict[str, str]
    config: CloudConfig
    create_calls: tuple[str, ...]
    """The mutating calls of a create with two ports and backends in one node group, in the order
    of upstream's create (the steps after the load balancer is made go out side by side)."""
    failure_points: tuple[int, ...] = ()
    """The calls (1-based) to fail; all of them when empty."""


KINDS = {
    "classic": Kind(
        {},
        CloudConfig(),
        (
            "create_security_group",
            "authorize_security_group_ingress",  # the ELB's group: service ports
            "create_load_balancer",
            "configure_health_check",
            "authorize_security_group_ingress",  # the node group admits the ELB's group
            "register_instances_with_load_balancer",
        ),
    ),
    "nlb": Kind(
        {ann.TYPE: "nlb"},
        CloudConfig(),
        (
            "create_load_balancer",
            "create_target_group",
            "register_targets",
            "create_listener",
            "create_target_group",
            "register_targets",
            "create_listener",
            "modify_load_balancer_attributes",
            "authorize_security_group_ingress",  # node group: client rules
            "authorize_security_group_ingress",  # node group: MTU rule
        ),
    ),
    "nlb-managed-group": Kind(
        {ann.TYPE: "nlb"},
        CloudConfig(nlb_security_group_mode="Managed"),
        (
            "create_security_group",
            "create_load_balancer",
            "create_target_group",
            "register_targets",
            "create_listener",
            "create_target_group",
            "register_targets",
            "create_listener",
            "modify_load_balancer_attributes",
            "authorize_security_group_ingress",  # the NLB's group: service ports
            "authorize_security_group_ingress",
            "authorize_security_group_ingress",
        ),
        # Only where Managed mode differs from "nlb" (the group, the NLB created with it, the
        # group's rules): the other calls are the same code, one call later.
        failure_points=(1, 2, 10),
    ),
}
CASES = [
    (name, k)
    for name, kind in KINDS.items()
    for k in kind.failure_points or range(1, len(kind.create_calls) + 1)
]


@dataclass
class CallWatch:
    """Watches the provider's mutating AWS calls; can make one fail in the emulator: the
    ``fail_count``-th call of ``fail_operation`` (calls made side by side arrive in any order,
    the calls of one operation in a fixed one)."""

    aws: EmulatorControl
    fail_operation: str = ""
    fail_count: int = 0
    calls: list[str] = field(default_factory=list)
    failed: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, k: int, create_calls: tuple[str, ...]) -> None:
        """Fail the k-th call (1-based) of ``create_calls``."""
        self.fail_operation = create_calls[k - 1]
        self.fail_count = create_calls[:k].count(self.fail_operation)

    def wrap(self, original: Any) -> Any:
        def call(api: AwsApi, service: str, operation: str, **params: Any) -> Any:
            if not operation.startswith(READS):
                with self.lock:
                    self.calls.append(operation)
                    chosen = (
                        operation == self.fail_operation
                        and self.calls.count(operation) == self.fail_count
                    )
                if chosen:
                    action = api.client(service).meta.method_to_api_mapping[operation]
                    self.aws.inject(action, code="ValidationError", status=400, service=service)
                    self.failed = operation
            return original(api, service, operation, **params)

        return call


@pytest.fixture
def watch(aws: EmulatorControl, monkeypatch: pytest.MonkeyPatch) -> Iterator[CallWatch]:
    watcher = CallWatch(aws)
    monkeypatch.setattr(AwsApi, "call", watcher.wrap(AwsApi.call))
    yield watcher


@dataclass
class Setup:
    world: World
    provider: AwsProvider
    service: Service
    nodes: list[Node]
    running: set[str]
    name: str


def setup(kind: Kind) -> Setup:
    """Two running backends and a stopped one, all in the node group, and the service."""
    world = World()
    instances = world.instances(2) + world.instances(1, "us-east-1b")
    world.ec2.stop_instances(InstanceIds=[instances[2]["InstanceId"]])
    service = world.service(annotations=kind.annotations, ports=PORTS)
    return Setup(
        world=world,
        provider=AwsProvider(kind.config, cluster_name=CLUSTER, cache_ttl=0.0, max_attempts=1),
        service=service,
        nodes=[world.node(i) for i in instances],
        running={i["InstanceId"] for i in instances[:2]},
        name=default_load_balancer_name(service),
    )


# -- what the cloud holds ----------------------------------------------------------------------


def classic_elbs(world: World) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = world.elb.describe_load_balancers()["LoadBalancerDescriptions"]
    return found


def nlbs(world: World) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = world.elbv2.describe_load_balancers()["LoadBalancers"]
    return found


def target_groups(world: World) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = world.elbv2.describe_target_groups()["TargetGroups"]
    return found


def k8s_groups(world: World) -> list[dict[str, Any]]:
    """Security groups polyccm names (``k8s-elb-<lb>``, ``k8s-<ns>-<svc>-<hash>``)."""
    groups: list[dict[str, Any]] = world.ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}]
    )["SecurityGroups"]
    return [g for g in groups if g["GroupName"].startswith("k8s-")]


def node_group_permissions(world: World) -> list[dict[str, Any]]:
    group = world.ec2.describe_security_groups(GroupIds=[world.node_group])["SecurityGroups"][0]
    permissions: list[dict[str, Any]] = group["IpPermissions"]
    return permissions


def targets(world: World, group_arn: str) -> set[str]:
    health = world.elbv2.describe_target_health(TargetGroupArn=group_arn)
    return {d["Target"]["Id"] for d in health["TargetHealthDescriptions"]}


def expected_target_group_names() -> set[str]:
    return {
        target_group_name(
            cluster_id=CLUSTER,
            namespace="default",
            name="web",
            service_port=port,
            node_port=node_port,
            target_protocol="TCP",
            health_check_protocol="TCP",
            health_check_interval=30,
        )
        for port, node_port in ((80, 30080), (53, 30053))
    }


def assert_complete(kind: str, s: Setup) -> None:
    """Exactly the load balancer a clean create makes: nothing missing, nothing twice."""
    world = s.world
    node_rules = {
        (p.get("FromPort"), r.get("CidrIp", ""), r.get("Description", ""))
        for p in node_group_permissions(world)
        for r in p.get("IpRanges", [])
    }
    node_sources = {
        pair["GroupId"] for p in node_group_permissions(world) for pair in p["UserIdGroupPairs"]
    }
    if kind == "classic":
        assert nlbs(world) == [] and target_groups(world) == []
        (elb,) = classic_elbs(world)
        assert elb["LoadBalancerName"] == s.name
        assert {i["InstanceId"] for i in elb["Instances"]} == s.running
        assert sorted(d["Listener"]["LoadBalancerPort"] for d in elb["ListenerDescriptions"]) == [
            53,
            80,
        ]
        assert elb["HealthCheck"]["Target"] == "TCP:30080"
        (group,) = k8s_groups(world)
        assert group["GroupName"] == f"k8s-elb-{s.name}"
        assert elb["SecurityGroups"] == [group["GroupId"]]
        assert {p.get("FromPort") for p in group["IpPermissions"]} == {80, 53, 3}
        assert node_sources == {group["GroupId"]}
        return
    assert classic_elbs(world) == []
    (nlb,) = nlbs(world)
    assert nlb["LoadBalancerName"] == s.name
    groups = target_groups(world)
    assert {g["TargetGroupName"] for g in groups} == expected_target_group_names()
    assert len(groups) == 2
    listeners = world.elbv2.describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"])["Listeners"]
    assert {lsn["Port"]: lsn["DefaultActions"][0]["TargetGroupArn"] for lsn in listeners} == {
        80 if g["Port"] == 30080 else 53: g["TargetGroupArn"] for g in groups
    }
    for group in groups:
        assert targets(world, group["TargetGroupArn"]) == s.running
    client = f"kubernetes.io/rule/nlb/client={s.name}"
    assert node_rules == {
        (30080, "0.0.0.0/0", client),
        (30053, "0.0.0.0/0", client),
        (3, "0.0.0.0/0", "kubernetes.io/rule/nlb/mtu"),
    }
    assert node_sources == set()
    if kind == "nlb":
        assert k8s_groups(world) == [] and not nlb.get("SecurityGroups")
    else:
        (group,) = k8s_groups(world)
        assert nlb["SecurityGroups"] == [group["GroupId"]]
        assert {p.get("FromPort") for p in group["IpPermissions"]} == {80, 53, 3}


def assert_nothing_left(world: World) -> None:
    assert classic_elbs(world) == []
    assert nlbs(world) == []
    assert target_groups(world) == []
    assert k8s_groups(world) == []
    assert node_group_permissions(world) == []


# -- a stopped backend ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["classic", "nlb"])
def test_a_stopped_backend_is_not_registered_and_the_lb_is_complete(
    aws: EmulatorControl, kind: str
) -> None:
    s = setup(KINDS[kind])
    lb = s.provider.load_balancer()

    status = lb.ensure_load_balancer(CLUSTER, s.service, s.nodes)

    assert status.ingress and status.ingress[0].hostname
    assert_complete(kind, s)
    lb.ensure_load_balancer_deleted(CLUSTER, s.service)
    assert_nothing_left(s.world)


def test_a_backend_that_stops_stays_registered_and_one_that_starts_joins(
    aws: EmulatorControl,
) -> None:
    s = setup(KINDS["nlb"])
    lb = s.provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, s.service, s.nodes)
    first, _, stopped = (n.provider_id.rsplit("/", 1)[-1] for n in s.nodes)
    s.world.ec2.stop_instances(InstanceIds=[first])
    s.world.ec2.start_instances(InstanceIds=[stopped])

    lb.update_load_balancer(CLUSTER, s.service, s.nodes)

    # AWS keeps a stopped target registered (state "unused"); it serves again once started.
    for group in target_groups(s.world):
        assert targets(s.world, group["TargetGroupArn"]) == s.running | {stopped}


# -- every failure point of a create -----------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_create_makes_these_mutating_calls(
    aws: EmulatorControl, watch: CallWatch, kind: str
) -> None:
    s = setup(KINDS[kind])
    aws.reset_calls()

    s.provider.load_balancer().ensure_load_balancer(CLUSTER, s.service, s.nodes)

    assert sorted(watch.calls) == sorted(KINDS[kind].create_calls)
    counted = sum(n for action, n in aws.calls().items() if not action.startswith(READ_ACTIONS))
    assert counted == len(KINDS[kind].create_calls)


def fail_create_at(k: int, kind: str, watch: CallWatch) -> Setup:
    s = setup(KINDS[kind])
    watch.fail(k, KINDS[kind].create_calls)
    with pytest.raises(AwsApiError, match="ValidationError"):
        s.provider.load_balancer().ensure_load_balancer(CLUSTER, s.service, s.nodes)
    assert watch.failed == KINDS[kind].create_calls[k - 1]
    return s


@pytest.mark.parametrize(("kind", "k"), CASES)
def test_an_interrupted_create_converges_on_the_next_ensure(
    aws: EmulatorControl, watch: CallWatch, kind: str, k: int
) -> None:
    s = fail_create_at(k, kind, watch)

    s.provider.load_balancer().ensure_load_balancer(CLUSTER, s.service, s.nodes)

    assert_complete(kind, s)


@pytest.mark.parametrize(("kind", "k"), CASES)
def test_an_interrupted_create_is_deleted_without_leftovers(
    aws: EmulatorControl, watch: CallWatch, kind: str, k: int
) -> None:
    s = fail_create_at(k, kind, watch)

    s.provider.load_balancer().ensure_load_balancer_deleted(CLUSTER, s.service)

    assert_nothing_left(s.world)


# -- backend updates when the annotations no longer validate -----------------------------------


@pytest.mark.parametrize("kind", ["classic", "nlb"])
def test_update_registers_a_new_node_although_the_annotations_became_invalid(
    aws: EmulatorControl, kind: str
) -> None:
    s = setup(KINDS[kind])
    lb = s.provider.load_balancer()
    lb.ensure_load_balancer(CLUSTER, s.service, s.nodes)
    (new,) = s.world.instances(1, "us-east-1b")
    broken = s.world.service(
        uid=s.service.uid,
        ports=PORTS,
        annotations={**KINDS[kind].annotations, ann.HC_INTERVAL: "often"},
    )
    with pytest.raises(CloudError, match="healthcheck-interval"):
        lb.ensure_load_balancer(CLUSTER, broken, s.nodes)

    lb.update_load_balancer(CLUSTER, broken, [*s.nodes, s.world.node(new)])

    s.running.add(new["InstanceId"])
    assert_complete(kind, s)


# -- call counts -------------------------------------------------------------------------------


def test_nlb_create_calls_do_not_grow_with_the_backends(aws: EmulatorControl) -> None:
    """Beyond one RegisterTargets per 200 targets per group, a create costs the same calls for
    3 backends as for 220 (instances are described in one batch, rules per node group)."""
    world = World()
    few = world.instances(3)
    many = few + world.instances(TARGETS_PER_CALL + 17)
    calls = []
    for instances in (few, many):
        provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=0.0)
        service = world.service(f"web{len(instances)}", annotations={ann.TYPE: "nlb"}, ports=PORTS)
        aws.reset_calls()
        provider.load_balancer().ensure_load_balancer(
            CLUSTER, service, [world.node(i) for i in instances]
        )
        calls.append(dict(aws.calls()))
        provider.load_balancer().ensure_load_balancer_deleted(CLUSTER, service)

    small, large = calls
    assert large.pop("RegisterTargets") == 2 * 2  # two target groups, 220 targets each
    assert small.pop("RegisterTargets") == 2
    assert large == small
    assert small["DescribeInstances"] == 1
