"""The provider contract: what a cloud offers the controllers, modelled on k8s.io/cloud-provider.

A provider is a :class:`CloudProvider` whose capability accessors return an implementation or
``None``. A controller whose capability is absent logs that and does not start. Everything a
controller hands a provider (:class:`~polyccm.objects.Node`, :class:`~polyccm.objects.Service`)
is read-only; providers answer with the frozen records defined here or raise one of the errors
from :mod:`polyccm.errors`, whose type decides what the controller does next.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from polyccm.errors import InstanceNotFound
from polyccm.objects import Node, Service

if TYPE_CHECKING:
    import contextlib

    from polyccm.events import EventRecorder
    from polyccm.kube.api import KubeApi
    from polyccm.kube.informer import Informer
    from polyccm.ops.contract import LoadBalancerPlanner, Orphans

# Node address types, as in core/v1 NodeAddressType.
HOSTNAME = "Hostname"
INTERNAL_IP = "InternalIP"
EXTERNAL_IP = "ExternalIP"
INTERNAL_DNS = "InternalDNS"
EXTERNAL_DNS = "ExternalDNS"


@dataclass(frozen=True, slots=True)
class NodeAddress:
    """One address of a node, as it appears in ``node.status.addresses``."""

    type: str
    address: str

    def to_api(self) -> dict[str, str]:
        """The Kubernetes API form of this address."""
        return {"type": self.type, "address": self.address}


@dataclass(frozen=True, slots=True)
class InstanceMetadata:
    """What the cloud knows about the instance behind a node.

    Empty strings mean "the cloud does not say"; the node controller then leaves the matching
    label alone.
    """

    provider_id: str
    """The node's ``spec.providerID``, e.g. ``aws:///us-east-1a/i-0123``."""
    instance_type: str = ""
    """Instance type or size (``m5.large``, ``s-2vcpu-4gb``)."""
    node_addresses: tuple[NodeAddress, ...] = ()
    """All addresses of the instance, in the cloud's preferred order."""
    zone: str = ""
    """Failure domain within the region; empty where the cloud has none (DigitalOcean)."""
    region: str = ""
    """The region the instance runs in."""
    additional_labels: Mapping[str, str] = field(default_factory=dict)
    """Provider-specific labels; keys under ``kubernetes.io/`` and ``k8s.io/`` are dropped."""


@dataclass(frozen=True, slots=True)
class Route:
    """A pod-network route: traffic to ``destination_cidr`` goes to the node ``target_node``."""

    name: str
    target_node: str
    destination_cidr: str
    blackhole: bool = False
    """True when the route's target no longer exists; the route controller deletes it."""


@dataclass(frozen=True, slots=True)
class PortStatus:
    """Status of one load-balancer port (``status.loadBalancer.ingress[].ports[]``)."""

    port: int
    protocol: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class LoadBalancerIngress:
    """One ingress point of a load balancer: an IP, a hostname, or both."""

    ip: str = ""
    hostname: str = ""
    ip_mode: str | None = None
    """``VIP`` or ``Proxy`` (KEP-1860); ``None`` leaves the field unset."""
    ports: tuple[PortStatus, ...] = ()

    def to_api(self) -> dict[str, object]:
        """The Kubernetes API form of this ingress."""
        api: dict[str, object] = {}
        if self.ip:
            api["ip"] = self.ip
        if self.hostname:
            api["hostname"] = self.hostname
        if self.ip_mode:
            api["ipMode"] = self.ip_mode
        if self.ports:
            api["ports"] = [
                {"port": p.port, "protocol": p.protocol, **({"error": p.error} if p.error else {})}
                for p in self.ports
            ]
        return api


@dataclass(frozen=True, slots=True)
class LoadBalancerStatus:
    """What ``EnsureLoadBalancer`` reports and the service controller writes to the service."""

    ingress: tuple[LoadBalancerIngress, ...] = ()
    warnings: tuple[str, ...] = ()
    """Problems the provider worked around rather than refused (an annotation value that means
    nothing, read the way upstream reads it). Each becomes a Warning event on the service
    (reason ``LoadBalancerWarning``); none is written to the service's status."""
    service_annotations: Mapping[str, str] = field(default_factory=dict)
    """Annotations the service controller writes onto the service after a successful ensure,
    in its own resourceVersion-guarded patch, when they differ from what the service has (for
    example the cloud's id of the load balancer, so that a rename never orphans it). Writing
    them is not a change that triggers another ensure. Not part of ``status``."""

    def to_api(self) -> dict[str, object]:
        """The Kubernetes API form (``status.loadBalancer``)."""
        return {"ingress": [i.to_api() for i in self.ingress]} if self.ingress else {}


