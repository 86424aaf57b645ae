"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules and a fence.

Only the leader runs controllers. A candidate takes the Lease when it does not exist, when its
holder is empty (released), or when the record has not changed for ``lease_duration`` seconds
*by the candidate's own clock* (renewTime is not trusted across machines). Every write is a PUT
carrying the resourceVersion read, so two candidates never both win.

The leader renews every ``retry_period``. Its deadline is counted from its last *successful*
renewal, and every Lease request is bounded by ``request_timeout`` (at most half the renew
deadline, and never past the deadline), so a hung API connection cannot keep a leader believing
it leads: ``renew_deadline`` after the last renewal that went through, leadership is lost, the
Event given to ``on_started_leading`` is set, ``on_stopped_leading`` is called and :meth:`run`
returns.

The optional :class:`~polyccm.cloudcalls.Fence` is what makes that safe for the cloud. Each
successful write opens it until ``<start of that request> + renew_deadline``; it closes by
itself at that instant whatever the renewing thread is doing, and is closed at once when leading
ends. A standby takes over only after ``lease_duration`` (> ``renew_deadline``) without seeing
the record change, and it saw the last renewal no earlier than that request started, so the old
leader's cloud calls stop before the new leader's can begin.

A term that ends for any reason (the controllers' callback returning or failing, a requested
stop) gives the Lease up (empty holder, as client-go's ReleaseOnCancel) so a successor starts
at once; on a requested stop the controllers first get up to ``renew_deadline`` (at most
``stop_grace``) to finish the item in hand, with the fence still open, and the release request
itself is bounded by ``release_timeout``: a process asked to stop ends in a bounded time whether
its controllers and the API server answer or not.

Each change of holder is recorded as client-go records it: a Normal ``LeaderElection`` Event
about the Lease, "<identity> became leader" when a campaign succeeds and "<identity> stopped
leading" when the term is over (after the release), from the component's event recorder.

Why not ``kubernetes.leaderelection``: its ``run()`` cannot be stopped, never releases the
lease, takes no stop signal into the leading callback, talks through the global default client
configuration rather than ours, and calls ``sys.exit`` on bad settings.
"""

from __future__ import annotations

import copy
import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from polyccm import metrics
from polyccm.cloudcalls import Fence
from polyccm.events import NORMAL, EventRecorder
from polyccm.kube.api import LEASES, ApiError, JsonObject, KubeApi

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2
"""client-go waits retry_period * (1 + JITTER_FACTOR * rand) between acquisition attempts."""


STOPPED = "stopped"
RENEWAL_FAILED = "renewal failed"
TERM_ENDED = "the controllers stopped"
POLL = 0.1
"""Seconds between looks at the stop signal and the term while waiting."""


def micro_time(moment: datetime | None = None) -> str:
    """A metav1.MicroTime: RFC 3339 in UTC with microseconds."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One candidate for one Lease."""

    def __init__(
        self,
        api: KubeApi,
        *,
        lock_name: str,
        lock_namespace: str,
        identity: str,
        lease_duration: float = 15,
        renew_deadline: float = 10,
        retry_period: float = 2,
        on_started_leading: Callable[[threading.Event], None],
        on_stopped_leading: Callable[[], None],
        fence: Fence | None = None,
        request_timeout: float | None = None,
        recorder: EventRecorder | None = None,
        stop_grace: float | None = None,
        release_timeout: float | None = None,
    ) -> None:
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= JITTER_FACTOR * retry_period:
            raise ValueError(f"renew_deadline must be greater than retry_period*{JITTER_FACTOR}")
        if retry_period <= 0:
            raise ValueError("retry_period must be positive")
        if not identity:
            raise ValueError("identity must not be empty")
        if request_timeout is not None and not 0 < request_timeout <= renew_deadline / 2:
            raise ValueError("request_timeout must be positive and at most renew_deadline/2")
        self.api = api
        self.lock_name = lock_name
        self.lock_namespace = lock_namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.fence = fence
        self.request_timeout = request_timeout or renew_deadline / 2
        self.recorder = recorder
        self.stop_grace = min(renew_deadline, stop_grace or renew_deadline)
        """On a requested stop, how long the controllers get to finish the item in hand."""
        self.release_timeout = min(self.request_timeout, release_timeout or self.request_timeout)
        """How long the request that gives the Lease up may take."""

        self._leading = False
        self._lease: JsonObject | None = None  # the Lease as last read or written
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0  # monotonic time the observed spec last changed
        self._last_renewed = 0.0  # monotonic start of our last successful write as leader
        self._leading_since = 0.0
        self._status = metrics.leader_election_master_status.labels(name=lock_name)
        self._status.set(0)

    # -- public API -----------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self._leading

    def leading_for(self) -> float:
        """Seconds since this candidate took the lease (0 when it does not lead)."""
        return time.monotonic() - self._leading_since if self._leading else 0.0

    def healthy(self, tolerance: float = 20.0) -> bool:
        """False when this candidate believes it leads but has not renewed for longer than
        ``lease_duration + tolerance`` (client-go's leader-election healthz adaptor): a
        stuck leader should be restarted."""
        if not self._leading:
            return True
        return time.monotonic() - self._last_renewed <= self.lease_duration + tolerance

    def run(self, stop: threading.Event) -> None:
        """Campaign until leading, lead until the lease is lost, the term ends or ``stop`` is
        set. Blocks."""
        if not self._acquire(stop):
            return
        lost = threading.Event()
        term_over = threading.Event()
        leader_thread = threading.Thread(
            target=self._lead,
            args=(lost, term_over),
            name=f"leading-{self.lock_name}",
            daemon=True,
        )
        leader_thread.start()
        try:
            reason = self._renew_until_lost(stop, term_over)
        finally:
            self._leading = False
            self._status.set(0)
            if self.fence is not None and reason != STOPPED:
                self.fence.close()  # no cloud call from here on
            lost.set()
        if reason == STOPPED:
            # Let controllers finish the item in hand before a successor may start.
            leader_thread.join(timeout=self.stop_grace)
            if self.fence is not None:
                self.fence.close()
        if reason != RENEWAL_FAILED:
            self._release()
        log.info("%s stopped leading %s (%s)", self.identity, self._lock_ref(), reason)
        self._record_event("stopped leading")
        try:
            self.on_stopped_leading()
        except Exception:
            log.exception("on_stopped_leading failed")

    # -- campaign -------------------------------------------------------------------------

    def _acquire(self, stop: threading.Event) -> bool:
        log.info("%s is campaigning for %s", self.identity, self._lock_ref())
        while not stop.is_set():
            if self._try_acquire_or_renew():
                self._leading = True
                self._leading_since = time.monotonic()
                self._status.set(1)
                log.info("%s acquired %s", self.identity, self._lock_ref())
                self._record_event("became leader")
                return True
            stop.wait(self.retry_period * (1 + JITTER_FACTOR * random.random()))
        return False

    def _lead(self, lost: threading.Event, term_over: threading.Event) -> None:
        try:
            self.on_started_leading(lost)
        except Exception:
            # Nothing protected by the lease runs any more: give it up.
            log.exception("on_started_leading failed; giving up leadership")
        finally:
            # However the term ended, a lease held with nothing running helps no one.
            term_over.set()

    def _renew_until_lost(self, stop: threading.Event, term_over: threading.Event) -> str:
        """Renew every retry_period; return why leading ended."""
        while True:
            if self._wait(stop, term_over, self.retry_period):
                return STOPPED if stop.is_set() else TERM_ENDED
            while not self._try_acquire_or_renew():
                remaining = self._deadline() - time.monotonic()
                if remaining <= 0:
                    log.error(
                        "%s failed to renew %s within %ss of the last renewal",
                        self.identity,
                        self._lock_ref(),
                        self.renew_deadline,
                    )
                    return RENEWAL_FAILED
                if self._wait(stop, term_over, min(self.retry_period, remaining)):
                    return STOPPED if stop.is_set() else TERM_ENDED

    @staticmethod
    def _wait(stop: threading.Event, term_over: threading.Event, seconds: float) -> bool:
        """Wait ``seconds``; True as soon as ``stop`` or ``term_over`` is set."""
        end = time.monotonic() + seconds
        while True:
            if stop.is_set() or term_over.is_set():
                return True
            left = end - time.monotonic()
            if left <= 0:
                return False
            term_over.wait(min(left, POLL))

    def _deadline(self) -> float:
        """The monotonic time leadership ends unless a renewal succeeds first."""
        return self._last_renewed + self.renew_deadline

    def _timeout(self) -> float:
        """How long one Lease request may take: ``request_timeout``, and for a leader never
        past its renew deadline."""
        if not self._leading:
            return self.request_timeout
        return max(0.05, min(self.request_timeout, self._deadline() - time.monotonic()))

    # -- one attempt ----------------------------------------------------------------------

    def _try_acquire_or_renew(self) -> bool:
        now = datetime.now(UTC)
        # Fast path, as client-go: a leader renews with the Lease it last wrote (one PUT, no
        # GET). A conflict means someone else wrote it: fall back to reading it.
        if self._leading and self._lease is not None:
            lease = copy.deepcopy(self._lease)
            lease["spec"]["renewTime"] = micro_time(now)
            lease["spec"]["leaseDurationSeconds"] = round(self.lease_duration)
            if self._write(lease, renewing=True):
                return True

        try:
            lease = self._request("GET")
        except ApiError as error:
            if not error.not_found:
                log.warning("%s: reading %s failed: %s", self.identity, self._lock_ref(), error)
                return False
            return self._create(now)
        except Exception as error:  # noqa: BLE001 - any failure is a failed attempt
            log.warning("%s: reading %s failed: %s", self.identity, self._lock_ref(), error)
            return False

        spec: dict[str, Any] = lease.get("spec") or {}
        observed = _record(spec)
        if observed != self._observed_spec:
            self._observed_spec = observed
            self._observed_at = time.monotonic()
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity and self._held_by_other(spec):
            return False

        new_spec = dict(spec)
        new_spec["holderIdentity"] = self.identity
        new_spec["leaseDurationSeconds"] = round(self.lease_duration)
        new_spec["renewTime"] = micro_time(now)
        if holder != self.identity or not spec.get("acquireTime"):
            new_spec["acquireTime"] = micro_time(now)
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if holder != self.identity else 0
            )
        lease["spec"] = new_spec
        return self._write(lease, renewing=False)

    def _held_by_other(self, spec: dict[str, Any]) -> bool:
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        return time.monotonic() < self._observed_at + duration

    def _request(
        self, method: str, body: JsonObject | None = None, *, timeout: float | None = None
    ) -> JsonObject:
        """One Lease request on the elector's own bounded timeout (``timeout`` if given)."""
        path = LEASES.path(self.lock_namespace, None if method == "POST" else self.lock_name)
        return self.api.request(method, path, body=body, timeout=timeout or self._timeout())

    def _create(self, now: datetime) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.lock_name, "namespace": self.lock_namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.lease_duration),
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": 0,
            },
        }
        started = time.monotonic()
        try:
            created = self._request("POST", body)
        except Exception as error:  # noqa: BLE001 - any failure is a failed attempt
            log.info("%s: creating %s failed: %s", self.identity, self._lock_ref(), error)
            return False
        self._remember(created, written_at=started)
        return True

    def _write(self, lease: JsonObject, *, renewing: bool) -> bool:
        started = time.monotonic()
        try:
            written = self._request("PUT", lease)
        except ApiError as error:
            if not (renewing and error.conflict):
                log.info("%s: writing %s failed: %s", self.identity, self._lock_ref(), error)
            return False
        except Exception as error:  # noqa: BLE001 - any failure is a failed attempt
            log.info("%s: writing %s failed: %s", self.identity, self._lock_ref(), error)
            return False
        self._remember(written, written_at=started)
        return True

    def _remember(self, lease: JsonObject, *, written_at: float) -> None:
        """Keep the Lease we wrote; ``written_at`` is when that request *started*, the
        earliest moment a standby can have seen the record change."""
        self._lease = lease
        self._observed_spec = _record(lease.get("spec") or {})
        self._observed_at = time.monotonic()
        self._last_renewed = written_at
        if self.fence is not None:
            self.fence.open_until(written_at + self.renew_deadline)

    def _release(self) -> None:
        """Give the Lease up (empty holder) if we still hold it, so a successor need not wait."""
        if self._lease is None:
            return
        lease = copy.deepcopy(self._lease)
        if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        now = micro_time()
        lease["spec"].update(
            holderIdentity=None, leaseDurationSeconds=1, acquireTime=now, renewTime=now
        )
        try:
            self._lease = self._request("PUT", lease, timeout=self.release_timeout)
            log.info("%s released %s", self.identity, self._lock_ref())
        except Exception as error:  # noqa: BLE001 - the lease then expires on its own
            # The lease simply expires after lease_duration.
            log.warning("%s: releasing %s failed: %s", self.identity, self._lock_ref(), error)

    def _record_event(self, what: str) -> None:
        """client-go's LeaseLock.RecordEvent: "<identity> <what>" about the Lease as last read
        or written (so the Event names its uid), if there is a recorder."""
        if self.recorder is not None and self._lease is not None:
            self.recorder.event(self._lease, NORMAL, "LeaderElection", f"{self.identity} {what}")

    def _lock_ref(self) -> str:
        return f"lease {self.lock_namespace}/{self.lock_name}"


def _record(spec: dict[str, Any]) -> dict[str, Any]:
    """The part of a Lease spec whose change proves its holder is alive."""
    return {
        key: spec.get(key)
        for key in (
            "holderIdentity",
            "leaseDurationSeconds",
            "acquireTime",
            "renewTime",
            "leaseTransitions",
        )
    }
