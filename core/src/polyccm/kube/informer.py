"""Informers: a light, shared cache of one resource kept in step with the API server.

An :class:`Informer` lists a resource (in pages of 500) and then watches it from the list's
resourceVersion with bookmarks on, so that a reconnect resumes where it stopped instead of
listing again. Watches end on the server after about five minutes and are re-opened from the
last resourceVersion seen (a bookmark counts); errors reconnect with capped exponential backoff
and jitter; a 410 Gone (the resourceVersion was compacted away) triggers a full relist, which is
compared with the cache to emit the adds, updates and deletes that were missed.

Why not ``kubernetes.informer.SharedInformer`` (see core/DESIGN-NOTES-machinery.md for the
numbers): it caches the generated models, which take several times the memory of plain dicts
and parse several times slower; its update handler gets only the new object; it does not ask
for bookmarks; it reconnects at once (a busy loop when the server is down); its resync lists the
whole resource again; and it has no "has synced".

Objects are cached as the API server's JSON dictionaries after a ``slim`` function has dropped
what no controller reads (by default ``metadata.managedFields`` and the kubectl
last-applied-configuration annotation). Cached dictionaries are shared with every handler and
reader: never mutate them; ``copy.deepcopy`` one before changing it, and write with patches.

Handlers run one at a time on the informer's threads and must be quick: they enqueue keys.
"""

from __future__ import annotations

import builtins
import logging
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from polyccm import metrics
from polyccm.kube.api import ApiError, JsonObject, KubeApi, Resource, WatchHandle

log = logging.getLogger(__name__)

_intern = sys.intern

LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"

AddHandler = Callable[[JsonObject], None]
UpdateHandler = Callable[[JsonObject, JsonObject], None]
DeleteHandler = Callable[[JsonObject], None]
Slim = Callable[[JsonObject], JsonObject]


def object_key(obj: JsonObject) -> str:
    """``namespace/name`` for a namespaced object, ``name`` for a cluster-scoped one."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def default_slim(obj: JsonObject) -> JsonObject:
    """Drop ``metadata.managedFields`` and the kubectl last-applied annotation.

    A slim function receives a freshly parsed object that nothing else holds, so it may change
    it in place; it returns the object to cache."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(LAST_APPLIED_ANNOTATION, None)
    return obj


NODE_STATUS_UNREAD = (
    "images",
    "volumesInUse",
    "volumesAttached",
    "nodeInfo",
    "capacity",
    "allocatable",
    "daemonEndpoints",
    "config",
    "runtimeHandlers",
    "features",
)
"""Parts of a node's status no cloud controller reads (``images`` is usually the biggest part
of a node; the rest is about a fifth of what remains)."""


def slim_node(obj: JsonObject) -> JsonObject:
    """:func:`default_slim` plus the parts of a node's status no cloud controller reads
    (:data:`NODE_STATUS_UNREAD`); then :func:`intern_keys`, since nodes are many and mostly
    arrive one watch event at a time.

    A node cached this way must never be written back whole (PUT); patch the fields you own."""
    default_slim(obj)
    status = obj.get("status")
    if isinstance(status, dict):
        for unread in NODE_STATUS_UNREAD:
            status.pop(unread, None)
    result: JsonObject = intern_keys(obj)
    _share_values(result)
    return result


def _share_values(node: JsonObject) -> None:
    """Intern the string values nodes repeat: label and annotation values, each condition's
    type, status, reason and message, address types and taints (thousands of nodes carry the
    same zone, instance type, "KubeletReady", "kubelet is posting ready status"...)."""
    meta = node.get("metadata") or {}
    for mapping in (meta.get("labels"), meta.get("annotations")):
        if isinstance(mapping, dict):
            for key, value in mapping.items():
                if isinstance(value, str) and len(value) <= 64:
                    mapping[key] = _intern(value)
    status = node.get("status") or {}
    spec = node.get("spec") or {}
    for items, fields in (
        (status.get("conditions"), ("type", "status", "reason", "message")),
        (status.get("addresses"), ("type",)),
        (spec.get("taints"), ("key", "value", "effect")),
    ):
        for item in items if isinstance(items, list) else ():
            for field in fields:
                value = item.get(field) if isinstance(item, dict) else None
                if isinstance(value, str):
                    item[field] = _intern(value)


