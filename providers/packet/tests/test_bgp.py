"""``packet-bgp`` against the real API server and the Metal emulator: each node's device gets
its session and the node its peers once; after that, node updates cost Metal nothing, and a
pass repairs what changed in Metal (a deleted session) with one read for every node."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from polyccm.kube.api import MERGE_PATCH, NODES, KubeApi
from polyccm_packet.bgp import (
    ANNOTATION_PREFIX,
    NETWORK_ANNOTATION,
    BgpController,
    peer_annotations,
)
from polyccm_packet_emulator.demo import bgp_peers
from polyccm_packet_emulator.testing import MetalApi, control, provider_for
from polyccm_testing.controllers import provider_controllers
from polyccm_testing.kubeobjects import events_for, make_node, make_service, wait_for

PASSWORD = "BgpMd5Pass7"


@dataclass(frozen=True)
class KubeVipPeering:
    node_asn: int
    source: str
    peer_asn: int
    peers: list[str]
    password: str


def kube_vip_reads(annotations: Mapping[str, str], prefix: str = "metal.equinix.com") -> Any:
    """What kube-vip's speaker makes of a node's annotations, by its rule (kube-vip/kube-vip
    pkg/manager/watch_annotations.go:140-229 at bee5cfe, v1.2.3+24): the ASNs and source of
    ``bgp-peers-0-``, every ``bgp-peers-N-peer-ip``, and ``bgp-peers-0-bgp-pass`` decoded by
    Go's base64.StdEncoding, which fails (and the speaker with it) on anything not base64."""

    def first(field: str) -> str:
        pattern = re.compile(rf"^{re.escape(prefix)}/(bgp-peers-0-)?{field}$")
        return next((v for k, v in annotations.items() if pattern.match(k)), "")

    ips = re.compile(rf"^{re.escape(prefix)}/(bgp-peers-[0-9]+-)?peer-ip$")
    encoded = first("bgp-pass")
    return KubeVipPeering(
        node_asn=int(first("node-asn")),
        source=first("src-ip"),
        peer_asn=int(first("peer-asn")),
        peers=sorted(v for k, v in annotations.items() if ips.match(k)),
        password=base64.b64decode(encoded, validate=True).decode() if encoded else "",
    )


def peered(kube_api: KubeApi, names: list[str]) -> bool:
    return all(bgp_peers(kube_api.get(NODES, name)) for name in names)


def devices_with_nodes(
    metal: Mapping[str, str], kube_api: KubeApi, count: int, prefix: str, *, tainted: bool = True
) -> list[dict[str, Any]]:
    """``count`` devices made through the API, each with its node (providerID set)."""
    devices: list[dict[str, Any]] = MetalApi(metal).create_devices(count, prefix=prefix)
    for device in devices:
        make_node(kube_api, device["hostname"], tainted=tainted,
                  provider_id=f"equinixmetal://{device['id']}")  # fmt: skip
    return devices


