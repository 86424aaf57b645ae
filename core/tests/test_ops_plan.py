"""``polyccm plan`` against the real kube-apiserver and the fake cloud: what it says the
controllers would do, its exit status, and that it changes nothing in the cloud or the cluster
(the fake cloud counts writes; a read-only ServiceAccount could not write anyway)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from polyccm.kube.api import MERGE_PATCH, NODES, SERVICES, KubeApi
from polyccm.objects import (
    LOAD_BALANCER_FINALIZER,
    SHUTDOWN_TAINT,
    UNINITIALIZED_TAINT,
    Node,
    Service,
)
from polyccm.ops.contract import LoadBalancerPlan
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.fake import REFUSE_ANNOTATION, FakeCloud
from polyccm_testing.fake_main import FakeCloudPlugin
from polyccm_testing.kubeobjects import make_node, make_service
from polyccm_testing.opstools import (
    CommandResult,
    plans_by_service,
    read_only_kubeconfig,
    run_command,
    run_polyccm,
)

pytestmark = pytest.mark.usefixtures("clean_nodes")


def plan(
    cloud: FakeCloud, control_plane: ControlPlane, *extra: str, kubeconfig: Path | None = None
) -> CommandResult:
    return run_command(
        "plan",
        "fake",
        kubeconfig or control_plane.kubeconfig,
        "--controllers=*,-route",
        *extra,
        plugins=[FakeCloudPlugin(cloud)],
    )


def as_json(result: CommandResult) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def initialised(api: KubeApi, cloud: FakeCloud, name: str, **node: Any) -> Node:
    """A node whose instance exists, initialised as cloud-node leaves it."""
    instance = cloud.add_instance(name)
    make_node(
        api,
        name,
        tainted=False,
        provider_id=instance.provider_id,
        addresses=tuple((a.type, a.address) for a in instance.addresses),
        **node,
    )
    return Node(api.get(NODES, name))


def ensured(cloud: FakeCloud, api: KubeApi, namespace: str, name: str, nodes: list[Node]) -> None:
    """A LoadBalancer service whose load balancer the controller made (finalizer included)."""
    make_service(api, namespace, name)
    api.patch(
        SERVICES,
        name,
        {"metadata": {"finalizers": [LOAD_BALANCER_FINALIZER]}},
        namespace,
        patch_type=MERGE_PATCH,
    )
    cloud.ensure_load_balancer("kubernetes", Service(api.get(SERVICES, name, namespace)), nodes)


def test_nothing_to_do_says_so_and_exits_0(
    kube_api: KubeApi, control_plane: ControlPlane, namespace: str
) -> None:
    cloud = FakeCloud()
    node = initialised(kube_api, cloud, "plan-calm")
    ensured(cloud, kube_api, namespace, "web", [node])
    writes = cloud.writes

    result = plan(cloud, control_plane)

    assert result.status == 0, result
    assert f"{namespace}/web" in result.stdout and "adopt" in result.stdout
    assert "nothing would change" in result.stdout
    assert cloud.writes == writes


def test_nodes_to_initialise_delete_and_taint(
    kube_api: KubeApi, control_plane: ControlPlane
) -> None:
    cloud = FakeCloud()
    fresh = cloud.add_instance("plan-new", instance_type="fake.large", zone="zone-b")
    make_node(kube_api, "plan-new")
    make_node(kube_api, "plan-gone", tainted=False, ready=False, provider_id="fake://region-1/x")
    stopped = initialised(kube_api, cloud, "plan-stopped", ready=False)
    cloud.instances[stopped.name].shutdown = True
    healed = initialised(kube_api, cloud, "plan-healed")
    kube_api.patch(
        NODES,
        healed.name,
        {"spec": {"taints": [{"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}]}},
        patch_type=MERGE_PATCH,
    )

    result = plan(cloud, control_plane, "-o", "json")

    assert result.status == 1, result
    changes = {c["node"]: c for c in as_json(result)["nodes"]}
    assert set(changes) == {"plan-new", "plan-gone", "plan-stopped", "plan-healed"}
    new = changes["plan-new"]
    assert new["action"] == "initialise"
    assert new["providerID"] == fresh.provider_id
    assert new["labels"]["node.kubernetes.io/instance-type"] == "fake.large"
    assert new["labels"]["topology.kubernetes.io/zone"] == "zone-b"
    assert {"type": "InternalIP", "address": fresh.addresses[0].address} in new["addresses"]
    assert changes["plan-gone"]["action"] == "delete"
    assert changes["plan-stopped"]["action"] == "taint-shutdown"
    assert changes["plan-healed"]["action"] == "untaint-shutdown"
    # Nothing was done: the new node is still tainted, the gone one still there.
    assert Node(kube_api.get(NODES, "plan-new")).has_taint(UNINITIALIZED_TAINT)
    assert kube_api.get(NODES, "plan-gone")
    assert cloud.writes == 0


def test_load_balancers_adopt_create_update_fail_and_delete(
    kube_api: KubeApi, control_plane: ControlPlane, namespace: str
) -> None:
    cloud = FakeCloud()
    first = initialised(kube_api, cloud, "plan-lb-a")
    ensured(cloud, kube_api, namespace, "kept", [first])
    ensured(cloud, kube_api, namespace, "grown", [first])
    ensured(cloud, kube_api, namespace, "gone", [first])
    second = initialised(kube_api, cloud, "plan-lb-b")
    make_service(kube_api, namespace, "fresh")
    make_service(
        kube_api,
        namespace,
        "refused",
        lambda s: s["metadata"]["annotations"].update({REFUSE_ANNOTATION: "please"}),
    )
    kube_api.patch(
        SERVICES, "gone", {"spec": {"type": "ClusterIP"}}, namespace, patch_type=MERGE_PATCH
    )
    # "kept" already has both nodes: adopt. "grown" has only the first: update.
    kept = Service(kube_api.get(SERVICES, "kept", namespace))
    cloud.ensure_load_balancer("kubernetes", kept, [first, second])
    writes = cloud.writes

    result = plan(cloud, control_plane, "-o", "json")

    assert result.status == 1, result
    plans = plans_by_service(result)
    assert {name: p["action"] for name, p in plans.items()} == {
        "kept": "adopt",
        "grown": "update",
        "fresh": "create",
        "refused": "fail",
        "gone": "delete",
    }
    assert plans["grown"]["differences"] == [{"aspect": "backends", "detail": "add node plan-lb-b"}]
    assert plans["kept"]["differences"] == []
    (problem,) = plans["refused"]["problems"]
    assert problem["eventReason"] == "SyncLoadBalancerFailed"
    assert problem["eventMessage"] == (
        f"Error syncing load balancer: annotation {REFUSE_ANNOTATION}='please': refused as asked"
    )
    assert {"aspect": "load-balancer", "detail": f"delete {plans['gone']['loadBalancer']}"} in (
        plans["gone"]["differences"]
    )
    assert cloud.writes == writes
    assert cloud.count("ensure_load_balancer") == 4  # the test's own, none by plan


def test_the_table_lists_each_change_on_a_line(
    kube_api: KubeApi, control_plane: ControlPlane, namespace: str
) -> None:
    cloud = FakeCloud()
    initialised(kube_api, cloud, "plan-table")
    make_service(kube_api, namespace, "web")

    result = plan(cloud, control_plane)

    assert result.status == 1
    lines = result.stdout.splitlines()
    assert "LOAD BALANCERS" in lines
    row = next(line for line in lines if line.startswith(f"{namespace}/web"))
    assert row.split()[1] == "create"
    assert any(line.strip() == "backends: node plan-table" for line in lines)
    assert lines[-1].endswith("changes would be made.")


def test_a_read_only_service_account_is_enough(
    kube_api: KubeApi, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cloud = FakeCloud()
    cloud.add_instance("plan-ro")
    make_node(kube_api, "plan-ro")
    make_service(kube_api, namespace, "web")
    read_only = read_only_kubeconfig(kube_api, control_plane, namespace, tmp_path)

    result = plan(cloud, control_plane, "-o", "json", kubeconfig=read_only)

    assert result.status == 1, result
    document = as_json(result)
    assert [c["action"] for c in document["nodes"]] == ["initialise"]
    assert [p["action"] for p in document["loadBalancers"]] == ["create"]
    service = kube_api.get(SERVICES, "web", namespace)
    assert not service["metadata"].get("finalizers")


def test_routes_to_create_and_delete(kube_api: KubeApi, control_plane: ControlPlane) -> None:
    cloud = FakeCloud()
    initialised(kube_api, cloud, "plan-routed", pod_cidrs=("10.244.1.0/24",))
    cloud.add_instance("plan-old")
    from polyccm.cloud import Route

    cloud.cloud_routes["stale"] = Route("stale", "plan-old", "10.244.9.0/24")

    result = run_polyccm(
        [
            "plan",
            "--provider=fake",
            f"--kubeconfig={control_plane.kubeconfig}",
            "--cluster-cidr=10.244.0.0/16",
            "-o",
            "json",
        ],
        plugins=[FakeCloudPlugin(cloud)],
    )

    assert result.status == 1, result
    routes = as_json(result)["routes"]
    assert {
        "action": "create",
        "node": "plan-routed",
        "destinationCIDR": "10.244.1.0/24",
    }.items() <= (routes[0].items())
    assert routes[1]["action"] == "delete" and routes[1]["name"] == "stale"
    assert "stale" in cloud.cloud_routes


class NoPlanner(FakeCloud):
    def load_balancer_planner(self) -> None:
        return None


def test_a_provider_that_cannot_plan_load_balancers_is_refused(
    control_plane: ControlPlane,
) -> None:
    result = plan(NoPlanner(), control_plane)

    assert result.status == 2
    assert result.stdout == ""
    assert result.stderr.strip() == (
        "polyccm plan: error: provider fake cannot plan load balancers (it offers no "
        "LoadBalancerPlanner); pass --controllers=*,-service to plan the rest"
    )
    assert plan(NoPlanner(), control_plane, "--controllers=*,-service,-route").status == 0


class WritingPlanner(FakeCloud):
    """A planner with a bug: it ensures instead of planning."""

    def plan_load_balancer(
        self, cluster_name: str, service: Service, nodes: Any
    ) -> LoadBalancerPlan:
        self.ensure_load_balancer(cluster_name, service, nodes)
        raise AssertionError("not reached: the write is refused")


def test_a_write_while_planning_is_refused_before_it_reaches_the_cloud(
    kube_api: KubeApi, control_plane: ControlPlane, namespace: str
) -> None:
    cloud = WritingPlanner()
    make_service(kube_api, namespace, "web")

    result = plan(cloud, control_plane)

    assert result.status == 2
    assert "fake ensure_load_balancer: refused, polyccm only reads here" in result.stderr
    assert cloud.count("ensure_load_balancer") == 0
    assert cloud.load_balancers == {}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan"], "--provider is required"),
        (["plan", "--provider=fake", "-o", "yaml"], "argument -o/--output: invalid choice"),
        (["plan", "--provider=fake", "--controllers=-route", "--kubeconfig=/x"], "cannot load"),
        (["plan", "--provider=fake"], "the route controller needs --cluster-cidr"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str) -> None:
    result = run_polyccm(argv, plugins=[FakeCloudPlugin(FakeCloud())])

    assert result.status == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_providers_own_controllers_are_named_as_not_planned() -> None:
    from polyccm.app.options import ManagerOptions
    from polyccm.ops.plan import make_plan

    options = ManagerOptions(provider="fake", controllers=frozenset({"service", "fake-bgp"}))

    result = make_plan(FakeCloud(), options, [], [])

    assert result.not_planned == (
        "fake-bgp: a controller of the provider's own; plan does not cover it",
    )
    assert not result.changes
