"""The AWS provider end to end: the real kube-apiserver, the controllers, boto3 and the moto
emulator together, as a user runs them. What a user sees is asserted: node labels and
providerIDs, the ELB in the cloud, events on the service, nothing left after deletion, and no
leak when the controller manager is killed and restarted."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import boto3
import pytest
from polyccm.kube.api import NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_aws.config import CloudConfig
from polyccm_aws.naming import target_group_name
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import (
    CLUSTER,
    World,
    isolated_environment,
)
from polyccm_testing.demo import service_gone
from polyccm_testing.devenv.processes import free_ports
from polyccm_testing.kubeobjects import (
    events_for,
    ingress_hostname,
    make_node,
    make_service,
    wait_for,
)
from polyccm_testing.manager import RunningManager, manager_options, start_manager

ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-"


@pytest.fixture
def manager(
    control_plane: Any, clean_nodes: None, aws: EmulatorControl
) -> Iterator[Callable[..., None]]:
    running: list[RunningManager] = []

    def start(**overrides: Any) -> None:
        options = manager_options(
            "aws",
            control_plane.kubeconfig,
            cluster_name=CLUSTER,
            configure_cloud_routes=False,
            node_monitor_period=1.0,
        )
        provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=0.0, max_attempts=2)
        running.append(start_manager(dataclasses.replace(options, **overrides), provider))

    yield start
    for handle in running:
        handle.stop()


def register(api: KubeApi, instance: Mapping[str, Any]) -> str:
    name = str(instance["PrivateDnsName"])
    make_node(api, name)
    return name


def polyccm_command(control_plane: Any, *flags: str) -> list[str]:
    """``polyccm --provider aws`` against the test control plane, no leader election."""
    return [
        sys.executable,
        "-m",
        "polyccm.cli",
        "--provider=aws",
        f"--kubeconfig={control_plane.kubeconfig}",
        f"--cluster-name={CLUSTER}",
        "--leader-elect=false",
        "--configure-cloud-routes=false",
        "--secure-port=0",
        *flags,
    ]


def polyccm_env(emulator: Mapping[str, str]) -> dict[str, str]:
    """The process environment: the emulator's AWS and instance metadata endpoints (the
    ``aws`` fixture has removed foreign AWS variables from this process's environment)."""
    return {**os.environ, **isolated_environment(emulator)}


def balancers() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = boto3.client("elb").describe_load_balancers()[
        "LoadBalancerDescriptions"
    ]
    return found


def test_nodes_and_a_load_balancer_through_the_whole_stack(
    kube_api: KubeApi, namespace: str, aws: EmulatorControl, manager: Callable[[], None]
) -> None:
    world = World()
    (first,) = world.instances(1, "us-east-1a", "m5.large")
    (second,) = world.instances(1, "us-east-1b", "c5.large")
    names = [register(kube_api, first), register(kube_api, second)]
    manager()

    def initialised() -> list[Node] | None:
        nodes = [Node(kube_api.get(NODES, n)) for n in names]
        ok = all(not n.has_taint(UNINITIALIZED_TAINT) and n.addresses for n in nodes)
        return nodes if ok else None

    nodes = wait_for(initialised, what="both nodes initialised")
    assert nodes[0].provider_id == f"aws:///us-east-1a/{first['InstanceId']}"
    assert nodes[1].labels["topology.kubernetes.io/zone"] == "us-east-1b"
    assert nodes[1].labels["node.kubernetes.io/instance-type"] == "c5.large"
    assert nodes[0].labels["topology.kubernetes.io/region"] == "us-east-1"
    assert nodes[0].labels["topology.k8s.aws/zone-id"]

    service = make_service(kube_api, namespace, "web")
    lb_name = ("a" + service["metadata"]["uid"].replace("-", ""))[:32]
    assert wait_for(lambda: ingress_hostname(kube_api, namespace, "web"), what="ELB hostname")
    (elb,) = balancers()
    assert elb["LoadBalancerName"] == lb_name, "the upstream name, so switching adopts it"
    assert {i["InstanceId"] for i in elb["Instances"]} == {
        first["InstanceId"],
        second["InstanceId"],
    }

    (third,) = world.instances(1, "us-east-1a")
    register(kube_api, third)
    wait_for(lambda: len(balancers()[0]["Instances"]) == 3, what="the new node behind the ELB")

    kube_api.delete(SERVICES, "web", namespace)
    wait_for(lambda: service_gone(kube_api, namespace, "web"), what="service finalised")
    assert balancers() == []
    groups = boto3.client("ec2").describe_security_groups()["SecurityGroups"]
    assert not [g for g in groups if g["GroupName"] == f"k8s-elb-{lb_name}"]


