"""The test control plane behaves like a real cluster's API: nodes can be created, patched
(labels by strategic merge, status through its subresource) and watched from a resourceVersion;
RBAC refuses strangers; and the cleanup fixtures leave nothing behind.

Uses the ``control_plane``, ``kube_api``, ``namespace`` and ``clean_nodes`` fixtures of the
``polyccm_controlplane`` pytest plugin.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest
from polyccm.kube.api import CONFIGMAPS, NAMESPACES, NODES, SERVICES, ApiError, KubeApi
from polyccm_testing.devenv.cleanup import delete_all_nodes, delete_namespace
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.kubeobjects import user_with_cluster_role


def make_node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": f"test:///{name}"},
    }


def http_get(
    plane: ControlPlane, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """GET ``path`` on the API server with exactly ``headers`` (no credentials unless given)."""
    request = urllib.request.Request(plane.api_url + path, headers=headers or {})
    context = ssl.create_default_context(cafile=str(plane.ca_cert))
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read())


def test_a_node_can_be_created_patched_and_watched(kube_api: KubeApi, clean_nodes: None) -> None:
    start = kube_api.list(NODES)["metadata"]["resourceVersion"]

    kube_api.create(NODES, make_node("node-a", team="a"))
    labelled = kube_api.patch(NODES, "node-a", {"metadata": {"labels": {"zone": "z1"}}})
    status_patch = {
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "test",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    }
    with_status = kube_api.patch(NODES, "node-a", status_patch, subresource="status")

    assert labelled["metadata"]["labels"] == {"team": "a", "zone": "z1"}
    assert with_status["status"]["addresses"] == [{"type": "InternalIP", "address": "10.1.2.3"}]
    assert kube_api.get(NODES, "node-a")["status"]["conditions"][0]["status"] == "True"

    events = []
    with contextlib.closing(
        kube_api.watch(NODES, resource_version=start, timeout_seconds=10)
    ) as stream:
        for event in stream:
            if event["type"] == "BOOKMARK":
                continue
            events.append(event)
            if event["object"].get("status", {}).get("addresses"):
                break

    assert [event["type"] for event in events] == ["ADDED", "MODIFIED", "MODIFIED"]
    assert events[0]["object"]["metadata"]["labels"] == {"team": "a"}
    assert events[1]["object"]["metadata"]["labels"] == {"team": "a", "zone": "z1"}
    versions = [int(event["object"]["metadata"]["resourceVersion"]) for event in events]
    assert versions == sorted(versions)


def test_requests_without_credentials_are_forbidden(control_plane: ControlPlane) -> None:
    status, body = http_get(control_plane, "/api/v1/nodes")
    assert status == 403
    assert "system:anonymous" in body["message"]


def test_requests_with_an_unknown_token_are_unauthorized(control_plane: ControlPlane) -> None:
    headers = {"Authorization": f"Bearer {secrets.token_urlsafe(16)}"}
    status, _ = http_get(control_plane, "/api/v1/nodes", headers)
    assert status == 401


def test_rbac_decides_what_an_authenticated_user_may_do(
    control_plane: ControlPlane, kube_api: KubeApi
) -> None:
    user = f"user-{secrets.token_hex(4)}"
    as_user = {"Authorization": f"Bearer {control_plane.admin_token}", "Impersonate-User": user}
    assert http_get(control_plane, "/api/v1/nodes", as_user)[0] == 403

    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]
    with user_with_cluster_role(kube_api, user, rules):
        assert http_get(control_plane, "/api/v1/nodes", as_user)[0] == 200
        assert http_get(control_plane, "/api/v1/namespaces", as_user)[0] == 403


def test_the_namespace_fixture_gives_a_fresh_active_namespace(
    kube_api: KubeApi, namespace: str
) -> None:
    assert namespace.startswith("test-")
    assert kube_api.get(NAMESPACES, namespace)["status"]["phase"] == "Active"
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert kube_api.create(CONFIGMAPS, configmap, namespace)["metadata"]["namespace"] == namespace


def test_deleting_a_namespace_removes_its_objects_even_those_held_by_finalizers(
    kube_api: KubeApi,
) -> None:
    name = f"test-{secrets.token_hex(4)}"
    kube_api.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "lb", "finalizers": ["service.kubernetes.io/load-balancer-cleanup"]},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }
    kube_api.create(SERVICES, service, name)
    kube_api.create(CONFIGMAPS, {"metadata": {"name": "c"}}, name)

    delete_namespace(kube_api, name)

    with pytest.raises(ApiError) as missing:
        kube_api.get(NAMESPACES, name)
    assert missing.value.not_found
    everywhere = kube_api.list(SERVICES)["items"] + kube_api.list(CONFIGMAPS)["items"]
    assert [item for item in everywhere if item["metadata"]["namespace"] == name] == []


def test_deleting_all_nodes_removes_nodes_held_by_finalizers(
    kube_api: KubeApi, clean_nodes: None
) -> None:
    held = make_node("held")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    kube_api.create(NODES, held)
    kube_api.create(NODES, make_node("free"))

    delete_all_nodes(kube_api)

    assert kube_api.list(NODES)["items"] == []
