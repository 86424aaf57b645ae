"""``polyccm plan --provider aws`` on the emulator and the real kube-apiserver.

The switch from cloud-provider-aws: load balancers made the way upstream makes them (plain
boto3, upstream's names, tags and rules) plan as ``adopt``, nothing else, exit 0. Then what an
update would change (listeners, health check, security groups, backends), what a create would
make, what ensure would refuse; and, throughout, the emulator sees only Describe/Get/List calls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from polyccm.controllers import nodeinfo
from polyccm.kube.api import MERGE_PATCH, SERVICES, KubeApi
from polyccm.objects import Node, Service
from polyccm_aws import annotations as ann
from polyccm_aws.config import CloudConfig
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator import upstream_made
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.kubeobjects import make_node, make_service
from polyccm_testing.opstools import CommandResult, plans_by_service, run_command, run_polyccm

pytestmark = pytest.mark.usefixtures("clean_nodes")

READS = ("Describe", "Get", "List")


@pytest.fixture
def instances(world: World) -> list[dict[str, Any]]:
    return world.instances(2)


@pytest.fixture
def nodes(kube_api: KubeApi, provider: AwsProvider, instances: list[dict[str, Any]]) -> list[Node]:
    """The instances' Nodes, initialised as the cloud-node controller leaves them."""
    registered = []
    instances_v2 = provider.instances_v2()
    for instance in instances:
        view = World.node(instance)
        metadata = instances_v2.instance_metadata(view)
        make_node(
            kube_api,
            view.name,
            tainted=False,
            provider_id=view.provider_id,
            labels=nodeinfo.labels_for(metadata, {}),
            addresses=tuple((a.type, a.address) for a in metadata.node_addresses),
        )
        registered.append(view)
    return registered


def service(api: KubeApi, namespace: str, name: str, **annotations: str) -> Service:
    def annotate(body: dict[str, Any]) -> None:
        body["metadata"]["annotations"].update(annotations)

    return Service(make_service(api, namespace, name, annotate))


def plan(control_plane: ControlPlane, cloud_config: Path, *extra: str) -> CommandResult:
    return run_command(
        "plan",
        "aws",
        control_plane.kubeconfig,
        "--controllers=*,-route",
        "-o",
        "json",
        *extra,
        cloud_config=cloud_config,
    )


def writes(aws: EmulatorControl) -> dict[str, int]:
    return {a: n for a, n in aws.calls().items() if not a.startswith(READS)}


def test_load_balancers_made_by_upstream_plan_as_adopt_and_nothing_else(
    aws: EmulatorControl,
    world: World,
    kube_api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
    instances: list[dict[str, Any]],
    nodes: list[Node],
    cloud_config: Path,
) -> None:
    classic = service(kube_api, namespace, "classic")
    network = service(kube_api, namespace, "network", **{ann.TYPE: ann.NLB})
    elb_name = upstream_made.classic_elb(world, classic, instances)
    nlb_name = upstream_made.nlb(world, network, instances)
    aws.reset_calls()

    result = plan(control_plane, cloud_config)

    assert result.status == 0, result.stdout
    document = json.loads(result.stdout)
    assert document["nodes"] == [] and document["routes"] == []
    assert plans_by_service(result) == {
        "classic": {
            "service": f"{namespace}/classic",
            "action": "adopt",
            "loadBalancer": elb_name,
            "differences": [],
            "problems": [],
        },
        "network": {
            "service": f"{namespace}/network",
            "action": "adopt",
            "loadBalancer": nlb_name,
            "differences": [],
            "problems": [],
        },
    }
    assert writes(aws) == {}
    assert aws.calls()  # it did read the cloud


def test_an_update_lists_listener_health_check_security_group_and_backend_differences(
    aws: EmulatorControl,
    world: World,
    kube_api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
    instances: list[dict[str, Any]],
    nodes: list[Node],
    cloud_config: Path,
) -> None:
    classic = service(kube_api, namespace, "classic", **{ann.HC_INTERVAL: "20"})
    name = upstream_made.classic_elb(world, classic, instances[:1])
    kube_api.patch(
        SERVICES,
        "classic",
        {
            "spec": {
                "ports": [
                    {"name": "http", "port": 80, "targetPort": 8080},
                    {"name": "alt", "port": 8080, "targetPort": 8080},
                ]
            }
        },
        namespace,
        patch_type=MERGE_PATCH,
    )
    alt = Service(kube_api.get(SERVICES, "classic", namespace)).ports[1].node_port
    group = world.ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [f"k8s-elb-{name}"]}]
    )["SecurityGroups"][0]["GroupId"]
    aws.reset_calls()

    result = plan(control_plane, cloud_config)

    assert result.status == 1, result
    planned = plans_by_service(result)["classic"]
    assert planned["action"] == "update"
    details = {(d["aspect"], d["detail"]) for d in planned["differences"]}
    port = classic.ports[0].node_port
    assert ("listeners", f"add tcp:8080 -> tcp:{alt}") in details
    assert (
        "health-check",
        f"set TCP:{port} every 20s, timeout 5s, healthy after 2, unhealthy after 6",
    ) in details
    assert ("security-groups", f"allow tcp 8080-8080 from 0.0.0.0/0 on {group}") in details
    assert ("backends", f"register {instances[1]['InstanceId']}") in details
    assert len(details) == 4, details
    assert writes(aws) == {}


