"""``polyccm orphans --provider gce`` on the emulator and the real kube-apiserver.

Resources leaked on purpose (the load balancer of a Service deleted behind upstream's back, a
Local one with its own health check, a route of a node that is gone) are found, exactly those,
without a write; ``--delete --yes`` deletes exactly those. What looks like them but lacks this
cluster's marks (another cluster's load balancer and shared check, a firewall without a
Service's description, another cluster's and a hand-made route) and what a live Service or Node
accounts for is left alone. Deleting a resource whose marks are gone since it was listed keeps it.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from polyccm.cloud import default_load_balancer_name
from polyccm.errors import CloudError
from polyccm.kube.api import KubeApi
from polyccm.objects import Node, Service
from polyccm.ops import orphans as orphan_tools
from polyccm_gce.routes import DESCRIPTION, route_name
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
from polyccm_testing.opstools import CommandResult, listed_orphans, run_command

pytestmark = pytest.mark.usefixtures("clean_nodes")

TAG = "ops"


def everything(compute: ComputeApi) -> set[tuple[str, str]]:
    """(kind, name) of every load-balancer piece and route in the project."""
    found = {
        ("forwarding-rule", r["name"])
        for r in compute.list_all(f"regions/{REGION}/forwardingRules")
    }
    found |= {("target-pool", p["name"]) for p in compute.list_all(f"regions/{REGION}/targetPools")}
    found |= {("firewall", f["name"]) for f in compute.list_all("global/firewalls")}
    found |= {("http-health-check", c["name"]) for c in compute.list_all("global/httpHealthChecks")}
    found |= {("route", r["name"]) for r in compute.list_all("global/routes")}
    return found


def pieces(name: str, *, local: bool = False) -> set[tuple[str, str]]:
    made = {("forwarding-rule", name), ("target-pool", name), ("firewall", f"k8s-fw-{name}")}
    if local:
        made |= {("http-health-check", name), ("firewall", f"k8s-{name}-http-hc")}
    return made


def route(
    compute: ComputeApi, name: str, instance: str, cidr: str, description: str = DESCRIPTION
) -> None:
    compute.do(
        "POST",
        "global/routes",
        {
            "name": name,
            "network": "global/networks/default",
            "destRange": cidr,
            "nextHopInstance": f"zones/{ZONE}/instances/{instance}",
            "priority": 1000,
            "description": description,
        },
    )


def gone_service(name: str, **spec: Any) -> Service:
    """A Service that is not in the cluster (deleted while no controller ran)."""
    return service_for(name, namespace="gone", **spec)


def orphans(gce_conf: Path, kubeconfig: Path, *extra: str) -> CommandResult:
    return run_command(
        "orphans",
        "gce",
        kubeconfig,
        f"--cluster-name={CLUSTER}",
        "--controllers=*,-route",
        *extra,
        cloud_config=gce_conf,
    )


def test_leaked_resources_are_found_and_deleted_and_look_alikes_are_not(
    emulator: RunningEmulator,
    kube_api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
    gce_conf: Path,
    cluster_id: str,
) -> None:
    compute = emulator.api()
    for name in ("ops-a", "ops-b"):
        compute.create_instance(name, tags=[TAG])
    compute.create_instance("gone-vm", tags=[TAG])
    compute.create_instance("other-vm", tags=["other-node"])
    node = Node(
        make_node(kube_api, "ops-a", tainted=False, provider_id=f"gce://polyccm-dev/{ZONE}/ops-a")
    )
    make_node(kube_api, "ops-b", tainted=False, provider_id=f"gce://polyccm-dev/{ZONE}/ops-b")

    # This cluster's: a live Service's load balancer and route (kept), and what leaked.
    live = Service(make_service(kube_api, namespace, "live"))
    ours = dict(cluster_id=cluster_id, tags=[TAG], firewall_ports=["80"])
    live_lb = upstream_made.network_load_balancer(
        compute, live, instances=["ops-a", "ops-b"], **ours
    )
    leaked = upstream_made.network_load_balancer(
        compute, gone_service("web"), instances=["ops-a"], **ours
    )
    leaked_local = upstream_made.network_load_balancer(
        compute,
        gone_service("local", externalTrafficPolicy="Local", healthCheckNodePort=31500),
        instances=["ops-b"],
        **ours,
    )
    route(compute, route_name(CLUSTER, node.uid), "ops-a", "10.64.0.0/24")
    leaked_route = route_name(CLUSTER, str(uuid.uuid4()))
    route(compute, leaked_route, "gone-vm", "10.64.9.0/24")
    # Look-alikes without this cluster's marks.
    upstream_made.network_load_balancer(
        compute,
        gone_service("theirs"),
        cluster_id="othercluster",
        instances=["other-vm"],
        tags=["other-node"],
        firewall_ports=["80"],
    )
    compute.do(
        "POST",
        "global/firewalls",
        {
            "name": f"k8s-fw-{default_load_balancer_name(gone_service('hand-made'))}",
            "network": "global/networks/default",
            "targetTags": [TAG],
            "allowed": [{"IPProtocol": "tcp", "ports": ["80"]}],
        },
    )
    route(compute, route_name(f"{CLUSTER}-2", str(uuid.uuid4())), "gone-vm", "10.65.0.0/24")
    route(compute, route_name(CLUSTER, str(uuid.uuid4())), "gone-vm", "10.66.0.0/24", "by hand")
    before = everything(compute)
    emulator.control.reset_calls()

    # Upstream's deny flags together are taken (main.go:105-106@v36.3.8; before: exit 2).
    deny_flags = ("--enable-l4-deny-firewall", "--enable-l4-deny-firewall-rollback-cleanup")
    listed = orphans(gce_conf, control_plane.kubeconfig, "-o", "json", *deny_flags)

    assert listed.status == 1, listed
    found = {(r["kind"], r["id"]) for r in listed_orphans(listed)}
    expected = pieces(leaked) | pieces(leaked_local, local=True) | {("route", leaked_route)}
    assert found == expected
    assert write_calls(emulator.control.calls()) == 0
    assert live_lb not in {name for _, name in found}

    deleted = orphans(gce_conf, control_plane.kubeconfig, "--delete", "--yes")

    assert deleted.status == 0, deleted
    assert everything(compute) == before - expected
    reported = {line for line in deleted.stdout.splitlines() if line.startswith("deleted ")}
    assert reported == {f"deleted {kind} {name}" for kind, name in expected}
    again = orphans(gce_conf, control_plane.kubeconfig)
    assert again.status == 0, again


# -- the capability itself -------------------------------------------------------------------------


@pytest.fixture
def provider(emulator: RunningEmulator) -> Any:
    built = gce_provider(emulator.endpoint)
    built._cluster_id = "cafe0123"  # what initialize reads from kube-system/ingress-uid
    emulator.api().create_instance("ops-a", tags=[TAG])
    return built


@pytest.fixture
def made(provider: Any, emulator: RunningEmulator) -> tuple[Service, str, set[tuple[str, str]]]:
    """Service web's load balancer, ensured by polyccm on ops-a: the service, the load
    balancer's name, and what the project held before."""
    web = service_for("web")
    before = everything(emulator.api())
    provider.load_balancer().ensure_load_balancer(CLUSTER, web, [node_for("ops-a")])
    return web, provider.load_balancer().get_load_balancer_name(CLUSTER, web), before


