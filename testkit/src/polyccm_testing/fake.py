"""An in-memory reference provider that implements every capability and records every call.

Like upstream's fake cloud, :class:`FakeCloud` is a test double for the *cloud*, never for
Kubernetes: controller tests run it against the real kube-apiserver. Tests arrange instances,
then tell the cloud to fail, throttle, be slow or answer "implemented elsewhere" for a given
operation, and afterwards read :attr:`FakeCloud.calls` to see what the controllers asked.
``initialize`` is recorded (and can be told to fail) like a call, but it is no cloud call: the
leadership fence does not apply to it.

It implements the operator-tools contract too (:mod:`polyccm.ops.contract`): planning by the
same comparison ensure makes, orphans (load balancers of its cluster that no service claims),
and the offline check of the two fake annotations, :data:`REFUSE_ANNOTATION` (ensure refuses
the service) and :data:`WARN_ANNOTATION` (ensure warns).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from polyccm import cloudcalls, useragent
from polyccm.cloud import (
    CloudProvider,
    InstanceMetadata,
    InstancesV2,
    LoadBalancer,
    LoadBalancerIngress,
    LoadBalancerStatus,
    NodeAddress,
    ProviderContext,
    Route,
    Routes,
)
from polyccm.errors import CloudError, InstanceNotFound, InvalidServiceSpec
from polyccm.objects import Node, Service
from polyccm.ops.contract import (
    ADOPT,
    BACKENDS,
    CREATE,
    FAIL,
    LISTENERS,
    UPDATE,
    CloudResource,
    Difference,
    LoadBalancerPlan,
    LoadBalancerPlanner,
    Orphans,
    Problem,
    ServiceChecker,
    claims_load_balancer,
)

PROVIDER_ID_PREFIX = "fake://"
LOAD_BALANCER_ID_ANNOTATION = "fake.polyccm.dev/load-balancer-id"
"""Written back onto each service by ensure (``LoadBalancerStatus.service_annotations``), as
DigitalOcean writes its load-balancer id: the load balancer's name in the fake cloud."""
REFUSE_ANNOTATION = "fake.polyccm.dev/refuse"
"""Any value: ensure refuses the service (``InvalidServiceSpec`` naming the annotation)."""
WARN_ANNOTATION = "fake.polyccm.dev/warn"
"""Any value: ensure succeeds with a warning naming the annotation and value."""
READS = frozenset(
    {
        "instance_exists",
        "instance_shutdown",
        "instance_metadata",
        "instances_metadata",
        "instances_exist",
        "instances_shutdown",
        "get_load_balancer",
        "plan_load_balancer",
        "find_orphans",
        "list_routes",
    }
)
"""The fake cloud's operations that only read (``FakeCloud.read_only_call``)."""


def validate(service: Service) -> tuple[str, ...]:
    """The warnings of ``service``'s fake annotations; raises ``InvalidServiceSpec`` for
    :data:`REFUSE_ANNOTATION`. Ensure, plan and the checker all call this."""
    annotations = service.annotations
    if REFUSE_ANNOTATION in annotations:
        raise InvalidServiceSpec(
            f"annotation {REFUSE_ANNOTATION}={annotations[REFUSE_ANNOTATION]!r}: refused as asked"
        )
    if WARN_ANNOTATION in annotations:
        return (f"annotation {WARN_ANNOTATION}={annotations[WARN_ANNOTATION]!r}: warned as asked",)
    return ()


class FakeServiceChecker(ServiceChecker):
    """The fake provider's offline check (hook ``polyccm_build_service_checker``)."""

    def check_service(self, service: Service) -> list[Problem]:
        try:
            return list(Problem.warnings(validate(service)))
        except InvalidServiceSpec as error:
            return [Problem.error(error)]


