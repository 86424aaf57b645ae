"""``polyccm plan --provider packet`` against the real kube-apiserver and the Metal emulator:
Elastic IPs reserved by upstream's CCM (through Metal's API, with its tags and its cluster id,
the kube-system namespace's UID) are adopted as they are, services without one would get one,
and the plan sends no write to Metal (the emulator's call records) and needs no write to the
cluster (a read-only ServiceAccount)."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

import pytest
from polyccm.kube.api import NAMESPACES, SERVICES, KubeApi
from polyccm.objects import Service
from polyccm_packet import provider as packet_provider
from polyccm_packet.config import MetalConfig
from polyccm_packet.load_balancer import EIP_FACILITY_ANNOTATION, EIP_METRO_ANNOTATION
from polyccm_packet_emulator.testing import MetalApi, MetalCloudUnderTest, control, provider_for
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.kubeobjects import make_service
from polyccm_testing.opstools import (
    CommandResult,
    plans_by_service,
    read_only_kubeconfig,
    run_command,
)

USAGE = "usage=cloud-provider-equinix-metal-auto"


def upstream_tags(namespace: str, name: str, cluster_id: str) -> list[str]:
    """The tags upstream's CCM puts on a service's Elastic IP."""
    digest = base64.b64encode(hashlib.sha256(f"{namespace}/{name}".encode()).digest()).decode()
    return [USAGE, f"service={digest}", f"cluster={cluster_id}"]


def plan(control_plane: ControlPlane, kubeconfig: Path | None = None) -> CommandResult:
    return run_command("plan", "packet", kubeconfig or control_plane.kubeconfig, "-o", "json")


def writes(metal: Mapping[str, str]) -> int:
    return int(MetalCloudUnderTest(metal).write_calls())


@pytest.mark.usefixtures("clean_nodes")
def test_upstream_elastic_ips_are_adopted_read_only(
    metal: Mapping[str, str],
    kube_api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> None:
    # Upstream tags with the kube-system namespace's UID (metal/loadbalancers.go:74-81,111,627
    # @38d15e2); polyccm reads the same one, with no setting (it used --cluster-name).
    cluster_id = kube_api.get(NAMESPACES, "kube-system")["metadata"]["uid"]
    api = MetalApi(metal)
    made = {}
    for name in ("web", "api"):
        make_service(kube_api, namespace, name)
        made[name] = api.request_ip(tags=upstream_tags(namespace, name, cluster_id))
    before = set(MetalCloudUnderTest(metal).load_balancer_resources())
    control(metal).reset_calls()
    namespaces = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}
    kubeconfig = read_only_kubeconfig(
        kube_api, control_plane, namespace, tmp_path, rules=[namespaces]
    )

    result = plan(control_plane, kubeconfig)

    assert result.status == 0, result
    found = plans_by_service(result, namespace)
    assert {n: (p["action"], p["differences"], p["problems"]) for n, p in found.items()} == {
        "web": ("adopt", [], []),
        "api": ("adopt", [], []),
    }
    assert found["web"]["loadBalancer"] == ":".join(upstream_tags(namespace, "web", cluster_id))
    calls = control(metal).calls()
    assert calls.get("findIPReservations", 0) >= 2
    assert writes(metal) == 0, calls
    assert set(MetalCloudUnderTest(metal).load_balancer_resources()) == before


@pytest.mark.usefixtures("clean_nodes")
def test_an_account_that_cannot_read_kube_system_is_told_in_one_line(
    metal: Mapping[str, str], kube_api: KubeApi, control_plane: ControlPlane, namespace: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    # The Elastic IPs' cluster tag is the kube-system UID (metal/loadbalancers.go:74-81
    # @38d15e2): without it plan could name no load balancer right.
    make_service(kube_api, namespace, "web")
    kubeconfig = read_only_kubeconfig(kube_api, control_plane, namespace, tmp_path)

    result = plan(control_plane, kubeconfig)

    assert result.status == 2, result
    assert "cannot read namespace kube-system, whose UID tags the Elastic IPs" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.usefixtures("clean_nodes")
def test_what_ensure_would_do_create_fail_and_warn(
    metal: Mapping[str, str], kube_api: KubeApi, control_plane: ControlPlane, namespace: str
) -> None:
    uid = kube_api.get(NAMESPACES, "kube-system")["metadata"]["uid"]
    ours = provider_for(metal, METAL_CLUSTER_ID=uid).load_balancer()
    make_service(kube_api, namespace, "kept")
    ours.ensure_load_balancer("kubernetes", Service(kube_api.get(SERVICES, "kept", namespace)), [])
    make_service(kube_api, namespace, "fresh")
    make_service(
        kube_api,
        namespace,
        "elsewhere",
        lambda s: s["metadata"]["annotations"].update(
            {EIP_FACILITY_ANNOTATION: "sv15", EIP_METRO_ANNOTATION: "ny"}
        ),
    )
    make_service(
        kube_api, namespace, "unheld", lambda s: s["spec"].update(loadBalancerIP="198.51.100.7")
    )
    operators = MetalApi(metal).request_ip(tags=["team=web"])
    make_service(
        kube_api, namespace, "operators",
        lambda s: s["spec"].update(loadBalancerIP=operators["address"]),
    )  # fmt: skip
    writes_before = writes(metal)

    result = plan(control_plane)

    assert result.status == 1, result
    found = plans_by_service(result, namespace)
    assert found["kept"]["action"] == "adopt"
    assert found["fresh"]["action"] == "create"
    assert found["fresh"]["differences"][0] == {
        "aspect": "elastic-ip",
        "detail": "reserve a public IPv4 /32 in metro da",
    }
    elsewhere = found["elsewhere"]
    assert elsewhere["action"] == "create"
    assert elsewhere["differences"][0]["detail"] == "reserve a public IPv4 /32 in metro ny"
    assert [p["severity"] for p in elsewhere["problems"]] == ["warning"]
    assert EIP_FACILITY_ANNOTATION in elsewhere["problems"][0]["message"]
    # "adopt" only for a reservation with this cluster's tags for the service: an address named
    # in spec.loadBalancerIP without them is used as upstream uses it (metal/loadbalancers.go:
    # 422@38d15e2), never released (280), the project's or not.
    unheld, operator = found["unheld"], found["operators"]
    assert (unheld["action"], operator["action"]) == ("update", "update")
    assert "use 198.51.100.7 as it is" in unheld["differences"][0]["detail"]
    assert "198.51.100.7 is not an Elastic IP (/32) of project" in unheld["problems"][0]["message"]
    assert operator["differences"][0]["detail"].startswith(f"use {operators['address']} ")
    assert operator["problems"] == []
    assert writes(metal) == writes_before
    assert len(MetalCloudUnderTest(metal).elastic_ips()) == 1


# Every Metal operation the provider sends, and whether it only reads.
OPERATIONS = {
    "devices.find_device_by_id": True,
    "devices.find_project_devices": True,
    "devices.get_bgp_neighbor_data": True,
    "devices.create_bgp_session": False,
    "devices.create_ip_assignment": False,
    "bgp.find_bgp_config_by_project": True,
    "bgp.request_bgp_config": False,
    "ips.find_ip_reservations": True,
    "ips.find_ip_address_by_id": True,
    "ips.request_ip_reservation": False,
    "ips.delete_ip_address": False,
}


def test_the_read_only_guard_knows_every_operation_the_provider_sends() -> None:
    package = Path(packet_provider.__file__).parent
    sent = {
        match
        for path in package.glob("*.py")
        for match in re.findall(
            r'"((?:devices|bgp|ips|metros|projects)\.[a-z_]+)"', path.read_text()
        )
    }
    provider = packet_provider.MetalProvider(MetalConfig(api_key="unused", project_id="p-1"))

    assert sent == set(OPERATIONS)
    # The guard gets the method's name, as MetalClient.call passes it to cloudcalls.record.
    assert {op: provider.read_only_call(op.split(".")[1]) for op in OPERATIONS} == OPERATIONS
