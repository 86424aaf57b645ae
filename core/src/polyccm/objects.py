"""Read-only views of the Kubernetes objects that controllers hand to providers.

The caches keep API objects as plain JSON dictionaries (camelCase keys, as the API server sends
them): they are small and fast to parse. :class:`Node` and :class:`Service` wrap such a
dictionary with typed accessors for what providers need, without copying it. ``raw`` gives the
whole object for anything else; treat it as read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

UNINITIALIZED_TAINT = "node.cloudprovider.kubernetes.io/uninitialized"
SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
PROVIDED_NODE_IP_ANNOTATION = "alpha.kubernetes.io/provided-node-ip"
LOAD_BALANCER_FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
"""The finalizer the service controller puts on a Service it made a load balancer for, and takes
off once that load balancer is deleted (upstream's
``LoadBalancerCleanupFinalizer``, cloud-provider service/helpers/helper.go)."""

_EMPTY: Mapping[str, Any] = {}


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    current: Any = obj
    for key in path:
        # Cached objects are plain dicts: checked first, as the Mapping check costs ten times
        # more and runs for every field of every node in each backend computation.
        if type(current) is not dict and not isinstance(current, Mapping):
            return None
        current = current.get(key)
    return current


class _View:
    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw

    @property
    def name(self) -> str:
        return str(_get(self.raw, "metadata", "name") or "")

    @property
    def uid(self) -> str:
        return str(_get(self.raw, "metadata", "uid") or "")

    @property
    def labels(self) -> Mapping[str, str]:
        return _get(self.raw, "metadata", "labels") or _EMPTY

    @property
    def annotations(self) -> Mapping[str, str]:
        return _get(self.raw, "metadata", "annotations") or _EMPTY

    @property
    def deletion_timestamp(self) -> str | None:
        value = _get(self.raw, "metadata", "deletionTimestamp")
        return str(value) if value else None

    @property
    def resource_version(self) -> str:
        return str(_get(self.raw, "metadata", "resourceVersion") or "")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Node(_View):
    """A node as the controllers and providers see it."""

    __slots__ = ()

    @property
    def provider_id(self) -> str:
        return str(_get(self.raw, "spec", "providerID") or "")

    @property
    def pod_cidrs(self) -> tuple[str, ...]:
        cidrs = _get(self.raw, "spec", "podCIDRs") or []
        single = _get(self.raw, "spec", "podCIDR")
        if not cidrs and single:
            cidrs = [single]
        return tuple(str(c) for c in cidrs)

    @property
    def taints(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(_get(self.raw, "spec", "taints") or ())

    def has_taint(self, key: str) -> bool:
        return any(t.get("key") == key for t in self.taints)

    @property
    def addresses(self) -> tuple[tuple[str, str], ...]:
        """``(type, address)`` pairs from ``status.addresses``."""
        return tuple(
            (str(a.get("type", "")), str(a.get("address", "")))
            for a in _get(self.raw, "status", "addresses") or ()
        )

    def address_of(self, address_type: str) -> str:
        """The first address of ``address_type``, or an empty string."""
        return next((a for t, a in self.addresses if t == address_type), "")

    @property
    def ready(self) -> bool:
        for condition in _get(self.raw, "status", "conditions") or ():
            if condition.get("type") == "Ready":
                return bool(condition.get("status") == "True")
        return False


@dataclass(frozen=True, slots=True)
class ServicePort:
    """One entry of ``service.spec.ports``."""

    name: str
    protocol: str
    port: int
    node_port: int
    target_port: int | str | None


class Service(_View):
    """A service as the service controller and providers see it."""

    __slots__ = ()

    @property
    def namespace(self) -> str:
        return str(_get(self.raw, "metadata", "namespace") or "")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def type(self) -> str:
        return str(_get(self.raw, "spec", "type") or "ClusterIP")

    @property
    def ports(self) -> tuple[ServicePort, ...]:
        return tuple(
            ServicePort(
                name=str(p.get("name") or ""),
                protocol=str(p.get("protocol") or "TCP"),
                port=int(p.get("port") or 0),
                node_port=int(p.get("nodePort") or 0),
                target_port=p.get("targetPort"),
            )
            for p in _get(self.raw, "spec", "ports") or ()
        )

    @property
    def load_balancer_class(self) -> str | None:
        value = _get(self.raw, "spec", "loadBalancerClass")
        return str(value) if value else None

    @property
    def load_balancer_ip(self) -> str:
        return str(_get(self.raw, "spec", "loadBalancerIP") or "")

    @property
    def load_balancer_source_ranges(self) -> tuple[str, ...]:
        return tuple(_get(self.raw, "spec", "loadBalancerSourceRanges") or ())

    @property
    def external_traffic_policy(self) -> str:
        return str(_get(self.raw, "spec", "externalTrafficPolicy") or "Cluster")

    @property
    def health_check_node_port(self) -> int:
        return int(_get(self.raw, "spec", "healthCheckNodePort") or 0)

    @property
    def session_affinity(self) -> str:
        return str(_get(self.raw, "spec", "sessionAffinity") or "None")

    @property
    def ip_families(self) -> tuple[str, ...]:
        return tuple(_get(self.raw, "spec", "ipFamilies") or ())

    @property
    def finalizers(self) -> tuple[str, ...]:
        return tuple(_get(self.raw, "metadata", "finalizers") or ())

    @property
    def load_balancer_status(self) -> Mapping[str, Any]:
        return _get(self.raw, "status", "loadBalancer") or _EMPTY


def wants_load_balancer(service: Service) -> bool:
    """Whether the service controller should give ``service`` a load balancer: ``type:
    LoadBalancer`` and no ``loadBalancerClass`` (a class means another controller serves it)."""
    return service.type == "LoadBalancer" and service.load_balancer_class is None
