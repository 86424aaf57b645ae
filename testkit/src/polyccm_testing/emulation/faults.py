"""Call counting and fault injection, per API operation.

Operations are named by their OpenAPI ``operationId`` (the names the cloud's generated client
methods come from). A fault makes the next ``count`` calls of an operation (``*``: of any
operation) wait ``latency`` seconds and, when ``status`` is set, fail with the cloud's error
body for that status. ``after`` lets that many matching calls through first, and
``writes_only`` matches only calls that change something (any HTTP method but GET and HEAD), so
that a test can fail "the k-th write from now" (the fault conformance kit fails each step of a
create so). A cloud subclasses :class:`Fault` to refuse statuses it never answers.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Any

from polyccm_testing.emulation.callers import CallerLog

ANY_OPERATION = "*"


@dataclass
class Fault:
    """Make the next ``count`` calls of ``operation`` slow (``latency`` s) and/or fail
    (``status``: 429, 500, 502, 503, 504, or any other status the cloud answers)."""

    operation: str
    count: int = 1
    status: int | None = 503
    latency: float = 0.0
    message: str | None = None
    after: int = 0
    """Matching calls to let through, unharmed, before the first one that suffers."""
    writes_only: bool = False
    """Match only calls that change something (not GET or HEAD)."""

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("count must be at least 1")
        if self.after < 0:
            raise ValueError("after must be >= 0")
        if self.latency < 0:
            raise ValueError("latency must be >= 0")
        if self.status is not None:
            self.check_status(self.status)

    def check_status(self, status: int) -> None:
        """Raise ``ValueError`` for a status the cloud never answers (here: none refused)."""

    def matches(self, operation: str, *, write: bool = True) -> bool:
        return self.operation in (ANY_OPERATION, operation) and (write or not self.writes_only)


class CallLog:
    """Counts calls per operation (and keeps who made each, :attr:`callers`) and hands out
    pending faults; safe across threads."""

    def __init__(self, fault_type: type[Fault] = Fault) -> None:
        self.fault_type = fault_type
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()
        self._faults: list[Fault] = []
        self.callers = CallerLog()

    def record(
        self, operation: str, *, write: bool = True, caller: str | None = None
    ) -> Fault | None:
        """Count one call (``write``: whether it changes something; ``caller``: the process
        its User-Agent names); return the fault it must suffer, if any (using one of its
        count)."""
        self.callers.record(caller, operation)
        with self._lock:
            self._calls[operation] += 1
            fault = next((f for f in self._faults if f.matches(operation, write=write)), None)
            if fault is None:
                return None
            if fault.after:
                fault.after -= 1
                return None
            fault.count -= 1
            if fault.count == 0:
                self._faults.remove(fault)
            return replace(fault, count=1, after=0)

    def calls(self) -> dict[str, int]:
        with self._lock:
            return dict(self._calls)

    def clear_calls(self) -> None:
        self.callers.clear()
        with self._lock:
            self._calls.clear()

    def add_fault(self, spec: dict[str, Any]) -> list[dict[str, Any]]:
        fault = self.fault_type(**spec)
        with self._lock:
            self._faults.append(fault)
            return [asdict(f) for f in self._faults]

    def faults(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(f) for f in self._faults]

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
