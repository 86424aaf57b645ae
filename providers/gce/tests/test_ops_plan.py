"""``polyccm plan --provider gce`` on the emulator and the real kube-apiserver.

The switch from cloud-provider-gcp: load balancers made the way upstream makes them (the
compute API alone, upstream's names, descriptions, port ranges and health checks) and upstream's
routes plan as ``adopt`` and nothing else, exit 0, run with a ServiceAccount that may only read
nodes, services and the cluster id. Then what an update would change (backends, firewall), what
a create would make, what ensure would refuse; and, throughout, the emulator sees only reads.
The planner is also driven directly: a forwarding rule or pool ensure would make again is an
update, not a create, and so is the one patch of a firewall earlier polyccm left (its
description, its destination).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from polyccm import cloudcalls
from polyccm.controllers import nodeinfo
from polyccm.kube.api import MERGE_PATCH, SERVICES, KubeApi
from polyccm.objects import Node, Service
from polyccm.ops.contract import ADOPT, BACKENDS, CREATE, LISTENERS, UPDATE, Difference
from polyccm_gce.routes import DESCRIPTION, route_name
from polyccm_gce.service_spec import RBS_ANNOTATION
from polyccm_gce_emulator import upstream_made
from polyccm_gce_emulator.testing import (
    CLUSTER,
    REGION,
    ZONE,
    ComputeApi,
    RunningEmulator,
    gce_provider,
    node_for,
    service_for,
    write_calls,
)
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.kubeobjects import make_node, make_service
from polyccm_testing.opstools import (
    CommandResult,
    plans_by_service,
    read_only_kubeconfig,
    run_command,
    run_polyccm,
)

pytestmark = pytest.mark.usefixtures("clean_nodes")

TAG = "ops"
NAMES = ("ops-a", "ops-b")
CIDR = "10.64.0.0/16"


@pytest.fixture
def nodes(kube_api: KubeApi, emulator: RunningEmulator) -> list[Node]:
    """Two instances and their Nodes, initialised as the cloud-node controller leaves them,
    each with a pod CIDR."""
    compute = emulator.api()
    instances = gce_provider(emulator.endpoint).instances_v2()
    registered = []
    for index, name in enumerate(NAMES):
        compute.create_instance(name, tags=[TAG])
        metadata = instances.instance_metadata(node_for(name))
        made = make_node(
            kube_api,
            name,
            tainted=False,
            provider_id=metadata.provider_id,
            labels=nodeinfo.labels_for(metadata, {}),
            addresses=tuple((a.type, a.address) for a in metadata.node_addresses),
            pod_cidrs=(f"10.64.{index}.0/24",),
        )
        registered.append(Node(made))
    return registered


def upstream_routes(compute: ComputeApi, nodes: list[Node]) -> None:
    """The routes cloud-provider-gcp's route controller makes for ``nodes``."""
    for node in nodes:
        compute.do(
            "POST",
            "global/routes",
            {
                "name": route_name(CLUSTER, node.uid),
                "network": "global/networks/default",
                "destRange": node.pod_cidrs[0],
                "nextHopInstance": f"zones/{ZONE}/instances/{node.name}",
                "priority": 1000,
                "description": DESCRIPTION,
            },
        )


def service(api: KubeApi, namespace: str, name: str, **spec: Any) -> Service:
    def change(body: dict[str, Any]) -> None:
        body["spec"].update(spec)

    return Service(make_service(api, namespace, name, change))


def plan(gce_conf: Path, kubeconfig: Path) -> CommandResult:
    return run_command(
        "plan",
        "gce",
        kubeconfig,
        f"--cluster-name={CLUSTER}",
        f"--cluster-cidr={CIDR}",
        "-o",
        "json",
        cloud_config=gce_conf,
    )


CLUSTER_ID_RULE = {
    "apiGroups": [""],
    "resources": ["configmaps"],
    "resourceNames": ["ingress-uid"],
    "verbs": ["get"],
}
"""What the GCE provider reads besides nodes and services: the cluster id (its shared health
check's name), from ConfigMap kube-system/ingress-uid."""