def test_a_service_without_load_balancer_plans_create(
    aws: EmulatorControl,
    world: World,
    kube_api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
    nodes: list[Node],
    cloud_config: Path,
) -> None:
    web = service(kube_api, namespace, "web")
    aws.reset_calls()

    result = plan(control_plane, cloud_config)

    assert result.status == 1
    planned = plans_by_service(result)["web"]
    assert planned["action"] == "create"
    details = [(d["aspect"], d["detail"]) for d in planned["differences"]]
    name = planned["loadBalancer"]
    assert details[0] == ("security-groups", f"create k8s-elb-{name} in {world.vpc_id}")
    assert ("load-balancer", "create internet-facing classic ELB") in details
    assert ("listeners", f"add tcp:80 -> tcp:{web.ports[0].node_port}") in details
    assert ("backends", "the running instances of 2 node(s)") in details
    assert writes(aws) == {}


def test_what_ensure_would_refuse_plans_as_fail_with_its_event(
    aws: EmulatorControl,
    world: World,
    kube_api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
    instances: list[dict[str, Any]],
    nodes: list[Node],
    cloud_config: Path,
    tmp_path: Path,
) -> None:
    service(kube_api, namespace, "bad", **{ann.HC_INTERVAL: "1"})
    switched = service(kube_api, namespace, "switched")
    upstream_made.classic_elb(world, switched, instances)
    kube_api.patch(
        SERVICES,
        "switched",
        {"metadata": {"annotations": {ann.TYPE: ann.NLB}}},
        namespace,
        patch_type=MERGE_PATCH,
    )

    result = plan(control_plane, cloud_config)

    assert result.status == 1
    planned = plans_by_service(result)
    assert planned["bad"]["action"] == planned["switched"]["action"] == "fail"
    (problem,) = planned["bad"]["problems"]
    message = f"annotation {ann.HC_INTERVAL}='1': must be between 5 and 300 seconds"
    assert problem["eventMessage"] == f"Error syncing load balancer: {message}"
    assert "the load balancer type cannot change" in planned["switched"]["problems"][0]["message"]
    # check-service says the same of the same service, offline.
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(json.dumps(kube_api.get(SERVICES, "bad", namespace)))
    checked = run_polyccm(["check-service", "--provider=aws", "-f", str(manifest)])
    assert checked.stdout == f"{namespace}/bad: error: {message}\n"


def test_without_cluster_id_and_route_flags_plan_refuses_like_the_manager(
    aws: EmulatorControl, control_plane: ControlPlane, tmp_path: Path
) -> None:
    config = tmp_path / "empty.conf"
    config.write_text("[Global]\n")
    no_cidr = run_polyccm(["plan", "--provider=aws", f"--kubeconfig={control_plane.kubeconfig}"])
    no_id = run_polyccm(
        [
            "plan",
            "--provider=aws",
            f"--cloud-config={config}",
            "--controllers=*,-route",
            f"--kubeconfig={control_plane.kubeconfig}",
        ]
    )

    assert no_cidr.status == no_id.status == 2
    assert "the route controller needs --cluster-cidr" in no_cidr.stderr
    assert "no cluster id" in no_id.stderr
    assert writes(aws) == {}


def test_the_provider_plans_with_the_same_clients_and_leaves_no_record_behind(
    aws: EmulatorControl, world: World, instances: list[dict[str, Any]]
) -> None:
    provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=0.0)
    planner = provider.load_balancer_planner()
    svc = World.service("web", uid="0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
    nodes = [World.node(i) for i in instances]

    first = planner.plan_load_balancer(CLUSTER, svc, nodes)
    provider.load_balancer().ensure_load_balancer(CLUSTER, svc, nodes)
    aws.reset_calls()
    second = planner.plan_load_balancer(CLUSTER, svc, nodes)

    assert first.action == "create"
    assert (second.action, second.differences) == ("adopt", ())
    assert writes(aws) == {}
