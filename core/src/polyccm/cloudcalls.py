"""Every cloud call passes here: it is counted, and refused once this process may not act.

Providers call :func:`record` immediately before each request they send to their cloud (the
AWS provider does it from botocore's ``before-send`` event, so retries count too). It does two
things:

* counts the call in ``polyccm_cloud_api_calls_total{provider, operation}`` (the figure
  benchmarks and users read to see what polyccm costs);
* checks the process-wide :data:`FENCE`. With leader election on, the fence is open only while
  this process holds a lease it renewed less than ``renew_deadline`` ago, judged by the
  monotonic clock at the moment of the call, not by whether the renewing thread has noticed
  yet. A call outside that window raises :class:`~polyccm.errors.LeadershipLost` and is never
  sent. Since a standby takes the lease only after ``lease_duration`` (> ``renew_deadline``) of
  silence by its own clock, the old leader's last cloud call always precedes the new leader's
  first one, even when the old leader's API connection hangs.

Without leader election (``--leader-elect=false``, tests, the demo) the fence is always open.
"""

from __future__ import annotations

import threading
import time

from polyccm import metrics
from polyccm.errors import LeadershipLost


class Fence:
    """Whether cloud calls may be made now. Thread-safe; reads take no lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open_until: float | None = float("inf")  # None: closed; inf: always open

    def check(self) -> None:
        """Raise :class:`LeadershipLost` unless calls are allowed at this instant."""
        until = self._open_until
        if until is None or time.monotonic() >= until:
            raise LeadershipLost("not the leader: cloud call refused")

    def allowed(self) -> bool:
        until = self._open_until
        return until is not None and time.monotonic() < until

    def open_until(self, deadline: float) -> None:
        """Allow calls until the monotonic time ``deadline`` (extended on each renewal)."""
        with self._lock:
            self._open_until = deadline

    def open_always(self) -> None:
        """Allow calls with no deadline (leader election off)."""
        with self._lock:
            self._open_until = float("inf")

    def close(self) -> None:
        """Refuse every call from now on, until opened again."""
        with self._lock:
            self._open_until = None


FENCE = Fence()
"""The process's fence; the leader elector opens and closes it."""


def record(provider: str, operation: str) -> None:
    """Count one call of ``operation`` to ``provider``'s cloud, or refuse it (see module doc).

    Raises :class:`~polyccm.errors.LeadershipLost` (without counting) when the fence is shut."""
    FENCE.check()
    metrics.cloud_api_calls_total.labels(provider=provider, operation=operation).inc()


def record_error(provider: str, operation: str) -> None:
    """Count one failed call (the cloud answered with an error, or none came)."""
    metrics.cloud_api_errors_total.labels(provider=provider, operation=operation).inc()


def calls_made(provider: str, operation: str | None = None) -> float:
    """Calls counted so far for ``provider`` (one operation, or all): for tests and benchmarks."""
    total = 0.0
    for family in metrics.REGISTRY.collect():
        if family.name != "polyccm_cloud_api_calls":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            if labels.get("provider") == provider and operation in (None, labels.get("operation")):
                total += sample.value
    return total