def network_condition(api: KubeApi, name: str) -> tuple[str, str] | None:
    for condition in Node(api.get(NODES, name)).raw["status"].get("conditions") or ():
        if condition["type"] == "NetworkUnavailable":
            return str(condition["status"]), str(condition["reason"])
    return None


def test_a_new_nodes_route_through_the_whole_stack(
    kube_api: KubeApi, aws: EmulatorControl, manager: Callable[..., None]
) -> None:
    world = World()
    (instance,) = world.instances(1, "us-east-1b")
    name = register(kube_api, instance)  # as a kubelet registers it: tainted, no pod CIDR yet
    manager(configure_cloud_routes=True, cluster_cidrs=("100.64.0.0/16",))

    wait_for(
        lambda: not Node(kube_api.get(NODES, name)).has_taint(UNINITIALIZED_TAINT),
        what="the node initialised",
    )
    # No NetworkUnavailable until the route controller has a pod CIDR to route (upstream's
    # cloud-node controller sets none since kubernetes c11e2ae).
    assert network_condition(kube_api, name) is None

    kube_api.patch(
        NODES, name, {"spec": {"podCIDR": "100.64.7.0/24", "podCIDRs": ["100.64.7.0/24"]}}
    )

    def routed() -> str | None:
        table = world.ec2.describe_route_tables(RouteTableIds=[world.route_table])
        for route in table["RouteTables"][0]["Routes"]:
            if route["DestinationCidrBlock"] == "100.64.7.0/24":
                return str(route.get("InstanceId"))
        return None

    assert wait_for(routed, what="the route in the cluster's table") == instance["InstanceId"]
    assert world.describe(instance["InstanceId"])["SourceDestCheck"] is False
    wait_for(
        lambda: network_condition(kube_api, name) == ("False", "RouteCreated"),
        what="the node's network available",
    )


def test_an_invalid_annotation_is_a_warning_event_and_creates_nothing(
    kube_api: KubeApi, namespace: str, aws: EmulatorControl, manager: Callable[[], None]
) -> None:
    World()
    manager()
    bad = {f"{ANNOTATION}connection-idle-timeout": "soon"}
    make_service(kube_api, namespace, "bad", lambda s: s["metadata"]["annotations"].update(bad))

    def warning() -> str | None:
        return next(
            (
                m
                for t, r, m in events_for(kube_api, namespace, "bad")
                if t == "Warning" and r == "SyncLoadBalancerFailed"
            ),
            None,
        )

    message = wait_for(warning, what="a Warning event")
    assert f"{ANNOTATION}connection-idle-timeout" in message
    assert aws.calls().get("CreateLoadBalancer", 0) == 0
    assert balancers() == []


def test_throttling_surfaces_as_an_event_then_succeeds_on_retry(
    kube_api: KubeApi, namespace: str, aws: EmulatorControl, manager: Callable[[], None]
) -> None:
    world = World()
    register(kube_api, world.instances(1)[0])
    manager()
    aws.inject("CreateLoadBalancer", count=2, code="RequestLimitExceeded")
    make_service(kube_api, namespace, "busy")

    def throttled() -> bool:
        return any(
            r == "SyncLoadBalancerFailed" and ("RequestLimitExceeded" in m or "throttl" in m)
            for _t, r, m in events_for(kube_api, namespace, "busy")
        )

    wait_for(throttled, what="the throttling reported on the service")
    wait_for(
        lambda: ingress_hostname(kube_api, namespace, "busy"),
        timeout=40,
        what="retried with backoff",
    )
    assert len(balancers()) == 1


