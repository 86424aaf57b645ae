"""``METAL_LOAD_BALANCER=metallb:///<ns>/<configmap>``: MetalLB's configuration kept from the
services' Elastic IPs and the nodes' BGP peers, in the legacy ConfigMap, or in the ``metallb.io``
objects (CRDs the tests install) with ``?crdConfiguration=true``, as upstream
(metal/loadbalancers/metallb/metallb.go:92-114@38d15e2); against the real API server and the
Metal emulator, with ``packet-bgp`` and ``packet-metallb`` running."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm.kube.api import CONFIGMAPS, NODES, SECRETS, SERVICES, ApiError, KubeApi, Resource
from polyccm.objects import Service
from polyccm_packet.bgp import BgpController
from polyccm_packet.metallb import (
    BGP_ADVERTISEMENTS,
    BGP_PEERS,
    IP_ADDRESS_POOLS,
    MetalLbController,
    wanted_pools,
)
from polyccm_packet_emulator.testing import MetalApi, provider_for
from polyccm_testing.controllers import provider_controllers
from polyccm_testing.kubeobjects import events_for, make_node, make_service, wait_for

PASSWORD = "MetalLbMd5Pass7"
CRDS = Path(__file__).parent / "data" / "metallb-crds.yaml"
CRD = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False)


def crds_served(api: KubeApi) -> bool:
    try:
        api.request("GET", "/apis/metallb.io/v1beta2")
    except ApiError as error:
        if error.not_found:
            return False
        raise
    return True


@pytest.fixture
def metallb_crds(kube_api: KubeApi) -> Iterator[None]:
    """MetalLB's CRDs installed for the test, deleted after it."""
    definitions = list(yaml.safe_load_all(CRDS.read_text()))
    for body in definitions:
        kube_api.create(CRD, body)
    try:
        wait_for(lambda: crds_served(kube_api), 20, "metallb.io served")
        yield
    finally:
        for body in definitions:
            kube_api.delete(CRD, body["metadata"]["name"])
        wait_for(lambda: not crds_served(kube_api), 30, "metallb.io gone")


@contextmanager
def running(
    kube_api: KubeApi, env: Mapping[str, str], namespace: str, query: str = ""
) -> Iterator[Any]:
    """``packet-bgp`` and ``packet-metallb`` in a term of their own (as the manager runs them)."""
    provider = provider_for(env, METAL_LOAD_BALANCER=f"metallb:///{namespace}/config{query}",
                            METAL_BGP_PASS=PASSWORD, METAL_LOCAL_ASN="65100")  # fmt: skip
    with provider_controllers(
        kube_api, provider, BgpController.for_term, MetalLbController.for_term
    ):
        yield provider


def two_nodes_and_a_service(
    kube_api: KubeApi, metal: Mapping[str, str], namespace: str, provider: Any
) -> tuple[list[str], str]:
    """Two devices with their nodes, and a service whose Elastic IP is reserved. Its status is
    left empty: the pool comes from the reservation, as upstream's does (MetalLB clears a
    status whose pool does not exist yet)."""
    devices = MetalApi(metal).create_devices(2, prefix=f"lb-{namespace}")
    for device in devices:
        make_node(kube_api, device["hostname"], provider_id=f"equinixmetal://{device['id']}")
    raw = make_service(kube_api, namespace, "web")
    status = provider.load_balancer().ensure_load_balancer("kubernetes", Service(raw), [])
    return [d["hostname"] for d in devices], status.ingress[0].ip


def legacy(kube_api: KubeApi, namespace: str) -> dict[str, Any]:
    try:
        cm = kube_api.get(CONFIGMAPS, "config", namespace)
    except ApiError:
        return {}
    parsed: dict[str, Any] = yaml.safe_load(cm["data"]["config"])
    return parsed


def names(kube_api: KubeApi, resource: Resource, namespace: str) -> list[str]:
    items = kube_api.list(resource, namespace).get("items") or []
    return sorted(o["metadata"]["name"] for o in items)