def test_the_shared_health_check_goes_with_the_last_load_balancer_that_used_it(
    provider: Any, emulator: RunningEmulator, made: tuple[Service, str, set[tuple[str, str]]]
) -> None:
    web, name, empty = made
    nodes = [node_for("ops-a")]

    kept = provider.orphans().find_orphans(CLUSTER, [web], nodes)
    found = orphan_tools.find(provider.orphans(), CLUSTER, [], nodes)

    assert kept == []
    assert [(r.kind, r.id, r.delete_order) for r in found] == [
        ("forwarding-rule", name, 0),
        ("target-pool", name, 1),
        ("firewall", "k8s-cafe0123-node-http-hc", 2),
        ("firewall", f"k8s-fw-{name}", 2),
        ("http-health-check", "k8s-cafe0123-node", 2),
    ]
    assert found[0].reason == "service default/web no longer exists"
    assert "health check k8s-cafe0123-node" in found[0].mark
    outcomes = orphan_tools.delete_all(provider.orphans(), CLUSTER, found)
    assert [o.error for o in outcomes] == [""] * 5
    assert everything(emulator.api()) == empty


def test_a_resource_that_lost_its_marks_since_it_was_listed_is_kept(
    provider: Any, emulator: RunningEmulator, made: tuple[Service, str, set[tuple[str, str]]]
) -> None:
    compute = emulator.api()
    _, name, _ = made
    nodes = [node_for("ops-a")]
    found = {(r.kind, r.id): r for r in provider.orphans().find_orphans(CLUSTER, [], nodes)}
    firewall = f"k8s-fw-{name}"
    compute.do("PATCH", f"global/firewalls/{firewall}", {"name": firewall, "description": "mine"})

    with pytest.raises(CloudError, match="no longer carries this cluster's marks"):
        provider.orphans().delete_orphan(CLUSTER, found["firewall", firewall])

    assert compute.get(f"global/firewalls/{firewall}")["description"] == "mine"
    rule = found["forwarding-rule", name]
    provider.orphans().delete_orphan(CLUSTER, rule)  # still marked: deleted
    provider.orphans().delete_orphan(CLUSTER, rule)  # already gone: fine
    assert ("forwarding-rule", name) not in everything(compute)


