"""Routine edits of an external network load balancer against the emulator, through the
compute API: the address a Service is reached on survives them, the firewall lets in what the
Service asks (spec or annotation), and the network tier is the one annotated (issue 27).

Upstream's lines are of cloud-provider-gcp v36.3.8 (f67fc7e3), providers/gce/.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service
from polyccm_gce_emulator.testing import (
    REGION,
    ComputeApi,
    RunningEmulator,
    gce_provider,
    node_for,
    service_for,
    write_calls,
)

CLUSTER_ID = "cafe0123"
RANGES = "service.beta.kubernetes.io/load-balancer-source-ranges"
TIER = "cloud.google.com/network-tier"


@pytest.fixture
def provider(emulator: RunningEmulator) -> Any:
    built = gce_provider(emulator.endpoint)
    built._cluster_id = CLUSTER_ID
    return built


@pytest.fixture
def nodes(api: ComputeApi) -> list[Any]:
    for name in ("ed-a", "ed-b"):
        api.create_instance(name, tags=["ed"])
    return [node_for(name) for name in ("ed-a", "ed-b")]


def edited(service: Service, **spec: Any) -> Service:
    """The same Service (same UID, so the same load balancer) with ``spec`` fields changed."""
    raw = copy.deepcopy(service.raw)
    raw["spec"].update(spec)
    return Service(raw)


def annotated(service: Service, annotations: dict[str, str]) -> Service:
    raw = copy.deepcopy(service.raw)
    raw["metadata"]["annotations"] = annotations
    return Service(raw)


def rule_of(api: ComputeApi, name: str) -> dict[str, Any]:
    return api.get(f"regions/{REGION}/forwardingRules/{name}")


def addresses(api: ComputeApi) -> list[str]:
    return [item["name"] for item in api.list_all(f"regions/{REGION}/addresses")]


# -- the IP survives an edit -------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            {
                "ports": [
                    {"name": "a", "port": 80, "protocol": "TCP", "nodePort": 30000},
                    {"name": "b", "port": 8443, "protocol": "TCP", "nodePort": 30001},
                ]
            },
            id="port-added",
        ),
        pytest.param(
            {"ports": [{"name": "a", "port": 80, "protocol": "UDP", "nodePort": 30000}]},
            id="protocol",
        ),
        pytest.param({"sessionAffinity": "ClientIP"}, id="session-affinity"),
    ],
)
def test_an_edit_that_makes_the_rule_again_keeps_the_services_ip(
    provider: Any, nodes: list[Any], api: ComputeApi, change: dict[str, Any]
) -> None:
    # Upstream holds the rule's ephemeral address as the static address <lb> before deleting
    # the rule and makes the new rule on it, then releases it
    # (gce_loadbalancer_external.go:201-212 ensureStaticIP, :1424-1469; :291 the rule made on
    # ipAddressToUse; :174-187 the release). Before: the new rule got a new ephemeral IP.
    lb = provider.load_balancer()
    service = service_for()
    name = lb.get_load_balancer_name("c", service)
    before = lb.ensure_load_balancer("c", service, nodes).ingress[0].ip

    after = lb.ensure_load_balancer("c", edited(service, **change), nodes).ingress[0].ip

    assert after == before
    assert rule_of(api, name)["IPAddress"] == before
    assert addresses(api) == []  # held only while the rule was made again


def test_a_session_affinity_edit_makes_the_pool_again_on_the_same_ip(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # gce_loadbalancer_external.go:875-897 targetPoolNeedsRecreation: CLIENT_IP after NONE.
    lb = provider.load_balancer()
    service = service_for()
    name = lb.get_load_balancer_name("c", service)
    ip = lb.ensure_load_balancer("c", service, nodes).ingress[0].ip

    lb.ensure_load_balancer("c", edited(service, sessionAffinity="ClientIP"), nodes)

    assert api.get(f"regions/{REGION}/targetPools/{name}")["sessionAffinity"] == "CLIENT_IP"
    assert rule_of(api, name)["IPAddress"] == ip


def test_an_address_an_interrupted_edit_left_goes_with_the_service(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # gce_loadbalancer_external.go:409-414: delete releases the address <lb> too.
    lb = provider.load_balancer()
    service = service_for()
    name = lb.get_load_balancer_name("c", service)
    ip = lb.ensure_load_balancer("c", service, nodes).ingress[0].ip
    api.do("POST", f"regions/{REGION}/addresses", {"name": name, "address": ip})

    lb.ensure_load_balancer_deleted("c", service)

    assert addresses(api) == []


# -- source ranges -------------------------------------------------------------------------------


def test_the_source_ranges_annotation_restricts_the_firewall(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # k8s.io/cloud-provider v0.35.4 service/helpers/helper.go:61-85 GetLoadBalancerSourceRanges
    # (the annotation when the spec has none), read at gce_loadbalancer_external.go:1191.
    # Before: the firewall let in 0.0.0.0/0.
    lb = provider.load_balancer()
    service = service_for(annotations={RANGES: "192.0.2.0/24,198.51.100.7/32"})
    name = lb.get_load_balancer_name("c", service)

    lb.ensure_load_balancer("c", service, nodes)

    firewall = api.get(f"global/firewalls/k8s-fw-{name}")
    assert sorted(firewall["sourceRanges"]) == ["192.0.2.0/24", "198.51.100.7/32"]

    # The spec's ranges come first.
    lb.ensure_load_balancer("c", edited(service, loadBalancerSourceRanges=["203.0.113.0/24"]),
                            nodes)  # fmt: skip
    assert api.get(f"global/firewalls/k8s-fw-{name}")["sourceRanges"] == ["203.0.113.0/24"]


def test_ranges_naming_the_same_networks_are_the_same_firewall(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    # Upstream compares the firewall's ranges as parsed networks (gce_loadbalancer_external.go
    # :986 firewallNeedsUpdate, :1010 utilnet.ParseIPNets): 192.0.2.7/24 is 192.0.2.0/24.
    lb = provider.load_balancer()
    service = service_for(loadBalancerSourceRanges=["192.0.2.0/24"])
    lb.ensure_load_balancer("c", service, nodes)
    emulator.control.reset_calls()

    lb.ensure_load_balancer("c", edited(service, loadBalancerSourceRanges=["192.0.2.7/24"]), nodes)

    assert write_calls(emulator.control.calls()) == 0


def test_an_annotation_that_is_no_range_is_refused_before_any_write(
    provider: Any, nodes: list[Any], emulator: RunningEmulator
) -> None:
    emulator.control.reset_calls()
    with pytest.raises(InvalidServiceSpec, match="not a CIDR"):
        provider.load_balancer().ensure_load_balancer(
            "c", service_for(annotations={RANGES: "192.0.2.0/24,office"}), nodes
        )
    assert write_calls(emulator.control.calls()) == 0


# -- network tier --------------------------------------------------------------------------------


def test_the_standard_tier_annotation_makes_a_standard_rule(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # gce_annotations.go:160-176 GetServiceNetworkTier; the rule's NetworkTier
    # (gce_loadbalancer_external.go:1096). Before: PREMIUM whatever the annotation.
    lb = provider.load_balancer()
    service = service_for(annotations={TIER: "Standard"})
    name = lb.get_load_balancer_name("c", service)

    lb.ensure_load_balancer("c", service, nodes)

    assert rule_of(api, name)["networkTier"] == "STANDARD"


def test_a_rule_of_the_other_tier_is_made_again_in_the_annotated_one(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # gce_loadbalancer_external.go:133, :1481-1540 deleteWrongNetworkTieredResources: only when
    # the annotation is there, the rule and the address <lb> of another tier are deleted.
    lb = provider.load_balancer()
    service = service_for()
    name = lb.get_load_balancer_name("c", service)
    lb.ensure_load_balancer("c", service, nodes)
    assert rule_of(api, name)["networkTier"] == "PREMIUM"

    lb.ensure_load_balancer("c", annotated(service, {TIER: "Standard"}), nodes)

    assert rule_of(api, name)["networkTier"] == "STANDARD"


def test_an_unsupported_tier_is_refused_before_any_write(
    provider: Any, nodes: list[Any], emulator: RunningEmulator
) -> None:
    # gce_annotations.go:171-174: "unsupported network tier".
    emulator.control.reset_calls()
    with pytest.raises(InvalidServiceSpec, match="unsupported network tier 'Gold'"):
        provider.load_balancer().ensure_load_balancer(
            "c", service_for(annotations={TIER: "Gold"}), nodes
        )
    assert write_calls(emulator.control.calls()) == 0


# -- externalTrafficPolicy -----------------------------------------------------------------------


def test_a_flip_to_cluster_deletes_the_services_own_check_and_its_firewall(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # gce_loadbalancer_external.go:255-262@v36.3.8 (Local -> Cluster: hcToDelete is the
    # service's check) and :447-497 DeleteExternalTargetPoolAndChecks (the check, then its
    # firewall). Before: both stayed until the Service was deleted.
    lb = provider.load_balancer()
    service = service_for(externalTrafficPolicy="Local", healthCheckNodePort=31999)
    name = lb.get_load_balancer_name("c", service)
    ip = lb.ensure_load_balancer("c", service, nodes).ingress[0].ip

    lb.ensure_load_balancer(
        "c", edited(service, externalTrafficPolicy="Cluster", healthCheckNodePort=None), nodes
    )

    checks = {item["name"] for item in api.list_all("global/httpHealthChecks")}
    firewalls = {item["name"] for item in api.list_all("global/firewalls")}
    assert checks == {f"k8s-{CLUSTER_ID}-node"}
    assert f"k8s-{name}-http-hc" not in firewalls
    assert f"k8s-{CLUSTER_ID}-node-http-hc" in firewalls
    assert rule_of(api, name)["IPAddress"] == ip


def test_a_flip_to_local_deletes_the_shared_check_no_other_pool_uses(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # gce_loadbalancer_external.go:243-253@v36.3.8 (Cluster -> Local: hcToDelete is the nodes
    # check), :470-492 (deleted only when no pool uses it, then its firewall).
    lb = provider.load_balancer()
    service, other = service_for(), service_for("other")
    lb.ensure_load_balancer("c", service, nodes)
    lb.ensure_load_balancer("c", other, nodes)

    local = dict(externalTrafficPolicy="Local", healthCheckNodePort=31999)
    lb.ensure_load_balancer("c", edited(service, **local), nodes)
    assert f"k8s-{CLUSTER_ID}-node" in {i["name"] for i in api.list_all("global/httpHealthChecks")}

    lb.ensure_load_balancer("c", edited(other, **local), nodes)
    checks = {i["name"] for i in api.list_all("global/httpHealthChecks")}
    assert f"k8s-{CLUSTER_ID}-node" not in checks
    assert f"k8s-{CLUSTER_ID}-node-http-hc" not in {
        i["name"] for i in api.list_all("global/firewalls")
    }


def test_a_load_balancer_ip_of_the_other_tier_is_refused_with_upstreams_words(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # gce_loadbalancer_external.go:528-535@v36.3.8 verifyUserRequestedIP. Before: the rule was
    # made PREMIUM on the STANDARD address, whatever the annotation said.
    api.do("POST", f"regions/{REGION}/addresses", {"name": "mine", "networkTier": "PREMIUM"})
    reserved = api.get(f"regions/{REGION}/addresses/mine")["address"]
    service = service_for(annotations={TIER: "Standard"}, loadBalancerIP=reserved)

    with pytest.raises(InvalidServiceSpec) as refused:
        provider.load_balancer().ensure_load_balancer("c", service, nodes)

    assert str(refused.value) == (
        f'requested IP "{reserved}" belongs to the Premium network tier; expected Standard'
    )
    assert api.list_all(f"regions/{REGION}/forwardingRules") == []


# -- upstream's deny firewall ------------------------------------------------------------------


def test_upstreams_deny_firewall_is_left_on_adoption_and_goes_with_the_service(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    # gce_loadbalancer_naming.go:135@v36.3.8 MakeFirewallDenyName; gce_loadbalancer_external.go
    # :395-408 (deleted with the load balancer). Before: left behind, denying traffic to an
    # address the project may hand to another load balancer.
    lb = provider.load_balancer()
    service = service_for()
    name = lb.get_load_balancer_name("c", service)
    ip = lb.ensure_load_balancer("c", service, nodes).ingress[0].ip
    deny = {"name": f"k8s-fw-{name}-deny", "network": f"{api.base}global/networks/default",
            "priority": 1000, "denied": [{"IPProtocol": "all"}],
            "sourceRanges": ["0.0.0.0/0"], "destinationRanges": [ip],
            "targetTags": ["ed"]}  # fmt: skip
    api.do("POST", "global/firewalls", deny)
    emulator.control.reset_calls()

    lb.ensure_load_balancer("c", service, nodes)
    assert write_calls(emulator.control.calls()) == 0

    lb.ensure_load_balancer_deleted("c", service)
    assert {item["name"] for item in api.list_all("global/firewalls")} == set()