@pytest.mark.timeout(90)
def test_without_metallb_crds_the_legacy_configmap_holds_pools_and_peers(
    control_plane: Any, kube_api: KubeApi, namespace: str, clean_nodes: None,
    metal: Mapping[str, str],
) -> None:  # fmt: skip
    assert not crds_served(kube_api)
    with running(kube_api, metal, namespace) as provider:
        (first, second), ip = two_nodes_and_a_service(kube_api, metal, namespace, provider)

        config = wait_for(lambda: (c := legacy(kube_api, namespace)) and len(c["peers"]) == 4
                          and c["address-pools"] and c, 30, "the ConfigMap")  # fmt: skip
        assert config["address-pools"] == [{
            "name": f"{namespace}/web", "protocol": "bgp", "addresses": [f"{ip}/32"],
            "auto-assign": False,
        }]  # fmt: skip
        by_node = {
            (p["node-selectors"][0]["match-labels"]["kubernetes.io/hostname"], p["peer-address"])
            for p in config["peers"]
        }
        assert by_node == {(n, a) for n in (first, second)
                           for a in ("169.254.255.1", "169.254.255.2")}  # fmt: skip
        peer = config["peers"][0]
        assert (peer["my-asn"], peer["peer-asn"], peer["password"]) == (65100, 65530, PASSWORD)
        # upstream's nomatch selector records the service using the peer (config.go:395-440)
        assert peer["node-selectors"][1:] == [{"match-labels": {
            "nomatch.metal.equinix.com/service-namespace": namespace,
            "nomatch.metal.equinix.com/service-name": "web",
        }}]  # fmt: skip
        assert peer["source-address"].startswith("10.64.")

        kube_api.delete(NODES, second)
        wait_for(lambda: len(legacy(kube_api, namespace)["peers"]) == 2, 20, "peers of a node gone")
        assert {p["node-selectors"][0]["match-labels"]["kubernetes.io/hostname"]
                for p in legacy(kube_api, namespace)["peers"]} == {first}  # fmt: skip

        kube_api.delete(SERVICES, "web", namespace)
        wait_for(lambda: legacy(kube_api, namespace)["address-pools"] == [], 20, "pool gone")
    assert not crds_served(kube_api)  # the ConfigMap, not CRD objects, was the only target