# -- internal load balancers and the deny firewall (issue 27) -------------------------------------

INTERNAL = {"networking.gke.io/load-balancer-type": "Internal"}


def with_internal(compute: ComputeApi) -> set[tuple[str, str]]:
    """:func:`everything` and the internal load balancers' pieces."""
    found = everything(compute)
    found |= {
        ("backend-service", b["name"])
        for b in compute.list_all(f"regions/{REGION}/backendServices")
    }
    found |= {("health-check", c["name"]) for c in compute.list_all("global/healthChecks")}
    found |= {
        ("instance-group", f"{ZONE}/{g['name']}")
        for g in compute.list_all(f"zones/{ZONE}/instanceGroups")
    }
    return found


def internal_pieces(name: str, *, local: bool = False) -> set[tuple[str, str]]:
    made = {("forwarding-rule", name), ("backend-service", name), ("firewall", f"k8s-fw-{name}")}
    if local:
        made |= {("health-check", name), ("firewall", f"{name}-hc")}
    return made


def leak_internal(compute: ComputeApi, cluster_id: str = "cafe0123") -> tuple[str, str]:
    """Two internal load balancers cloud-provider-gcp made (gce_loadbalancer_internal.go:59-272
    @v36.3.8) for Services deleted since: one Cluster, one Local."""
    ours = dict(cluster_id=cluster_id, instances=["ops-a"], tags=[TAG], firewall_ports=["80"])
    cluster = upstream_made.internal_load_balancer(
        compute, gone_service("ilb", annotations=INTERNAL), **ours
    )
    local = upstream_made.internal_load_balancer(
        compute,
        gone_service("ilb-local", annotations=INTERNAL, externalTrafficPolicy="Local",
                     healthCheckNodePort=31600),
        **ours,
    )  # fmt: skip
    return cluster, local


def test_a_deleted_services_internal_and_deny_pieces_are_found_and_deleted(
    provider: Any, emulator: RunningEmulator
) -> None:
    # Before: only the external pieces were listed; the backend services, the healthChecks
    # API's checks, the instance group, <lb>-hc, k8s-<cid>-node-hc and k8s-fw-<lb>-deny leaked.
    compute = emulator.api()
    compute.create_instance("other-vm", tags=["other-node"])
    # Another cluster's internal load balancer: none of this cluster's marks.
    theirs = upstream_made.internal_load_balancer(
        compute, gone_service("theirs", annotations=INTERNAL), cluster_id="othercluster",
        instances=["other-vm"], tags=["other-node"], firewall_ports=["80"],
    )  # fmt: skip
    before = with_internal(compute)
    cluster, local = leak_internal(compute)
    external = upstream_made.network_load_balancer(
        compute, gone_service("web"), cluster_id="cafe0123", instances=["ops-a"], tags=[TAG],
        firewall_ports=["80"], deny=True,
    )  # fmt: skip
    emulator.control.reset_calls()

    found = orphan_tools.find(provider.orphans(), CLUSTER, [], [node_for("ops-a")])

    assert {(r.kind, r.id) for r in found} == (
        internal_pieces(cluster) | internal_pieces(local, local=True) | pieces(external)
        | {("firewall", f"k8s-fw-{external}-deny"),
           ("instance-group", f"{ZONE}/k8s-ig--cafe0123"),
           ("health-check", "k8s-cafe0123-node"), ("firewall", "k8s-cafe0123-node-hc"),
           ("http-health-check", "k8s-cafe0123-node"),
           ("firewall", "k8s-cafe0123-node-http-hc")}
    )  # fmt: skip
    assert write_calls(emulator.control.calls()) == 0
    assert theirs not in {r.id for r in found}

    outcomes = orphan_tools.delete_all(provider.orphans(), CLUSTER, found)

    assert [o.error for o in outcomes] == [""] * len(found)
    assert with_internal(compute) == before


def test_a_live_internal_service_keeps_the_shared_pieces(
    provider: Any, emulator: RunningEmulator
) -> None:
    compute = emulator.api()
    cluster, local = leak_internal(compute)
    live = service_for("live", annotations=INTERNAL)
    live_lb = upstream_made.internal_load_balancer(
        compute, live, cluster_id="cafe0123", instances=["ops-a"], tags=[TAG],
        firewall_ports=["80"],
    )  # fmt: skip

    found = orphan_tools.find(provider.orphans(), CLUSTER, [live], [node_for("ops-a")])

    assert {(r.kind, r.id) for r in found} == (
        internal_pieces(cluster) | internal_pieces(local, local=True)
    )
    assert live_lb not in {r.id for r in found}