@dataclass
class FakeInstance:
    """An instance in the fake cloud."""

    name: str
    """The instance name, which is also the node name the kubelet registers."""
    instance_type: str = "fake.small"
    zone: str = "zone-a"
    region: str = "region-1"
    addresses: tuple[NodeAddress, ...] = ()
    additional_labels: Mapping[str, str] = field(default_factory=dict)
    shutdown: bool = False
    reported_provider_id: str | None = None
    """What the cloud reports as provider ID; ``None`` means the usual ``fake://region/name``
    (set it to ``""`` to model a cloud that gives none)."""

    @property
    def provider_id(self) -> str:
        if self.reported_provider_id is not None:
            return self.reported_provider_id
        return f"{PROVIDER_ID_PREFIX}{self.region}/{self.name}"


@dataclass
class FakeLoadBalancer:
    """A load balancer in the fake cloud."""

    name: str
    service_key: str
    ports: tuple[int, ...]
    backends: tuple[str, ...]
    ip: str
    cluster: str = "kubernetes"
    """The cluster it was made for: the fake cloud's ownership mark."""


@dataclass(frozen=True)
class Call:
    """One recorded call: the operation and the objects it concerned."""

    operation: str
    subjects: tuple[str, ...]


class FakeCloud(CloudProvider, InstancesV2, LoadBalancer, Routes, LoadBalancerPlanner, Orphans):
    """A cloud with instances, load balancers and routes held in memory. Thread-safe."""

    name = "fake"

    def __init__(self, *, bulk: bool = True, call_log: Path | None = None) -> None:
        self.instances: dict[str, FakeInstance] = {}
        self.load_balancers: dict[str, FakeLoadBalancer] = {}
        self.cloud_routes: dict[str, Route] = {}
        self.route_targets: dict[str, Node] = {}
        """The node each route was created for (``create_route``'s ``target``), by route name."""
        self.contexts: list[ProviderContext] = []
        """What each ``initialize`` was given, in order."""
        self.calls: list[Call] = []
        self.writes = 0
        """Calls that changed the cloud (made, changed or deleted a load balancer or route), as
        a real cloud's mutating API calls: an ensure that finds everything in place writes
        nothing."""
        self.bulk = bulk
        """Whether the bulk instance lookups answer in one call (as a listing cloud would)."""
        self.call_log = call_log
        """A file shared by several processes: each call appends ``<unix time> <pid>
        <operation> <identity>`` (the process's leader-election identity, which a real cloud
        reads from the User-Agent: :mod:`polyccm.useragent`), so a test sees from the cloud's
        side who called when."""
        self._failures: dict[str, deque[Exception]] = {}
        self._always: dict[str, Exception] = {}
        self._delays: dict[str, float] = {}
        self._observers: dict[str, Callable[[tuple[str, ...]], None]] = {}
        self._warnings: dict[str, tuple[str, ...]] = {}
        self._lock = threading.RLock()
        self._next_ip = 1

    # -- arranging ------------------------------------------------------------------------

    def add_instance(self, name: str, **details: object) -> FakeInstance:
        """Create an instance; a node named ``name`` then resolves to it."""
        instance = FakeInstance(name=name, **details)  # type: ignore[arg-type]
        if not instance.addresses:
            index = len(self.instances) + 10
            instance.addresses = (
                NodeAddress("InternalIP", f"10.0.0.{index}"),
                NodeAddress("ExternalIP", f"203.0.113.{index}"),
                NodeAddress("Hostname", name),
            )
        with self._lock:
            self.instances[name] = instance
        return instance

    def remove_instance(self, name: str) -> None:
        """Terminate an instance: it no longer exists."""
        with self._lock:
            self.instances.pop(name, None)

    def fail(self, operation: str, error: Exception, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``operation`` raise ``error``."""
        with self._lock:
            self._failures.setdefault(operation, deque()).extend([error] * times)

    def fail_always(self, operation: str, error: Exception | None) -> None:
        """Make every call of ``operation`` raise ``error`` (``None`` stops it)."""
        with self._lock:
            if error is None:
                self._always.pop(operation, None)
            else:
                self._always[operation] = error

    def slow(self, operation: str, seconds: float) -> None:
        """Make every call of ``operation`` take ``seconds`` longer."""
        with self._lock:
            self._delays[operation] = seconds

    def observe(self, operation: str, callback: Callable[[tuple[str, ...]], None]) -> None:
        """Call ``callback(subjects)`` at the start of every call of ``operation``, before any
        injected failure; tests use it to look at the cluster at the moment of a cloud call."""
        with self._lock:
            self._observers[operation] = callback

    def warn(self, service_key: str, *messages: str) -> None:
        """Make ensuring ``namespace/name`` succeed with these warnings (as a provider does
        when it reads a meaningless annotation value the way upstream reads it)."""
        with self._lock:
            self._warnings[service_key] = messages

    def count(self, operation: str) -> int:
        """How many times ``operation`` was called."""
        with self._lock:
            return sum(1 for call in self.calls if call.operation == operation)

    def counts(self) -> Counter[str]:
        """Calls per operation."""
        with self._lock:
            return Counter(call.operation for call in self.calls)

    def _enter(self, operation: str, *subjects: str) -> None:
        # As every provider does: a call this process may not make is refused before it is
        # "sent", and is therefore neither recorded nor logged.
        cloudcalls.record(self.name, operation)
        self._note(operation, *subjects)

    def _note(self, operation: str, *subjects: str) -> None:
        """Record ``operation``, then apply what the test arranged for it (observer, delay,
        failure)."""
        if self.call_log is not None:
            with self.call_log.open("a") as log:
                log.write(f"{time.time():.6f} {os.getpid()} {operation} {useragent.IDENTITY}\n")
        with self._lock:
            self.calls.append(Call(operation, subjects))
            delay = self._delays.get(operation, 0.0)
            queued = self._failures.get(operation)
            error = queued.popleft() if queued else self._always.get(operation)
            observer = self._observers.get(operation)
        if observer is not None:
            observer(subjects)
        if delay:
            time.sleep(delay)
        if error is not None:
            raise error

    # -- the provider -----------------------------------------------------------------------

    def initialize(self, context: ProviderContext) -> None:
        with self._lock:  # first, so that an observer of "initialize" sees it
            self.contexts.append(context)
        self._note("initialize")

    # -- capabilities -----------------------------------------------------------------------

    def instances_v2(self) -> InstancesV2:
        return self

    def load_balancer(self) -> LoadBalancer:
        return self

    def routes(self) -> Routes:
        return self

    def load_balancer_planner(self) -> LoadBalancerPlanner:
        return self

    def orphans(self) -> Orphans:
        return self

    def read_only_call(self, operation: str) -> bool:
        return operation in READS

    # -- InstancesV2 ------------------------------------------------------------------------

    def _find(self, node: Node) -> FakeInstance:
        with self._lock:
            if node.provider_id:
                for instance in self.instances.values():
                    if instance.provider_id == node.provider_id:
                        return instance
                raise InstanceNotFound(node.provider_id)
            by_name = self.instances.get(node.name)
        if by_name is None:
            raise InstanceNotFound(node.name)
        return by_name

    def _metadata(self, instance: FakeInstance) -> InstanceMetadata:
        return InstanceMetadata(
            provider_id=instance.provider_id,
            instance_type=instance.instance_type,
            node_addresses=instance.addresses,
            zone=instance.zone,
            region=instance.region,
            additional_labels=dict(instance.additional_labels),
        )

    def instance_exists(self, node: Node) -> bool:
        self._enter("instance_exists", node.name)
        try:
            self._find(node)
        except InstanceNotFound:
            return False
        return True

    def instance_shutdown(self, node: Node) -> bool:
        self._enter("instance_shutdown", node.name)
        return self._find(node).shutdown

    def instance_metadata(self, node: Node) -> InstanceMetadata:
        self._enter("instance_metadata", node.name)
        return self._metadata(self._find(node))

    def instances_metadata(
        self, nodes: Sequence[Node]
    ) -> Mapping[str, InstanceMetadata | Exception]:
        if not self.bulk:
            return super().instances_metadata(nodes)
        self._enter("instances_metadata", *(n.name for n in nodes))
        results: dict[str, InstanceMetadata | Exception] = {}
        for node in nodes:
            try:
                results[node.name] = self._metadata(self._find(node))
            except InstanceNotFound as error:
                results[node.name] = error
        return results

    def instances_exist(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        if not self.bulk:
            return super().instances_exist(nodes)
        self._enter("instances_exist", *(n.name for n in nodes))
        results: dict[str, bool | Exception] = {}
        for node in nodes:
            try:
                self._find(node)
                results[node.name] = True
            except InstanceNotFound:
                results[node.name] = False
        return results

    def instances_shutdown(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        if not self.bulk:
            return super().instances_shutdown(nodes)
        self._enter("instances_shutdown", *(n.name for n in nodes))
        results: dict[str, bool | Exception] = {}
        for node in nodes:
            try:
                results[node.name] = self._find(node).shutdown
            except InstanceNotFound as error:
                results[node.name] = error
        return results

    # -- LoadBalancer -----------------------------------------------------------------------

    def get_load_balancer(self, cluster_name: str, service: Service) -> LoadBalancerStatus | None:
        self._enter("get_load_balancer", service.key)
        with self._lock:
            balancer = self.load_balancers.get(self.get_load_balancer_name(cluster_name, service))
        if balancer is None:
            return None
        return LoadBalancerStatus((LoadBalancerIngress(ip=balancer.ip),))

    def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        self._enter("ensure_load_balancer", service.key)
        checked = validate(service)
        name = self.get_load_balancer_name(cluster_name, service)
        with self._lock:
            existing = self.load_balancers.get(name)
            ip = existing.ip if existing else f"192.0.2.{self._next_ip}"
            if existing is None:
                self._next_ip += 1
            wanted = self._wanted(cluster_name, service, nodes, ip)
            if wanted != existing:
                self.load_balancers[name] = wanted
                self.writes += 1
            warnings = self._warnings.get(service.key, ()) + checked
        return LoadBalancerStatus(
            (LoadBalancerIngress(ip=ip),),
            warnings=warnings,
            service_annotations={LOAD_BALANCER_ID_ANNOTATION: name},
        )

    def _wanted(
        self, cluster_name: str, service: Service, nodes: Sequence[Node], ip: str
    ) -> FakeLoadBalancer:
        """The load balancer ``service`` asks for: what ensure makes and plan compares."""
        return FakeLoadBalancer(
            name=self.get_load_balancer_name(cluster_name, service),
            service_key=service.key,
            ports=tuple(p.port for p in service.ports),
            backends=tuple(sorted(n.name for n in nodes)),
            ip=ip,
            cluster=cluster_name,
        )

    def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        self._enter("update_load_balancer", service.key)
        name = self.get_load_balancer_name(cluster_name, service)
        with self._lock:
            balancer = self.load_balancers.get(name)
            backends = tuple(sorted(n.name for n in nodes))
            if balancer is not None and balancer.backends != backends:
                balancer.backends = backends
                self.writes += 1

    def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        self._enter("ensure_load_balancer_deleted", service.key)
        with self._lock:
            name = self.get_load_balancer_name(cluster_name, service)
            if self.load_balancers.pop(name, None) is not None:
                self.writes += 1

    # -- LoadBalancerPlanner ----------------------------------------------------------------

    def plan_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerPlan:
        self._enter("plan_load_balancer", service.key)
        name = self.get_load_balancer_name(cluster_name, service)
        try:
            warnings = Problem.warnings(self._warnings.get(service.key, ()) + validate(service))
        except InvalidServiceSpec as error:
            return LoadBalancerPlan(FAIL, name, problems=(Problem.error(error),))
        with self._lock:
            existing = self.load_balancers.get(name)
        wanted = self._wanted(cluster_name, service, nodes, existing.ip if existing else "")
        if existing is None:
            parts = [Difference(LISTENERS, f"port {port}") for port in wanted.ports]
            parts += [Difference(BACKENDS, f"node {node}") for node in wanted.backends]
            return LoadBalancerPlan(CREATE, name, tuple(parts), warnings)
        differences = _differences(LISTENERS, "port", existing.ports, wanted.ports)
        differences += _differences(BACKENDS, "node", existing.backends, wanted.backends)
        if existing.service_key != wanted.service_key or existing.cluster != wanted.cluster:
            differences.append(Difference("owner", f"{wanted.service_key} in {cluster_name}"))
        action = UPDATE if differences else ADOPT
        return LoadBalancerPlan(action, name, tuple(differences), warnings)

    # -- Orphans ------------------------------------------------------------------------------

    def find_orphans(
        self, cluster_name: str, services: Sequence[Service], nodes: Sequence[Node]
    ) -> list[CloudResource]:
        self._enter("find_orphans")
        claimed = {
            self.get_load_balancer_name(cluster_name, s)
            for s in services
            if claims_load_balancer(s)
        }
        with self._lock:
            return [
                CloudResource(
                    kind="load-balancer",
                    id=balancer.name,
                    mark=f"made for cluster {cluster_name}",
                    reason=f"no Service claims it (made for {balancer.service_key})",
                )
                for balancer in self.load_balancers.values()
                if balancer.cluster == cluster_name and balancer.name not in claimed
            ]

    def delete_orphan(self, cluster_name: str, resource: CloudResource) -> None:
        self._enter("delete_orphan", resource.id)
        with self._lock:
            balancer = self.load_balancers.get(resource.id)
            if balancer is None:
                return
            if balancer.cluster != cluster_name:
                raise CloudError(f"load balancer {resource.id} is not cluster {cluster_name}'s")
            del self.load_balancers[resource.id]
            self.writes += 1

    def balancer_for(self, service_key: str) -> FakeLoadBalancer | None:
        """The load balancer made for ``namespace/name``, if any."""
        with self._lock:
            return next(
                (b for b in self.load_balancers.values() if b.service_key == service_key), None
            )

    # -- Routes -----------------------------------------------------------------------------

    def list_routes(self, cluster_name: str) -> list[Route]:
        self._enter("list_routes")
        with self._lock:
            return [
                Route(
                    r.name,
                    r.target_node,
                    r.destination_cidr,
                    blackhole=r.target_node not in self.instances,
                )
                for r in self.cloud_routes.values()
            ]

    def create_route(
        self, cluster_name: str, name_hint: str, route: Route, *, target: Node
    ) -> None:
        self._enter("create_route", route.target_node, route.destination_cidr)
        if target.name != route.target_node:
            raise ValueError(f"route to {route.target_node!r} given target node {target.name!r}")
        suffix = route.destination_cidr.replace("/", "-").replace(":", "-").replace(".", "-")
        name = f"{cluster_name}-{name_hint}-{suffix}"
        with self._lock:
            wanted = Route(name, route.target_node, route.destination_cidr)
            if self.cloud_routes.get(name) != wanted:
                self.cloud_routes[name] = wanted
                self.writes += 1
            self.route_targets[name] = target

    def delete_route(self, cluster_name: str, route: Route) -> None:
        self._enter("delete_route", route.target_node, route.destination_cidr)
        with self._lock:
            if self.cloud_routes.pop(route.name, None) is not None:
                self.writes += 1


def _differences(
    aspect: str, noun: str, actual: Sequence[object], wanted: Sequence[object]
) -> list[Difference]:
    added = [Difference(aspect, f"add {noun} {item}") for item in wanted if item not in actual]
    return added + [
        Difference(aspect, f"remove {noun} {item}") for item in actual if item not in wanted
    ]