def sessions(metal: MetalApi, device_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = metal.ok("GET", f"/devices/{device_id}/bgp/sessions")[
        "bgp_sessions"
    ]
    return found


@pytest.mark.timeout(120)
def test_sessions_and_peers_are_made_once_and_a_pass_repairs_a_deleted_session(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    namespace: str,
) -> None:  # fmt: skip
    api = MetalApi(metal)
    make_service(kube_api, namespace, "web")  # sessions follow load balancers, as upstream
    devices = devices_with_nodes(metal, kube_api, 3, "bgp")
    names = [str(d["hostname"]) for d in devices]
    provider = provider_for(metal, METAL_LOAD_BALANCER="kube-vip://", METAL_BGP_PASS=PASSWORD)
    calls = control(metal)
    calls.reset_calls()

    with provider_controllers(kube_api, provider, BgpController.for_term) as (bgp,):
        wait_for(lambda: peered(kube_api, names), 30, "every node peered")
        made = calls.calls()
        assert made["createBgpSession"] == 3 and made["getBgpNeighborData"] == 3, made
        assert made["requestBgpConfig"] == 1
        peers = bgp_peers(kube_api.get(NODES, names[0]))
        # the private network's CIDR, as upstream (metal/loadbalancers.go:320-335, 631-652
        # @38d15e2) writes it for the speakers
        device = api.ok("GET", f"/devices/{devices[0]['id']}?include=ip_addresses.parent_block")
        block = next(ip["parent_block"] for ip in device["ip_addresses"]
                     if not ip["public"] and ip["address_family"] == 4)  # fmt: skip
        annotations = kube_api.get(NODES, names[0])["metadata"]["annotations"]
        assert annotations[NETWORK_ANNOTATION] == f"{block['network']}/{block['cidr']}"
        # base64, as upstream writes it (metal/loadbalancers.go:348@38d15e2) and kube-vip
        # decodes it: a plain password failed kube-vip's decoding, and every session with it
        assert kube_vip_reads(peers).password == PASSWORD

        # Heartbeats and label changes of peered nodes ask Metal nothing.
        calls.reset_calls()
        for name in names:
            kube_api.patch(NODES, name, {"metadata": {"labels": {"beat": "1"}}},
                           patch_type=MERGE_PATCH)  # fmt: skip
        time.sleep(1.5)
        assert calls.calls() == {}

        # Annotations someone removed come back, read from Metal; no session is made.
        removed = {k: None for k in bgp_peers(kube_api.get(NODES, names[1]))}
        kube_api.patch(NODES, names[1], {"metadata": {"annotations": removed}},
                       patch_type=MERGE_PATCH)  # fmt: skip
        wait_for(lambda: peered(kube_api, names), 30, "peers back")
        assert calls.calls() == {"findBgpConfigByProject": 1, "getBgpNeighborData": 1}

        # A session deleted in Metal is made again by the next pass: one read for all nodes.
        (session,) = sessions(api, devices[2]["id"])
        api.ok("DELETE", f"/bgp/sessions/{session['id']}")
        calls.reset_calls()
        bgp.enqueue_all()
        wait_for(lambda: calls.calls().get("getBgpNeighborData"), 30, "the pass")
        time.sleep(0.5)
        assert calls.calls() == {
            "findBgpConfigByProject": 1, "createBgpSession": 1, "getBgpNeighborData": 1,
        }  # fmt: skip
        (remade,) = sessions(api, devices[2]["id"])
        # a node whose session went away gets an Event naming the new one (a new node's first
        # session is only logged: a burst's would crowd other Events out)
        wait_for(
            lambda: ("Normal", "BGPSessionCreated",
                     f"BGP session {remade['id']} created for device {devices[2]['id']}")
            in events_for(kube_api, "default", names[2]),
            10, "the BGPSessionCreated event",
        )  # fmt: skip
        assert not any(
            r == "BGPSessionCreated" for _, r, _ in events_for(kube_api, "default", names[0])
        )


@pytest.mark.timeout(120)
def test_a_burst_reads_its_devices_private_networks_in_one_listing(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    namespace: str,
) -> None:  # fmt: skip
    # Upstream reads each node's device for its private network (getNodePrivateNetwork:
    # findDeviceById with include ip_addresses.parent_block, metal/loadbalancers.go:632-652
    # @38d15e2), a third request per new node beside its session and its neighbours. The
    # project's device listing takes the same include (findProjectDevices, `include`,
    # shared/specs/equinix-metal-openapi3.yaml:14618): a burst's networks are its pages.
    api = MetalApi(metal)
    make_service(kube_api, namespace, "web")
    devices = devices_with_nodes(metal, kube_api, 6, "net", tainted=False)
    provider = provider_for(metal, METAL_LOAD_BALANCER="kube-vip://")
    calls = control(metal)
    calls.reset_calls()

    with provider_controllers(kube_api, provider, BgpController.for_term):
        names = [str(d["hostname"]) for d in devices]
        wait_for(lambda: peered(kube_api, names), 30, "every node peered")
        time.sleep(0.5)
        made = calls.calls()
        assert made.get("findDeviceById", 0) == 0, made
        assert made["findProjectDevices"] == 1, made
        assert made["createBgpSession"] == 6 and made["getBgpNeighborData"] == 6, made
        for device in devices:
            read = api.ok("GET", f"/devices/{device['id']}?include=ip_addresses.parent_block")
            block = next(ip["parent_block"] for ip in read["ip_addresses"]
                         if not ip["public"] and ip["address_family"] == 4)  # fmt: skip
            annotations = kube_api.get(NODES, str(device["hostname"]))["metadata"]["annotations"]
            assert annotations[NETWORK_ANNOTATION] == f"{block['network']}/{block['cidr']}"


@pytest.mark.timeout(120)
def test_a_node_initialisation_burst_goes_first(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    namespace: str,
) -> None:  # fmt: skip
    api = MetalApi(metal)
    make_service(kube_api, namespace, "web")
    (device,) = api.create_devices(1, prefix="first")
    provider = provider_for(metal, METAL_LOAD_BALANCER="kube-vip://")
    calls = control(metal)
    calls.reset_calls()
    # another node of the burst still waits for its device (the taint is still on)
    make_node(kube_api, "still-initialising")

    with provider_controllers(kube_api, provider, BgpController.for_term):
        make_node(kube_api, device["hostname"], tainted=False,
                  provider_id=f"equinixmetal://{device['id']}")  # fmt: skip
        time.sleep(2.5)
        assert calls.calls() == {}, "BGP asked Metal while a node was being initialised"

        kube_api.patch(NODES, "still-initialising", {"spec": {"taints": []}},
                       patch_type=MERGE_PATCH)  # fmt: skip
        wait_for(lambda: peered(kube_api, [device["hostname"]]), 30, "the node peered")
        made = calls.calls()
        assert made["createBgpSession"] == 1 and made["getBgpNeighborData"] == 1, made


@pytest.mark.timeout(120)
def test_a_term_that_ends_mid_batch_stops_asking_metal(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, metal: Mapping[str, str],
    namespace: str,
) -> None:  # fmt: skip
    make_service(kube_api, namespace, "web")
    devices_with_nodes(metal, kube_api, 12, "ending", tainted=False)
    provider = provider_for(metal, METAL_LOAD_BALANCER="kube-vip://")
    calls = control(metal)
    calls.reset_calls()
    # each session takes Metal 0.5 s: the batch would take 6 s
    calls.inject("createBgpSession", count=12, status=None, latency=0.5)

    with provider_controllers(kube_api, provider, BgpController.for_term):
        wait_for(lambda: calls.calls().get("createBgpSession"), 30, "the first session")
        ending = time.monotonic()
    stopped_in = time.monotonic() - ending
    time.sleep(1.0)
    made = calls.calls()["createBgpSession"]
    assert stopped_in < 2.0, f"the controller took {stopped_in:.1f} s to stop"
    assert made <= 3, f"{made} sessions created after the term ended"


def test_peers_are_the_first_ipv4_neighbours_routers_sorted_with_the_password_encoded() -> None:
    # Upstream's annotateNode (metal/loadbalancers.go:337-373@38d15e2): the first IPv4
    # neighbour only (bgp.go:110-117), its peer IPs sorted (353), the password base64 (348).
    neighbors = [
        {"address_family": 6, "peer_ips": ["fc00::2"], "customer_as": 65000, "peer_as": 65530},
        {"address_family": 4, "peer_ips": ["169.254.255.2", "169.254.255.1"],
         "customer_as": 65000, "peer_as": 65530, "customer_ip": "10.0.0.3",
         "md5_password": PASSWORD},
        {"address_family": 4, "peer_ips": ["169.254.255.9"], "customer_as": 65001,
         "peer_as": 65530, "customer_ip": "10.0.0.3"},
    ]  # fmt: skip

    written = peer_annotations(neighbors)

    assert kube_vip_reads(written) == KubeVipPeering(
        65000, "10.0.0.3", 65530, ["169.254.255.1", "169.254.255.2"], PASSWORD
    )
    assert [written[f"{ANNOTATION_PREFIX}{n}-peer-ip"] for n in (0, 1)] == [
        "169.254.255.1", "169.254.255.2"
    ]  # fmt: skip
    assert len(written) == 10


def test_without_a_password_each_peer_says_so_with_an_empty_value() -> None:
    # upstream writes bgp-pass whatever the password (metal/loadbalancers.go:348,372@38d15e2)
    written = peer_annotations([{"address_family": 4, "peer_ips": ["169.254.255.1"],
                                 "customer_as": 65000, "peer_as": 65530,
                                 "customer_ip": "10.0.0.3"}])  # fmt: skip
    assert written[f"{ANNOTATION_PREFIX}0-bgp-pass"] == ""
    assert kube_vip_reads(written).password == ""


@pytest.mark.timeout(60)
def test_the_annotation_names_are_the_operators_when_set(
    control_plane: Any,
    kube_api: KubeApi,
    namespace: str,
    clean_nodes: None,
    metal: Mapping[str, str],
) -> None:
    # METAL_ANNOTATION_* rename each annotation, {{n}} the peer's number (metal/config.go:
    # 153-163, loadbalancers.go:362-366@38d15e2): here for a kube-vip reading its own prefix.
    make_service(kube_api, namespace, "web")  # sessions follow load balancers, as upstream
    (device,) = devices_with_nodes(metal, kube_api, 1, "named")
    names = {f"METAL_ANNOTATION_{v}": f"kube-vip.io/bgp-peers-{{{{n}}}}-{k}" for k, v in (
        ("node-asn", "LOCAL_ASN"), ("peer-asn", "PEER_ASN"), ("peer-ip", "PEER_IP"),
        ("src-ip", "SRC_IP"), ("bgp-pass", "BGP_PASS"))}  # fmt: skip
    provider = provider_for(metal, METAL_LOAD_BALANCER="kube-vip://", METAL_BGP_PASS=PASSWORD,
                            METAL_ANNOTATION_NETWORK_IPV4_PRIVATE="kube-vip.io/private",
                            **names)  # fmt: skip

    with provider_controllers(kube_api, provider, BgpController.for_term):
        annotations = wait_for(
            lambda: (a := kube_api.get(NODES, device["hostname"])["metadata"].get("annotations")
                     or {}) and "kube-vip.io/private" in a and a,
            30, "the node annotated",
        )  # fmt: skip

    assert kube_vip_reads(annotations, prefix="kube-vip.io").password == PASSWORD
    assert not any(k.startswith("metal.equinix.com/") for k in annotations)
