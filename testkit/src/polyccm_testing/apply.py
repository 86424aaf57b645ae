"""Server-side apply of a manifest's objects to the real API server, as ``kubectl apply
--server-side`` sends them: each object's URL found through API discovery (so the kinds of CRDs
installed a moment ago are found too), and the dry run with strict field validation that tests
use to have the API server check a manifest without storing it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from polyccm.kube.api import KubeApi

FIELD_MANAGER = "polyccm-tests"


def object_path(api: KubeApi, obj: dict[str, Any]) -> str:
    """The URL of ``obj`` (by its apiVersion, kind, namespace and name), through discovery."""
    group_version = obj["apiVersion"]
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    listing = api.request("GET", prefix)
    (resource,) = [
        r for r in listing["resources"] if r["kind"] == obj["kind"] and "/" not in r["name"]
    ]
    metadata = obj["metadata"]
    if resource["namespaced"]:
        prefix = f"{prefix}/namespaces/{metadata['namespace']}"
    return f"{prefix}/{resource['name']}/{metadata['name']}"


def apply(api: KubeApi, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """Server-side apply ``obj`` with strict field validation (an unknown or duplicated field is
    an error, not a warning); returns the object as the API server would store it. With
    ``dry_run`` the API server validates, defaults and admits it but stores nothing."""
    query: dict[str, Any] = {"fieldManager": FIELD_MANAGER, "force": True}
    query["fieldValidation"] = "Strict"
    if dry_run:
        query["dryRun"] = "All"
    return api.request(
        "PATCH",
        object_path(api, obj),
        query=query,
        body=obj,
        content_type="application/apply-patch+yaml",
    )
