"""The cloud-node controller: initialises new nodes from the cloud and keeps addresses fresh.

A kubelet started with ``--cloud-provider=external`` registers its node with the taint
``node.cloudprovider.kubernetes.io/uninitialized``. This controller asks the cloud about the
instance, sets ``spec.providerID`` (only when empty), the instance-type/zone/region labels and
the provider's extra labels, writes the addresses, removes the taint and emits ``Synced``. It
never removes the taint without a provider ID, nor when the node's provided IP is not an
address of its instance. All of that is decided at once by
:func:`~polyccm.controllers.nodeplan.plan_node_init`, whose plan this controller applies and
``polyccm plan`` prints. It writes no ``NetworkUnavailable`` condition: upstream did so only
on GCE and stopped in 2024 (kubernetes c11e2ae), and a node whose CNI allocates pod addresses
itself would never get a route to clear it.

Cloud calls are batched: a worker takes up to :data:`BATCH` waiting nodes at once (waiting up to
:data:`BATCH_MAX_WAIT` for more while a burst keeps arriving) and asks the provider's bulk
``instances_metadata`` once for all of them, so a provider that lists in bulk initialises N
nodes in about N/100 calls. The batch's node writes then go out
:data:`WRITES_IN_FLIGHT` at a time, so a batch of 100 costs the API server's latency about 50
times, not 200. Initialised nodes cost no cloud call on updates (their GA labels are made to
match the beta ones). Their addresses are refreshed as upstream's ``UpdateNodeStatus`` does: once
at start, then every ``--node-status-update-frequency``, by ``--concurrent-node-status-updates``
workers side by side, each asking the cloud about its own slice of the nodes in one bulk lookup;
a node's addresses are patched only when they change.

Every key of a batch is settled one by one: forgotten on success, re-queued with backoff on any
error (an API server that restarts mid-batch included). Should the batch fail as a whole, every
key it had not settled yet is re-queued with backoff, so no node is ever dropped.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import NamedTuple, TypeVar

from polyccm import metrics
from polyccm.cloud import InstanceMetadata, InstancesV2, NodeAddress
from polyccm.controllers import nodeinfo, nodeplan
from polyccm.controllers.base import (
    Controller,
    ControllerContext,
    guarded,
    run_periodically,
    run_workers,
)
from polyccm.controllers.nodeplan import NodeInitPlan
from polyccm.errors import LeadershipLost, RetryAfter
from polyccm.kube.api import MERGE_PATCH, NODES, ApiError, JsonObject
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm.workqueue import RateLimitingQueue

log = logging.getLogger(__name__)

BATCH = 100
"""Nodes asked about in one bulk cloud lookup."""
MAX_KEYS = 4 * BATCH
"""Most nodes in one batch, initialised ones (no cloud call) included."""
BATCH_WINDOW = 0.1
"""Seconds a worker waits for more nodes to join a batch."""
BATCH_MAX_WAIT = 1.0
"""Longest a batch waits for more nodes while they keep arriving."""
WRITES_IN_FLIGHT = 4
"""Nodes of one batch written at the same time, once the cloud has answered for the batch."""
CONFLICT_RETRIES = 5

_R = TypeVar("_R")


def creation_age(node: Node) -> float | None:
    """Seconds since the node object was created, if known."""
    stamp = node.raw.get("metadata", {}).get("creationTimestamp")
    if not stamp:
        return None
    created = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return max(0.0, (datetime.now(UTC) - created).total_seconds())


class CloudNodeController(Controller):
    """Initialises tainted nodes and refreshes node addresses."""

    name = "cloud-node"

    def __init__(self, context: ControllerContext, instances: InstancesV2) -> None:
        self.context = context
        self.instances = instances
        self.queue = RateLimitingQueue(self.name)
        self._collecting = threading.Lock()
        self._seen_first_sync: set[str] = set()

    # -- wiring -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        self.context.nodes.add_handler(
            on_add=self._enqueue, on_update=lambda _old, new: self._enqueue(new)
        )
        refresher = threading.Thread(
            target=self._status_loop, args=(stop,), name="cloud-node-status", daemon=True
        )
        refresher.start()
        run_workers(
            name=self.name,
            queue=self.queue,
            workers=self.context.options.concurrent_node_syncs,
            process=self._process_batch,
            stop=stop,
        )
        refresher.join(timeout=30)

    def _enqueue(self, obj: JsonObject) -> None:
        self.queue.add(str(obj["metadata"]["name"]))

    # -- the batch worker ---------------------------------------------------------------

    def _process_batch(self, queue: RateLimitingQueue) -> bool:
        with self._collecting:
            keys = self._collect(queue)
        if not keys:
            return not queue.shutting_down
        batch = _Batch(queue)
        try:
            self._sync_batch(keys, batch)
        except LeadershipLost:
            raise  # the term is over: nothing is retried, the worker stops
        except Exception:
            unsettled = [key for key in keys if key not in batch.settled]
            log.exception(
                "cloud-node: a batch of %d nodes failed; %d re-queued", len(keys), len(unsettled)
            )
            for key in unsettled:
                batch.retry(key)
        finally:
            for key in keys:
                queue.done(key)
        return True

    def _collect(self, queue: RateLimitingQueue) -> list[str]:
        """The next batch. Nodes arrive in bursts (a scale-up, the initial list): while a batch
        has fewer than :data:`BATCH` nodes that need the cloud, more are awaited for
        :data:`BATCH_WINDOW` at a time, as long as some keep coming and for
        :data:`BATCH_MAX_WAIT` at most, so one lookup answers a whole stretch of the burst. Only
        uninitialised nodes count toward it: the updates of initialised ones (this controller's
        own writes come back as updates) ride along without a cloud call, up to
        :data:`MAX_KEYS` keys in all. One worker collects at a time (the others are busy or
        idle), so a burst fills batches one after the other rather than four halves. A batch
        of initialised nodes alone never waits."""
        keys = queue.get_batch(BATCH, timeout=1.0)
        needing = sum(1 for key in keys if self._needs_cloud(key))
        if not needing or needing >= BATCH:
            return keys
        deadline = time.monotonic() + BATCH_MAX_WAIT
        while needing < BATCH and len(keys) < MAX_KEYS and not queue.shutting_down:
            time.sleep(BATCH_WINDOW)
            wanted = min(BATCH - needing, MAX_KEYS - len(keys))
            more = queue.get_batch(wanted, timeout=0) if len(queue) else []
            keys += more
            needing += sum(1 for key in more if self._needs_cloud(key))
            if not more or time.monotonic() >= deadline:
                break
        return keys

    def _sync_batch(self, keys: Sequence[str], batch: _Batch) -> None:
        uninitialised: list[Node] = []
        for key in keys:
            raw = self.context.nodes.get(key)
            if raw is None:
                batch.forget(key)  # deleted meanwhile: nothing to do
                continue
            node = Node(raw)
            if node.has_taint(UNINITIALIZED_TAINT):
                uninitialised.append(node)
            else:
                self._sync_initialised(node, batch)
        if uninitialised:
            self._initialise_all(uninitialised, batch)

    def _needs_cloud(self, key: str) -> bool:
        raw = self.context.nodes.get(key)
        return raw is not None and Node(raw).has_taint(UNINITIALIZED_TAINT)

    def _sync_initialised(self, node: Node, batch: _Batch) -> None:
        """Make the GA labels match the beta ones; no cloud call."""
        fixes = nodeinfo.ga_label_fixes(node.labels)
        try:
            if fixes:
                body = nodeplan.labels_patch(fixes)
                self.context.api.patch(NODES, node.name, body, patch_type=MERGE_PATCH, decode=False)
        except Exception as error:  # noqa: BLE001 - any failure (a restarting API server too) is retried
            if not (isinstance(error, ApiError) and error.not_found):
                log.warning("cloud-node: labels of %s: %s", node.name, error)
                batch.retry(node.name)
                return
        batch.forget(node.name)

    def _initialise_all(self, nodes: Sequence[Node], batch: _Batch) -> None:
        """Plan every node of the batch from one bulk lookup, then apply the plans: every
        node's spec write first, then every node's addresses, so that each node keeps
        upstream's order and none waits for another's address write to become schedulable.
        The writes go out :data:`WRITES_IN_FLIGHT` at a time; what became of each is settled
        here, on the batch's own thread."""
        for node in nodes:
            if node.name not in self._seen_first_sync:
                self._seen_first_sync.add(node.name)
                age = creation_age(node)
                if age is not None:
                    metrics.initial_node_sync_delay_seconds.observe(age)
        try:
            answers: Mapping[str, InstanceMetadata | Exception] = self.instances.instances_metadata(
                nodes
            )
        except LeadershipLost:
            raise
        except Exception as error:  # noqa: BLE001 - reported and retried
            answers = {node.name: error for node in nodes}

        pending: list[_Pending] = []
        for node in nodes:
            answer = answers.get(node.name)
            plan = nodeplan.plan_node_init(node, answer)
            if not plan.initialises:
                self._stays_tainted(node, plan, batch)
            else:
                assert isinstance(answer, InstanceMetadata)  # a plan that initialises had one
                pending.append(_Pending(node, plan, answer))

        written: list[_Pending] = []
        for item, outcome in zip(pending, _in_flight(pending, self._write_spec), strict=True):
            if isinstance(outcome, Exception):
                self._write_failed(item.node, outcome, batch)
            elif outcome is None:
                batch.forget(item.node.name)  # deleted, or initialised by someone else
            elif not outcome.plan.initialises:
                self._stays_tainted(outcome.node, outcome.plan, batch)
            else:
                age = creation_age(item.node)
                if age is not None:
                    metrics.cloud_provider_taint_removal_delay_seconds.observe(age)
                written.append(outcome)

        # Addresses after the taint (upstream's order): the watch event of the taint removal
        # then arrives first, so our own status write never triggers a second cloud lookup.
        for item, failure in zip(written, _in_flight(written, self._write_status), strict=True):
            if isinstance(failure, Exception):
                self._write_failed(item.node, failure, batch)
                continue
            provider_id = item.node.provider_id or item.plan.provider_id
            log.info("cloud-node: initialised %s (%s)", item.node.name, provider_id)
            self.context.recorder.event(
                item.node.raw, "Normal", "Synced", "Node synced successfully"
            )
            batch.forget(item.node.name)

    def _stays_tainted(self, node: Node, plan: NodeInitPlan, batch: _Batch) -> None:
        if plan.retry_after is not None:
            log.info("cloud-node: %s: %s", node.name, plan.failure)
            batch.retry_after(node.name, plan.retry_after)
        else:
            self._report_failure(node, plan.failure)
            batch.retry(node.name)

    def _write_failed(self, node: Node, error: Exception, batch: _Batch) -> None:
        if isinstance(error, RetryAfter):
            batch.retry_after(node.name, error.delay)
        else:
            self._report_failure(node, nodeplan.failure_message(error))
            batch.retry(node.name)

    def _report_failure(self, node: Node, message: str) -> None:
        log.warning("cloud-node: %s: %s", node.name, message)
        self.context.recorder.event(node.raw, "Warning", "FailedToInitialize", message)

    # -- one node's writes ----------------------------------------------------------------

    def _write_spec(self, item: _Pending) -> _Pending | None:
        """The plan's spec write (providerID, labels, the taint removed), guarded by the
        node's resourceVersion. On a conflict the node is read again and planned again from
        the same cloud answer. Returns what was written, or the fresh plan that no longer
        initialises (nothing written); ``None`` when the node is gone or someone else
        removed the taint."""
        node, plan = item.node, item.plan
        attempt = 1
        while True:
            try:
                self.context.api.patch(
                    NODES, node.name, plan.spec_patch(), patch_type=MERGE_PATCH, decode=False
                )
                return _Pending(node, plan, item.answer)
            except ApiError as error:
                if error.not_found:
                    return None
                if not error.conflict or attempt == CONFLICT_RETRIES:
                    raise
            attempt += 1
            node = Node(self.context.api.get(NODES, node.name))
            if not node.has_taint(UNINITIALIZED_TAINT):
                return None
            plan = nodeplan.plan_node_init(node, item.answer)
            if not plan.initialises:
                return _Pending(node, plan, item.answer)

    def _write_status(self, item: _Pending) -> None:
        """The plan's addresses, if they change; a node deleted meanwhile is no failure."""
        if item.plan.addresses is None:
            return
        try:
            self._write_addresses(item.node.name, item.plan.addresses)
        except ApiError as error:
            if not error.not_found:
                raise

    def _write_addresses(self, name: str, addresses: Sequence[NodeAddress]) -> None:
        self.context.api.patch(
            NODES,
            name,
            nodeplan.addresses_patch(addresses),
            subresource="status",
            patch_type=MERGE_PATCH,
            decode=False,  # the informer brings the node back; its answer is never read
        )

    # -- node status: addresses at start and every period ----------------------------

    def _status_loop(self, stop: threading.Event) -> None:
        # Upstream's wait.Until: the first pass at once, the next one a period after it ended.
        what = "node status update"
        if not guarded(self.name, what, self.update_node_status):
            stop.wait()  # leadership lost: no pass runs again this term
            return
        period = self.context.options.node_status_update_frequency
        run_periodically(self.name, what, self.update_node_status, period, stop)

    def _status_workers(self) -> int:
        options = self.context.options
        return max(1, options.concurrent_node_status_updates or options.concurrent_node_syncs)

    def update_node_status(self) -> int:
        """Refresh the addresses of every initialised node; returns how many were patched.

        Upstream hands the nodes one at a time to ``--concurrent-node-status-updates``
        workers. Here the nodes are cut into as many slices as workers (more when a slice
        would exceed :data:`BATCH` nodes), each slice costing one bulk lookup, and the workers
        take slices side by side: as many cloud calls in flight as upstream, far fewer calls."""
        nodes = [
            node
            for node in map(Node, self.context.nodes.list())
            if node.provider_id and not node.has_taint(UNINITIALIZED_TAINT)
        ]
        workers = self._status_workers()
        slices = status_slices(nodes, workers)
        if len(slices) <= 1:
            return sum(self._update_slice(piece) for piece in slices)
        with ThreadPoolExecutor(min(workers, len(slices)), "cloud-node-status") as pool:
            return sum(pool.map(self._update_slice, slices))

    def _update_slice(self, nodes: Sequence[Node]) -> int:
        try:
            results = self.instances.instances_metadata(nodes)
        except LeadershipLost:
            raise
        except Exception as error:  # noqa: BLE001 - the other slices may still succeed
            log.warning("cloud-node: address refresh of %d nodes: %s", len(nodes), error)
            return 0
        patched = 0
        for node in nodes:
            result = results.get(node.name)
            if isinstance(result, Exception):
                log.warning("cloud-node: instance metadata of %s: %s", node.name, result)
            if not isinstance(result, InstanceMetadata):
                continue
            try:
                addresses = nodeinfo.refreshed_addresses(node, result)
                if addresses is not None:
                    self._write_addresses(node.name, addresses)
                    patched += 1
            except LeadershipLost:
                raise
            except ApiError as error:
                if not error.not_found:
                    log.warning("cloud-node: addresses of %s: %s", node.name, error)
            except Exception as error:  # noqa: BLE001 - one node never stops the others
                log.warning("cloud-node: addresses of %s: %s", node.name, error)
        return patched