def intern_keys(value: Any) -> Any:
    """A copy of a parsed JSON value whose dictionary keys are interned strings.

    ``json.loads`` shares equal keys within one document only: objects from a list page share
    their keys, but each watch event brings its own copies of "metadata", "name",
    "lastTransitionTime"... Interning makes all cached objects share one copy (a node from a
    watch event shrinks by about a third, for about 30 us of work)."""
    if isinstance(value, dict):
        return {_intern(key): intern_keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [intern_keys(item) for item in value]
    return value


@dataclass(frozen=True)
class _Handlers:
    on_add: AddHandler | None
    on_update: UpdateHandler | None
    on_delete: DeleteHandler | None


class Backoff:
    """Capped exponential backoff with jitter, reset after a long enough healthy run
    (client-go's reflector uses 800 ms doubling to 30 s, reset after 2 minutes)."""

    def __init__(
        self,
        initial: float = 0.8,
        cap: float = 30.0,
        *,
        factor: float = 2.0,
        jitter: float = 1.0,
        reset_after: float = 120.0,
    ) -> None:
        self.initial = initial
        self.cap = cap
        self.factor = factor
        self.jitter = jitter
        self.reset_after = reset_after
        self._current = initial
        self._last = 0.0

    def next(self) -> float:
        """The next delay to wait."""
        now = time.monotonic()
        if self._last and now - self._last > self.reset_after:
            self._current = self.initial
        self._last = now
        delay = self._current
        self._current = min(self.cap, self._current * self.factor)
        return min(self.cap, delay * (1 + random.random() * self.jitter))

    def reset(self) -> None:
        self._current = self.initial


class Informer:
    """List-then-watch cache of one resource, with add/update/delete handlers."""

    page_size = 500
    """Objects per list page: bounds the memory of one response at 5,000 objects and more."""

    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        *,
        namespace: str | None = None,
        slim: Slim | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resync_period: float = 0,
        name: str = "",
        watch_timeout: float = 300.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.api = api
        self.resource = resource
        self.namespace = namespace
        self.slim: Slim = slim or default_slim
        self.resync_period = resync_period
        self.name = name or (f"{resource.plural}/{namespace}" if namespace else resource.plural)
        self.watch_timeout = watch_timeout
        self.backoff = backoff or Backoff()
        self._selectors: dict[str, str] = {}
        if label_selector:
            self._selectors["labelSelector"] = label_selector
        if field_selector:
            self._selectors["fieldSelector"] = field_selector

        self._items: dict[str, JsonObject] = {}
        self._items_lock = threading.Lock()
        # Serialises handler calls (watch thread and resync thread) and lets stop() wait for a
        # running handler; re-entrant so that a handler may call stop().
        self._dispatch_lock = threading.RLock()
        self._handlers: list[_Handlers] = []
        self._resource_version: str | None = None
        self._stopped = threading.Event()
        self._synced = threading.Event()
        self._threads: list[threading.Thread] = []
        self._open_watch: WatchHandle | None = None

        self._m_lists = metrics.informer_lists_total.labels(informer=self.name)
        self._m_watches = metrics.informer_watches_total.labels(informer=self.name)
        self._m_bookmarks = metrics.informer_bookmarks_total.labels(informer=self.name)
        self._m_errors = metrics.informer_watch_errors_total.labels(informer=self.name)
        self._m_cached = metrics.informer_cached_objects.labels(informer=self.name)

    # -- public API -----------------------------------------------------------------------

    def add_handler(
        self,
        *,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> None:
        """Register callbacks. A handler added after the first sync is first called with
        ``on_add`` for every cached object, so it never misses the initial state."""
        handlers = _Handlers(on_add, on_update, on_delete)
        with self._dispatch_lock:
            self._handlers.append(handlers)
            if self._synced.is_set() and on_add is not None:
                for obj in self.list():
                    self._call(on_add, obj)

    def start(self) -> None:
        """List and watch on a daemon thread (and resync on another, if asked). Idempotent."""
        if self._threads:
            return
        self._threads.append(
            threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        )
        if self.resync_period > 0:
            self._threads.append(
                threading.Thread(
                    target=self._resync_loop, name=f"informer-{self.name}-resync", daemon=True
                )
            )
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop watching. Once this returns no handler is running or will be called again,
        and the open watch connection has been shut down so its thread ends at once."""
        self._stopped.set()
        watch = self._open_watch
        if watch is not None:
            watch.shutdown()
        with self._dispatch_lock:
            pass  # wait for a handler in progress on another thread
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=0.05)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def has_synced(self) -> bool:
        """True once the first list is in the cache and its adds were handed to handlers."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    @property
    def resource_version(self) -> str | None:
        """The resourceVersion the next watch resumes from (``None`` before the first list)."""
        return self._resource_version

    def get(self, key: str) -> JsonObject | None:
        """The cached object for ``namespace/name`` (or ``name``). Read-only: do not mutate."""
        with self._items_lock:
            return self._items.get(key)

    def list(self) -> list[JsonObject]:
        """A snapshot of every cached object. Read-only: do not mutate the dictionaries."""
        with self._items_lock:
            return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        with self._items_lock:
            return list(self._items)

    def __len__(self) -> int:
        with self._items_lock:
            return len(self._items)

    # -- the watch thread -----------------------------------------------------------------

    def _watch_opened(self, handle: WatchHandle) -> None:
        self._open_watch = handle
        if self._stopped.is_set():  # stop() ran between the request and this call
            handle.shutdown()

    def _run(self) -> None:
        gone_in_a_row = 0
        while not self._stopped.is_set():
            try:
                if self._resource_version is None:
                    self._relist()
                self._watch_once()
                gone_in_a_row = 0
            except ApiError as error:
                if error.gone:
                    # The resourceVersion was compacted away: only a full list can tell what
                    # changed meanwhile. A second 410 in a row backs off like any error.
                    log.info("informer %s: %s; relisting", self.name, error)
                    self._resource_version = None
                    gone_in_a_row += 1
                    if gone_in_a_row > 1:
                        self._stopped.wait(self.backoff.next())
                    continue
                self._on_error(error)
            except Exception as error:  # noqa: BLE001 - network errors of any kind: reconnect
                self._on_error(error)

    def _on_error(self, error: Exception) -> None:
        self._m_errors.inc()
        delay = self.backoff.next()
        log.warning("informer %s: %s; retrying in %.1fs", self.name, error, delay)
        self._stopped.wait(delay)

    def _watch_once(self) -> None:
        assert self._resource_version is not None
        # Jitter spreads the re-watches of many informers (client-go: 5 to 10 minutes).
        timeout = max(1, round(self.watch_timeout * (1 + 0.2 * random.random())))
        self._m_watches.inc()
        stream = self.api.watch(
            self.resource,
            self.namespace,
            resource_version=self._resource_version,
            timeout_seconds=timeout,
            on_open=self._watch_opened,
            **self._selectors,
        )
        for event in stream:
            if self._stopped.is_set():
                return
            self._handle_event(event)
        # The server ended the watch normally: this connection worked, so the next error
        # starts from the initial backoff again.
        self.backoff.reset()

    def _handle_event(self, event: JsonObject) -> None:
        event_type = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if event_type == BOOKMARK:
            self._m_bookmarks.inc()
            if rv:
                self._resource_version = str(rv)
            return
        if event_type not in (ADDED, MODIFIED, DELETED):
            log.warning("informer %s: unexpected watch event %r", self.name, event_type)
            return
        obj = self.slim(obj)
        key = object_key(obj)
        with self._dispatch_lock:
            if self._stopped.is_set():
                return
            with self._items_lock:
                old = self._items.get(key)
                if event_type == DELETED:
                    self._items.pop(key, None)
                else:
                    self._items[key] = obj
                self._m_cached.set(len(self._items))
            if rv:
                self._resource_version = str(rv)
            if event_type == DELETED:
                self._fire_delete(obj)
            elif old is None:
                self._fire_add(obj)
            else:
                self._fire_update(old, obj)

    # -- listing --------------------------------------------------------------------------

    def _relist(self) -> None:
        fresh, rv = self._list_all()
        with self._dispatch_lock:
            if self._stopped.is_set():
                return
            with self._items_lock:
                old = self._items
                self._items = fresh
                self._m_cached.set(len(fresh))
            self._resource_version = rv
            for key, obj in old.items():
                if key not in fresh:
                    self._fire_delete(obj)
            for key, obj in fresh.items():
                previous = old.get(key)
                if previous is None:
                    self._fire_add(obj)
                elif _rv(previous) != _rv(obj):
                    self._fire_update(previous, obj)
            self._synced.set()
        log.debug("informer %s: listed %d objects at %s", self.name, len(fresh), rv)

    def _list_all(self) -> tuple[dict[str, JsonObject], str]:
        """Every object (slimmed, page by page) and the list's resourceVersion."""
        self._m_lists.inc()
        fresh: dict[str, JsonObject] = {}
        query: dict[str, Any] = {**self._selectors, "limit": self.page_size}
        continue_token: str | None = None
        while True:
            try:
                page = self.api.list(self.resource, self.namespace, **query)
            except ApiError as error:
                if not (error.gone and continue_token):
                    raise
                # The continue token expired mid-list: list everything in one request.
                log.info("informer %s: list continuation expired; listing at once", self.name)
                fresh.clear()
                page = self.api.list(self.resource, self.namespace, **self._selectors)
            self._absorb_page(page, fresh)
            meta = page.get("metadata") or {}
            continue_token = meta.get("continue") or None
            if not continue_token:
                return fresh, str(meta.get("resourceVersion") or "0")
            query["continue"] = continue_token

    def _absorb_page(self, page: JsonObject, into: dict[str, JsonObject]) -> None:
        # List items carry no kind/apiVersion; watch events do. Fill them in so that every
        # cached object looks the same (events need them for involvedObject).
        list_kind = str(page.get("kind") or "")
        kind = list_kind.removesuffix("List") if list_kind.endswith("List") else ""
        api_version = page.get("apiVersion") or self.resource.group_version
        for item in page.get("items") or ():
            if kind:
                item.setdefault("kind", kind)
            item.setdefault("apiVersion", api_version)
            obj = self.slim(item)
            into[object_key(obj)] = obj

    # -- resync ---------------------------------------------------------------------------

    def _resync_loop(self) -> None:
        while not self._stopped.wait(self.resync_period):
            if not self._synced.is_set():
                continue
            with self._dispatch_lock:
                if self._stopped.is_set():
                    return
                for obj in self.list():
                    self._fire_update(obj, obj)

    # -- handler dispatch (callers hold the dispatch lock) ---------------------------------

    def _fire_add(self, obj: JsonObject) -> None:
        for handlers in self._handlers:
            if handlers.on_add is not None:
                self._call(handlers.on_add, obj)

    def _fire_update(self, old: JsonObject, new: JsonObject) -> None:
        for handlers in self._handlers:
            if handlers.on_update is not None:
                self._call(handlers.on_update, old, new)

    def _fire_delete(self, obj: JsonObject) -> None:
        for handlers in self._handlers:
            if handlers.on_delete is not None:
                self._call(handlers.on_delete, obj)

    def _call(self, handler: Callable[..., None], *args: JsonObject) -> None:
        try:
            handler(*args)
        except Exception:
            # A faulty handler must not stop the cache from following the server.
            log.exception("informer %s: handler %r failed", self.name, handler)


def _rv(obj: JsonObject) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
