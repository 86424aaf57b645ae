"""The Kubernetes side of a benchmark: identities, nodes registered as kubelets do, services,
and trackers that see them converge.

Each client measured (polyccm, each Go peer, the bare client) runs as its own ServiceAccount in
kube-system (bound to cluster-admin, so RBAC costs all the same), so the API server's audit log
tells their requests apart. The harness itself is the admin user, which the audit policy leaves
out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from polyccm.kube.api import NAMESPACES, NODES, SERVICES, ApiError, KubeApi, Resource
from polyccm.objects import UNINITIALIZED_TAINT

from bench import incluster

NAMESPACE = "bench"
IDENTITY_NAMESPACE = "kube-system"
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io/v1", "clusterrolebindings", False)
SERVICE_ACCOUNTS = Resource("v1", "serviceaccounts", namespaced=True)
#: How the harness says "this fake instance is gone" to the framework floor's fake cloud.
TERMINATED_ANNOTATION = "bench.polyccm.dev/terminated"
#: Parallel requests of the harness when it registers or deletes objects in a burst.
BURST_WORKERS = 8

T = TypeVar("T")


def username(identity: str) -> str:
    """The user name the API server sees for ``identity``."""
    return f"system:serviceaccount:{IDENTITY_NAMESPACE}:{identity}"


def make_identity(admin: KubeApi, identity: str, directory: Path, ca_cert: Path) -> Path:
    """A ServiceAccount ``identity`` bound to cluster-admin, and a kubeconfig with a token for
    it; returns the kubeconfig's path. The token and CA are also written as a pod's service
    account directory (:func:`bench.incluster.write_account`), for a CCM run in-cluster."""
    try:
        admin.create(SERVICE_ACCOUNTS, {"metadata": {"name": identity}}, IDENTITY_NAMESPACE)
    except ApiError as error:
        if not error.conflict:
            raise
    binding = {
        "metadata": {"name": f"bench:{identity}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "ServiceAccount", "name": identity, "namespace": IDENTITY_NAMESPACE}],
    }
    try:
        admin.create(CLUSTER_ROLE_BINDINGS, binding)
    except ApiError as error:
        if not error.conflict:
            raise
    answer = admin.request(
        "POST",
        SERVICE_ACCOUNTS.path(IDENTITY_NAMESPACE, identity) + "/token",
        body={"spec": {"expirationSeconds": 86400}},
    )
    server = admin.configuration.host
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "bench", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}
        ],
        "users": [{"name": identity, "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": identity, "context": {"cluster": "bench", "user": identity}}],
        "current-context": identity,
    }
    path = directory / f"kubeconfig-{identity}"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    incluster.write_account(directory, identity, answer["status"]["token"], ca_cert)
    return path


def ensure_namespace(admin: KubeApi) -> None:
    try:
        admin.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    except ApiError as error:
        if not error.conflict:
            raise


def burst(action: Callable[[T], object], items: Iterable[T]) -> None:
    """``action`` on every item, :data:`BURST_WORKERS` at a time; the first error is raised."""
    with ThreadPoolExecutor(BURST_WORKERS) as pool:
        for future in [pool.submit(action, item) for item in items]:
            future.result()


def ready_condition(status: str = "True") -> dict[str, str]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "type": "Ready",
        "status": status,
        "reason": "KubeletReady" if status == "True" else "NodeStatusUnknown",
        "message": "bench",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def register_node(admin: KubeApi, name: str) -> None:
    """Register ``name`` as ``kubelet --cloud-provider=external`` does, in one request:
    tainted uninitialised, no providerID, its status Ready."""
    admin.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "spec": {
                "taints": [{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]
            },
            "status": {"conditions": [ready_condition()]},
        },
    )


def register_nodes(admin: KubeApi, names: Iterable[str]) -> None:
    burst(lambda name: register_node(admin, name), names)


def node_gone(admin: KubeApi, name: str) -> None:
    """What the rest of a cluster says once an instance is terminated: its kubelet stops, so
    the node lifecycle marks it Unknown; the fake cloud learns it from an annotation."""
    admin.patch(NODES, name, {"metadata": {"annotations": {TERMINATED_ANNOTATION: "true"}}})
    admin.patch(
        NODES, name, {"status": {"conditions": [ready_condition("Unknown")]}}, subresource="status"
    )


def service_body(index: int, annotations: Mapping[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"lb-{index:04d}",
            "namespace": NAMESPACE,
            "annotations": dict(annotations),
        },
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": f"lb-{index:04d}"},
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}],
        },
    }


def create_services(admin: KubeApi, bodies: Iterable[dict[str, Any]]) -> None:
    burst(lambda body: admin.create(SERVICES, body, NAMESPACE), bodies)


def delete_services(admin: KubeApi, names: Iterable[str]) -> None:
    burst(lambda name: admin.delete(SERVICES, name, NAMESPACE), names)


def clear(admin: KubeApi, timeout: float = 120.0) -> None:
    """Delete every node, and every service of the bench namespace (finalizers removed: no
    controller runs now), the nodes in one delete-collection request, and wait until they are
    gone."""
    for item in admin.list(SERVICES, NAMESPACE)["items"]:
        name = item["metadata"]["name"]
        if item["metadata"].get("finalizers"):
            admin.patch(SERVICES, name, {"metadata": {"finalizers": None}}, NAMESPACE)
    names = [item["metadata"]["name"] for item in admin.list(SERVICES, NAMESPACE)["items"]]
    burst(lambda name: _delete_quietly(admin, SERVICES, name, NAMESPACE), names)
    admin.request("DELETE", NODES.path(), timeout=timeout)
    deadline = time.monotonic() + timeout
    while admin.list(NODES, limit=1)["items"] or admin.list(SERVICES, NAMESPACE, limit=1)["items"]:
        if time.monotonic() > deadline:
            raise RuntimeError("nodes or services of a previous run are still there")
        time.sleep(0.2)


def _delete_quietly(admin: KubeApi, resource: Resource, name: str, namespace: str | None) -> None:
    try:
        admin.delete(resource, name, namespace)
    except ApiError as error:
        if not error.not_found:
            raise


# -- trackers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """How waiting for a phase ended: ``done``, or not, and then whether because nothing
    progressed for ``stalled`` seconds (else the time allowed ran out)."""

    done: bool
    stalled: float | None = None


class Tracker(Generic[T]):
    """The objects of one resource, as a watch shows them, each summarised by ``summarise``;
    :meth:`wait` blocks until a predicate over the summaries holds."""

    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        summarise: Callable[[Mapping[str, Any]], T],
        namespace: str | None = None,
    ) -> None:
        self._api = api
        self._resource = resource
        self._namespace = namespace
        self._summarise = summarise
        self._items: dict[str, T] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._handle: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"track-{resource}")
        self._synced = threading.Event()
        self._thread.start()
        if not self._synced.wait(60):
            raise RuntimeError(f"cannot list {resource.plural}")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listed = self._api.list(self._resource, self._namespace)
                items = {o["metadata"]["name"]: self._summarise(o) for o in listed["items"]}
                with self._lock:
                    self._items = items
                self._synced.set()
                version = listed["metadata"]["resourceVersion"]
                for event in self._api.watch(
                    self._resource,
                    self._namespace,
                    resource_version=version,
                    timeout_seconds=600,
                    on_open=self._opened,
                ):
                    self._apply(event)
            except Exception:  # noqa: BLE001 (a broken watch is listed and watched again)
                if self._stop.is_set():
                    return
                time.sleep(0.2)

    def _opened(self, handle: Any) -> None:
        self._handle = handle
        if self._stop.is_set():
            handle.shutdown()

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "BOOKMARK":
            return
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            with self._lock:
                self._items.pop(name, None)
            return
        summary = self._summarise(obj)
        with self._lock:
            self._items[name] = summary

    def snapshot(self) -> dict[str, T]:
        with self._lock:
            return dict(self._items)

    def wait(self, done: Callable[[Mapping[str, T]], bool], timeout: float) -> bool:
        """Whether ``done(items)`` became true within ``timeout`` seconds (checked every 0.1 s:
        a check may look at thousands of items)."""
        return self.wait_progress(done, timeout).done

    def wait_progress(
        self,
        done: Callable[[Mapping[str, T]], bool],
        timeout: float,
        progress: Callable[[Mapping[str, T]], int] | None = None,
        stall: float | None = None,
    ) -> Outcome:
        """Until ``done(items)``, for ``timeout`` seconds at most, or, with ``progress`` and
        ``stall``, until ``progress(items)`` (how far the phase got: a count) has not changed
        for ``stall`` seconds."""
        began = time.monotonic()
        deadline = began + timeout
        seen: int | None = None
        changed = began
        while True:
            with self._lock:
                if done(self._items):
                    return Outcome(True)
                count = progress(self._items) if progress is not None else None
            now = time.monotonic()
            if count != seen:
                seen, changed = count, now
            elif stall is not None and progress is not None and now - changed >= stall:
                return Outcome(False, stalled=now - changed)
            if now > deadline:
                return Outcome(False)
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.shutdown()
        self._thread.join(timeout=10)


def initialised(node: Mapping[str, Any]) -> bool:
    """Whether the cloud-node controller is done with ``node``: the uninitialised taint gone."""
    taints = node.get("spec", {}).get("taints") or ()
    return not any(t.get("key") == UNINITIALIZED_TAINT for t in taints)


def has_ingress(service: Mapping[str, Any]) -> bool:
    return bool(service.get("status", {}).get("loadBalancer", {}).get("ingress"))


def node_tracker(admin: KubeApi) -> Tracker[bool]:
    """Nodes, each ``True`` once initialised."""
    return Tracker(admin, NODES, initialised)


def service_tracker(admin: KubeApi) -> Tracker[bool]:
    """Services of the bench namespace, each ``True`` once it has an ingress."""
    return Tracker(admin, SERVICES, has_ingress, NAMESPACE)
