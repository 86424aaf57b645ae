"""Work queues between informer handlers and controller workers, as in client-go.

Handlers only enqueue keys (``namespace/name``); workers take a key with :meth:`get`, reconcile
it from the cache and call :meth:`done`. The queue guarantees what controllers rely on:

- an item is queued at most once however often it is added (de-duplication);
- an item is never handed to two workers at once: re-adding an item that is being processed
  marks it dirty, and it is queued again when its worker calls :meth:`done`;
- a failed item comes back after a per-item exponential backoff (``add_rate_limited``), a
  "retry after" item after a fixed delay (``add_after``), and ``forget`` resets the backoff
  once the item succeeds.

Delayed items are kept in a heap and moved to the queue by whichever caller of :meth:`get`
is waiting, so the queue needs no thread of its own. After :meth:`shutdown` no new items are
accepted and :meth:`get` returns ``None`` at once: a controller that loses leadership stops
taking work, finishes the item in hand, and leaves the rest to the next leader.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import weakref
from collections import deque

from polyccm import metrics


class RateLimitingQueue:
    """A de-duplicating, delaying work queue with per-item exponential backoff. Thread-safe."""

    def __init__(self, name: str, *, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError("need 0 < base_delay <= max_delay")
        self.name = name
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: dict[str, float] = {}  # key -> monotonic start of processing
        self._added_at: dict[str, float] = {}  # key -> monotonic time it entered the queue
        self._waiting: dict[str, float] = {}  # key -> earliest monotonic time it is due
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._failures: dict[str, int] = {}
        self._shutting_down = False
        self._metrics = _QueueMetrics(self)

    # -- adding ---------------------------------------------------------------------------

    def add(self, key: str) -> None:
        """Queue ``key`` unless it is already queued (or queue it again after its current
        processing ends)."""
        with self._cond:
            self._add_locked(key, time.monotonic())

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` once ``delay`` seconds have passed. An item already waiting keeps the
        earlier of its two due times."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutting_down:
                return
            due = time.monotonic() + delay
            current = self._waiting.get(key)
            if current is not None and current <= due:
                return
            self._waiting[key] = due
            heapq.heappush(self._heap, (due, next(self._seq), key))
            # A waiting get() may be sleeping until a later due time: wake it to recompute.
            self._cond.notify_all()

    def add_rate_limited(self, key: str) -> None:
        """Queue ``key`` after its backoff: ``base_delay * 2**n`` for its n-th consecutive
        failure, capped at ``max_delay``."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        self._metrics.retries.inc()
        self.add_after(key, self._backoff(failures))

    def _backoff(self, failures: int) -> float:
        if failures >= 64:  # 2**64 overflows nothing in Python, but it is past any cap
            return self.max_delay
        return float(min(self.max_delay, self.base_delay * (2**failures)))

    def forget(self, key: str) -> None:
        """Reset the backoff of ``key`` (call it when the item succeeded)."""
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key: str) -> int:
        """How many times ``key`` went through :meth:`add_rate_limited` since its last
        :meth:`forget`."""
        with self._cond:
            return self._failures.get(key, 0)

    def _add_locked(self, key: str, now: float) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._metrics.adds.inc()
        self._dirty.add(key)
        if key in self._processing:
            return  # done() queues it again
        self._queue.append(key)
        self._added_at[key] = now
        self._metrics.depth.set(len(self._queue))
        self._cond.notify()

    def _move_due_locked(self, now: float) -> float | None:
        """Queue every waiting item that is due; return the next due time, if any."""
        while self._heap:
            due, _, key = self._heap[0]
            if self._waiting.get(key) != due:
                heapq.heappop(self._heap)  # superseded by an earlier add_after
                continue
            if due > now:
                return due
            heapq.heappop(self._heap)
            del self._waiting[key]
            self._add_locked(key, now)
        return None

    # -- taking ---------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> str | None:
        """The next item, waiting up to ``timeout`` seconds (forever when ``None``).

        Returns ``None`` on timeout or once the queue shuts down. The caller owns the item
        until it calls :meth:`done`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._shutting_down:
                    return None
                now = time.monotonic()
                next_due = self._move_due_locked(now)
                if self._queue:
                    return self._pop_locked(now)
                wait_until = next_due
                if deadline is not None:
                    if now >= deadline:
                        return None
                    wait_until = deadline if wait_until is None else min(wait_until, deadline)
                self._cond.wait(None if wait_until is None else max(0.0, wait_until - now))

    def get_batch(self, max_items: int, timeout: float | None = None) -> list[str]:
        """At least one item (waiting as :meth:`get` does), plus whatever else is ready right
        now, up to ``max_items``. Empty on timeout or shutdown. Each item needs :meth:`done`.

        Lets a worker answer many keys with one bulk cloud call."""
        first = self.get(timeout)
        if first is None:
            return []
        batch = [first]
        with self._cond:
            now = time.monotonic()
            self._move_due_locked(now)
            while self._queue and len(batch) < max_items and not self._shutting_down:
                batch.append(self._pop_locked(now))
        return batch

    def _pop_locked(self, now: float) -> str:
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing[key] = now
        added = self._added_at.pop(key, now)
        self._metrics.depth.set(len(self._queue))
        self._metrics.queue_duration.observe(now - added)
        return key

    def done(self, key: str) -> None:
        """Mark ``key`` finished; if it was added meanwhile, it is queued again now."""
        with self._cond:
            started = self._processing.pop(key, None)
            now = time.monotonic()
            if started is not None:
                self._metrics.work_duration.observe(now - started)
            if key in self._dirty and not self._shutting_down:
                self._queue.append(key)
                self._added_at[key] = now
                self._metrics.depth.set(len(self._queue))
                self._cond.notify()

    # -- lifecycle ------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Accept no more items and wake every waiting :meth:`get` with ``None``."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def __len__(self) -> int:
        """Items ready to be handed out (not counting delayed or in-progress ones)."""
        with self._cond:
            return len(self._queue)

    def waiting(self) -> int:
        """Items scheduled by :meth:`add_after` / :meth:`add_rate_limited` and not yet due."""
        with self._cond:
            return len(self._waiting)

    def processing(self) -> int:
        """Items handed out and not yet marked :meth:`done`."""
        with self._cond:
            return len(self._processing)

    # -- used by the metrics gauges -------------------------------------------------------

    def _unfinished_seconds(self) -> float:
        now = time.monotonic()
        with self._cond:
            return sum(now - started for started in self._processing.values())

    def _longest_running_seconds(self) -> float:
        now = time.monotonic()
        with self._cond:
            return max((now - started for started in self._processing.values()), default=0.0)


class _QueueMetrics:
    """The client-go workqueue metrics of one queue, labelled with its name."""

    def __init__(self, queue: RateLimitingQueue) -> None:
        name = queue.name
        self.depth = metrics.workqueue_depth.labels(name=name)
        self.adds = metrics.workqueue_adds_total.labels(name=name)
        self.retries = metrics.workqueue_retries_total.labels(name=name)
        self.queue_duration = metrics.workqueue_queue_duration_seconds.labels(name=name)
        self.work_duration = metrics.workqueue_work_duration_seconds.labels(name=name)
        # Gauges read the queue when scraped; a weak reference lets a dropped queue go.
        ref = weakref.ref(queue)
        metrics.workqueue_unfinished_work_seconds.labels(name=name).set_function(
            lambda: q._unfinished_seconds() if (q := ref()) is not None else 0.0
        )
        metrics.workqueue_longest_running_processor_seconds.labels(name=name).set_function(
            lambda: q._longest_running_seconds() if (q := ref()) is not None else 0.0
        )
