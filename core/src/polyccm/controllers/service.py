"""The service controller: one cloud load balancer per ``type: LoadBalancer`` service.

It manages services of type LoadBalancer without ``spec.loadBalancerClass``. The finalizer
``service.kubernetes.io/load-balancer-cleanup`` goes on *before* the first cloud call that may
create anything, and comes off only after the load balancer is deleted, so killing the process at
any point never leaks a load balancer. A provider answering "implemented elsewhere" still gets
the finalizer managed.

Node changes reach the load balancers through one "node sync", started as upstream's
(StableLoadBalancerNodeSet, GA) is: by a node added or deleted, and by a node update only when
its exclude-from-load-balancers label starts or stops excluding it or its providerID changes.
A node's readiness, the cluster autoscaler's ``ToBeDeletedByClusterAutoscaler`` taint and a
deletionTimestamp start no sync, so the connections of a node being drained are not cut: such a
node leaves the backends at the next sync started for another reason, or when it is deleted.
A sync gives ``update_load_balancer`` to every load balancer last given another set of backends
(name and providerID of each node). Each attempt is remembered before the cloud call, as
upstream's ``storeLastSyncedNodes``: a failed update does not wait for another node sync but
queues its service for a full ensure, which backs off per service (5 s doubling to 300 s) while
it keeps failing. A failed update whose load balancer no longer exists is no failure (no event,
no retry). Node syncs start at most once per :data:`NODE_SYNC_INTERVAL`, so a burst of node
changes (a scale-up, a cluster's first nodes) costs each load balancer a few updates, not one
per node, and with no load balancer to manage a sync computes nothing. A sync updates
``--concurrent-service-syncs`` load balancers at a time, as upstream's does.
A service whose last ensure failed still gets its backends updated (its load balancer may exist,
adopted or half-made), so an annotation problem never freezes the backends of a working load
balancer. One service is only ever handled by one thread: the worker syncing it and the node
sync take the same per-service lock (see "State and locks" below).

After a successful ensure, the annotations the provider returns
(``LoadBalancerStatus.service_annotations``, such as the cloud's id of the load balancer) are
written onto the service when they differ from what it has, in a patch guarded by its
resourceVersion. The controller remembers what it wrote, so the update event of its own write
(like that of its finalizer) does not start another ensure; a user who changes or removes such
an annotation does.

State and locks: all the controller remembers about a service is one :class:`ServiceRecord`,
in one map keyed by ``namespace/name``. Two kinds of lock:

- the controller's ``_lock`` guards that map, every record's fields and the cached backend
  set. It is held for a few lines only: never across a cloud or API call, and no other lock
  is waited for while it is held;
- each record's ``lock`` is held by the one thread changing that service's load balancer (the
  worker syncing the service, or the node sync updating its backends), across the cloud and
  API calls. Threads take it through ``_hold``, which counts them in the record.

A record is made when a thread comes to hold its service's lock, or when a DELETED event leaves
a load balancer to clean up. It is dropped as soon as no thread holds or waits for its lock and
it remembers nothing: when its load balancer has been deleted (the service deleted, or no longer
of type LoadBalancer), when the DELETED event of a service whose deletion we finished arrives,
when a sync finds the service gone or not ours. A record whose lock is held is never dropped, so
two threads never hold two locks for one service. A controller serves one leadership term: the
next term's controller starts with no records.

A service deleted without our finalizer (someone else removed it) leaves only the record to
find its load balancer: the deleted service stays in the record, by UID, until the cloud has
deleted its load balancer; a failed delete is retried with the same backoff as a failed ensure,
as upstream drops its cached service only after a successful delete. A service created again
under the same name before that cleanup ran is a new service (a new UID, so a new load
balancer name): its sync first deletes the old one's load balancer, as upstream does for a
cached service of another UID. A watch that missed the DELETED event and sees one service
replace the other as an update counts as the same deletion.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from polyccm import metrics
from polyccm.cloud import LoadBalancer
from polyccm.controllers.base import Controller, ControllerContext, process_one, run_workers
from polyccm.errors import ImplementedElsewhere, LeadershipLost, RetryAfter, Throttled
from polyccm.flagtypes import parse_bool
from polyccm.kube.api import MERGE_PATCH, SERVICES, ApiError, JsonObject
from polyccm.objects import LOAD_BALANCER_FINALIZER as FINALIZER
from polyccm.objects import Node, Service, wants_load_balancer
from polyccm.workqueue import RateLimitingQueue

log = logging.getLogger(__name__)

EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
AUTOSCALER_TAINT = "ToBeDeletedByClusterAutoscaler"
MIN_RETRY_DELAY = 5.0
MAX_RETRY_DELAY = 300.0
CONFLICT_RETRIES = 5
NODE_SYNC_INTERVAL = 1.0
"""Fewest seconds from one node sync to the next: a burst of node changes (a scale-up of
thousands) is then a few syncs with the set as it stands, not one per node event."""

# Spec fields whose change needs the load balancer re-synced (upstream needsUpdate).
_SPEC_FIELDS = (
    "type",
    "loadBalancerSourceRanges",
    "ports",
    "sessionAffinity",
    "sessionAffinityConfig",
    "loadBalancerIP",
    "externalIPs",
    "externalTrafficPolicy",
    "healthCheckNodePort",
    "ipFamilies",
    "ipFamilyPolicy",
    "loadBalancerClass",
    "allocateLoadBalancerNodePorts",
)


def needs_cleanup(service: Service) -> bool:
    """Whether the service holds our finalizer but should no longer have a load balancer."""
    return FINALIZER in service.finalizers and (
        service.deletion_timestamp is not None or not wants_load_balancer(service)
    )


def needs_sync(old: Service, new: Service, *, written: Mapping[str, str] | None = None) -> bool:
    """Whether an update from ``old`` to ``new`` concerns the load balancer. ``written`` holds
    the annotations this controller wrote onto the service: a change to one of them that leaves
    it with the value we wrote is our own write, not a reason to sync."""
    if wants_load_balancer(old) != wants_load_balancer(new):
        return True
    if not wants_load_balancer(new) and not needs_cleanup(new):
        return False
    old_spec = old.raw.get("spec", {})
    new_spec = new.raw.get("spec", {})
    if any(old_spec.get(f) != new_spec.get(f) for f in _SPEC_FIELDS):
        return True
    if _annotations_changed(old, new, written or {}) or old.uid != new.uid:
        return True
    # Our own finalizer write is not a reason to sync again (it would double every ensure).
    return (old.deletion_timestamp is None) != (new.deletion_timestamp is None)


def _annotations_changed(old: Service, new: Service, written: Mapping[str, str]) -> bool:
    ours = {key for key, value in written.items() if new.annotations.get(key) == value}
    if not ours:
        return old.annotations != new.annotations
    before = {k: v for k, v in old.annotations.items() if k not in ours}
    after = {k: v for k, v in new.annotations.items() if k not in ours}
    return before != after


def is_included(node: Node) -> bool:
    """Whether the exclude label lets ``node`` take load-balancer traffic: absent, or a value
    that reads as false (an unparsable value excludes), as upstream's nodeIncludedPredicate."""
    if EXCLUDE_LABEL not in node.labels:
        return True
    try:
        return parse_bool(node.labels[EXCLUDE_LABEL]) is False
    except argparse.ArgumentTypeError:
        return False


