"""Kubernetes Events about the objects the controllers act on, recorded like client-go's.

:meth:`EventRecorder.event` never blocks and never raises: it builds a core/v1 Event and puts it
on a bounded queue. A background thread takes it from there through the :class:`EventCorrelator`
and hands it to one of a few writer threads, always the same one for the same Event, so that its
create and later count patches stay in order while different Events are written side by side
(one writer was the bottleneck of a burst: a thousand Services' and nodes' Events were still
being written a minute after the work they report). The correlator applies client-go's rules so
that a controller retrying a broken object every few seconds does not flood the API server:

- an identical event (same object, type, reason, message and source) seen again within
  ten minutes increments ``count`` and ``lastTimestamp`` of the existing Event (one PATCH)
  instead of creating another;
- once an object has produced ten different messages for one reason within ten minutes, the
  rest are folded into one Event whose message starts "(combined from similar events): ";
- a token bucket per object and type (burst 25, one more every five minutes) drops the excess.

Events live in the object's namespace, or in ``default`` for cluster-scoped objects (nodes).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from polyccm import metrics
from polyccm.kube.api import EVENTS, MERGE_PATCH, ApiError, JsonObject, KubeApi

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

AGGREGATE_PREFIX = "(combined from similar events): "
MAX_MESSAGE_LENGTH = 1024

T = TypeVar("T")


def _now_timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def involved_object(obj: Mapping[str, Any]) -> JsonObject:
    """The ObjectReference an Event uses for ``obj``."""
    meta = obj.get("metadata") or {}
    reference = {
        "kind": obj.get("kind") or "",
        "apiVersion": obj.get("apiVersion") or "",
        "name": meta.get("name") or "",
        "namespace": meta.get("namespace") or "",
        "uid": meta.get("uid") or "",
        "resourceVersion": meta.get("resourceVersion") or "",
    }
    return {key: value for key, value in reference.items() if value}


class _Lru(Generic[T]):
    """A size-bounded mapping that forgets the least recently used key first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[tuple[str, ...], T] = OrderedDict()

    def get(self, key: tuple[str, ...]) -> T | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: tuple[str, ...], value: T) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.size:
            self._data.popitem(last=False)


@dataclass
class _Seen:
    name: str
    count: int
    first_timestamp: str
    last_seen: float


@dataclass
class _Similar:
    messages: set[str] = field(default_factory=set)
    last_seen: float = 0.0


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass(frozen=True)
class Correlated:
    """What to write: a new Event (``patch`` False) or a PATCH of ``event['metadata']['name']``
    with the new count, message and lastTimestamp."""

    event: JsonObject
    patch: bool


