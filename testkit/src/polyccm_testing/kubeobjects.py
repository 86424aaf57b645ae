"""Builders and waiters for tests against the real API server: nodes as a kubelet registers
them, LoadBalancer services and their ingress, events, (Cluster)Roles, their bindings and what
they allow, ServiceAccount tokens and kubeconfigs, and polling with a deadline. Shared by the
core's and the providers' tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest
from polyccm.kube.api import EVENTS, LEASES, NODES, SERVICES, ApiError, KubeApi, Resource
from polyccm.objects import UNINITIALIZED_TAINT

from polyccm_testing.devenv.state import write_kubeconfig

if TYPE_CHECKING:
    from polyccm_testing.devenv.controlplane import ControlPlane

SERVICE_ACCOUNTS = Resource("v1", "serviceaccounts", namespaced=True)
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io/v1", "clusterrolebindings", namespaced=False
)
ROLES = Resource("rbac.authorization.k8s.io/v1", "roles", namespaced=True)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io/v1", "rolebindings", namespaced=True)


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}; last: {last!r}")


def stays(predicate: Callable[[], Any], seconds: float = 2.0) -> bool:
    """Whether ``predicate`` holds for ``seconds`` (a short observation window)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not predicate():
            return False
        time.sleep(0.1)
    return True


def make_node(
    api: KubeApi,
    name: str,
    *,
    tainted: bool = True,
    ready: bool = True,
    provider_id: str = "",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    pod_cidrs: tuple[str, ...] = (),
    addresses: tuple[tuple[str, str], ...] = (),
) -> dict[str, Any]:
    """Create a Node as a kubelet with ``--cloud-provider=external`` would register it."""
    spec: dict[str, Any] = {}
    if tainted:
        spec["taints"] = [{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]
    if provider_id:
        spec["providerID"] = provider_id
    if pod_cidrs:
        spec["podCIDR"] = pod_cidrs[0]
        spec["podCIDRs"] = list(pod_cidrs)
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
    }
    api.create(NODES, body)
    set_ready(api, name, ready, addresses=addresses)
    return api.get(NODES, name)


def set_ready(
    api: KubeApi, name: str, ready: bool, *, addresses: tuple[tuple[str, str], ...] = ()
) -> None:
    """Set the node's Ready condition (and addresses) as a kubelet would."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ]
    }
    if addresses:
        status["addresses"] = [{"type": t, "address": a} for t, a in addresses]
    api.patch(NODES, name, {"status": status}, subresource="status")


def make_service(
    api: KubeApi, namespace: str, name: str, *tweaks: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Create a ``type: LoadBalancer`` service on port 80, changed by ``tweaks``."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "annotations": {}},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    }
    for tweak in tweaks:
        tweak(body)
    return api.create(SERVICES, body, namespace)


def ingress_ip(api: KubeApi, namespace: str, name: str) -> str:
    """The IP of Service ``namespace/name``'s first load-balancer ingress; empty while it has
    none."""
    return _first_ingress(api, namespace, name, "ip")


def ingress_hostname(api: KubeApi, namespace: str, name: str) -> str:
    """The hostname of Service ``namespace/name``'s first load-balancer ingress (an AWS load
    balancer's DNS name); empty while it has none."""
    return _first_ingress(api, namespace, name, "hostname")


def _first_ingress(api: KubeApi, namespace: str, name: str, field: str) -> str:
    status = api.get(SERVICES, name, namespace).get("status") or {}
    ingress = (status.get("loadBalancer") or {}).get("ingress") or [{}]
    return str(ingress[0].get(field) or "")


