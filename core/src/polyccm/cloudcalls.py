"""Every cloud call passes here: it is counted, and refused once this process may not act.

Providers call :func:`record` immediately before each request they send to their cloud (the
AWS provider does it from botocore's ``before-send`` event, so retries count too). It does two
things:

* counts the call in ``polyccm_cloud_api_calls_total{provider, operation}`` (the figure
  benchmarks and users read to see what polyccm costs) and starts its clock: the provider says
  how it ended with :func:`record_answer` or :func:`record_error` (on the same thread), which
  feed the latency and error metrics, upstream's names included (:mod:`polyccm.cloudmetrics`);
* checks the process-wide :data:`FENCE`. With leader election on, the fence is open only while
  this process holds a lease it renewed less than ``renew_deadline`` ago, judged by the
  monotonic clock at the moment of the call, not by whether the renewing thread has noticed
  yet. A call outside that window raises :class:`~polyccm.errors.LeadershipLost` and is never
  sent. Since a standby takes the lease only after ``lease_duration`` (> ``renew_deadline``) of
  silence by its own clock, the old leader's last cloud call always precedes the new leader's
  first one, even when the old leader's API connection hangs.

Without leader election (``--leader-elect=false``, tests, the demo, the operator commands
``polyccm plan``/``orphans``/``check-service``) the fence is always open.

The operator commands that promise to change nothing also run under :func:`reads_only`: a call
that the provider's classifier does not take for a read raises
:class:`~polyccm.errors.WriteRefused` instead of being sent.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from polyccm import cloudmetrics, metrics
from polyccm.errors import LeadershipLost, WriteRefused


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

_READ = re.compile(r"(describe|list|get|find|search|wait|aggregatedlist)", re.IGNORECASE)
_only_reads: Callable[[str], bool] | None = None


def looks_like_read(operation: str) -> bool:
    """Whether ``operation`` reads by its name: the part after the last ``:``, ``.`` or ``/``
    starts with describe, list, get, find, search, wait or aggregatedList
    (``ec2:DescribeInstances``, ``droplets.get``, ``compute.targetPools.aggregatedList``,
    ``find_device_by_id``). The default of ``CloudProvider.read_only_call``."""
    last = re.split(r"[:./]", operation)[-1]
    return bool(_READ.match(last))


@contextmanager
def reads_only(is_read: Callable[[str], bool]) -> Iterator[None]:
    """Within the block, :func:`record` refuses (raising
    :class:`~polyccm.errors.WriteRefused`) every operation ``is_read`` does not accept."""
    global _only_reads
    previous, _only_reads = _only_reads, is_read
    try:
        yield
    finally:
        _only_reads = previous


class _Started(threading.local):
    """The calls this thread has sent and not yet seen end: ``(provider, operation)`` to the
    monotonic time of the send and the call's region and zone."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str], tuple[float, str, str]] = {}


_started = _Started()


def record(provider: str, operation: str, *, region: str = "", zone: str = "") -> None:
    """Count one call of ``operation`` to ``provider``'s cloud, or refuse it (see module doc).
    ``region`` and ``zone``: where the call goes, for the clouds whose metrics say it.

    Raises :class:`~polyccm.errors.LeadershipLost` (without counting) when the fence is shut,
    and :class:`~polyccm.errors.WriteRefused` for a write within :func:`reads_only`."""
    FENCE.check()
    only_reads = _only_reads
    if only_reads is not None and not only_reads(operation):
        raise WriteRefused(
            f"{provider} {operation}: refused, polyccm only reads here (the provider's planning "
            "code made a call that is not a read)"
        )
    metrics.cloud_api_calls_total.labels(provider=provider, operation=operation).inc()
    _started.calls[provider, operation] = (time.monotonic(), region, zone)


def record_answer(provider: str, operation: str) -> None:
    """``operation``, sent by this thread, was answered: its latency is observed."""
    started = _started.calls.pop((provider, operation), None)
    if started is not None:
        when, region, zone = started
        cloudmetrics.answered(provider, operation, time.monotonic() - when, region, zone)


def record_error(provider: str, operation: str) -> None:
    """Count one failed call (the cloud answered with an error, or none came)."""
    metrics.cloud_api_errors_total.labels(provider=provider, operation=operation).inc()
    started = _started.calls.pop((provider, operation), None)
    seconds, region, zone = None, "", ""
    if started is not None:
        seconds, region, zone = time.monotonic() - started[0], started[1], started[2]
    cloudmetrics.failed(provider, operation, seconds, region, zone)


def record_throttled(provider: str, operation: str) -> None:
    """The cloud refused ``operation`` for the rate of requests (counted where upstream
    counts it: AWS's ``cloudprovider_aws_api_throttled_requests_total``)."""
    cloudmetrics.throttled(provider, operation)


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
