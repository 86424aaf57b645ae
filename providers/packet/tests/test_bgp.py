"""``packet-bgp`` against the real API server and the Metal emulator: each node's device gets
its session and the node its peers once; after that, node updates cost Metal nothing, and a
pass repairs what changed in Metal (a deleted session) with one read for every node."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
from polyccm.kube.api import MERGE_PATCH, NODES, KubeApi
from polyccm_packet.bgp import ANNOTATION_PREFIX, BgpController
from polyccm_packet_emulator.demo import bgp_peers
from polyccm_packet_emulator.testing import MetalApi, control, provider_controllers, provider_for
from polyccm_testing.kubeobjects import events_for, make_node, make_service, wait_for

PASSWORD = "BgpMd5Pass7"


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
        assert peers[f"{ANNOTATION_PREFIX}0-bgp-pass"] == PASSWORD

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