@pytest.mark.timeout(120)
def test_with_metallb_crds_pools_peers_and_an_advertisement_are_written(
    control_plane: Any, kube_api: KubeApi, namespace: str, clean_nodes: None,
    metal: Mapping[str, str], metallb_crds: None,
) -> None:  # fmt: skip
    # What upstream made before the switch: one of a node's peers (adopted as it is, never
    # doubled), a peer of a node since gone (removed), and an operator's labelled
    # advertisement, as upstream's README suggests (kept: polyccm did not make it).
    devices = MetalApi(metal).create_devices(2, prefix=f"lb-{namespace}")
    first = str(devices[0]["hostname"])
    upstream_peer = {
        "myASN": 65100,
        "peerASN": 65530,
        "peerAddress": "169.254.255.1",
        "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": first}}],
    }
    kube_api.create(
        BGP_PEERS, crd(BGP_PEERS, "BGPPeer", f"{first}-0", namespace, upstream_peer), namespace
    )
    stale = {
        **upstream_peer,
        "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "gone"}}],
    }
    kube_api.create(BGP_PEERS, crd(BGP_PEERS, "BGPPeer", "gone-0", namespace, stale), namespace)
    kube_api.create(
        BGP_ADVERTISEMENTS,
        crd(
            BGP_ADVERTISEMENTS, "BGPAdvertisement", "mine", namespace, {"communities": ["65100:1"]}
        ),
        namespace,
    )
    with running(kube_api, metal, namespace, "?crdConfiguration=true") as provider:
        for device in devices:
            make_node(kube_api, device["hostname"], provider_id=f"equinixmetal://{device['id']}")
        status = provider.load_balancer().ensure_load_balancer(
            "kubernetes", Service(make_service(kube_api, namespace, "web")), []
        )
        ip, second = status.ingress[0].ip, str(devices[1]["hostname"])

        wait_for(
            lambda: (
                len(names(kube_api, BGP_PEERS, namespace)) == 4
                and names(kube_api, BGP_ADVERTISEMENTS, namespace)
            ),
            30,
            "MetalLB objects",
        )
        pool = kube_api.get(IP_ADDRESS_POOLS, f"{namespace}.web", namespace)
        assert pool["spec"]["addresses"] == [f"{ip}/32"] and pool["spec"]["autoAssign"] is False
        assert pool["metadata"]["labels"] == {
            "cloud-provider": "equinix-metal", "service-web": f"namespace-{namespace}"
        }  # fmt: skip
        adv = kube_api.get(BGP_ADVERTISEMENTS, "equinix-metal-bgp-adv", namespace)
        assert adv["spec"]["ipAddressPools"] == [f"{namespace}.web"]
        assert names(kube_api, BGP_PEERS, namespace) == sorted(
            f"{node}-{n}" for node in (first, second) for n in (0, 1)
        )
        peer = kube_api.get(BGP_PEERS, f"{first}-1", namespace)["spec"]
        assert peer["nodeSelectors"] == [
            {"matchLabels": {"kubernetes.io/hostname": first}},
            {"matchLabels": {"nomatch.metal.equinix.com/service-namespace": namespace,
                             "nomatch.metal.equinix.com/service-name": "web"}},
        ]  # fmt: skip
        assert (peer["myASN"], peer["peerASN"], peer["peerAddress"]) == (
            65100, 65530, "169.254.255.2"
        )  # fmt: skip
        assert peer["sourceAddress"].startswith("10.64.") and "password" not in peer
        assert peer["passwordSecret"] == {"name": "equinix-metal-bgp-pass", "namespace": namespace}
        secret = kube_api.get(SECRETS, "equinix-metal-bgp-pass", namespace)
        assert base64.b64decode(secret["data"]["password"]).decode() == PASSWORD
        assert not legacy(kube_api, namespace), "no ConfigMap when the CRDs exist"
        version = pool["metadata"]["resourceVersion"]

        kube_api.delete(NODES, second)
        wait_for(
            lambda: names(kube_api, BGP_PEERS, namespace) == [f"{first}-0", f"{first}-1"],
            20,
            "peers of a node gone",
        )
        # Nothing about the pool changed: it was not written again.
        assert kube_api.get(IP_ADDRESS_POOLS, f"{namespace}.web", namespace)["metadata"][
            "resourceVersion"] == version  # fmt: skip

        kube_api.delete(SERVICES, "web", namespace)
        wait_for(
            lambda: (
                not names(kube_api, IP_ADDRESS_POOLS, namespace)
                and names(kube_api, BGP_ADVERTISEMENTS, namespace) == ["mine"]
                and not names(kube_api, BGP_PEERS, namespace)
            ),
            20,
            "pool, advertisement and peers gone, the operator's advertisement kept",
        )
        events = [m for n in (first, second) for _, _, m in events_for(kube_api, "default", n)]
        assert all(PASSWORD not in m for m in events)


@pytest.mark.timeout(90)
def test_upstreams_v1beta1_peers_with_inline_passwords_are_adopted_never_doubled(
    control_plane: Any, kube_api: KubeApi, namespace: str, clean_nodes: None,
    metal: Mapping[str, str], metallb_crds: None,
) -> None:  # fmt: skip
    # Upstream writes its peers as metallb.io/v1beta1 BGPPeers named <node>-<i>, port 179, the
    # MD5 password inline (metal/loadbalancers/metallb/cr_config.go:44-66 and metallb.go:186-201
    # @38d15e2); polyccm writes v1beta2 with the password in a Secret. After a switch each
    # address must still have one peer: two would open two sessions to the same router.
    devices = MetalApi(metal).create_devices(2, prefix=f"lb-{namespace}")
    hosts = [str(d["hostname"]) for d in devices]
    for host in hosts:
        for n, address in enumerate(("169.254.255.1", "169.254.255.2")):
            spec = {
                "myASN": 65100, "peerASN": 65530, "peerAddress": address, "peerPort": 179,
                "holdTime": "0s", "password": PASSWORD, "sourceAddress": "10.64.0.1",
                "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": host}}],
            }  # fmt: skip
            kube_api.create(
                PEERS_V1BETA1, crd(PEERS_V1BETA1, "BGPPeer", f"{host}-{n}", namespace, spec),
                namespace,
            )  # fmt: skip
    with running(kube_api, metal, namespace, "?crdConfiguration=true") as provider:
        for device in devices:
            make_node(kube_api, device["hostname"], provider_id=f"equinixmetal://{device['id']}")
        provider.load_balancer().ensure_load_balancer(
            "kubernetes", Service(make_service(kube_api, namespace, "web")), []
        )

        def adopted() -> bool:
            peers = kube_api.list(BGP_PEERS, namespace).get("items") or []
            return len(peers) == 4 and all(
                (p["spec"].get("passwordSecret") or {}).get("name") for p in peers
            )

        wait_for(adopted, 30, "upstream's peers rewritten with the password Secret")
        for resource in (BGP_PEERS, PEERS_V1BETA1):
            peers = kube_api.list(resource, namespace).get("items") or []
            per_node = sorted(
                (p["spec"]["nodeSelectors"][0]["matchLabels"]["kubernetes.io/hostname"],
                 p["spec"]["peerAddress"]) for p in peers
            )  # fmt: skip
            assert per_node == sorted(
                (h, a) for h in hosts for a in ("169.254.255.1", "169.254.255.2")
            ), resource
            # MetalLB refuses a peer with both an inline password and a password Secret.
            assert all("password" not in p["spec"] for p in peers)


