"""Deleting namespaces and nodes on a control plane that runs no kube-controller-manager.

On the bare etcd + kube-apiserver of the development environment no namespace controller empties
a deleted namespace, so it would stay ``Terminating`` forever and its objects would linger, still
visible in cluster-wide lists (a service test would see another test's services). These helpers
do the namespace controller's work in-process: delete every namespaced collection, strip the
finalizers of whatever is held back (no controller will ever release them), then finalize the
namespace. Nodes get the same treatment.
"""

from __future__ import annotations

import time
from typing import Any

from polyccm.kube.api import MERGE_PATCH, NAMESPACES, NODES, ApiError, KubeApi, Resource

#: Per API server URL, the namespaced resources that support ``deletecollection``.
_collections: dict[str, list[Resource]] = {}

_DROP_FINALIZERS = {"metadata": {"finalizers": None}}


def namespaced_collections(api: KubeApi) -> list[Resource]:
    """Every namespaced resource (preferred versions only) that can be listed and deleted as a
    collection; discovered once per API server."""
    host = str(api.configuration.host)
    cached = _collections.get(host)
    if cached is not None:
        return cached
    group_versions = ["v1"]
    for group in api.request("GET", "/apis").get("groups", []):
        preferred = group.get("preferredVersion", {}).get("groupVersion")
        if preferred:
            group_versions.append(str(preferred))
    found: list[Resource] = []
    for group_version in group_versions:
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        try:
            listing = api.request("GET", path)
        except ApiError:
            continue  # an aggregated API that is not served right now
        for entry in listing.get("resources", []):
            verbs = set(entry.get("verbs", []))
            if (
                entry.get("namespaced")
                and "/" not in entry["name"]
                and {"list", "deletecollection"} <= verbs
            ):
                found.append(Resource(group_version, str(entry["name"]), namespaced=True))
    _collections[host] = found
    return found


def _items(api: KubeApi, path: str) -> list[dict[str, Any]]:
    try:
        return list(api.request("GET", path).get("items", []))
    except ApiError as error:
        if error.status in (403, 404, 405):
            return []
        raise


def _release(api: KubeApi, resource: Resource, item: dict[str, Any]) -> None:
    """Remove ``item``'s finalizers (if any) and delete it; gone already is fine."""
    metadata = item.get("metadata", {})
    name = str(metadata.get("name"))
    namespace = metadata.get("namespace")
    try:
        if metadata.get("finalizers"):
            api.patch(resource, name, _DROP_FINALIZERS, namespace, patch_type=MERGE_PATCH)
        if not metadata.get("deletionTimestamp"):
            api.delete(resource, name, namespace, gracePeriodSeconds=0)
    except ApiError as error:
        if not error.not_found:
            raise


def empty_namespace(api: KubeApi, namespace: str) -> None:
    """Delete every object in ``namespace``, forcing past finalizers and grace periods."""
    for resource in namespaced_collections(api):
        path = resource.path(namespace)
        if not _items(api, path):
            continue
        try:
            api.request("DELETE", path, query={"gracePeriodSeconds": 0})
        except ApiError as error:
            if error.status not in (403, 404, 405):
                raise
        for item in _items(api, path):
            _release(api, resource, item)


def delete_namespace(api: KubeApi, namespace: str, *, timeout: float = 30.0) -> None:
    """Delete ``namespace`` and everything in it, and wait until it is gone."""
    try:
        api.delete(NAMESPACES, namespace)
    except ApiError as error:
        if error.not_found:
            return
        raise
    empty_namespace(api, namespace)
    deadline = time.monotonic() + timeout
    while True:
        try:
            current = api.get(NAMESPACES, namespace)
        except ApiError as error:
            if error.not_found:
                return
            raise
        if current.get("spec", {}).get("finalizers"):
            current["spec"]["finalizers"] = []
            try:
                api.request("PUT", NAMESPACES.path(name=namespace) + "/finalize", body=current)
            except ApiError as error:
                if not (error.not_found or error.conflict):
                    raise
        if time.monotonic() >= deadline:
            raise TimeoutError(f"namespace {namespace} still exists after {timeout:.0f} s")
        time.sleep(0.1)


def delete_all_nodes(api: KubeApi, *, timeout: float = 30.0) -> None:
    """Delete every Node object, forcing past finalizers, and wait until none is left."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = _items(api, NODES.path())
        if not nodes:
            return
        for node in nodes:
            _release(api, NODES, node)
        if time.monotonic() >= deadline:
            names = ", ".join(str(node["metadata"]["name"]) for node in nodes)
            raise TimeoutError(f"nodes still exist after {timeout:.0f} s: {names}")
        time.sleep(0.05)