def test_killing_the_manager_never_leaks_the_load_balancer(
    kube_api: KubeApi,
    namespace: str,
    aws: EmulatorControl,
    control_plane: Any,
    emulator: Mapping[str, str],
    clean_nodes: None,
    tmp_path: Path,
) -> None:
    world = World()
    # polyccm runs on this node's instance: its cluster tag gives the cluster id.
    register(kube_api, world.instances(1, ccm_host=True)[0])
    command = polyccm_command(control_plane)
    env = polyccm_env(emulator)
    log = (tmp_path / "polyccm.log").open("w")
    first = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        make_service(kube_api, namespace, "survivor")
        wait_for(lambda: ingress_hostname(kube_api, namespace, "survivor"), what="the ELB")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    kube_api.delete(SERVICES, "survivor", namespace)
    assert not service_gone(kube_api, namespace, "survivor"), "the finalizer holds the service"
    assert len(balancers()) == 1

    second = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: service_gone(kube_api, namespace, "survivor"),
            timeout=45,
            what="the restarted manager to finish the deletion",
        )
        assert balancers() == []
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0
        log.close()


# -- the cluster id, as cloud-provider-aws finds it --------------------------------------------


def upstream_nlb(world: World, service: Mapping[str, Any], cluster_id: str) -> list[str]:
    """The NLB cloud-provider-aws made for ``service`` in cluster ``cluster_id``: its name,
    listeners and target groups named and tagged as upstream does. Returns the group names."""
    meta, spec = service["metadata"], service["spec"]
    owned = [
        {"Key": f"kubernetes.io/cluster/{cluster_id}", "Value": "owned"},
        {"Key": "kubernetes.io/service-name", "Value": f"{meta['namespace']}/{meta['name']}"},
    ]
    nlb = world.elbv2.create_load_balancer(
        Name=("a" + meta["uid"].replace("-", ""))[:32],
        Type="network",
        SubnetMappings=[{"SubnetId": s} for s in sorted(world.public.values())],
        Tags=owned,
    )["LoadBalancers"][0]
    names = []
    for port in spec["ports"]:
        name = target_group_name(
            cluster_id=cluster_id,
            namespace=meta["namespace"],
            name=meta["name"],
            service_port=port["port"],
            node_port=port["nodePort"],
            target_protocol="TCP",
            health_check_protocol="TCP",
            health_check_interval=30,
        )
        group = world.elbv2.create_target_group(
            Name=name,
            Port=port["nodePort"],
            Protocol="TCP",
            VpcId=world.vpc_id,
            TargetType="instance",
            HealthCheckProtocol="TCP",
            HealthCheckPort="traffic-port",
            HealthCheckIntervalSeconds=30,
            HealthyThresholdCount=3,
            UnhealthyThresholdCount=3,
            Tags=owned,
        )["TargetGroups"][0]
        world.elbv2.create_listener(
            LoadBalancerArn=nlb["LoadBalancerArn"],
            Port=port["port"],
            Protocol="TCP",
            DefaultActions=[{"Type": "forward", "TargetGroupArn": group["TargetGroupArn"]}],
        )
        names.append(name)
    return names


