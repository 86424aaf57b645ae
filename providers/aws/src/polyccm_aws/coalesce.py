"""Merge concurrent lookups into one bulk call.

When several controller workers ask for one instance each at nearly the same moment, the first
caller waits a short window, then fetches every key asked for meanwhile in one call; the others
wait for that result. This is upstream's DescribeInstances batcher, in a few lines.

A key that is already being fetched is never fetched a second time: a caller whose keys are
(partly) in flight waits for that fetch and asks only for the rest. Four service workers that
each want the same 1,000 backend instances thus cost one lookup, not four.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class _Batch(Generic[K, V]):
    def __init__(self) -> None:
        self.keys: set[K] = set()
        self.done = threading.Event()
        self.result: Mapping[K, V] = {}
        self.error: BaseException | None = None


class Coalescer(Generic[K, V]):
    """Calls ``fetch`` with the union of the keys requested within ``window`` seconds, and
    once only for a key requested again while its fetch runs."""

    def __init__(
        self,
        fetch: Callable[[list[K]], Mapping[K, V]],
        *,
        window: float = 0.02,
        max_keys: int = 500,
    ) -> None:
        self._fetch = fetch
        self._window = window
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._open: _Batch[K, V] | None = None
        self._pending: dict[K, _Batch[K, V]] = {}
        """Each key being fetched (or waiting in the open batch), and its batch."""

    def get(self, keys: Collection[K]) -> dict[K, V]:
        """The fetched values of ``keys`` (keys the fetch did not answer are left out)."""
        if not keys:
            return {}
        waits: list[_Batch[K, V]] = []
        own: _Batch[K, V] | None = None
        with self._lock:
            fresh: list[K] = []
            for key in keys:
                running = self._pending.get(key)
                if running is None:
                    fresh.append(key)
                elif all(running is not other for other in waits):
                    waits.append(running)
            if fresh:
                batch = self._open
                if batch is None or len(batch.keys) + len(fresh) > self._max_keys:
                    own = batch = self._open = _Batch()
                batch.keys.update(fresh)
                for key in fresh:
                    self._pending[key] = batch
                if own is None:
                    waits.append(batch)
        if own is not None:
            self._run(own)
            waits.append(own)
        result: dict[K, V] = {}
        for batch in waits:
            batch.done.wait()
            if batch.error is not None:
                raise batch.error
            result.update((key, batch.result[key]) for key in keys if key in batch.result)
        return result

    def _run(self, batch: _Batch[K, V]) -> None:
        """Fetch ``batch`` (this caller opened it) after the window, and let its waiters go."""
        if self._window > 0:
            time.sleep(self._window)
        with self._lock:
            if self._open is batch:
                self._open = None
        try:
            batch.result = self._fetch(sorted(batch.keys, key=str))
        except BaseException as error:  # noqa: BLE001 - raised by every waiter, this caller too
            batch.error = error
        finally:
            with self._lock:
                for key in batch.keys:
                    if self._pending.get(key) is batch:
                        del self._pending[key]
            batch.done.set()
