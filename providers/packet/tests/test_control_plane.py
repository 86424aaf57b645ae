"""``eipTag``: the control plane's Elastic IP kept on a control-plane node that answers
``/healthz``, and ``kube-system/cloud-provider-equinix-metal-kubernetes-external`` (Service and
EndpointSlice) kept in step with ``default/kubernetes``, as upstream's controlPlaneEndpointManager
(metal/eip_controlplane_reconciliation.go at 38d15e2). Health checks reach loopback servers only
(the test's kube-apiserver answers ``/healthz`` on 127.0.0.1; nothing listens on 127.0.0.3)."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import pytest
from polyccm.kube.api import MERGE_PATCH, NODES, SERVICES, ApiError, KubeApi
from polyccm_packet.control_plane import (
    ENDPOINT_SLICES,
    EXTERNAL_NAME,
    ControlPlaneEndpoint,
    health_check,
)
from polyccm_packet_emulator.testing import MetalApi, provider_for
from polyccm_testing.controllers import provider_controllers
from polyccm_testing.kubeobjects import make_node, stays, wait_for

TAG = "cluster-api-provider-packet:cluster-id:c1"
CONTROL_PLANE = {"node-role.kubernetes.io/control-plane": ""}


@pytest.fixture
def external(kube_api: KubeApi) -> Iterator[None]:
    """No external Service or EndpointSlice before or after the test."""

    def clean() -> None:
        for resource in (SERVICES, ENDPOINT_SLICES):
            with contextlib.suppress(ApiError):
                kube_api.delete(resource, EXTERNAL_NAME, "kube-system")

    clean()
    yield
    clean()


@pytest.fixture
def kubernetes_slice(kube_api: KubeApi) -> Iterator[dict[str, Any]]:
    """``default/kubernetes``'s EndpointSlice, as kube-apiserver's endpoint reconciler writes
    it (the test's API server has none); its addresses are data only (documentation range: an
    EndpointSlice refuses loopback ones), never contacted."""
    with contextlib.suppress(ApiError):
        kube_api.delete(ENDPOINT_SLICES, "kubernetes", "default")
    port = kube_api.get(SERVICES, "kubernetes", "default")["spec"]["ports"][0]["targetPort"]
    made = kube_api.create(ENDPOINT_SLICES, {
        "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.0.2.10"], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }, "default")  # fmt: skip
    yield made
    with contextlib.suppress(ApiError):
        kube_api.delete(ENDPOINT_SLICES, "kubernetes", "default")


def assigned_to(metal: MetalApi, reservation_id: str) -> list[str]:
    """The device ids the reservation is assigned to."""
    found = metal.ok("GET", f"/projects/{metal.project_id}/ips?include=assignments")
    (reservation,) = [r for r in found["ip_addresses"] if r["id"] == reservation_id]
    return [a["assigned_to"]["href"].rsplit("/", 1)[-1] for a in reservation["assignments"]]


def loopback_checks(controller: ControlPlaneEndpoint) -> list[str]:
    """Point the controller's health checks at loopback addresses only: any other URL is
    recorded (and fails) instead of being asked."""
    elsewhere: list[str] = []

    def check(url: str) -> bool:
        if not ipaddress.ip_address(urlsplit(url).hostname or "").is_loopback:
            elsewhere.append(url)
            return False
        return health_check(url)

    controller.healthy = check
    return elsewhere


@pytest.mark.timeout(120)
def test_the_external_service_and_endpointslice_follow_default_kubernetes(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    external: None, kubernetes_slice: dict[str, Any],
) -> None:  # fmt: skip
    # eip_controlplane_reconciliation.go:502-556 (syncService: the first port's targetPort,
    # the Service applied with the EIP and MetalLB's disabled pool, its status the EIP) and
    # 436-500 (syncEndpoints) @38d15e2; ssa-helpers.go:99-118 (the ports copied). Before,
    # polyccm ignored eipTag and made neither.
    api = MetalApi(metal)
    eip = api.request_ip(tags=[TAG])["address"]
    kubernetes = kube_api.get(SERVICES, "kubernetes", "default")
    (port,) = kubernetes["spec"]["ports"]
    provider = provider_for(metal, METAL_EIP_TAG=TAG)

    with provider_controllers(kube_api, provider, ControlPlaneEndpoint.for_term):
        service = wait_for(lambda: _get(kube_api, SERVICES, EXTERNAL_NAME), 30, "the Service")
        wait_for(lambda: _get(kube_api, SERVICES, EXTERNAL_NAME).get("status", {})
                 .get("loadBalancer", {}).get("ingress"), 30, "its status")  # fmt: skip
        found = wait_for(lambda: _get(kube_api, ENDPOINT_SLICES, EXTERNAL_NAME), 30, "the slice")
        # a change of the API servers' endpoints follows
        kube_api.patch(ENDPOINT_SLICES, "kubernetes", {"endpoints": [
            {"addresses": ["192.0.2.10"], "conditions": {"ready": True}},
            {"addresses": ["192.0.2.11"], "conditions": {"ready": False}},
        ]}, "default", patch_type=MERGE_PATCH)  # fmt: skip
        wait_for(lambda: len(_get(kube_api, ENDPOINT_SLICES, EXTERNAL_NAME)["endpoints"]) == 2,
                 30, "the second endpoint")  # fmt: skip
    service = _get(kube_api, SERVICES, EXTERNAL_NAME)
    found = _get(kube_api, ENDPOINT_SLICES, EXTERNAL_NAME)

    assert service["metadata"]["annotations"]["metallb.universe.tf/address-pool"] == (
        "disabled-metallb-do-not-use-any-address-pool"
    )
    assert (service["spec"]["type"], service["spec"]["loadBalancerIP"]) == ("LoadBalancer", eip)
    assert [(p["name"], p["port"], p["protocol"], p["targetPort"])
            for p in service["spec"]["ports"]] == [
        (port["name"], port["port"], port["protocol"], port["targetPort"])
    ]  # fmt: skip
    # (the API server defaults ipMode to VIP)
    assert [i["ip"] for i in service["status"]["loadBalancer"]["ingress"]] == [eip]
    source = kube_api.get(ENDPOINT_SLICES, "kubernetes", "default")
    assert found["metadata"]["labels"]["kubernetes.io/service-name"] == EXTERNAL_NAME
    assert [(e["addresses"], e["conditions"]["ready"]) for e in found["endpoints"]] == [
        (e["addresses"], e["conditions"]["ready"]) for e in source["endpoints"]
    ]
    assert [(p["name"], p["port"]) for p in found["ports"]] == [
        (p["name"], p["port"]) for p in source["ports"]
    ]


@pytest.mark.timeout(120)
def test_the_elastic_ip_moves_from_an_unhealthy_control_plane_node_to_a_healthy_one(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    external: None,
) -> None:  # fmt: skip
    # eip_controlplane_reconciliation.go:558-626 (doHealthCheck: the node holding the EIP is
    # checked, through its own ExternalIP with eipHealthCheckUseHostIP, and the EIP reassigned
    # when it fails), 232-292 (reassign: the first control-plane node one of whose addresses
    # answers /healthz 200; the old assignment deleted, a new one created), 408-430
    # (tryReassign: control-plane labels, no deleting nodes, schedulable first) @38d15e2.
    # Before, polyccm left the EIP on the dead node: the cluster's API endpoint was down.
    api = MetalApi(metal)
    reservation = api.request_ip(tags=[TAG])
    eip = reservation["address"]
    dead, alive, worker = api.create_devices(3, prefix="cp")
    api.ok("POST", f"/devices/{dead['id']}/ips", {"address": eip})
    make_node(
        kube_api,
        "cp-dead",
        tainted=False,
        provider_id=f"equinixmetal://{dead['id']}",
        labels=CONTROL_PLANE,
        addresses=(("ExternalIP", "127.0.0.3"), ("ExternalIP", eip)),
    )
    # a worker answers too, but is no control-plane node: never a candidate
    make_node(
        kube_api,
        "worker",
        tainted=False,
        provider_id=f"equinixmetal://{worker['id']}",
        addresses=(("InternalIP", "127.0.0.1"),),
    )
    make_node(kube_api, "cp-alive", tainted=False, provider_id=f"equinixmetal://{alive['id']}",
              labels=CONTROL_PLANE, addresses=(("ExternalIP", "127.0.0.1"),))  # fmt: skip
    provider = provider_for(metal, METAL_EIP_TAG=TAG, METAL_EIP_HEALTH_CHECK_USE_HOST_IP="true")

    with provider_controllers(kube_api, provider, ControlPlaneEndpoint.for_term) as (cp,):
        elsewhere = loopback_checks(cp)
        wait_for(lambda: _get(kube_api, SERVICES, EXTERNAL_NAME), 30, "the ports known")
        # a node update (a heartbeat) runs the health check, as upstream's UpdateFunc
        _beat(kube_api, "cp-dead")
        wait_for(lambda: assigned_to(api, reservation["id"]) == [alive["id"]], 30, "moved")

        # the node holding it answers (checked at its own ExternalIP): it stays
        kube_api.patch(NODES, "cp-alive", {"status": {"addresses": [
            {"type": "ExternalIP", "address": "127.0.0.1"}, {"type": "ExternalIP", "address": eip},
        ]}}, subresource="status", patch_type=MERGE_PATCH)  # fmt: skip
        _beat(kube_api, "cp-alive")
        assert stays(lambda: assigned_to(api, reservation["id"]) == [alive["id"]], 2.0)
    assert elsewhere == []


def _beat(kube_api: KubeApi, name: str) -> None:
    kube_api.patch(NODES, name, {"metadata": {"annotations": {"beat": _beat.__name__ + name}}},
                   patch_type=MERGE_PATCH)  # fmt: skip
    kube_api.patch(NODES, name, {"metadata": {"annotations": {"beat": None}}},
                   patch_type=MERGE_PATCH)  # fmt: skip


def _get(kube_api: KubeApi, resource: Any, name: str) -> dict[str, Any]:
    try:
        found: dict[str, Any] = kube_api.get(resource, name, "kube-system")
    except ApiError:
        return {}
    return found


@pytest.mark.timeout(120)
def test_a_node_cordoned_or_deleted_gives_the_elastic_ip_away(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    external: None,
) -> None:  # fmt: skip
    # eip_controlplane_reconciliation.go:129-133 (a node that becomes unschedulable) and
    # 141-148 (a deleted node) call tryReassignAwayFromSelf (381-405): the holder leaves the
    # candidates unless it is the only one, schedulable nodes first (362-377) @38d15e2.
    # Before, a drained control-plane node kept the cluster's API address.
    api = MetalApi(metal)
    reservation = api.request_ip(tags=[TAG])
    eip = reservation["address"]
    first, second = api.create_devices(2, prefix="cp")
    api.ok("POST", f"/devices/{first['id']}/ips", {"address": eip})
    for name, device in (("cp-first", first), ("cp-second", second)):
        make_node(kube_api, name, tainted=False, provider_id=f"equinixmetal://{device['id']}",
                  labels=CONTROL_PLANE, addresses=(("ExternalIP", "127.0.0.1"),))  # fmt: skip
    provider = provider_for(metal, METAL_EIP_TAG=TAG, METAL_EIP_HEALTH_CHECK_USE_HOST_IP="true")

    with provider_controllers(kube_api, provider, ControlPlaneEndpoint.for_term) as (cp,):
        elsewhere = loopback_checks(cp)
        wait_for(lambda: _get(kube_api, SERVICES, EXTERNAL_NAME), 30, "the ports known")
        _beat(kube_api, "cp-first")  # healthy: it keeps the address
        assert stays(lambda: assigned_to(api, reservation["id"]) == [first["id"]], 1.5)

        kube_api.patch(NODES, "cp-first", {"spec": {"unschedulable": True}},
                       patch_type=MERGE_PATCH)  # fmt: skip
        wait_for(lambda: assigned_to(api, reservation["id"]) == [second["id"]], 30, "cordoned")

        # the holder deleted: the cordoned node is the only one left, and answers
        kube_api.delete(NODES, "cp-second")
        wait_for(lambda: assigned_to(api, reservation["id"]) == [first["id"]], 30, "deleted")
    assert elsewhere == []