def is_backend(node: Node) -> bool:
    """Whether ``node`` should receive load-balancer traffic.

    Excluded: nodes being deleted, nodes tainted for scale-down by the cluster autoscaler,
    nodes the exclude label excludes (:func:`is_included`), and nodes without a providerID
    (not yet initialised: the cloud cannot target them; they join once they have one).
    Readiness is not a filter.
    """
    if node.deletion_timestamp is not None or node.has_taint(AUTOSCALER_TAINT):
        return False
    return bool(node.provider_id) and is_included(node)


def starts_node_sync(old: Node, new: Node) -> bool:
    """Whether a node update from ``old`` to ``new`` should start a node sync: only a change of
    what the exclude label says or of the providerID (upstream's shouldSyncUpdatedNode). The
    autoscaler's taint and a deletionTimestamp do not, so that the node's connections drain."""
    return is_included(old) != is_included(new) or old.provider_id != new.provider_id


def backend_set(nodes: Iterable[Node]) -> list[Node]:
    """The nodes every load balancer sends traffic to (:func:`is_backend`), by name."""
    return sorted((n for n in nodes if is_backend(n)), key=lambda n: n.name)


def backend_identity(nodes: Sequence[Node]) -> frozenset[tuple[str, str]]:
    """What a load balancer's backends were built from: each node's name and providerID."""
    return frozenset((n.name, n.provider_id) for n in nodes)


