"""``METAL_LOAD_BALANCER``'s modes and the nodes BGP reaches, as upstream has them (metal/
loadbalancers.go, cloud.go at 38d15e2): unset, no load balancing; ``empty://``, Elastic IPs with
BGP sessions and peers but no speaker configured; sessions only for the nodes the service
controller gives load balancers that ``bgpNodeSelector`` matches, and only once a Service wants
a load balancer."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from polyccm.kube.api import MERGE_PATCH, NODES, SERVICES, KubeApi
from polyccm.objects import Service
from polyccm_packet.bgp import BgpController
from polyccm_packet_emulator.demo import bgp_peers
from polyccm_packet_emulator.testing import (
    MetalApi,
    MetalCloudUnderTest,
    control,
    provider_for,
)
from polyccm_testing.controllers import provider_controllers
from polyccm_testing.demo import running_polyccm
from polyccm_testing.kubeobjects import make_node, make_service, stays, wait_for

EXCLUDE = "node.kubernetes.io/exclude-from-external-load-balancers"


def node_for(kube_api: KubeApi, device: Mapping[str, Any], **labels: str) -> str:
    name = str(device["hostname"])
    make_node(kube_api, name, tainted=False, provider_id=f"equinixmetal://{device['id']}",
              labels=dict(labels))  # fmt: skip
    return name


def sessions(metal: MetalApi, device: Mapping[str, Any]) -> list[Any]:
    found: list[Any] = metal.ok("GET", f"/devices/{device['id']}/bgp/sessions")["bgp_sessions"]
    return found


def ingress(kube_api: KubeApi, namespace: str, name: str) -> list[Any]:
    found: list[Any] = (
        kube_api.get(SERVICES, name, namespace).get("status", {}).get("loadBalancer", {})
    ).get("ingress") or []
    return found


@pytest.mark.timeout(120)
def test_without_a_load_balancer_setting_no_service_gets_an_elastic_ip(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # loadbalancers.go:64-68@38d15e2: no loadbalancer setting, newLoadBalancers returns nil;
    # cloud.go:112-114 then answers LoadBalancer() false, so the service controller never
    # runs: no Elastic IP is reserved (and billed) for any Service. Before, polyccm reserved
    # one for every LoadBalancer Service.
    monkeypatch.delenv("METAL_LOAD_BALANCER")
    api = MetalApi(metal)
    (device,) = api.create_devices(1, prefix="off")
    name = str(device["hostname"])
    make_node(kube_api, name)
    make_service(kube_api, namespace, "web")
    cloud = MetalCloudUnderTest(metal)

    with running_polyccm("packet", state=tmp_path, env={}, kubeconfig=control_plane.kubeconfig):
        # the node controllers run (the node gets its device), the service controller does not
        wait_for(lambda: kube_api.get(NODES, name)["spec"].get("providerID"), 60, "the node")
        assert stays(lambda: cloud.elastic_ips() == [] and not ingress(kube_api, namespace, "web"))
    assert Service(kube_api.get(SERVICES, "web", namespace)).finalizers == ()
    assert sessions(api, device) == [] and not bgp_peers(kube_api.get(NODES, name))


@pytest.mark.timeout(120)
def test_empty_mode_reserves_elastic_ips_and_peers_the_nodes(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    namespace: str,
) -> None:  # fmt: skip
    # loadbalancers.go:93-95@38d15e2: empty:// is "bgp only": addService (:391-529) reserves
    # the Elastic IP and, for every node, makes its session (bgp.go:74-95) and writes its peer
    # annotations (loadbalancers.go:303-390); the empty implementor (empty/empty.go) then does
    # nothing. Before, polyccm's BGP controller did not start in this mode.
    api = MetalApi(metal)
    devices = api.create_devices(2, prefix="bgponly")
    names = [node_for(kube_api, device) for device in devices]
    make_service(kube_api, namespace, "web")
    provider = provider_for(metal, METAL_LOAD_BALANCER="empty://")

    with provider_controllers(kube_api, provider, BgpController.for_term):
        wait_for(lambda: all(bgp_peers(kube_api.get(NODES, n)) for n in names), 30, "peers")
    status = provider.load_balancer().ensure_load_balancer(
        "kubernetes", Service(kube_api.get(SERVICES, "web", namespace)), []
    )

    assert [len(sessions(api, device)) for device in devices] == [1, 1]
    (reserved,) = MetalCloudUnderTest(metal).elastic_ips()
    assert status.ingress[0].ip == reserved["address"]


@pytest.mark.timeout(120)
def test_bgp_node_selector_and_the_exclude_label_limit_sessions_and_peers(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    namespace: str,
) -> None:  # fmt: skip
    # loadbalancers.go:57-60,187,228,651-661@38d15e2: the nodes the service controller gives
    # (its nodeIncludedPredicate drops the exclude label: k8s.io/cloud-provider
    # controllers/service/controller.go:1014-1025@v0.35.4) filtered by bgpNodeSelector are
    # the only ones given a session and peer annotations. Before, every node got both.
    api = MetalApi(metal)
    chosen, excluded, other = api.create_devices(3, prefix="select")
    names = [
        node_for(kube_api, chosen, bgp="yes"),
        node_for(kube_api, excluded, bgp="yes", **{EXCLUDE: "true"}),
        node_for(kube_api, other),
    ]
    make_service(kube_api, namespace, "web")
    provider = provider_for(metal, METAL_LOAD_BALANCER="kube-vip://",
                            METAL_BGP_NODE_SELECTOR="bgp in (yes)")  # fmt: skip

    with provider_controllers(kube_api, provider, BgpController.for_term):
        wait_for(lambda: bgp_peers(kube_api.get(NODES, names[0])), 30, "the chosen node peered")
        assert stays(lambda: not any(bgp_peers(kube_api.get(NODES, n)) for n in names[1:]), 1.5)
        assert [len(sessions(api, d)) for d in (chosen, excluded, other)] == [1, 0, 0]

        # a label that selects the node brings it in
        kube_api.patch(NODES, names[2], {"metadata": {"labels": {"bgp": "yes"}}},
                       patch_type=MERGE_PATCH)  # fmt: skip
        wait_for(lambda: bgp_peers(kube_api.get(NODES, names[2])), 30, "the newly chosen node")
    assert [len(sessions(api, d)) for d in (chosen, excluded, other)] == [1, 0, 1]


@pytest.mark.timeout(120)
def test_sessions_wait_for_a_service_that_wants_a_load_balancer(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    namespace: str,
) -> None:  # fmt: skip
    # upstream makes sessions and peers only inside addService / UpdateLoadBalancer
    # (loadbalancers.go:220-262,512-529@38d15e2), i.e. for a Service the service controller
    # reconciles: none while the cluster has no LoadBalancer Service (a ClusterIP Service, or
    # one of another loadBalancerClass, is not one). Before, every node was peered at once.
    api = MetalApi(metal)
    (device,) = api.create_devices(1, prefix="waits")
    name = node_for(kube_api, device)
    make_service(kube_api, namespace, "internal", lambda s: s["spec"].update(type="ClusterIP"))
    make_service(kube_api, namespace, "elsewhere",
                 lambda s: s["spec"].update(loadBalancerClass="example.com/other"))  # fmt: skip
    provider = provider_for(metal, METAL_LOAD_BALANCER="kube-vip://")
    calls = control(metal)
    calls.reset_calls()

    with provider_controllers(kube_api, provider, BgpController.for_term):
        assert stays(lambda: not bgp_peers(kube_api.get(NODES, name)), 2.5)
        assert calls.calls() == {} and sessions(api, device) == []

        make_service(kube_api, namespace, "web")
        wait_for(lambda: bgp_peers(kube_api.get(NODES, name)), 30, "the node peered")
    assert len(sessions(api, device)) == 1


@pytest.mark.timeout(60)
def test_bgp_is_enabled_on_the_project_only_once_bgp_has_work_a_deliberate_difference(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    namespace: str,
) -> None:  # fmt: skip
    # Upstream enables BGP on the project in Initialize, in every mode, load balancing off
    # included, and stops the process when it cannot (cloud.go:91-94, bgp.go:22-36 and
    # enableBGP bgp.go:40-75 @38d15e2). polyccm enables it with the first BGP work: in a BGP
    # mode once a Service wants a load balancer, never with load balancing off. A switch from
    # upstream finds BGP already enabled (upstream did it at its start) and polyccm never
    # disables it, so the project is the same either way; only a fresh project without BGP
    # work stays without BGP, and a key that may not enable BGP does not stop node work.
    api = MetalApi(metal)

    def project_bgp() -> Any:
        return api.ok("GET", f"/projects/{api.project_id}/bgp-config")

    off = provider_for(metal, METAL_LOAD_BALANCER="")
    assert BgpController.for_term(SimpleNamespace(provider=off)) is None  # type: ignore[arg-type]

    (device,) = api.create_devices(1, prefix="bgp-on")
    name = node_for(kube_api, device)
    provider = provider_for(metal, METAL_LOAD_BALANCER="kube-vip://")
    with provider_controllers(kube_api, provider, BgpController.for_term):
        assert stays(lambda: project_bgp() == {}, 2.0)
        make_service(kube_api, namespace, "web")
        wait_for(lambda: bgp_peers(kube_api.get(NODES, name)), 30, "the node peered")
    assert project_bgp()["status"] == "enabled"
