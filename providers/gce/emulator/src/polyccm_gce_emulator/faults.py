"""Fault injection, rate limits and call counting: what the control API sets and reads.

A :class:`Fault` makes the next ``count`` calls of one API method (``compute.routes.insert``,
or ``*``) slow (``latency``), fail with an HTTP error (``status`` and ``reason``: a 503
``backendError``, a 403 ``rateLimitExceeded``...), or succeed with an operation that ends in
``operation_error``; ``after`` lets that many matching calls through first, ``writes_only``
matches no GET. A :class:`RateLimit` is a token bucket per project and method: calls above
it answer 403 ``rateLimitExceeded`` as GCE's per-project API quotas do.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from polyccm_testing.emulation.callers import CallerLog


@dataclass
class Fault:
    """Misbehave on the next ``count`` calls of ``method`` (every call when ``count`` is 0)."""

    method: str = "*"
    count: int = 1
    latency: float = 0.0
    """Seconds to wait before answering."""
    status: int | None = None
    """HTTP status of an error answer; ``None`` answers normally (after ``latency``)."""
    reason: str = "backendError"
    message: str = ""
    operation_error: str | None = None
    """An operation error code (``RESOURCE_NOT_FOUND``, ``QUOTA_EXCEEDED``...): the call
    succeeds and its operation ends with this error instead of its effect."""
    operation_status: int = 400
    """``httpErrorStatusCode`` of that operation."""
    after: int = 0
    """Matching calls to let through, unharmed, before the first one that misbehaves."""
    writes_only: bool = False
    """Match only calls that change something (not a GET, nor ``operations.wait``)."""

    def matches(self, method: str, *, write: bool = True) -> bool:
        return self.method in ("*", method) and (write or not self.writes_only)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fault:
        fault = cls(**data)
        if fault.status is not None and not 400 <= fault.status <= 599:
            raise ValueError(f"status {fault.status} is not an error status")
        if fault.count < 0 or fault.latency < 0 or fault.after < 0:
            raise ValueError("count, latency and after must not be negative")
        return fault


@dataclass
class RateLimit:
    """At most ``per_second`` calls of ``method`` per project, after a burst of ``burst``."""

    method: str
    per_second: float
    burst: int = 1


class _Bucket:
    def __init__(self, limit: RateLimit, now: float) -> None:
        self.limit = limit
        self.tokens = float(max(limit.burst, 1))
        self.updated = now

    def take(self, now: float) -> bool:
        capacity = float(max(self.limit.burst, 1))
        self.tokens = min(capacity, self.tokens + (now - self.updated) * self.limit.per_second)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class Misbehaviour:
    """The faults, rate limits and call counts of one emulator (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.faults: list[Fault] = []
        self.limits: dict[str, RateLimit] = {}
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self.calls: Counter[tuple[str, str]] = Counter()
        self.callers = CallerLog()
        """Who made each call (the process its User-Agent names)."""

    def count(self, project: str, method: str, caller: str | None = None) -> None:
        self.callers.record(caller, method)
        with self._lock:
            self.calls[(project, method)] += 1

    def call_counts(self, project: str | None = None) -> dict[str, int]:
        """Calls per method since the last reset (of one project, or of all)."""
        totals: Counter[str] = Counter()
        with self._lock:
            for (called_project, method), number in self.calls.items():
                if project is None or project == called_project:
                    totals[method] += number
        return dict(totals)

    def take_fault(self, method: str, *, write: bool = True) -> Fault | None:
        """The fault this call (``write``: one that changes something) meets, if any, used up
        by one."""
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, write=write):
                    if fault.after:
                        fault.after -= 1
                        return None
                    if fault.count == 1:
                        self.faults.remove(fault)
                    elif fault.count > 1:
                        fault.count -= 1
                    return fault
        return None

    def admit(self, project: str, method: str, now: float, default: RateLimit | None) -> bool:
        """Whether the rate limit of ``method`` (set, else ``default``) lets this call in."""
        with self._lock:
            limit = self.limits.get(method, default)
            if limit is None or limit.per_second <= 0:
                return True
            bucket = self._buckets.get((project, method))
            if bucket is None or bucket.limit != limit:
                bucket = self._buckets[(project, method)] = _Bucket(limit, now)
            return bucket.take(now)

    def add_fault(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def set_limit(self, limit: RateLimit) -> None:
        with self._lock:
            self.limits[limit.method] = limit

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return {
                "faults": [asdict(fault) for fault in self.faults],
                "rate_limits": [asdict(limit) for limit in self.limits.values()],
            }

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def clear_limits(self) -> None:
        with self._lock:
            self.limits.clear()
            self._buckets.clear()

    def clear_calls(self) -> None:
        self.callers.clear()
        with self._lock:
            self.calls.clear()

    def reset(self) -> None:
        self.clear_faults()
        self.clear_limits()
        self.clear_calls()