@dataclass(eq=False)
class ServiceRecord:
    """What the controller remembers about one service; its fields are read and written under
    the controller's ``_lock`` (the module docstring says when a record is made and dropped)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held by the one thread changing the service's load balancer, across its cloud calls."""
    holders: int = 0
    """Threads holding or waiting for :attr:`lock`: the record stays while there are any."""
    applied: frozenset[tuple[str, str]] | None = None
    """The backends (name and providerID of each node) the load balancer was last given or
    attempted with: node sync updates it when they differ from the current set. ``None`` when
    the controller has no load balancer in hand for the service."""
    written: dict[str, str] = field(default_factory=dict)
    """Annotations we wrote onto the service (the provider's ``service_annotations``): their
    update events are ours, not the user's."""
    deleted: dict[str, JsonObject] = field(default_factory=dict)
    """Services of this name deleted with a load balancer to clean up, as last seen, by UID:
    each stays until the cloud has deleted its load balancer."""
    finalised: bool = False
    """We finished the service's deletion by removing the finalizer: its DELETED event needs
    no second cleanup."""

    def idle(self) -> bool:
        """Whether the record can go: nobody holds it and it remembers nothing."""
        return (
            self.holders == 0
            and self.applied is None
            and not self.written
            and not self.deleted
            and not self.finalised
        )


