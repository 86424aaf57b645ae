"""Upstream's deny firewall (cmd/cloud-controller-manager/main.go:105-106, 223-231@v36.3.8):
``--enable-l4-deny-firewall`` makes ``k8s-fw-<lb>-deny`` per external load balancer with the
allow firewalls just above it, ``--enable-l4-deny-firewall-rollback-cleanup`` alone deletes it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from polyccm.objects import Service
from polyccm_gce_emulator import upstream_made
from polyccm_gce_emulator.testing import (
    REGION,
    ComputeApi,
    RunningEmulator,
    gce_provider,
    node_for,
    service_for,
    write_calls,
)
from polyccm_testing.opstools import run_polyccm

CLUSTER_ID = "cafe0123"


@pytest.fixture
def provider(emulator: RunningEmulator) -> Any:
    built = gce_provider(emulator.endpoint)
    built._cluster_id = CLUSTER_ID
    return built


@pytest.fixture
def nodes(api: ComputeApi) -> list[Any]:
    for name in ("deny-a", "deny-b"):
        api.create_instance(name, tags=["deny"])
    return [node_for(name) for name in ("deny-a", "deny-b")]


def firewall(api: ComputeApi, name: str) -> dict[str, Any]:
    return api.get(f"global/firewalls/{name}")


def firewall_names(api: ComputeApi) -> set[str]:
    return {f["name"] for f in api.list_all("global/firewalls")}


def edited(service: Service, **spec: Any) -> Service:
    """The same Service (same UID, so the same load balancer) with ``spec`` fields changed."""
    raw = copy.deepcopy(service.raw)
    raw["spec"].update(spec)
    return Service(raw)


def denying(provider: Any) -> Any:
    lb = provider.load_balancer()
    lb.deny_firewall, lb.deny_cleanup = True, True
    return lb


def test_the_deny_flag_without_the_cleanup_one_is_refused_with_one_line(tmp_path: Path) -> None:
    # main.go:228-229@v36.3.8: upstream exits (klog.Fatal) on the deny flag alone. Before:
    # polyccm refused the deny flag whatever came with it ("does not make ... deny firewalls").
    config = tmp_path / "gce.conf"
    config.write_text("[global]\nproject-id = p\nlocal-zone = us-central1-a\n")

    result = run_polyccm(
        ["--provider=gce", f"--cloud-config={config}", "--enable-l4-deny-firewall=true"]
    )

    assert result.status == 2
    assert result.stderr == (
        "polyccm: error: --enable-l4-deny-firewall requires "
        "--enable-l4-deny-firewall-rollback-cleanup to be true\n"
    )


def test_ensure_makes_upstreams_deny_firewall_with_the_allow_ones_above_it(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    # gce_loadbalancer_external.go:48-50, 1200-1203, 1043-1046, 1242-1253@v36.3.8.
    lb = denying(provider)
    service = service_for(ports=((80, "TCP"), (81, "TCP")))
    name = lb.get_load_balancer_name("c", service)

    status = lb.ensure_load_balancer("c", service, nodes)

    ip = status.ingress[0].ip
    deny = firewall(api, f"k8s-fw-{name}-deny")
    assert {k: deny[k] for k in ("description", "sourceRanges", "destinationRanges",
                                 "targetTags", "denied", "priority")} == {
        "description": f'{{"kubernetes.io/service-name":"default/web", '
                       f'"kubernetes.io/service-ip":"{ip}"}}',
        "sourceRanges": ["0.0.0.0/0"], "destinationRanges": [ip], "targetTags": ["deny"],
        "denied": [{"IPProtocol": "all"}], "priority": 1000,
    }  # fmt: skip
    assert "allowed" not in deny
    assert firewall(api, f"k8s-fw-{name}")["priority"] == 999
    assert firewall(api, f"k8s-{CLUSTER_ID}-node-http-hc")["priority"] == 999
    emulator.control.reset_calls()

    lb.ensure_load_balancer("c", service, nodes)

    assert write_calls(emulator.control.calls()) == 0


def test_the_deny_firewall_follows_a_new_address_and_stays_on_a_port_edit(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    lb = denying(provider)
    service = service_for()
    name = lb.get_load_balancer_name("c", service)
    ip = lb.ensure_load_balancer("c", service, nodes).ingress[0].ip
    before = firewall(api, f"k8s-fw-{name}-deny")
    emulator.control.reset_calls()

    # A port added: the rule is made again on the same address; the deny firewall, which
    # denies every port, is left alone (firewallsEqual, external.go:1319-1332).
    two_ports = [{"name": "a", "port": 80, "protocol": "TCP", "nodePort": 30000},
                 {"name": "b", "port": 8080, "protocol": "TCP", "nodePort": 30001}]  # fmt: skip
    assert lb.ensure_load_balancer("c", edited(service, ports=two_ports), nodes).ingress[0].ip == ip

    assert firewall(api, f"k8s-fw-{name}-deny") == before
    assert emulator.control.calls().get("compute.firewalls.patch", 0) == 1  # k8s-fw-<lb> only
    # A loadBalancerIP: the deny firewall's destination and description follow it.
    api.do("POST", f"regions/{REGION}/addresses", {"name": "mine"})
    mine = api.get(f"regions/{REGION}/addresses/mine")["address"]
    moved = edited(service, ports=two_ports, loadBalancerIP=mine)

    assert lb.ensure_load_balancer("c", moved, nodes).ingress[0].ip == mine != ip

    deny = firewall(api, f"k8s-fw-{name}-deny")
    assert deny["destinationRanges"] == [mine]
    assert mine in deny["description"]
    assert deny["denied"] == [{"IPProtocol": "all"}]


def test_delete_removes_the_deny_firewall(provider: Any, nodes: list[Any], api: ComputeApi) -> None:
    lb = denying(provider)
    service = service_for()
    name = lb.get_load_balancer_name("c", service)
    lb.ensure_load_balancer("c", service, nodes)

    lb.ensure_load_balancer_deleted("c", service)

    assert not {f"k8s-fw-{name}", f"k8s-fw-{name}-deny"} & firewall_names(api)


def test_upstreams_deny_firewall_is_adopted_with_no_write(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    # What cloud-provider-gcp v36.3.8 leaves with both flags (external.go:224, 302-307).
    service = service_for()
    upstream_made.network_load_balancer(
        api, service, cluster_id=CLUSTER_ID, instances=[n.name for n in nodes], tags=["deny"],
        firewall_ports=["80"], deny=True,
    )  # fmt: skip
    emulator.control.reset_calls()

    denying(provider).ensure_load_balancer("c", service, nodes)

    assert write_calls(emulator.control.calls()) == 0


def test_rolled_back_the_deny_firewall_goes_and_the_allow_ones_return_to_1000(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # external.go:217-223 (the cleanup) and 1028 (the allow firewall's priority compared).
    service = service_for()
    name = upstream_made.network_load_balancer(
        api, service, cluster_id=CLUSTER_ID, instances=[n.name for n in nodes], tags=["deny"],
        firewall_ports=["80"], deny=True,
    )  # fmt: skip
    lb = provider.load_balancer()
    lb.deny_cleanup = True

    lb.ensure_load_balancer("c", service, nodes)

    assert f"k8s-fw-{name}-deny" not in firewall_names(api)
    assert firewall(api, f"k8s-fw-{name}")["priority"] == 1000


def test_the_rollback_cleanup_reads_before_it_deletes(
    provider: Any, nodes: list[Any], emulator: RunningEmulator
) -> None:
    # gce_loadbalancer_external.go:1297-1317@v36.3.8 ensureFirewallDeleted: a GET first, a
    # DELETE only for a deny firewall that is there. Before: a DELETE (answered 404) on every
    # sync, so a settled load balancer was written to on each one.
    lb = provider.load_balancer()
    lb.deny_cleanup = True
    service = service_for()
    lb.ensure_load_balancer("c", service, nodes)
    emulator.control.reset_calls()

    lb.ensure_load_balancer("c", service, nodes)

    assert write_calls(emulator.control.calls()) == 0
