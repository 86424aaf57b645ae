"""``polyccm orphans --provider packet`` against the real kube-apiserver and the Metal emulator:
Elastic IPs carrying this cluster's tags whose service is gone are listed (without a write to
Metal) and, with ``--delete --yes``, released; look-alikes without the cluster's tags (another
cluster's, an untagged one, an operator's) and a live service's are never touched."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

import pytest
from polyccm.errors import CloudError
from polyccm.kube.api import MERGE_PATCH, NAMESPACES, SERVICES, KubeApi
from polyccm_packet_emulator.testing import MetalApi, MetalCloudUnderTest, control, provider_for
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.kubeobjects import make_service
from polyccm_testing.opstools import CommandResult, listed_orphans, run_command

USAGE = "usage=cloud-provider-equinix-metal-auto"


def service_tag(namespace: str, name: str) -> str:
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return "service=" + base64.b64encode(digest).decode()


def orphans(control_plane: ControlPlane, *extra: str) -> CommandResult:
    return run_command("orphans", "packet", control_plane.kubeconfig, *extra)


def ids(metal: Mapping[str, str]) -> set[str]:
    """Every reservation of the project (tagged or not)."""
    api = MetalApi(metal)
    found = api.ok("GET", f"/projects/{api.project_id}/ips?types=public_ipv4")
    return {str(ip["id"]) for ip in found["ip_addresses"]}


@pytest.fixture
def leaky(metal: Mapping[str, str], kube_api: KubeApi, namespace: str) -> dict[str, Any]:
    """Reservations: a live service's; one whose service was deleted and one whose service is
    no longer a LoadBalancer (both leaked); and look-alikes of a deleted service's: another
    cluster's, one without the cluster tag, one without the usage tag, an operator's."""
    api = MetalApi(metal)
    # The cluster's id is upstream's, the kube-system UID (metal/loadbalancers.go:111@38d15e2).
    cluster = "cluster=" + kube_api.get(NAMESPACES, "kube-system")["metadata"]["uid"]
    for name in ("live", "retyped"):
        make_service(kube_api, namespace, name)
    kube_api.patch(
        SERVICES, "retyped", {"spec": {"type": "ClusterIP"}}, namespace, patch_type=MERGE_PATCH
    )
    gone = service_tag(namespace, "gone")
    made: dict[str, list[str]] = {
        "live": [USAGE, service_tag(namespace, "live"), cluster],
        "gone": [USAGE, gone, cluster],
        "retyped": [USAGE, service_tag(namespace, "retyped"), cluster],
        "other-cluster": [USAGE, gone, "cluster=another"],
        "no-cluster": [USAGE, gone],
        "no-usage": [gone, cluster],
        "operator": ["team=web"],
    }
    found = {key: api.request_ip(tags=tags) for key, tags in made.items()}
    return {**found, "cluster": cluster}


def test_only_the_leaked_marked_addresses_are_listed_without_a_write(
    leaky: dict[str, Any], metal: Mapping[str, str], control_plane: ControlPlane, namespace: str
) -> None:
    control(metal).reset_calls()

    result = orphans(control_plane, "-o", "json")

    assert result.status == 1, result
    listed = {o["id"]: o for o in listed_orphans(result)}
    assert set(listed) == {leaky["gone"]["id"], leaky["retyped"]["id"]}
    assert listed[leaky["retyped"]["id"]]["reason"] == (
        f"service {namespace}/retyped no longer wants a load balancer"
    )
    gone = listed[leaky["gone"]["id"]]
    assert gone["kind"] == "elastic-ip"
    assert gone["name"] == f"{leaky['gone']['address']}/32"
    assert leaky["cluster"] in gone["mark"]
    assert MetalCloudUnderTest(metal).write_calls() == 0, control(metal).calls()


def test_delete_yes_releases_exactly_the_orphans(
    leaky: dict[str, Any], metal: Mapping[str, str], control_plane: ControlPlane
) -> None:
    before = ids(metal)

    result = orphans(control_plane, "--delete", "--yes")

    assert result.status == 0, result
    deleted = [line for line in result.stdout.splitlines() if line.startswith("deleted ")]
    assert sorted(deleted) == sorted(
        f"deleted elastic-ip {leaky[k]['id']}" for k in ("gone", "retyped")
    )
    assert ids(metal) == before - {leaky["gone"]["id"], leaky["retyped"]["id"]}
    assert orphans(control_plane).status == 0


def test_delete_keeps_an_address_that_lost_the_marks_and_accepts_one_already_gone(
    leaky: dict[str, Any], metal: Mapping[str, str]
) -> None:
    finder = provider_for(metal, METAL_CLUSTER_ID=leaky["cluster"].split("=")[1]).orphans()
    (listed,) = [
        o for o in finder.find_orphans("kubernetes", [], []) if o.id == leaky["gone"]["id"]
    ]
    # As if the operator had retagged it between listing and deleting: the look-alike's id.
    retagged = dataclasses.replace(listed, id=leaky["other-cluster"]["id"])

    with pytest.raises(CloudError, match="no longer carries this cluster's tags"):
        finder.delete_orphan("kubernetes", retagged)
    MetalApi(metal).ok("DELETE", f"/ips/{listed.id}")
    finder.delete_orphan("kubernetes", listed)

    assert leaky["other-cluster"]["id"] in ids(metal)