@pytest.fixture
def reader(
    kube_api: KubeApi, control_plane: ControlPlane, namespace: str, cluster_id: str, tmp_path: Path
) -> Path:
    """A kubeconfig that may only read nodes and services, and the cluster id's ConfigMap."""
    return read_only_kubeconfig(
        kube_api, control_plane, namespace, tmp_path, namespaced={"kube-system": [CLUSTER_ID_RULE]}
    )


def test_load_balancers_and_routes_made_by_upstream_plan_as_adopt_and_nothing_else(
    emulator: RunningEmulator,
    kube_api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
    nodes: list[Node],
    gce_conf: Path,
    cluster_id: str,
    reader: Path,
) -> None:
    compute = emulator.api()
    web = service(
        kube_api,
        namespace,
        "web",
        ports=[{"name": "http", "port": 80}, {"name": "alt", "port": 81}],
    )
    local = service(kube_api, namespace, "local", externalTrafficPolicy="Local")
    # GKE's regional backend-service controller builds this one: upstream skips it.
    make_service(kube_api, namespace, "rbs", lambda body: body["metadata"]["annotations"].update(
        {RBS_ANNOTATION: "enabled"}))  # fmt: skip
    instances = [n.name for n in nodes]
    made = {
        "web": upstream_made.network_load_balancer(
            compute,
            web,
            cluster_id=cluster_id,
            instances=instances,
            tags=[TAG],
            firewall_ports=["80-81"],
        ),
        "local": upstream_made.network_load_balancer(
            compute,
            local,
            cluster_id=cluster_id,
            instances=instances,
            tags=[TAG],
            firewall_ports=["80"],
        ),
    }
    upstream_routes(compute, nodes)
    emulator.control.reset_calls()

    result = plan(gce_conf, reader)

    assert result.status == 0, result
    document = json.loads(result.stdout)
    assert (document["nodes"], document["routes"]) == ([], [])
    assert plans_by_service(result) == {
        key: {
            "service": f"{namespace}/{key}",
            "action": "adopt",
            "loadBalancer": name,
            "differences": [],
            "problems": [],
        }
        for key, name in made.items()
    } | {"rbs": {"service": f"{namespace}/rbs", "action": "skip", "loadBalancer": "",
                 "differences": [], "problems": []}}  # fmt: skip
    calls = emulator.control.calls()
    assert write_calls(calls) == 0, calls
    assert calls["compute.forwardingRules.get"] == 2  # it did read the cloud


def test_without_the_cluster_id_plan_says_what_to_grant(
    emulator: RunningEmulator,
    kube_api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
    nodes: list[Node],
    gce_conf: Path,
    cluster_id: str,
    tmp_path: Path,
) -> None:
    service(kube_api, namespace, "web")
    nodes_and_services_only = read_only_kubeconfig(kube_api, control_plane, namespace, tmp_path)
    emulator.control.reset_calls()

    result = plan(gce_conf, nodes_and_services_only)

    assert result.status == 2
    assert result.stderr.startswith(
        "polyccm plan: error: cannot read the GCE cluster id from ConfigMap "
        "kube-system/ingress-uid: 403"
    ), result.stderr
    assert write_calls(emulator.control.calls()) == 0