def status_slices(nodes: Sequence[Node], workers: int) -> list[Sequence[Node]]:
    """``nodes`` cut into ``workers`` slices of nearly equal size (fewer with fewer nodes,
    more when a slice would hold over :data:`BATCH` nodes), in their order."""
    count = min(len(nodes), max(workers, -(-len(nodes) // BATCH)))
    return [nodes[len(nodes) * i // count : len(nodes) * (i + 1) // count] for i in range(count)]


class _Pending(NamedTuple):
    """A node of the batch, its plan, and the cloud's answer the plan was made from."""

    node: Node
    plan: NodeInitPlan
    answer: InstanceMetadata


def _outcome(action: Callable[[_Pending], _R], item: _Pending) -> _R | Exception:
    try:
        return action(item)
    except Exception as error:  # noqa: BLE001 - handed back to be settled by the batch
        return error


def _in_flight(items: Sequence[_Pending], action: Callable[[_Pending], _R]) -> list[_R | Exception]:
    """``action`` on every item, :data:`WRITES_IN_FLIGHT` at a time: what each returned or
    raised, in order. A lost leadership is raised once every write in flight has ended."""
    if len(items) <= 1:
        outcomes = [_outcome(action, item) for item in items]
    else:
        with ThreadPoolExecutor(min(WRITES_IN_FLIGHT, len(items))) as writers:
            outcomes = list(writers.map(functools.partial(_outcome, action), items))
    for outcome in outcomes:
        if isinstance(outcome, LeadershipLost):
            raise outcome
    return outcomes


class _Batch:
    """The keys of one batch and what became of each: a key is settled once it is forgotten
    (done) or scheduled again; a batch that fails as a whole re-queues the rest."""

    def __init__(self, queue: RateLimitingQueue) -> None:
        self.queue = queue
        self.settled: set[str] = set()

    def forget(self, key: str) -> None:
        self.queue.forget(key)
        self.settled.add(key)

    def retry(self, key: str) -> None:
        self.queue.add_rate_limited(key)
        self.settled.add(key)

    def retry_after(self, key: str, delay: float) -> None:
        self.queue.add_after(key, delay)
        self.settled.add(key)