def events_for(api: KubeApi, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """``(type, reason, message)`` of the events about object ``name`` in ``namespace``."""
    listing = api.list(EVENTS, namespace, fieldSelector=f"involvedObject.name={name}")
    return [
        (e.get("type", ""), e.get("reason", ""), e.get("message", "")) for e in listing["items"]
    ]


def reasons_for(api: KubeApi, namespace: str, name: str) -> set[str]:
    return {reason for _type, reason, _message in events_for(api, namespace, name)}


def lease_holder(api: KubeApi, namespace: str, name: str = "cloud-controller-manager") -> str:
    """The identity holding Lease ``namespace/name``; empty when released or absent."""
    try:
        lease = api.get(LEASES, name, namespace)
    except ApiError:
        return ""
    return str(lease.get("spec", {}).get("holderIdentity") or "")


def make_cluster_role(api: KubeApi, name: str, rules: list[dict[str, Any]]) -> None:
    """Create ClusterRole ``name`` granting ``rules`` (delete it after: it outlives any
    namespace)."""
    api.create(CLUSTER_ROLES, {"metadata": {"name": name}, "rules": rules})


def make_role(api: KubeApi, namespace: str, name: str, rules: list[dict[str, Any]]) -> None:
    """Create Role ``namespace/name`` granting ``rules`` in that namespace."""
    api.create(ROLES, {"metadata": {"name": name}, "rules": rules}, namespace)


def _binding(name: str, kind: str, role: str, subject: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [subject],
    }


def bind_cluster_role(api: KubeApi, name: str, cluster_role: str, subject: dict[str, str]) -> None:
    """Create ClusterRoleBinding ``name`` giving ClusterRole ``cluster_role`` to ``subject`` (a
    ``User``, ``Group`` or ``ServiceAccount`` entry of the binding's subjects)."""
    api.create(CLUSTER_ROLE_BINDINGS, _binding(name, "ClusterRole", cluster_role, subject))


def bind_role(api: KubeApi, namespace: str, name: str, role: str, subject: dict[str, str]) -> None:
    """Create RoleBinding ``namespace/name`` giving Role ``role`` of that namespace to
    ``subject``."""
    api.create(ROLE_BINDINGS, _binding(name, "Role", role, subject), namespace)


def allowed(api: KubeApi, attributes: dict[str, str]) -> bool:
    """Whether the API server's authorizer lets the identity ``api`` authenticates as do what
    ``attributes`` (a SelfSubjectAccessReview's ``resourceAttributes``: verb, group, resource,
    namespace, name) say, now. A new binding takes a moment to reach the authorizer."""
    answer = api.request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    )
    return bool(answer.get("status", {}).get("allowed"))


@contextmanager
def user_with_cluster_role(api: KubeApi, user: str, rules: list[dict[str, Any]]) -> Iterator[None]:
    """For the block, User ``user`` (a name to impersonate or to review access for; no account
    behind it) holds ClusterRole ``user`` granting ``rules``; the role and its binding are
    deleted after."""
    make_cluster_role(api, user, rules)
    try:
        subject = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
        bind_cluster_role(api, user, user, subject)
        yield
    finally:
        for resource in (CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES):
            try:
                api.delete(resource, user)
            except ApiError as error:
                if not error.not_found:
                    raise


def make_service_account(
    api: KubeApi, namespace: str, name: str, *, cluster_role: str | None = None
) -> str:
    """Create ServiceAccount ``namespace/name``, bound to ``cluster_role`` when given by a
    ClusterRoleBinding, whose name is returned (delete it after: it outlives the namespace)."""
    api.create(SERVICE_ACCOUNTS, {"metadata": {"name": name}}, namespace)
    if cluster_role is None:
        return ""
    binding = f"{namespace}-{name}"
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    bind_cluster_role(api, binding, cluster_role, subject)
    return binding


def service_account_token(
    api: KubeApi, namespace: str, name: str, *, expiration_seconds: int = 3600
) -> str:
    """A fresh token of ServiceAccount ``namespace/name`` from the TokenRequest API (each call
    returns a different one)."""
    answer = api.request(
        "POST",
        f"/api/v1/namespaces/{quote(namespace, safe='')}/serviceaccounts/{quote(name, safe='')}"
        "/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        },
    )
    return str(answer["status"]["token"])


def service_account_kubeconfig(
    api: KubeApi, control_plane: ControlPlane, directory: Path, *, namespace: str, name: str
) -> Path:
    """A kubeconfig for ``control_plane`` (its CA verified) that authenticates as ServiceAccount
    ``namespace/name`` with a TokenRequest token; written in a folder of its own in ``directory``,
    readable by the owner only."""
    folder = directory / f"{namespace}.{name}"
    folder.mkdir(parents=True, exist_ok=True)
    return write_kubeconfig(
        folder,
        server=control_plane.api_url,
        ca_cert=control_plane.ca_cert,
        token=service_account_token(api, namespace, name),
        name=name,
    )