class ServiceController(Controller):
    """Creates, updates and deletes load balancers for services."""

    name = "service"

    def __init__(self, context: ControllerContext, balancer: LoadBalancer) -> None:
        self.context = context
        self.balancer = balancer
        self.cluster_name = context.options.cluster_name
        self.queue = RateLimitingQueue(
            self.name, base_delay=MIN_RETRY_DELAY, max_delay=MAX_RETRY_DELAY
        )
        self._lock = threading.Lock()
        self._records: dict[str, ServiceRecord] = {}
        self._node_sync = threading.Event()
        # The backend nodes and their identity as of a node cache version: every ensure of
        # a burst of services shares one computation and one identity object.
        self._backends: tuple[str, list[Node], frozenset[tuple[str, str]]] | None = None

    def tracked_services(self) -> frozenset[str]:
        """The services (``namespace/name``) the controller holds a record for."""
        with self._lock:
            return frozenset(self._records)

    @contextmanager
    def _hold(self, key: str) -> Iterator[ServiceRecord]:
        """Hold the lock of service ``key``'s record, made if need be, and drop the record
        afterwards if it is idle."""
        with self._lock:
            record = self._records.get(key)
            if record is None:
                record = self._records[key] = ServiceRecord()
            record.holders += 1
        try:
            with record.lock:
                yield record
        finally:
            with self._lock:
                record.holders -= 1
                self._drop_if_idle(key, record)

    def _drop_if_idle(self, key: str, record: ServiceRecord) -> None:
        """Forget ``record`` if it is idle; the caller holds ``_lock``."""
        if record.idle() and self._records.get(key) is record:
            del self._records[key]

    # -- wiring -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        self.context.services.add_handler(
            on_add=self._on_add, on_update=self._on_update, on_delete=self._on_delete
        )
        self.context.nodes.add_handler(
            on_add=lambda _n: self._node_sync.set(),
            on_update=self._on_node_update,
            on_delete=lambda _n: self._node_sync.set(),
        )
        syncer = threading.Thread(
            target=self._node_sync_loop, args=(stop,), name="service-node-sync", daemon=True
        )
        syncer.start()
        run_workers(
            name=self.name,
            queue=self.queue,
            workers=self.context.options.concurrent_service_syncs,
            process=lambda q: process_one(q, self.sync, name=self.name),
            stop=stop,
        )
        self._node_sync.set()
        syncer.join(timeout=30)

    def _on_add(self, obj: JsonObject) -> None:
        service = Service(obj)
        if wants_load_balancer(service) or needs_cleanup(service):
            self.queue.add(service.key)

    def _on_update(self, old: JsonObject, new: JsonObject) -> None:
        service = Service(new)
        previous = Service(old)
        if previous.uid != service.uid:
            # A relist after a missed DELETED event: the old service is gone all the same.
            self._on_delete(old)
        with self._lock:
            record = self._records.get(service.key)
            written = dict(record.written) if record is not None and record.written else None
        if needs_sync(previous, service, written=written):
            self.queue.add(service.key)

    def _on_delete(self, obj: JsonObject) -> None:
        service = Service(obj)
        key = service.key
        with self._lock:
            record = self._records.get(key)
            if record is not None:
                record.written.clear()
                if record.finalised:
                    record.finalised = False  # we removed the finalizer: all done
                    self._drop_if_idle(key, record)
                    return
            has_balancer = (
                (record is not None and record.applied is not None)
                or FINALIZER in service.finalizers
                or (wants_load_balancer(service) and service.load_balancer_status.get("ingress"))
            )
            if not has_balancer:
                if record is not None:
                    self._drop_if_idle(key, record)
                return
            if record is None:
                record = self._records[key] = ServiceRecord()
            record.deleted[service.uid] = obj
        self.queue.add(key)

    def _on_node_update(self, old: JsonObject, new: JsonObject) -> None:
        if starts_node_sync(Node(old), Node(new)):
            self._node_sync.set()

    # -- one service --------------------------------------------------------------------

    def sync(self, key: str) -> None:
        """Reconcile the load balancer of service ``key``."""
        with self._hold(key) as record:
            self._sync(key, record)

    def _sync(self, key: str, record: ServiceRecord) -> None:
        raw = self.context.services.get(key)
        service = Service(raw) if raw is not None else None
        with self._lock:
            if service is not None:  # present after all: synced as it is now
                record.deleted.pop(service.uid, None)
            gone = list(record.deleted.items())
        # Deleted services' load balancers first, the one of a service created again under
        # this name included: each is forgotten only once the cloud deleted it, so a failure
        # is retried (with backoff) and the service present is synced after.
        for uid, obj in gone:
            self._delete_balancer(Service(obj), record, remove_finalizer=False)
            with self._lock:
                record.deleted.pop(uid, None)
        if service is None:
            return
        if needs_cleanup(service):
            self._delete_balancer(service, record, remove_finalizer=True)
        elif wants_load_balancer(service) and service.deletion_timestamp is None:
            self._ensure_balancer(service, record)

    def _ensure_balancer(self, service: Service, record: ServiceRecord) -> None:
        recorder = self.context.recorder
        service = self._add_finalizer(service)
        recorder.event(service.raw, "Normal", "EnsuringLoadBalancer", "Ensuring load balancer")
        nodes = self.backend_nodes()
        if not nodes:
            self._warn_no_nodes(service)
        # Remembered before the cloud call, as upstream does: a node sync then updates the
        # load balancer only when the backends differ from these, whether the ensure succeeds
        # or not (a failed ensure's load balancer may exist and is retried with backoff).
        identity = self._identity(nodes)
        with self._lock:
            record.applied = identity
        try:
            status = self.balancer.ensure_load_balancer(self.cluster_name, service, nodes)
        except ImplementedElsewhere:
            log.info("service: %s: load balancer implemented by another controller", service.key)
            return
        except Throttled as error:
            self._warn_throttled(service, "SyncLoadBalancerFailed", error)
            raise
        except (RetryAfter, LeadershipLost):
            raise
        except Exception as error:
            recorder.event(
                service.raw,
                "Warning",
                "SyncLoadBalancerFailed",
                f"Error syncing load balancer: {error}",
            )
            raise
        metrics.loadbalancer_sync_total.inc()
        self._write_annotations(service, record, status.service_annotations)
        self._patch_status(service, status.to_api())
        for warning in status.warnings:
            recorder.event(service.raw, "Warning", "LoadBalancerWarning", warning)
        recorder.event(service.raw, "Normal", "EnsuredLoadBalancer", "Ensured load balancer")

    def _warn_throttled(self, service: Service, reason: str, error: Throttled) -> None:
        """The cloud throttled the sync: re-queued after the cloud's delay, and a Warning, as
        upstream's controller does for a ``RetryError`` (re-queued after its delay,
        k8s.io/cloud-provider controllers/service/controller.go:297-300@v0.36.2, and reported as
        any failed sync, ``SyncLoadBalancerFailed`` at :342, ``DeleteLoadBalancerFailed`` at
        :927)."""
        verb = "syncing" if reason == "SyncLoadBalancerFailed" else "deleting"
        self.context.recorder.event(
            service.raw,
            "Warning",
            reason,
            f"Error {verb} load balancer: throttled by the cloud, retrying in "
            f"{error.delay:.0f}s: {error}",
        )

    def _delete_balancer(
        self, service: Service, record: ServiceRecord, *, remove_finalizer: bool
    ) -> None:
        recorder = self.context.recorder
        recorder.event(service.raw, "Normal", "DeletingLoadBalancer", "Deleting load balancer")
        try:
            self.balancer.ensure_load_balancer_deleted(self.cluster_name, service)
        except ImplementedElsewhere:
            pass
        except Throttled as error:
            self._warn_throttled(service, "DeleteLoadBalancerFailed", error)
            raise
        except (RetryAfter, LeadershipLost):
            raise
        except Exception as error:
            recorder.event(
                service.raw,
                "Warning",
                "DeleteLoadBalancerFailed",
                f"Error deleting load balancer: {error}",
            )
            raise
        metrics.loadbalancer_sync_total.inc()
        recorder.event(service.raw, "Normal", "DeletedLoadBalancer", "Deleted load balancer")
        with self._lock:
            record.applied = None
            record.written.clear()
        if not remove_finalizer:
            return
        if service.deletion_timestamp is None and service.load_balancer_status:
            self._patch_status(service, {})
        # Marked before the write: its DELETED event may arrive before the call returns.
        if service.deletion_timestamp is not None:
            with self._lock:
                record.finalised = True
        removed = False
        try:
            removed = self._remove_finalizer(service)
        finally:
            if not removed:
                # Not our write (the service or its finalizer already gone): its DELETED event,
                # if still to come, is handled as anyone's, and the record is not kept for it.
                with self._lock:
                    record.finalised = False

    # -- writes -------------------------------------------------------------------------

    def _add_finalizer(self, service: Service) -> Service:
        """Put the finalizer on; the service as written (for the next guarded write)."""
        if FINALIZER in service.finalizers:
            return service

        def add(current: Service) -> JsonObject | None:
            if FINALIZER in current.finalizers:
                return None
            return {"finalizers": [*current.finalizers, FINALIZER]}

        return self._patch_guarded(service, add) or service

    def _remove_finalizer(self, service: Service) -> bool:
        """Take the finalizer off; whether this call did (not when it was already off or the
        service is gone)."""

        def remove(current: Service) -> JsonObject | None:
            if FINALIZER not in current.finalizers:
                return None
            return {"finalizers": [f for f in current.finalizers if f != FINALIZER] or None}

        if FINALIZER not in service.finalizers:
            return False
        return self._patch_guarded(service, remove) is not None

    def _write_annotations(
        self, service: Service, record: ServiceRecord, wanted: Mapping[str, str]
    ) -> None:
        """Write the provider's ``service_annotations`` where the service's differ."""
        if not wanted:
            return
        with self._lock:  # before the write: its update event may arrive before the call returns
            record.written.update(wanted)

        def annotate(current: Service) -> JsonObject | None:
            changed = {k: v for k, v in wanted.items() if current.annotations.get(k) != v}
            return {"annotations": changed} if changed else None

        self._patch_guarded(service, annotate)

    def _patch_guarded(
        self, service: Service, change: Callable[[Service], JsonObject | None]
    ) -> Service | None:
        """Merge ``change(service)`` into the service's metadata, guarded by resourceVersion so
        that a concurrent write is never overwritten; a conflict is retried at once with the
        fresh object (of the same UID: a service deleted and created again is left to its own
        sync). Returns the service as written, or ``None`` when nothing was written."""
        for attempt in range(CONFLICT_RETRIES):
            metadata = change(service)
            if metadata is None:
                return None
            body = {"metadata": {**metadata, "resourceVersion": service.resource_version}}
            try:
                written = self.context.api.patch(
                    SERVICES, service.name, body, service.namespace, patch_type=MERGE_PATCH
                )
                return Service(written)
            except ApiError as error:
                if error.not_found:
                    return None
                if not error.conflict or attempt == CONFLICT_RETRIES - 1:
                    raise
                try:
                    fresh = Service(self.context.api.get(SERVICES, service.name, service.namespace))
                except ApiError as again:
                    if again.not_found:
                        return None
                    raise
                if fresh.uid != service.uid:
                    return None
                service = fresh
        return None

    def _patch_status(self, service: Service, status: Mapping[str, Any]) -> None:
        if dict(service.load_balancer_status) == dict(status):
            return
        try:
            self.context.api.patch(
                SERVICES,
                service.name,
                {"status": {"loadBalancer": status or None}},
                service.namespace,
                subresource="status",
                patch_type=MERGE_PATCH,
            )
        except ApiError as error:
            if not error.not_found:
                raise

    # -- node sync ----------------------------------------------------------------------

    def backend_nodes(self) -> list[Node]:
        """The nodes every load balancer should send traffic to, by name: computed once per
        version of the node cache (a shared list: never change it)."""
        version = getattr(self.context.nodes, "resource_version", None)
        with self._lock:
            cached = self._backends
        if version is not None and cached is not None and cached[0] == version:
            return cached[1]
        nodes = backend_set(Node(raw) for raw in self.context.nodes.list())
        if version is not None:
            identity = backend_identity(nodes)
            with self._lock:
                previous = self._backends
                if previous is not None and previous[2] == identity:
                    # A node change that changes no backend (a heartbeat, an annotation) makes
                    # a new cache version: services ensured on either side of it keep sharing
                    # one identity. One each was 500 copies of 5,000 nodes' identity (some
                    # 300 MiB) while a provider annotated nodes through a burst of services.
                    identity = previous[2]
                self._backends = (version, nodes, identity)
        return nodes

    def _identity(self, nodes: Sequence[Node]) -> frozenset[tuple[str, str]]:
        """:func:`backend_identity` of ``nodes``, the one object all services given the
        same backend list share (a thousand nodes' identity is some 90 KB)."""
        with self._lock:
            cached = self._backends
        if cached is not None and cached[1] is nodes:
            return cached[2]
        return backend_identity(nodes)

    def _node_sync_loop(self, stop: threading.Event) -> None:
        # Only node changes start a sync (run() sets the event to end the loop): a failed
        # update is retried by its service's worker, so no periodic pass is needed.
        last = 0.0
        while not stop.is_set():
            self._node_sync.wait()
            if stop.wait(max(0.0, last + NODE_SYNC_INTERVAL - time.monotonic())):
                return
            self._node_sync.clear()
            last = time.monotonic()
            try:
                self.node_sync()
            except LeadershipLost:
                log.info("service: node sync stopped: leadership lost")
                return
            except Exception:
                log.exception("service: node sync failed")

    def node_sync(self) -> None:
        """Update every load balancer last given (or last attempted with) a backend set other
        than the current one; a service whose update fails is queued for a full ensure."""
        with self._lock:
            applied = {
                key: record.applied
                for key, record in self._records.items()
                if record.applied is not None
            }
        if not applied:
            return  # no load balancer: the backend set need not even be computed
        nodes = self.backend_nodes()
        current = self._identity(nodes)
        stale = [key for key, given in applied.items() if given != current]
        if not stale:
            return
        started = time.monotonic()

        def update(key: str) -> None:
            with self._hold(key) as record:
                with self._lock:
                    if record.applied == current:
                        return  # a worker ensured it with these nodes meanwhile
                raw = self.context.services.get(key)
                if raw is None:
                    return
                service = Service(raw)
                if not wants_load_balancer(service) or service.deletion_timestamp is not None:
                    return
                # Remembered before the call, as upstream's nodeSyncService does: a failure
                # is retried by the service's own worker, not by the next node sync.
                with self._lock:
                    record.applied = current
                if not self._update_backends(service, nodes):
                    self.queue.add(key)  # a full ensure; its failures back off per service

        # As upstream: --concurrent-service-syncs load balancers are updated at a time.
        workers = max(1, min(self.context.options.concurrent_service_syncs, len(stale)))
        with ThreadPoolExecutor(workers, thread_name_prefix="service-node-sync") as pool:
            for outcome in [pool.submit(update, key) for key in stale]:
                outcome.result()  # a lost leadership stops the sync once the updates end
        metrics.nodesync_latency_seconds.observe(time.monotonic() - started)

    def _warn_no_nodes(self, service: Service) -> None:
        self.context.recorder.event(
            service.raw,
            "Warning",
            "UnAvailableLoadBalancer",
            "There are no available nodes for LoadBalancer",
        )

    def _update_backends(self, service: Service, nodes: Sequence[Node]) -> bool:
        """Give the load balancer ``nodes``; ``False`` when it failed and should be retried."""
        if not nodes:
            self._warn_no_nodes(service)
        started = time.monotonic()
        try:
            self.balancer.update_load_balancer(self.cluster_name, service, nodes)
        except ImplementedElsewhere:
            return True
        except LeadershipLost:
            raise  # not a failure: the next leader updates it
        except Exception as error:  # noqa: BLE001 - reported and retried
            if not self._balancer_exists(service):
                return True  # nothing to update: no failure to report or retry
            metrics.nodesync_error_total.inc()
            self.context.recorder.event(
                service.raw,
                "Warning",
                "UpdateLoadBalancerFailed",
                f"Error updating load balancer with new hosts {_host_list(nodes)}: {error}",
            )
            return False
        metrics.update_loadbalancer_host_latency_seconds.observe(time.monotonic() - started)
        metrics.loadbalancer_sync_total.inc()
        self.context.recorder.event(
            service.raw, "Normal", "UpdatedLoadBalancer", "Updated load balancer with new hosts"
        )
        return True

    def _balancer_exists(self, service: Service) -> bool:
        """Whether the cloud still has the service's load balancer; ``True`` when it cannot
        tell (the failed update is then reported and retried, as upstream does)."""
        try:
            return self.balancer.get_load_balancer(self.cluster_name, service) is not None
        except LeadershipLost:
            raise
        except Exception as error:  # noqa: BLE001 - logged; the update failure stands
            log.warning(
                "service: %s: cannot tell whether its load balancer exists: %s", service.key, error
            )
            return True


def _host_list(nodes: Sequence[Node], limit: int = 10) -> str:
    names = [n.name for n in nodes]
    shown = ", ".join(names[:limit])
    return f"[{shown}{', ...' if len(names) > limit else ''}]"