class InstancesV2(ABC):
    """Instance lookups for the node and node-lifecycle controllers.

    Each method receives a node that may or may not carry ``spec.providerID``: look the
    instance up by provider ID first and fall back to the node name. Raise
    :class:`~polyccm.errors.InstanceNotFound` when the cloud has no such instance.
    """

    @abstractmethod
    def instance_exists(self, node: Node) -> bool:
        """Whether the instance behind ``node`` exists. A stopped instance still exists;
        only a terminated or deleted one does not."""

    @abstractmethod
    def instance_shutdown(self, node: Node) -> bool:
        """Whether the instance is shut down (stopped, powered off) but still exists. Raise
        :class:`~polyccm.errors.CapabilityNotImplemented` when the cloud cannot tell: the
        node-lifecycle controller then takes the instance for running (as upstream reads
        ``NotImplemented``), without a taint or a warning."""

    @abstractmethod
    def instance_metadata(self, node: Node) -> InstanceMetadata:
        """Provider ID, type, zone, region, addresses and extra labels of the instance."""

    def instances_metadata(
        self, nodes: Sequence[Node]
    ) -> Mapping[str, InstanceMetadata | Exception]:
        """Metadata of many nodes at once, keyed by node name.

        The node controller calls this when several uninitialised nodes wait at the same time
        (a scale-up, a controller restart). The default asks one node at a time; a provider
        whose cloud lists instances in bulk overrides it so that N nodes cost about N/100 calls.
        A node whose lookup fails maps to the exception instead of a result.
        """
        results: dict[str, InstanceMetadata | Exception] = {}
        for node in nodes:
            try:
                results[node.name] = self.instance_metadata(node)
            except Exception as error:  # noqa: BLE001 - the caller handles each node's failure
                results[node.name] = error
        return results

    def instances_exist(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        """Existence of many nodes at once, keyed by node name (default: one by one).

        Used by the node-lifecycle controller on every monitor period; a bulk override keeps
        that periodic work to a handful of cloud calls however many nodes are not ready.
        """
        results: dict[str, bool | Exception] = {}
        for node in nodes:
            try:
                results[node.name] = self.instance_exists(node)
            except InstanceNotFound:
                results[node.name] = False
            except Exception as error:  # noqa: BLE001
                results[node.name] = error
        return results

    def instances_shutdown(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        """Shutdown state of many existing instances at once, keyed by node name (default:
        one by one). The node-lifecycle controller asks this for every not-Ready node whose
        instance exists, so a bulk override keeps a cluster of booting nodes cheap."""
        results: dict[str, bool | Exception] = {}
        for node in nodes:
            try:
                results[node.name] = self.instance_shutdown(node)
            except Exception as error:  # noqa: BLE001
                results[node.name] = error
        return results


class LoadBalancer(ABC):
    """Load balancers for services of ``type: LoadBalancer``.

    ``service`` and ``nodes`` are read-only. ``nodes`` is the backend set the service controller
    chose (not being deleted, not excluded by label, not tainted for scale-down). Raise
    :class:`~polyccm.errors.ImplementedElsewhere` when another controller owns this service,
    :class:`~polyccm.errors.RetryAfter` to be asked again after a fixed delay, and
    :class:`~polyccm.errors.InvalidServiceSpec` when the service asks for something impossible
    (its message becomes a Warning event on the service).
    """

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        """The cloud name of the service's load balancer: by default ``a`` + the service UID
        without dashes, cut to 32 characters, as upstream names them."""
        return default_load_balancer_name(service)

    @abstractmethod
    def get_load_balancer(self, cluster_name: str, service: Service) -> LoadBalancerStatus | None:
        """The current status of the service's load balancer, or ``None`` when it does not exist."""

    @abstractmethod
    def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        """Create or update the load balancer so it matches the service; return its status."""

    @abstractmethod
    def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        """Point an existing load balancer at ``nodes``; only the backends change."""

    @abstractmethod
    def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        """Delete the load balancer and everything made for it; succeed when already gone."""


class Routes(ABC):
    """Pod-network routes, one per node pod CIDR, for clouds that route pod traffic."""

    @abstractmethod
    def list_routes(self, cluster_name: str) -> list[Route]:
        """Every route that belongs to this cluster."""

    @abstractmethod
    def create_route(
        self, cluster_name: str, name_hint: str, route: Route, *, target: Node
    ) -> None:
        """Create ``route``; ``name_hint`` is the node UID and ``target`` the node the route
        sends traffic to (its providerID and addresses locate the instance: zone and instance
        name on GCE). Creating an existing route succeeds."""

    @abstractmethod
    def delete_route(self, cluster_name: str, route: Route) -> None:
        """Delete ``route``; deleting a missing route succeeds."""


@dataclass(frozen=True)
class ProviderContext:
    """What a provider gets at the start of each leadership term (upstream's ``Initialize``
    with its client builder, shared informers and stop channel)."""

    api: KubeApi
    """The Kubernetes API client of this process (rate-limited like the controllers')."""
    nodes: Informer
    """The term's shared, synced node cache: read nodes here, never list them yourself."""
    services: Informer
    """The term's shared, synced service cache."""
    recorder: EventRecorder
    """Events on nodes and services, aggregated and rate-limited as client-go does."""
    stop: threading.Event
    """Set when the term ends (leadership lost or the process stopping): stop any background
    work started in :meth:`CloudProvider.initialize`."""


class CloudProvider:
    """A cloud: a name, up to three capabilities, and the optional operator-tools ones.

    Subclasses override the accessors of the capabilities they offer. :meth:`initialize` is
    called at the start of every leadership term, once the caches have synced and before any
    controller of that term starts; a standby never gets it.
    """

    name: ClassVar[str] = ""
    reads_flags: ClassVar[frozenset[str]] = frozenset()
    """Upstream flags the core ignores (``polyccm.app.options.IGNORED_FLAGS``) that this
    provider's own controllers act on: no "ignored" warning is given for them."""

    def initialize(self, context: ProviderContext) -> None:
        """Called once per leadership term, before the term's controllers start. Keep what you
        need from ``context`` (the caches replace any listing of your own; a handler added to
        them first replays every cached object); an exception ends the term and gives the
        lease up, and the manager campaigns again after a pause. The capability accessors may
        be called before (the manager builds the term's controllers from them), so build the
        capabilities in the constructor and connect them to the caches here."""

    def serve(self, serving: contextlib.ExitStack) -> None:
        """Start servers of the provider's own (upstream's, kept for a drop-in switch) for the
        life of the manager process: called once, on every replica, after the secure port is
        served and before the first term; never for the operator commands. Register their stop
        with ``serving``; raise :class:`polyccm.errors.ConfigError` for an address that cannot
        be bound (the process exits 2 with that line)."""

    def instances_v2(self) -> InstancesV2 | None:
        """The instances capability, or ``None``."""
        return None

    def load_balancer(self) -> LoadBalancer | None:
        """The load-balancer capability, or ``None``."""
        return None

    def routes(self) -> Routes | None:
        """The routes capability, or ``None``."""
        return None

    def has_cluster_id(self) -> bool:
        """Whether the provider knows which cluster it serves (upstream ``HasClusterID``)."""
        return True

    def load_balancer_planner(self) -> LoadBalancerPlanner | None:
        """The read-only load-balancer planning of ``polyccm plan`` (see
        :mod:`polyccm.ops.contract`), or ``None``: plan then lists no load balancers."""
        return None

    def orphans(self) -> Orphans | None:
        """Leaked-resource discovery for ``polyccm orphans``, or ``None`` (not supported)."""
        return None

    def read_only_call(self, operation: str) -> bool:
        """Whether ``operation`` (as this provider passes it to
        :func:`polyccm.cloudcalls.record`) only reads. ``polyccm plan`` refuses every other
        call. By default judged by the name (:func:`polyccm.cloudcalls.looks_like_read`)."""
        from polyccm.cloudcalls import looks_like_read

        return looks_like_read(operation)


def default_load_balancer_name(service: Service) -> str:
    """``a`` + the service UID without dashes, cut to 32 characters (upstream's default)."""
    return ("a" + service.uid.replace("-", ""))[:32]