def test_update_create_and_fail_are_planned_with_their_differences(
    emulator: RunningEmulator,
    kube_api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
    nodes: list[Node],
    gce_conf: Path,
    cluster_id: str,
    tmp_path: Path,
) -> None:
    compute = emulator.api()
    grown = service(kube_api, namespace, "grown")
    name = upstream_made.network_load_balancer(
        compute,
        grown,
        cluster_id=cluster_id,
        instances=[NAMES[0]],
        tags=[TAG],
        firewall_ports=["80"],
    )
    kube_api.patch(
        SERVICES,
        "grown",
        {"spec": {"loadBalancerSourceRanges": ["10.0.0.0/8"]}},
        namespace,
        patch_type=MERGE_PATCH,
    )
    new = service(
        kube_api, namespace, "new", ports=[{"name": "dns", "port": 53, "protocol": "UDP"}]
    )
    service(
        kube_api,
        namespace,
        "mixed",
        ports=[
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "http", "port": 80, "protocol": "TCP"},
        ],
    )
    upstream_routes(compute, nodes[:1])
    emulator.control.reset_calls()

    result = plan(gce_conf, control_plane.kubeconfig)

    assert result.status == 1, result
    planned = plans_by_service(result)
    assert planned["grown"]["action"] == "update"
    assert {(d["aspect"], d["detail"]) for d in planned["grown"]["differences"]} == {
        ("firewall", f"k8s-fw-{name}: sources 10.0.0.0/8"),
        ("backends", f"target pool {name}: add {ZONE}/{NAMES[1]}"),
    }
    created = planned["new"]
    lb = created["loadBalancer"]
    assert created["action"] == "create"
    assert [(d["aspect"], d["detail"]) for d in created["differences"]] == [
        (
            "backends",
            f"create target pool {lb} (session affinity NONE) with "
            f"{ZONE}/{NAMES[0]}, {ZONE}/{NAMES[1]}",
        ),
        ("health-check", f"target pool {lb} uses k8s-{cluster_id}-node"),
        ("listeners", f"create forwarding rule {lb}: UDP 53-53"),
        ("firewall", f"create k8s-fw-{lb}: allow udp 53 from 0.0.0.0/0 to tags {TAG}"),
    ]
    assert new.key == created["service"]
    (problem,) = planned["mixed"]["problems"]
    assert planned["mixed"]["action"] == "fail"
    assert problem["message"].startswith("ports use TCP, UDP")
    document = json.loads(result.stdout)
    assert document["routes"] == [
        {"action": "create", "node": NAMES[1], "destinationCIDR": "10.64.1.0/24", "name": ""}
    ]
    assert write_calls(emulator.control.calls()) == 0
    # check-service says the same of the same service, offline.
    manifest = tmp_path / "mixed.yaml"
    manifest.write_text(json.dumps(kube_api.get(SERVICES, "mixed", namespace)))
    checked = run_polyccm(["check-service", "--provider=gce", "-f", str(manifest)])
    assert checked.stdout == f"{namespace}/mixed: error: {problem['message']}\n"


# -- the planner itself --------------------------------------------------------------------------


@pytest.fixture
def provider(emulator: RunningEmulator) -> Any:
    built = gce_provider(emulator.endpoint)
    built._cluster_id = "cafe0123"  # what initialize reads from kube-system/ingress-uid
    for name in NAMES:
        emulator.api().create_instance(name, tags=[TAG])
    return built


def planned(provider: Any, emulator: RunningEmulator, service: Service) -> Any:
    """The plan, under the read-only guard ``polyccm plan`` sets, with no write seen."""
    emulator.control.reset_calls()
    with cloudcalls.reads_only(provider.read_only_call):
        result = provider.load_balancer_planner().plan_load_balancer(
            CLUSTER, service, [node_for(name) for name in NAMES]
        )
    assert write_calls(emulator.control.calls()) == 0
    return result


def ensured(provider: Any) -> tuple[Service, str]:
    """A Service whose load balancer ensure made, and that load balancer's name."""
    web = service_for()
    provider.load_balancer().ensure_load_balancer(CLUSTER, web, [node_for(name) for name in NAMES])
    return web, provider.load_balancer().get_load_balancer_name(CLUSTER, web)


def test_plan_is_create_before_ensure_and_adopt_after(
    provider: Any, emulator: RunningEmulator
) -> None:
    web = service_for()
    name = provider.load_balancer().get_load_balancer_name(CLUSTER, web)

    before = planned(provider, emulator, web)
    provider.load_balancer().ensure_load_balancer(CLUSTER, web, [node_for(name) for name in NAMES])
    after = planned(provider, emulator, web)

    assert before.action == CREATE
    assert before.differences[0] == Difference(
        "health-check",
        "create k8s-cafe0123-node: HTTP :10256/healthz every 8s, timeout 1s, healthy after 1, "
        "unhealthy after 3",
    )
    assert (after.action, after.name, after.differences) == (ADOPT, name, ())


def test_pieces_left_without_their_rule_plan_as_the_rule_alone(
    provider: Any, emulator: RunningEmulator
) -> None:
    web, name = ensured(provider)
    emulator.api().do("DELETE", f"regions/{REGION}/forwardingRules/{name}")

    result = planned(provider, emulator, web)

    assert result.action == CREATE
    made = [d.detail for d in result.differences if d.detail.startswith("create")]
    assert made == [f"create forwarding rule {name}: TCP 80-80"]  # the pool and firewalls stay


