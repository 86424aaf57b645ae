"""The GCE provider end to end: the real kube-apiserver, polyccm's controllers and the GCE
emulator together. What a user sees is asserted: initialised nodes with GCE's labels and
providerIDs, a route per node with NetworkUnavailable flipped, a load balancer served and
deleted without leftovers, and the internal load balancer refused with a Warning event."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from polyccm.kube.api import NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_gce_emulator.testing import (
    CLUSTER,
    PROJECT,
    REGION,
    ZONE,
    RunningEmulator,
    emulator_thread,
    gce_provider,
)
from polyccm_testing.demo import service_gone
from polyccm_testing.kubeobjects import ingress_ip, make_node, make_service, wait_for
from polyccm_testing.manager import RunningManager, manager_options, start_manager


@pytest.fixture
def gce() -> Iterator[RunningEmulator]:
    with emulator_thread() as running:
        yield running


@pytest.fixture
def manager(
    control_plane: Any, clean_nodes: None, gce: RunningEmulator
) -> Iterator[Callable[..., None]]:
    running: list[RunningManager] = []

    def start(**overrides: Any) -> None:
        options = manager_options(
            "gce",
            control_plane.kubeconfig,
            cluster_name=CLUSTER,
            configure_cloud_routes=False,
            node_monitor_period=1.0,
        )
        provider = gce_provider(gce.endpoint)
        running.append(start_manager(dataclasses.replace(options, **overrides), provider))

    yield start
    for handle in running:
        handle.stop()


def network_condition(api: KubeApi, name: str) -> tuple[str, str] | None:
    for condition in Node(api.get(NODES, name)).raw["status"].get("conditions") or ():
        if condition["type"] == "NetworkUnavailable":
            return str(condition["status"]), str(condition["reason"])
    return None


def test_nodes_routes_and_a_load_balancer_through_the_whole_stack(
    kube_api: KubeApi, namespace: str, gce: RunningEmulator, manager: Callable[..., None]
) -> None:
    compute = gce.api()
    names = ["gce-e2e-a", "gce-e2e-b"]
    for name in names:
        compute.create_instance(name, machine_type="n2-standard-2", tags=["gce-e2e"])
        make_node(kube_api, name)  # as a kubelet registers it: tainted, no providerID
    manager(configure_cloud_routes=True, cluster_cidrs=("100.64.0.0/16",))

    def initialised() -> list[Node] | None:
        nodes = [Node(kube_api.get(NODES, n)) for n in names]
        ok = all(not n.has_taint(UNINITIALIZED_TAINT) and n.addresses for n in nodes)
        return nodes if ok else None

    nodes = wait_for(initialised, what="both nodes initialised")
    assert nodes[0].provider_id == f"gce://{PROJECT}/{ZONE}/gce-e2e-a"
    assert nodes[1].labels["topology.kubernetes.io/zone"] == ZONE
    assert nodes[1].labels["topology.kubernetes.io/region"] == REGION
    assert nodes[1].labels["node.kubernetes.io/instance-type"] == "n2-standard-2"
    # No NetworkUnavailable until the route controller has a pod CIDR to route (upstream's
    # cloud-node controller sets none since kubernetes c11e2ae).
    assert network_condition(kube_api, names[0]) is None

    for index, name in enumerate(names):
        cidr = f"100.64.{index + 1}.0/24"
        kube_api.patch(NODES, name, {"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}})
    for name in names:
        wait_for(
            lambda name=name: network_condition(kube_api, name) == ("False", "RouteCreated"),
            what=f"{name}'s network available",
        )
    routes = compute.list_all("global/routes", filter='description = "k8s-node-route"')
    assert sorted((r["destRange"], r["nextHopInstance"].rsplit("/", 1)[-1]) for r in routes) == [
        ("100.64.1.0/24", "gce-e2e-a"),
        ("100.64.2.0/24", "gce-e2e-b"),
    ]

    service = make_service(kube_api, namespace, "web")
    lb_name = ("a" + service["metadata"]["uid"].replace("-", ""))[:32]
    ip = wait_for(lambda: ingress_ip(kube_api, namespace, "web"), what="the LB's address")
    rule = compute.get(f"regions/{REGION}/forwardingRules/{lb_name}")
    assert rule["IPAddress"] == ip
    pool = compute.get(f"regions/{REGION}/targetPools/{lb_name}")
    assert {url.rsplit("/", 1)[-1] for url in pool["instances"]} == set(names)

    kube_api.delete(SERVICES, "web", namespace)
    wait_for(lambda: service_gone(kube_api, namespace, "web"), what="service finalised")
    assert compute.list_all(f"regions/{REGION}/forwardingRules") == []
    assert compute.list_all(f"regions/{REGION}/targetPools") == []
    assert compute.list_all("global/httpHealthChecks") == []
    assert not [f for f in compute.list_all("global/firewalls") if f["name"].startswith("k8s-")]


def test_an_internal_load_balancer_is_served_and_deleted_with_its_finalizer(
    kube_api: KubeApi, namespace: str, gce: RunningEmulator, manager: Callable[..., None]
) -> None:
    # cloud-provider-gcp v36.3.8 gce_loadbalancer.go:199-201 (the internal scheme) and
    # gce_loadbalancer_internal.go (the l4-ilb-v1 finalizer, the INTERNAL rule on the subnet,
    # the backend service): served end to end, and nothing left after deletion.
    gce.api().create_instance("gce-e2e-c", tags=["gce-e2e"])
    make_node(kube_api, "gce-e2e-c")
    manager()

    def internal(body: dict[str, Any]) -> None:
        body["metadata"]["annotations"]["networking.gke.io/load-balancer-type"] = "Internal"

    make_service(kube_api, namespace, "internal", internal)
    ip = wait_for(lambda: ingress_ip(kube_api, namespace, "internal"), what="the ILB's address")
    service = kube_api.get(SERVICES, "internal", namespace=namespace)
    assert "gke.networking.io/l4-ilb-v1" in service["metadata"]["finalizers"]
    (rule,) = gce.api().list_all(f"regions/{REGION}/forwardingRules")
    assert (rule["loadBalancingScheme"], rule["IPAddress"]) == ("INTERNAL", ip)
    assert gce.api().list_all(f"regions/{REGION}/backendServices") != []

    kube_api.delete(SERVICES, "internal", namespace=namespace)
    wait_for(lambda: service_gone(kube_api, namespace, "internal"), what="service finalised")
    assert gce.api().list_all(f"regions/{REGION}/forwardingRules") == []
    assert gce.api().list_all(f"regions/{REGION}/backendServices") == []


@pytest.mark.timeout(240)
def test_make_demo_provider_gce_shows_nodes_routes_and_a_load_balancer() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "polyccm_gce_emulator.demo"],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    nodes = re.findall(
        r"^demo-node-\d\s+gce://polyccm-dev/(us-central1-[ab])/demo-node-\d\s+\S+\s+(\S+)\s+"
        r"InternalIP=",
        out,
        re.MULTILINE,
    )
    assert {zone for zone, _ in nodes} == {"us-central1-a", "us-central1-b"}, out
    assert len(nodes) == 3, out
    routes = re.findall(
        r"^demo-[0-9a-f-]{36}\s+10\.64\.\d\.0/24\s+\S+/instances/demo-node-\d\s+1000",
        out,
        re.MULTILINE,
    )
    assert len(routes) == 3, out
    assert re.search(r"ingress\[0\]\.ip = \d+\.\d+\.\d+\.\d+", out), out
    assert "load-balancer resources left in the cloud: 0" in out
    assert "Traceback" not in result.stderr
