"""Which process made each call an emulator served, told by the request itself.

A ``polyccm`` process names itself in the User-Agent of its cloud calls
(``polyccm-identity/<leader-election identity>``, :mod:`polyccm.useragent`; the GCE SDK puts
it in ``x-goog-api-client``). :class:`CallerLog` keeps, for every call whose headers name a
caller, ``(unix time, caller, operation)``, newest last, at most :data:`LIMIT` of them: the fault
kit's leader test reads it (``GET /_polyccm/calls?by=caller``) to show that the old leader made
no call after the new leader's first. Calls naming no caller (the tests' own) are not kept.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Protocol

from polyccm.useragent import caller_of

LIMIT = 100_000
"""Calls kept (the oldest go first): a long benchmark run must not grow the emulator."""
HEADERS = ("User-Agent", "X-Goog-Api-Client")
"""Where an SDK carries the caller's User-Agent."""


def caller_in(values: Iterable[str | None]) -> str | None:
    """The caller named by the first of these header values that names one."""
    for value in values:
        found = caller_of(value or "")
        if found is not None:
            return found
    return None


class _Headers(Protocol):
    def get(self, key: str, /) -> str | None: ...


def caller_from(headers: _Headers) -> str | None:
    """The caller a request's headers name (:data:`HEADERS`), if any."""
    return caller_in(headers.get(name) for name in HEADERS)


class CallerLog:
    """``(unix time, caller, operation)`` of each call that named its caller; thread-safe."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._lock = threading.Lock()
        self._calls: deque[tuple[float, str, str]] = deque(maxlen=limit)

    def record(self, caller: str | None, operation: str) -> None:
        if caller is None:
            return
        with self._lock:
            self._calls.append((time.time(), caller, operation))

    def calls(self) -> list[tuple[float, str, str]]:
        with self._lock:
            return list(self._calls)

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()
