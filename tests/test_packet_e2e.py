"""The Equinix Metal provider end to end: ``polyccm --provider packet`` as a user runs it (the
real CLI, upstream's ``METAL_*`` variables, ``--v=10``), the real kube-apiserver and the Metal
emulator. What a user sees is asserted: nodes initialised from their devices, BGP enabled with
a session per node and the peer annotations on each node, an Elastic IP on the service and
released after it, and neither the API key nor the BGP password in the log or an event."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from polyccm.kube.api import NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_packet_emulator.demo import bgp_peers, running_ccm
from polyccm_packet_emulator.testing import MetalApi, MetalCloudUnderTest, control, running_emulator
from polyccm_testing.demo import service_gone
from polyccm_testing.kubeobjects import events_for, ingress_ip, make_node, make_service, wait_for

PASSWORD = "E2eBgpMd5Secret9"


@pytest.fixture(scope="module")
def metal_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, str]]:
    with running_emulator(tmp_path_factory.mktemp("metal-e2e")) as env:
        yield env


@pytest.mark.timeout(180)
def test_polyccm_initialises_devices_peers_them_and_serves_an_elastic_ip(
    control_plane: Any,
    kube_api: KubeApi,
    namespace: str,
    clean_nodes: None,
    metal_emulator: Mapping[str, str],
    tmp_path: Path,
) -> None:
    control(metal_emulator).reset()
    metal = MetalApi(metal_emulator)
    devices = metal.create_devices(2, prefix=f"e2e-{namespace}")
    for device in devices:
        make_node(kube_api, device["hostname"])
    env = {**metal_emulator, "METAL_LOAD_BALANCER": "kube-vip://", "METAL_LOCAL_ASN": "65100",
           "METAL_BGP_PASS": PASSWORD}  # fmt: skip
    cloud = MetalCloudUnderTest(env)

    with running_ccm(tmp_path, env, control_plane.kubeconfig, ["--v=10"]) as log:
        # sessions and peers follow the first LoadBalancer Service, as upstream's
        make_service(kube_api, namespace, "web")
        for device in devices:
            name = device["hostname"]
            wait_for(lambda n=name: bgp_peers(kube_api.get(NODES, n)), 30, f"{name} peered")
            raw = kube_api.get(NODES, name)
            node = Node(raw)
            assert not node.has_taint(UNINITIALIZED_TAINT)
            assert node.provider_id == f"equinixmetal://{device['id']}"
            assert node.labels["node.kubernetes.io/instance-type"] == "c3.small.x86"
            assert node.labels["topology.kubernetes.io/region"] == "da"
            assert "topology.kubernetes.io/zone" not in node.labels  # upstream v3.8+
            peers = bgp_peers(raw)
            prefix = "metal.equinix.com/bgp-peers-0-"
            assert peers[prefix + "node-asn"] == "65100"
            assert peers[prefix + "peer-asn"] == "65530"
            assert peers[prefix + "peer-ip"] == "169.254.255.1"
            # base64, as upstream (metal/loadbalancers.go:348@38d15e2) and kube-vip read it
            assert base64.b64decode(peers[prefix + "bgp-pass"]).decode() == PASSWORD
            sessions = metal.ok("GET", f"/devices/{device['id']}/bgp/sessions")["bgp_sessions"]
            assert [s["address_family"] for s in sessions] == ["ipv4"]
        config = metal.ok("GET", f"/projects/{metal.project_id}/bgp-config")
        assert config["asn"] == 65100

        ip = wait_for(lambda: ingress_ip(kube_api, namespace, "web"), 30, "the Elastic IP")
        (reserved,) = cloud.elastic_ips()
        assert (reserved["address"], reserved["cidr"]) == (ip, 32)

        kube_api.delete(SERVICES, "web", namespace)

        wait_for(lambda: service_gone(kube_api, namespace, "web"), 30, "the service finalised")
        assert cloud.elastic_ips() == []
        time.sleep(0.5)
        text = log.read_text()

    key = metal_emulator["METAL_API_KEY"]
    assert key not in text, "the API key is in polyccm's log"
    assert PASSWORD not in text, "the BGP password is in polyccm's log"
    events = [m for d in devices for _, _, m in events_for(kube_api, "default", d["hostname"])]
    events += [m for _, _, m in events_for(kube_api, namespace, "web")]
    assert all(f"created for device {d['id']}" in text for d in devices), "no session logged"
    assert all(PASSWORD not in m and key not in m for m in events)