PEERS_V1BETA1 = Resource("metallb.io/v1beta1", "bgppeers", namespaced=True)


def crd(resource: Resource, kind: str, name: str, namespace: str, spec: Any) -> dict[str, Any]:
    return {"apiVersion": resource.group_version, "kind": kind, "spec": spec,
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"cloud-provider": "equinix-metal"}}}  # fmt: skip


@pytest.mark.timeout(90)
def test_metallbs_crds_are_written_only_when_the_url_asks_for_them(
    control_plane: Any, kube_api: KubeApi, namespace: str, clean_nodes: None,
    metal: Mapping[str, str], metallb_crds: None,
) -> None:  # fmt: skip
    # Upstream's default is the ConfigMap, CRDs or not (metallb.go:64,92-114@38d15e2): a
    # cluster switched from it keeps the configuration its MetalLB reads.
    with running(kube_api, metal, namespace) as provider:
        two_nodes_and_a_service(kube_api, metal, namespace, provider)
        wait_for(lambda: legacy(kube_api, namespace).get("address-pools"), 30, "the ConfigMap")
        assert names(kube_api, IP_ADDRESS_POOLS, namespace) == []


def test_polyccm_rbac_grants_what_packet_metallb_writes() -> None:
    out = subprocess.run(
        [str(Path(sys.executable).with_name("polyccm")), "rbac", "--provider", "packet"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rules = [r for doc in yaml.safe_load_all(out) if doc and doc.get("kind") == "ClusterRole"
             for r in doc["rules"]]  # fmt: skip
    metallb = [r for r in rules if r.get("apiGroups") == ["metallb.io"]]
    assert metallb and {"ipaddresspools", "bgppeers", "bgpadvertisements"} <= set(
        metallb[0]["resources"]
    )
    assert {"create", "update", "delete", "list"} <= set(metallb[0]["verbs"])
    assert any(r.get("apiGroups") == [""] and "configmaps" in r["resources"]
               and {"create", "update"} <= set(r["verbs"]) for r in rules)  # fmt: skip


def test_pools_come_from_the_services_address_or_reservation_never_their_status() -> None:
    # Upstream hands MetalLB spec.loadBalancerIP or the reservation it found or made
    # (metal/loadbalancers.go:485-509,546@38d15e2), never the Service's status, which MetalLB
    # clears while no pool holds the address (and the pool would then go).
    def svc(name: str, **spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "shop"},
                "spec": {"type": "LoadBalancer", **spec},
                "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.99"}]}}}  # fmt: skip

    reserved = {"reserved": "198.51.100.2"}
    pools = wanted_pools(
        [svc("named", loadBalancerIP="198.51.100.1"), svc("reserved"), svc("status-only"),
         svc("classed", loadBalancerIP="198.51.100.3", loadBalancerClass="example.com/lb")],
        lambda s: reserved.get(s["metadata"]["name"], ""),
    )  # fmt: skip

    assert [(p.service, p.address) for p in pools] == [
        ("named", "198.51.100.1"), ("reserved", "198.51.100.2")
    ]  # fmt: skip
