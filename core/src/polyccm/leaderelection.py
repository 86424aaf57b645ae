"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules.

Only the leader runs controllers. A candidate takes the Lease when it does not exist, when its
holder is empty (released), or when the record has not changed for ``lease_duration`` seconds
*by the candidate's own clock* (renewTime is not trusted across machines). The leader renews
every ``retry_period``; if it cannot renew for ``renew_deadline`` it has lost leadership: the
Event given to ``on_started_leading`` is set so controllers stop, ``on_stopped_leading`` is
called, and :meth:`LeaderElector.run` returns. On a requested stop the elector first lets the
controllers finish (up to ``renew_deadline``) and then releases the Lease (empty holder, as
client-go's ReleaseOnCancel), so a successor starts at once instead of after lease_duration.
Every write is a PUT carrying the resourceVersion read, so two candidates never both win.

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
from polyccm.kube.api import LEASES, ApiError, JsonObject, KubeApi

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2
"""client-go waits retry_period * (1 + JITTER_FACTOR * rand) between acquisition attempts."""


STOPPED = "stopped"
RENEWAL_FAILED = "renewal failed"
CALLBACK_FAILED = "leading callback failed"


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
    ) -> None:
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= JITTER_FACTOR * retry_period:
            raise ValueError(f"renew_deadline must be greater than retry_period*{JITTER_FACTOR}")
        if retry_period <= 0:
            raise ValueError("retry_period must be positive")
        if not identity:
            raise ValueError("identity must not be empty")
        self.api = api
        self.lock_name = lock_name
        self.lock_namespace = lock_namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading

        self._leading = False
        self._lease: JsonObject | None = None  # the Lease as last read or written
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0  # monotonic time the observed spec last changed
        self._last_renewed = 0.0  # monotonic time of our last successful write as leader
        self._status = metrics.leader_election_master_status.labels(name=lock_name)
        self._status.set(0)

    # -- public API -----------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self._leading

    def healthy(self, tolerance: float = 20.0) -> bool:
        """False when this candidate believes it leads but has not renewed for longer than
        ``lease_duration + tolerance`` (client-go's leader-election healthz adaptor): a
        stuck leader should be restarted."""
        if not self._leading:
            return True
        return time.monotonic() - self._last_renewed <= self.lease_duration + tolerance

    def run(self, stop: threading.Event) -> None:
        """Campaign until leading, lead until the lease is lost or ``stop`` is set. Blocks."""
        if not self._acquire(stop):
            return
        lost = threading.Event()
        leader_thread = threading.Thread(
            target=self._lead, args=(lost,), name=f"leading-{self.lock_name}", daemon=True
        )
        leader_thread.start()
        try:
            reason = self._renew_until_lost(stop, lost)
        finally:
            self._leading = False
            self._status.set(0)
            lost.set()
        if reason == STOPPED:
            # Let controllers finish the item in hand before a successor may start.
            leader_thread.join(timeout=self.renew_deadline)
        if reason != RENEWAL_FAILED:
            self._release()
        log.info("%s stopped leading %s (%s)", self.identity, self._lock_ref(), reason)
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
                self._status.set(1)
                log.info("%s acquired %s", self.identity, self._lock_ref())
                return True
            stop.wait(self.retry_period * (1 + JITTER_FACTOR * random.random()))
        return False

    def _lead(self, lost: threading.Event) -> None:
        try:
            self.on_started_leading(lost)
        except Exception:
            # Nothing protected by the lease runs any more: give it up.
            log.exception("on_started_leading failed; giving up leadership")
            lost.set()

    def _renew_until_lost(self, stop: threading.Event, lost: threading.Event) -> str:
        """Renew every retry_period; return why leading ended."""
        while True:
            if stop.wait(self.retry_period):
                return STOPPED
            if lost.is_set():
                return CALLBACK_FAILED
            deadline = time.monotonic() + self.renew_deadline
            while not self._try_acquire_or_renew():
                if time.monotonic() + self.retry_period > deadline:
                    log.error(
                        "%s failed to renew %s within %ss",
                        self.identity,
                        self._lock_ref(),
                        self.renew_deadline,
                    )
                    return RENEWAL_FAILED
                if stop.wait(self.retry_period):
                    return STOPPED

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
            lease = self.api.get(LEASES, self.lock_name, self.lock_namespace)
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
        try:
            created = self.api.create(LEASES, body, self.lock_namespace)
        except Exception as error:  # noqa: BLE001 - any failure is a failed attempt
            log.info("%s: creating %s failed: %s", self.identity, self._lock_ref(), error)
            return False
        self._remember(created)
        return True

    def _write(self, lease: JsonObject, *, renewing: bool) -> bool:
        try:
            written = self.api.replace(LEASES, self.lock_name, lease, self.lock_namespace)
        except ApiError as error:
            if not (renewing and error.conflict):
                log.info("%s: writing %s failed: %s", self.identity, self._lock_ref(), error)
            return False
        except Exception as error:  # noqa: BLE001 - any failure is a failed attempt
            log.info("%s: writing %s failed: %s", self.identity, self._lock_ref(), error)
            return False
        self._remember(written)
        return True

    def _remember(self, lease: JsonObject) -> None:
        self._lease = lease
        self._observed_spec = _record(lease.get("spec") or {})
        self._observed_at = time.monotonic()
        self._last_renewed = self._observed_at

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
            self._lease = self.api.replace(LEASES, self.lock_name, lease, self.lock_namespace)
            log.info("%s released %s", self.identity, self._lock_ref())
        except Exception as error:  # noqa: BLE001 - the lease then expires on its own
            # The lease simply expires after lease_duration.
            log.warning("%s: releasing %s failed: %s", self.identity, self._lock_ref(), error)

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
