"""``polyccm orphans --provider digitalocean`` against the real kube-apiserver and the emulator:
load balancers leaked on purpose (their Service deleted, or no longer of type LoadBalancer) are
listed and deleted, exactly those; look-alikes without this cluster's marks (another cluster's
backends, no backends, a hand-made name, one backend not ours) are never touched. Listing
writes nothing to DigitalOcean (the emulator's call records)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from polyccm.cloud import default_load_balancer_name
from polyccm.errors import CloudError
from polyccm.kube.api import MERGE_PATCH, NODES, SERVICES, KubeApi
from polyccm.objects import Node, Service
from polyccm_digitalocean import annotations as ann
from polyccm_digitalocean.orphans import cluster_mark
from polyccm_digitalocean_emulator.testing import (
    TEST_REGION,
    DigitalOceanApi,
    control,
    provider_for,
    upstream_load_balancer,
)
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.kubeobjects import make_node, make_service
from polyccm_testing.opstools import CommandResult, listed_orphans, run_command


def orphans(control_plane: ControlPlane, *extra: str) -> CommandResult:
    return run_command("orphans", "digitalocean", control_plane.kubeconfig, *extra)


def balancer_names(cloud: DigitalOceanApi) -> set[str]:
    return {b["name"] for b in cloud.ok("GET", "/v2/load_balancers")["load_balancers"]}


def some_default_name() -> str:
    return "a" + uuid.uuid4().hex[:31]


@pytest.fixture
def leaky(
    do: Mapping[str, str],
    kube_api: KubeApi,
    namespace: str,
    clean_nodes: None,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, dict[str, Any]]:
    """Load balancers by role: "live" (named for its Service), "moved" (its Service was made
    again with the id annotation of the one before), "deleted" and "retyped" (leaked), and the
    look-alikes "foreign" (another cluster's droplet behind it), "empty" (no backends),
    "manual" (a hand-made name) and "mixed" (one backend is not a node of this cluster)."""
    monkeypatch.setenv("REGION", TEST_REGION)
    cloud = DigitalOceanApi(do)
    ours = cloud.create_droplets(2, prefix="orphans")
    for droplet in ours:
        make_node(kube_api, droplet["name"], tainted=False,
                  provider_id=f"digitalocean://{droplet['id']}")  # fmt: skip
    (stranger,) = cloud.create_droplets(1, prefix="elsewhere")
    backends = [d["id"] for d in ours]
    made: dict[str, dict[str, Any]] = {}
    for name in ("live", "deleted", "retyped"):
        service = Service(make_service(kube_api, namespace, name))
        lb_name = default_load_balancer_name(service)
        made[name] = upstream_load_balancer(cloud, lb_name, backends, {80: 30080})
    made["moved"] = upstream_load_balancer(cloud, some_default_name(), backends, {80: 30080})
    make_service(kube_api, namespace, "moved", lambda s: s["metadata"]["annotations"].update(
        {ann.LOAD_BALANCER_ID: made["moved"]["id"]}))  # fmt: skip
    kube_api.delete(SERVICES, "deleted", namespace)
    kube_api.patch(SERVICES, "retyped", {"spec": {"type": "ClusterIP"}}, namespace,
                   patch_type=MERGE_PATCH)  # fmt: skip
    for role, droplets in (("foreign", [stranger["id"]]), ("empty", []),
                           ("mixed", [backends[0], stranger["id"]])):  # fmt: skip
        made[role] = upstream_load_balancer(cloud, some_default_name(), droplets, {80: 30080})
    made["manual"] = upstream_load_balancer(cloud, "ingress-by-hand", backends, {80: 30080})
    return made


def test_lists_exactly_the_leaked_load_balancers_and_writes_nothing(
    do: Mapping[str, str], leaky: dict[str, dict[str, Any]], control_plane: ControlPlane,
    namespace: str,
) -> None:  # fmt: skip
    control(do).reset_calls()

    result = orphans(control_plane, "-o", "json")

    assert result.status == 1, result
    found = {o["id"]: o for o in listed_orphans(result)}
    assert set(found) == {leaky["deleted"]["id"], leaky["retyped"]["id"]}
    assert found[leaky["retyped"]["id"]]["reason"] == (
        f"service {namespace}/retyped no longer wants a load balancer"
    )
    deleted = leaky["deleted"]["name"]
    assert found[leaky["deleted"]["id"]]["reason"].startswith(
        f"no Service has a uid starting {deleted[1:9]}"
    )
    assert all(o["mark"].startswith("name a<uid>, backends ") for o in found.values())
    calls = control(do).calls()
    assert calls["loadBalancers_list"] == 1
    assert all(operation.endswith(("_get", "_list")) for operation in calls), calls


def test_delete_yes_deletes_exactly_those(
    leaky: dict[str, dict[str, Any]], do: Mapping[str, str], control_plane: ControlPlane
) -> None:
    cloud = DigitalOceanApi(do)

    result = orphans(control_plane, "--delete", "--yes")
    again = orphans(control_plane)

    assert result.status == 0, result
    assert {line for line in result.stdout.splitlines() if line.startswith("deleted ")} == {
        f"deleted load-balancer {leaky[role]['id']}" for role in ("deleted", "retyped")
    }
    kept = ("live", "moved", "foreign", "empty", "mixed", "manual")
    assert balancer_names(cloud) == {leaky[role]["name"] for role in kept}
    assert (again.status, again.stdout) == (0, "No orphaned cloud resources.\n")


def test_a_load_balancer_that_changed_since_it_was_found_is_kept(
    leaky: dict[str, dict[str, Any]], do: Mapping[str, str], kube_api: KubeApi
) -> None:
    cloud = DigitalOceanApi(do)
    capability = provider_for(do).orphans()
    nodes = [Node(n) for n in kube_api.list(NODES, None)["items"]]
    services = [Service(s) for s in kube_api.list(SERVICES, None)["items"]]
    found = {r.id: r for r in capability.find_orphans("kubernetes", services, nodes)}
    deleted, retyped = found[leaky["deleted"]["id"]], found[leaky["retyped"]["id"]]
    # Meanwhile someone points "retyped" at another droplet, and deletes "deleted" by hand.
    stranger = leaky["foreign"]["droplet_ids"][0]
    cloud.ok("POST", f"/v2/load_balancers/{retyped.id}/droplets", {"droplet_ids": [stranger]})
    cloud.ok("DELETE", f"/v2/load_balancers/{deleted.id}")

    capability.delete_orphan("kubernetes", deleted)  # gone already: done
    with pytest.raises(CloudError, match="no longer carries this cluster's marks; kept"):
        capability.delete_orphan("kubernetes", retyped)

    assert leaky["retyped"]["name"] in balancer_names(cloud)


def test_the_cluster_tag_marks_a_load_balancer_and_another_clusters_tag_excludes_it() -> None:
    name = some_default_name()
    ours = {"name": "custom", "droplet_ids": [], "tags": ["k8s:c1"]}
    theirs = {"name": name, "droplet_ids": [7], "tags": ["k8s:c2"]}
    untagged = {"name": name, "droplet_ids": [7]}

    assert cluster_mark(ours, {7}, "k8s:c1") == "tag k8s:c1"
    assert cluster_mark(theirs, {7}, "k8s:c1") is None
    assert cluster_mark(untagged, {7}, "k8s:c1") == (
        "name a<uid>, backends 7 are this cluster's nodes"
    )
    assert cluster_mark(untagged, {7, 8}, "") is not None
    assert cluster_mark(untagged, {8}, "") is None
