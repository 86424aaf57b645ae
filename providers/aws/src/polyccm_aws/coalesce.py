"""Merge concurrent lookups into one bulk call.

When several controller workers ask for one instance each at nearly the same moment, the first
caller waits a short window, then fetches every key asked for meanwhile in one call; the others
wait for that result. This is upstream's DescribeInstances batcher, in a few lines.
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
    """Calls ``fetch`` with the union of the keys requested within ``window`` seconds."""

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

    def get(self, keys: Collection[K]) -> dict[K, V]:
        """The fetched values of ``keys`` (keys the fetch did not answer are left out)."""
        if not keys:
            return {}
        with self._lock:
            batch = self._open
            leader = batch is None or len(batch.keys) + len(keys) > self._max_keys
            if leader:
                batch = _Batch()
                self._open = batch
            assert batch is not None
            batch.keys.update(keys)
        if leader:
            if self._window > 0:
                time.sleep(self._window)
            with self._lock:
                if self._open is batch:
                    self._open = None
            try:
                batch.result = self._fetch(sorted(batch.keys, key=str))
            except BaseException as error:
                batch.error = error
                raise
            finally:
                batch.done.set()
        else:
            batch.done.wait()
            if batch.error is not None:
                raise batch.error
        return {key: batch.result[key] for key in keys if key in batch.result}