def test_changed_ports_and_affinity_replace_rule_and_pool_as_an_update(
    provider: Any, emulator: RunningEmulator
) -> None:
    web, name = ensured(provider)
    raw = json.loads(json.dumps(dict(web.raw)))
    raw["spec"]["ports"].append({"name": "p8080", "port": 8080, "protocol": "TCP"})
    raw["spec"]["sessionAffinity"] = "ClientIP"

    result = planned(provider, emulator, Service(raw))

    assert result.action == UPDATE
    listeners = [d.detail for d in result.differences if d.aspect == LISTENERS]
    pools = [d.detail for d in result.differences if d.aspect == BACKENDS]
    # The rule is made again on its address, held meanwhile (issue 27).
    ip = emulator.api().get(f"regions/{REGION}/forwardingRules/{name}")["IPAddress"]
    assert listeners == [
        f"hold {ip} as static address {name} while the forwarding rule is made again",
        f"delete forwarding rule {name} to make it again",
        f"create forwarding rule {name}: TCP 80-8080 on {ip}",
        f"release static address {name}",
    ]
    assert pools[0] == f"delete target pool {name} to make it again"
    assert pools[1].startswith(f"create target pool {name} (session affinity CLIENT_IP)")
    assert provider.load_balancer().get_load_balancer(CLUSTER, web) is not None


def test_a_firewall_earlier_polyccm_left_plans_the_patch_ensure_would_make(
    provider: Any, emulator: RunningEmulator
) -> None:
    web, name = ensured(provider)
    compute, firewall = emulator.api(), f"k8s-fw-{name}"
    address = compute.get(f"regions/{REGION}/forwardingRules/{name}")["IPAddress"]
    # As earlier polyccm left it: the Service alone, spaced, and traffic to any address.
    compute.do("PUT", f"global/firewalls/{firewall}", {
        **{k: v for k, v in compute.get(f"global/firewalls/{firewall}").items()
           if k in ("name", "network", "sourceRanges", "targetTags", "allowed")},
        "description": '{"kubernetes.io/service-name": "default/web"}',
    })  # fmt: skip

    result = planned(provider, emulator, web)

    assert (result.action, result.differences) == (
        UPDATE,
        (
            Difference("firewall", f"{firewall}: destination {address}"),
            Difference(
                "firewall",
                f'{firewall}: description {{"kubernetes.io/service-name":"default/web", '
                f'"kubernetes.io/service-ip":"{address}"}}',
            ),
        ),
    )


def test_every_served_method_is_classified_read_or_write_for_the_guard(
    emulator: RunningEmulator,
) -> None:
    provider = gce_provider(emulator.endpoint)
    methods = emulator.control.methods()
    assert methods

    misjudged = [
        m["id"]
        for m in methods
        if provider.read_only_call(m["id"])
        != (
            m["httpMethod"] == "GET"
            # POSTs that only read: an operation's wait, an instance group's member list
            or m["id"].endswith(("Operations.wait", "instanceGroups.listInstances"))
        )
    ]

    assert misjudged == []


def test_turning_the_deny_firewall_on_plans_it_and_the_allow_priorities(
    provider: Any, emulator: RunningEmulator
) -> None:
    # --enable-l4-deny-firewall on a load balancer made without it: upstream lowers the allow
    # firewalls to 999 and makes k8s-fw-<lb>-deny (gce_loadbalancer_external.go:1200-1228,
    # 1043-1072, 1230-1270@v36.3.8); plan says so before ensure does it. Before: the planner
    # copied the load balancer before the flags were set, and planned without them.
    web, name = ensured(provider)
    provider.load_balancer().deny_firewall = True
    provider.load_balancer().deny_cleanup = True

    result = planned(provider, emulator, web)

    assert result.action == UPDATE
    assert [d.detail for d in result.differences if d.aspect == "firewall"] == [
        "k8s-cafe0123-node-http-hc: priority 999",
        f"k8s-fw-{name}: priority 999",
        f"create k8s-fw-{name}-deny: deny all from 0.0.0.0/0 to tags {TAG}",
    ]