def upstream_elb(world: World, service: Mapping[str, Any], cluster_id: str) -> str:
    """The classic ELB cloud-provider-aws made for ``service``, with its ``k8s-elb-<name>``
    security group tagged for ``cluster_id``. Returns the group id."""
    name = ("a" + service["metadata"]["uid"].replace("-", ""))[:32]
    group: str = world.ec2.create_security_group(
        GroupName=f"k8s-elb-{name}",
        Description="Security group for Kubernetes ELB (made by cloud-provider-aws)",
        VpcId=world.vpc_id,
        TagSpecifications=[
            {
                "ResourceType": "security-group",
                "Tags": [{"Key": f"kubernetes.io/cluster/{cluster_id}", "Value": "owned"}],
            }
        ],
    )["GroupId"]
    port = service["spec"]["ports"][0]
    world.elb.create_load_balancer(
        LoadBalancerName=name,
        Listeners=[
            {
                "Protocol": "tcp",
                "LoadBalancerPort": port["port"],
                "InstanceProtocol": "tcp",
                "InstancePort": port["nodePort"],
            }
        ],
        Subnets=sorted(world.public.values()),
        SecurityGroups=[group],
    )
    return group


def test_switching_from_cloud_provider_aws_adopts_its_resources_by_the_instance_cluster_tag(
    kube_api: KubeApi,
    namespace: str,
    aws: EmulatorControl,
    control_plane: Any,
    emulator: Mapping[str, str],
    clean_nodes: None,
    tmp_path: Path,
) -> None:
    """The cluster was run by cloud-provider-aws with cluster id ``prod``, found on its
    instance's tags; cloud.conf names no id, and --cluster-name is the default. polyccm must
    arrive at ``prod`` too, or it would create new target groups and refuse upstream's groups."""
    world = World(cluster="prod")
    host = world.instances(1, ccm_host=True)[0]  # tagged kubernetes.io/cluster/prod=owned
    register(kube_api, host)
    register(kube_api, world.instances(1, "us-east-1b")[0])
    fast = make_service(
        kube_api,
        namespace,
        "fast",
        lambda s: s["metadata"]["annotations"].update({f"{ANNOTATION}type": "nlb"}),
    )
    classic = make_service(kube_api, namespace, "classic")
    groups = sorted(upstream_nlb(world, fast, "prod"))
    elb_group = upstream_elb(world, classic, "prod")
    security_groups = len(world.ec2.describe_security_groups()["SecurityGroups"])
    config = tmp_path / "cloud.conf"
    config.write_text("[Global]\nRegion = us-east-1\n")
    aws.reset_calls()

    log = (tmp_path / "polyccm.log").open("w")
    process = subprocess.Popen(
        polyccm_command(control_plane, f"--cloud-config={config}"),
        env=polyccm_env(emulator),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        for name in ("fast", "classic"):
            wait_for(
                lambda n=name: ingress_hostname(kube_api, namespace, n), what=f"{name} adopted"
            )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        log.close()

    calls = aws.calls()
    created = {c: n for c, n in calls.items() if c.startswith("Create") and c != "CreateTags"}
    assert created == {}, (created, (tmp_path / "polyccm.log").read_text()[-3000:])
    target_groups = world.elbv2.describe_target_groups()["TargetGroups"]
    assert sorted(g["TargetGroupName"] for g in target_groups) == groups
    (elb,) = [b for b in balancers() if b["LoadBalancerName"].startswith("a")]
    assert elb["SecurityGroups"] == [elb_group]
    assert len(world.ec2.describe_security_groups()["SecurityGroups"]) == security_groups


def test_without_a_cluster_id_polyccm_refuses_to_start_unless_allowed(
    kube_api: KubeApi,
    aws: EmulatorControl,
    control_plane: Any,
    emulator: Mapping[str, str],
    clean_nodes: None,
) -> None:
    world = World()
    host = world.instances(1, tags={"Name": "untagged"}, ccm_host=True)[0]
    name = register(kube_api, host)

    refused = subprocess.run(
        polyccm_command(control_plane),
        env=polyccm_env(emulator),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "no cluster id" in refused.stderr and "--allow-untagged-cloud" in refused.stderr
    assert "Traceback" not in refused.stderr

    allowed = subprocess.Popen(
        polyccm_command(control_plane, "--allow-untagged-cloud"),
        env=polyccm_env(emulator),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        node = wait_for(
            lambda: (n := Node(kube_api.get(NODES, name))).provider_id and n,
            what="the node initialised by polyccm started with --allow-untagged-cloud",
        )
        assert node.provider_id.endswith(host["InstanceId"])
    finally:
        allowed.send_signal(signal.SIGTERM)
        assert allowed.wait(timeout=30) == 0


# -- upstream's default deployment ------------------------------------------------------------


def test_started_as_upstreams_helm_chart_starts_its_ccm(
    kube_api: KubeApi,
    namespace: str,
    aws: EmulatorControl,
    control_plane: Any,
    emulator: Mapping[str, str],
    clean_nodes: None,
    tmp_path: Path,
) -> None:
    """cloud-provider-aws v1.37.1's chart (charts/aws-cloud-controller-manager values.yaml:3-5,
    templates/daemonset.yaml:42-48) runs its CCM with ``--v=2 --cloud-provider=aws`` alone: no
    cloud config, no region variable, in-cluster credentials. The kubeconfig stands for those,
    and a free secure port for the pod's own network; everything else is found on the CCM's
    instance (region aws.go:514, VPC aws.go:636-642, cluster id aws.go:653-661).

    Plus ``--configure-cloud-routes=false``: with the chart's args alone, upstream's own binary
    dies once leader (k8s.io/cloud-provider v0.35.4 app/core.go:116-119 parses the empty
    --cluster-cidr, controllermanager.go:224 is fatal: "invalid CIDR[0]"), and polyccm
    refuses the same start in one line (exit 2)."""
    world = World()
    (host,) = world.instances(1, "us-east-1a", "m5.large", ccm_host=True)
    (worker,) = world.instances(1, "us-east-1b", "c5.large")
    names = [register(kube_api, host), register(kube_api, worker)]
    env = polyccm_env(emulator)
    for variable in ("AWS_DEFAULT_REGION", "AWS_REGION"):
        env.pop(variable, None)
    (port,) = free_ports(1)
    command = [
        sys.executable,
        "-m",
        "polyccm.cli",
        "--v=2",
        "--cloud-provider=aws",
        "--configure-cloud-routes=false",
        f"--kubeconfig={control_plane.kubeconfig}",
        f"--secure-port={port}",
    ]
    log_path = tmp_path / "polyccm.log"
    log = log_path.open("w")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:

        def initialised() -> list[Node] | None:
            assert process.poll() is None, log_path.read_text()[-3000:]
            nodes = [Node(kube_api.get(NODES, n)) for n in names]
            return nodes if all(not n.has_taint(UNINITIALIZED_TAINT) for n in nodes) else None

        nodes = wait_for(initialised, timeout=60, what="both nodes initialised")
        assert nodes[1].provider_id == f"aws:///us-east-1b/{worker['InstanceId']}"
        assert nodes[0].labels["topology.kubernetes.io/region"] == "us-east-1"
        assert nodes[1].labels["node.kubernetes.io/instance-type"] == "c5.large"

        make_service(
            kube_api,
            namespace,
            "edge",
            lambda s: s["metadata"]["annotations"].update({f"{ANNOTATION}type": "nlb"}),
        )
        hostname = wait_for(
            lambda: ingress_hostname(kube_api, namespace, "edge"), timeout=60, what="the NLB"
        )
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        log.close()
    assert code == 0, log_path.read_text()[-3000:]

    (nlb,) = world.elbv2.describe_load_balancers()["LoadBalancers"]
    assert nlb["DNSName"] == hostname
    assert nlb["VpcId"] == world.vpc_id
    (group,) = world.elbv2.describe_target_groups(LoadBalancerArn=nlb["LoadBalancerArn"])[
        "TargetGroups"
    ]
    health = world.elbv2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
    targets = {t["Target"]["Id"] for t in health["TargetHealthDescriptions"]}
    assert targets == {host["InstanceId"], worker["InstanceId"]}
