"""A listing of a cloud's resources kept for the lookups that follow, with this process's own
changes applied to it: the piece providers share for bursts of lookups by name or tag.

Services come in bursts (a deploy, a restart's initial sync), and a provider that finds a
service's cloud resource by listing them all would list once per service. A
:class:`KeptListing` makes one listing serve every caller that accepts its age: callers asking
while it is being made wait for it rather than list again, and what this process creates or
deletes meanwhile (:meth:`KeptListing.put`, :meth:`KeptListing.drop`) is applied to it, so a
kept listing never misses what the process itself just made. Only the leader writes a
cluster's resources, so the age a caller accepts bounds what another writer (an operator, a
former leader) may have changed unseen; :meth:`KeptListing.forget` drops the listing when a new
term starts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, TypeVar

V = TypeVar("V")


class KeptListing(Generic[V]):
    """The items ``list_all`` yields (``(id, item)`` pairs), listed once for every caller that
    accepts the listing's age, with this process's changes since applied.

    The age of a listing counts from when it began (the ``clock`` before the first page was
    asked for), so what it lacks was made after that. The mapping a caller gets is never
    changed afterwards: changes replace it.
    """

    def __init__(
        self,
        list_all: Callable[[], Iterable[tuple[str, V]]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list_all = list_all
        self._clock = clock
        self._lock = threading.Lock()
        """Held while a listing is made (callers meanwhile wait for it) and while it changes."""
        self._started: float | None = None
        self._items: Mapping[str, V] = {}

    def current(self, max_age: float) -> Mapping[str, V]:
        """The items of a listing begun at most ``max_age`` seconds before this call, made now
        when the kept one is older (``max_age`` 0 or less: always made now)."""
        asked = self._clock()
        with self._lock:
            if max_age > 0 and self._started is not None and self._started >= asked - max_age:
                return self._items
            started = self._clock()
            self._items = dict(self._list_all())
            self._started = started
            return self._items

    def put(self, item_id: str, item: V) -> None:
        """``item`` as this process just made or changed it (kept only while a listing is)."""
        with self._lock:
            if self._started is not None:
                self._items = {**self._items, item_id: item}

    def drop(self, item_id: str) -> None:
        """``item_id`` deleted by this process."""
        with self._lock:
            if item_id in self._items:
                self._items = {k: v for k, v in self._items.items() if k != item_id}

    def forget(self) -> None:
        """Drop the kept listing: the next caller lists again (a new leadership term)."""
        with self._lock:
            self._started = None
            self._items = {}