class EventCorrelator:
    """client-go's EventCorrelator (aggregator, de-duplicating logger, spam filter), without
    I/O. Not thread-safe: the recorder's writer thread is its only user."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        window: float = 600.0,
        max_similar: int = 10,
        burst: int = 25,
        refill_every: float = 300.0,
        cache_size: int = 4096,
    ) -> None:
        self.clock = clock
        self.window = window
        self.max_similar = max_similar
        self.burst = burst
        self.refill_every = refill_every
        self.cache_size = cache_size
        self._seen: _Lru[_Seen] = _Lru(cache_size)
        self._similar: _Lru[_Similar] = _Lru(cache_size)
        self._buckets: _Lru[_Bucket] = _Lru(cache_size)

    def correlate(self, event: JsonObject) -> Correlated | None:
        """The write to make for ``event`` (a complete new Event), or ``None`` to drop it."""
        now = self.clock()
        ref = event["involvedObject"]
        source = event.get("source") or {}
        object_key: tuple[str, ...] = (
            source.get("component", ""),
            source.get("host", ""),
            ref.get("kind", ""),
            ref.get("namespace", ""),
            ref.get("name", ""),
            ref.get("uid", ""),
            ref.get("apiVersion", ""),
            event["type"],
        )
        if not self._allow(object_key, now):
            return None

        similar_key = (*object_key, event["reason"])
        key: tuple[str, ...] = (*similar_key, event["message"])
        similar = self._similar.get(similar_key)
        if similar is None or now - similar.last_seen > self.window:
            similar = _Similar()
        similar.messages.add(event["message"])
        similar.last_seen = now
        if len(similar.messages) >= self.max_similar:
            similar.messages.pop()  # never grow past the limit
            event = {**event, "message": AGGREGATE_PREFIX + event["message"]}
            key = similar_key
        self._similar.put(similar_key, similar)

        seen = self._seen.get(key)
        if seen is not None and now - seen.last_seen <= self.window:
            seen.count += 1
            seen.last_seen = now
            self._seen.put(key, seen)
            metadata = {**event["metadata"], "name": seen.name}
            updated = {
                **event,
                "metadata": metadata,
                "count": seen.count,
                "firstTimestamp": seen.first_timestamp,
            }
            return Correlated(updated, patch=True)
        self._seen.put(key, _Seen(event["metadata"]["name"], 1, event["firstTimestamp"], now))
        return Correlated(event, patch=False)

    def _allow(self, key: tuple[str, ...], now: float) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
        bucket.tokens = min(
            float(self.burst), bucket.tokens + (now - bucket.updated) / self.refill_every
        )
        bucket.updated = now
        allowed = bucket.tokens >= 1
        if allowed:
            bucket.tokens -= 1
        self._buckets.put(key, bucket)
        return allowed


_STOP = object()


class EventRecorder:
    """Records Events for one component; thread-safe, non-blocking."""

    def __init__(
        self,
        api: KubeApi,
        *,
        component: str = "cloud-controller-manager",
        host: str = "",
        queue_size: int = 1000,
        correlator: EventCorrelator | None = None,
        write_attempts: int = 3,
        retry_delay: float = 1.0,
        writers: int = 4,
    ) -> None:
        self.api = api
        self.component = component
        self.host = host
        self.correlator = correlator or EventCorrelator()
        self.write_attempts = write_attempts
        self.retry_delay = retry_delay
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        # Small per-writer queues: when the writers fall behind, the main queue fills and
        # events are dropped there, as with one writer.
        self._writer_queues: list[queue.Queue[object]] = [
            queue.Queue(maxsize=16) for _ in range(max(1, writers))
        ]
        self._thread: threading.Thread | None = None
        self._writers: list[threading.Thread] = []
        self._stopping = threading.Event()

    def event(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """Record an event about ``obj`` (a Kubernetes object as a dict). Never raises."""
        try:
            self._queue.put_nowait(self._make_event(obj, event_type, reason, message))
        except queue.Full:
            metrics.events_dropped_total.inc()
            log.warning("event queue full; dropped %s %s: %s", event_type, reason, message)
        except Exception:
            metrics.events_dropped_total.inc()
            log.exception("could not record event %s %s", event_type, reason)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._writers = [
            threading.Thread(
                target=self._write_from, args=(q,), name=f"event-writer-{i}", daemon=True
            )
            for i, q in enumerate(self._writer_queues)
        ]
        for writer in self._writers:
            writer.start()
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Write what is queued (for up to ``timeout`` seconds), then stop."""
        if self._thread is None:
            return
        deadline = time.monotonic() + timeout
        self._stopping.set()
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=timeout)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        for writer in self._writers:
            writer.join(max(0.0, deadline - time.monotonic()))
        self._thread = None
        self._writers = []

    # -- building -------------------------------------------------------------------------

    def _make_event(
        self, obj: Mapping[str, Any], event_type: str, reason: str, message: str
    ) -> JsonObject:
        reference = involved_object(obj)
        name = reference.get("name") or "unknown"
        namespace = reference.get("namespace") or "default"
        timestamp = _now_timestamp()
        source = {"component": self.component}
        if self.host:
            source["host"] = self.host
        event: JsonObject = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": reference,
            "reason": reason,
            "message": message[:MAX_MESSAGE_LENGTH],
            "type": event_type,
            "source": source,
            "firstTimestamp": timestamp,
            "lastTimestamp": timestamp,
            "count": 1,
            "reportingComponent": self.component,
        }
        if self.host:
            event["reportingInstance"] = self.host
        return event

    # -- writing --------------------------------------------------------------------------

    def _run(self) -> None:
        """Correlate each queued event and hand it to its writer (by the Event's name, which a
        count patch shares with the create it follows)."""
        while True:
            item = self._queue.get()
            if item is _STOP:
                for writer_queue in self._writer_queues:
                    writer_queue.put(_STOP)
                return
            assert isinstance(item, dict)
            try:
                correlated = self.correlator.correlate(item)
                if correlated is None:
                    log.debug("event dropped by the spam filter: %s", item.get("reason"))
                    continue
                name = str(correlated.event["metadata"]["name"])
                self._writer_queues[hash(name) % len(self._writer_queues)].put(correlated)
            except Exception:
                metrics.events_dropped_total.inc()
                log.exception("recording event %s failed", item.get("reason"))

    def _write_from(self, writer_queue: queue.Queue[object]) -> None:
        while True:
            item = writer_queue.get()
            if item is _STOP:
                return
            assert isinstance(item, Correlated)
            try:
                self._write(item)
            except Exception:
                metrics.events_dropped_total.inc()
                log.exception("recording event %s failed", item.event.get("reason"))

    def _write(self, correlated: Correlated) -> None:
        event = correlated.event
        patch = correlated.patch
        namespace = event["metadata"]["namespace"]
        failure: Exception | None = None
        for attempt in range(self.write_attempts):
            try:
                if patch:
                    self.api.patch(
                        EVENTS,
                        event["metadata"]["name"],
                        {
                            "count": event["count"],
                            "message": event["message"],
                            "lastTimestamp": event["lastTimestamp"],
                        },
                        namespace,
                        patch_type=MERGE_PATCH,
                        decode=False,
                    )
                else:
                    self.api.create(EVENTS, event, namespace, decode=False)
                return
            except ApiError as error:
                if patch and error.not_found:
                    # The Event expired (events have a TTL): create it again with the count.
                    patch = False
                    continue
                if error.status == 409 and not patch:
                    return  # created by an earlier attempt whose answer was lost
                if 400 <= error.status < 500 and error.status != 429:
                    metrics.events_dropped_total.inc()
                    log.warning("event %s rejected: %s", event.get("reason"), error)
                    return
                failure = error
            except Exception as error:  # noqa: BLE001 - any failure is retried, then counted as dropped
                failure = error
            if attempt + 1 < self.write_attempts and not self._stopping.is_set():
                time.sleep(self.retry_delay * (attempt + 1))
        metrics.events_dropped_total.inc()
        log.warning("event %s not recorded: %s", event.get("reason"), failure)
