"""The controller manager: elects a leader and runs the selected controllers for one leadership
term at a time, and answers the health checks the secure port asks (the process, the API client
and the port itself are wired in :mod:`polyccm.cli`).

Controllers are wired from one table, :data:`CONTROLLERS`, mapping each stable name to a
constructor that returns ``None`` when the provider lacks the capability (the controller then
logs that and does not start); the provider's own controllers (``polyccm_register_controllers``)
join that table for the process, selected and run the same way. A term starts fresh informers,
waits for them to sync, hands them to the provider's ``initialize`` (a provider that fails there
ends the term: the lease is given up, and the next campaign waits a growing pause), runs every
controller until the lease is lost or the process is asked to stop, and waits for each worker to
finish the item in hand; the manager then campaigns again, so losing the lease never needs a
restart. Without leader election the term is the process's life: a term that ends on its own
(caches that never sync, a failed ``initialize``) ends the process with status 1.

Leadership loss is bounded three ways. Cloud calls stop first, by time: the elector's
:data:`~polyccm.cloudcalls.FENCE` refuses every call from ``renew_deadline`` after the last
successful renewal, even while the renewing thread hangs on a dead connection. The controllers
are told to stop as soon as the elector sees the loss, and get ``lease_duration`` to do so; a
term whose workers are still running after that ends the process (exit status 1) so that a
restart, not a second set of workers, comes next. The elector talks to the API server through
its own client, so the controllers' rate limit never delays a renewal. /healthz fails while this
process leads but its controllers are not running (caches not synced in time, a controller
thread dead), and a term that ends for any reason gives the lease up.

A requested stop (``stop`` set, on SIGTERM or SIGINT) is bounded too, whatever the term is
doing: its controllers get :data:`STOP_DRAIN` seconds at most to finish the item in hand (less
with a shorter renew deadline), the Lease release :data:`STOP_RELEASE`, the last Events
:data:`STOP_EVENTS`; a term still running after that (a cloud call that never returns, caches
that cannot sync) is left to end with the process, and :meth:`ControllerManager.run` returns.
The term always runs on a thread of its own, so the caller is never held by it.

The health checks run on the secure port's threads while a term starts and ends on another: the
term they read is one immutable :class:`Term`, replaced whole at each step, so a check reads it
once, without a lock, and never sees half of one term and half of the next.
"""

from __future__ import annotations

import gc
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from polyccm import cloudcalls, useragent
from polyccm.app.options import ManagerOptions
from polyccm.cloud import CloudProvider, ProviderContext
from polyccm.controllers.base import Controller, ControllerContext
from polyccm.controllers.node import CloudNodeController
from polyccm.controllers.nodelifecycle import CloudNodeLifecycleController
from polyccm.controllers.route import RouteController
from polyccm.controllers.service import ServiceController
from polyccm.events import EventRecorder
from polyccm.kube.api import NO_RETRIES, NODES, SERVICES, KubeApi
from polyccm.kube.informer import Informer, slim_node
from polyccm.leaderelection import LeaderElector

log = logging.getLogger(__name__)

SYNC_TIMEOUT = 120.0
"""Seconds a term waits for its caches to sync before it gives up (and the lease)."""
EXIT_WORKERS_STUCK = 1
"""Exit status when a term's workers did not stop in time after leadership was lost."""
EXIT_TERM_FAILED = 1
"""Exit status, without leader election, when the term ended without being asked to stop."""
INITIALIZE_RETRY = (2.0, 60.0)
"""Pause before campaigning again after the provider's ``initialize`` failed: first, and cap
(doubling in between), so a provider that cannot start never spins on the Lease."""
STOP_DRAIN = 8.0
"""On a requested stop, the most the controllers get to finish the item in hand."""
STOP_RELEASE = 3.0
"""On a requested stop, the most the request that gives the Lease up may take."""
STOP_EVENTS = 1.0
"""On a requested stop, the most the last Events (the Lease's "stopped leading") get."""
POLL = 0.1
"""Seconds between looks at the stop signal while waiting for a term."""

ControllerFactory = Callable[[ControllerContext], Controller | None]


def _cloud_node(context: ControllerContext) -> Controller | None:
    instances = context.provider.instances_v2()
    return CloudNodeController(context, instances) if instances else None


def _cloud_node_lifecycle(context: ControllerContext) -> Controller | None:
    instances = context.provider.instances_v2()
    return CloudNodeLifecycleController(context, instances) if instances else None


def _service(context: ControllerContext) -> Controller | None:
    balancer = context.provider.load_balancer()
    return ServiceController(context, balancer) if balancer else None


def _route(context: ControllerContext) -> Controller | None:
    routes = context.provider.routes()
    if routes is None or not context.options.route_controller_on:
        return None
    return RouteController(context, routes)


CONTROLLERS: dict[str, ControllerFactory] = {
    "cloud-node": _cloud_node,
    "cloud-node-lifecycle": _cloud_node_lifecycle,
    "service": _service,
    "route": _route,
}


@dataclass(frozen=True)
class Term:
    """One leadership term as the health checks see it. Never changed: the manager replaces
    the whole value (one attribute store), so a reader gets one consistent term."""

    started: float
    """When it started (``time.monotonic()``): the caches have :data:`SYNC_TIMEOUT` from here."""
    lost: threading.Event
    """Set when the term is ending (leadership lost, or the process asked to stop)."""
    synced: bool = False
    """Its caches synced, the provider initialised and its controllers started."""
    threads: tuple[threading.Thread, ...] = ()
    """The controllers' threads, once started."""


class _Unmade(Controller):
    """Stands for a controller whose constructor raised: its thread ends at once, which
    /healthz reports as it does a dead controller thread."""

    def run(self, stop: threading.Event) -> None:
        return


def route_controller_problem(options: ManagerOptions, provider: CloudProvider) -> str | None:
    """Why the route controller cannot start as configured, if it cannot."""
    if options.route_controller_on and provider.routes() is not None and not options.cluster_cidrs:
        return (
            "the route controller needs --cluster-cidr (or disable it with "
            "--configure-cloud-routes=false or --controllers=*,-route)"
        )
    return None


class ControllerManager:
    """Runs the selected controllers against one API server for one provider."""

    def __init__(
        self,
        options: ManagerOptions,
        provider: CloudProvider,
        api: KubeApi,
        *,
        provider_controllers: Mapping[str, ControllerFactory] | None = None,
    ) -> None:
        self.options = options
        self.provider = provider
        self.api = api
        # The provider's own controllers (polyccm_register_controllers), run like CONTROLLERS.
        self.provider_controllers = dict(provider_controllers or {})
        # Upstream's form, <host>_<UUID>; the same name is in the User-Agent of the cloud calls.
        self.identity = useragent.IDENTITY
        self._term_lock = threading.Lock()
        self.elector: LeaderElector | None = None
        # The current term, read by the health checks without a lock; None between terms.
        self._term: Term | None = None
        self._stuck: list[str] = []
        self._initialize_failures = 0

    # -- health -------------------------------------------------------------------------

    def ready(self) -> bool:
        """Ready once this process leads (or election is off) and its caches are synced, or
        while it waits as a standby candidate."""
        if self.elector is not None and not self.elector.is_leader():
            return True
        term = self._term
        return term is not None and term.synced

    def healthy(self) -> bool:
        """Liveness: the lease is being renewed and the controllers run when they should."""
        return self.election_healthy() and self.controllers_healthy()

    def election_healthy(self) -> bool:
        """The lease is being renewed in time (always, without leader election)."""
        elector = self.elector
        return elector is None or elector.healthy()

    def controllers_healthy(self) -> bool:
        """False while this process should run controllers and does not: its caches have not
        synced within :data:`SYNC_TIMEOUT`, or a controller's thread has died."""
        term = self._term
        if term is None or term.lost.is_set():
            return True  # a standby, or a term that is ending
        if term.synced:
            return all(thread.is_alive() for thread in term.threads)
        return time.monotonic() - term.started <= SYNC_TIMEOUT

    # -- running ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> int:
        """Run until ``stop`` is set; returns the process exit status."""
        if not self.options.leader_election.enabled:
            cloudcalls.FENCE.open_always()
            return self._run_alone(stop)
        election = self.options.leader_election
        cloudcalls.FENCE.close()  # nothing may reach the cloud before this process leads
        # The process's own recorder for the Lease's LeaderElection events: a term's recorder
        # starts after the lease is taken and stops before it is given up.
        election_events = EventRecorder(self.api, host=socket.gethostname())
        election_events.start()
        election_api = KubeApi(
            self.api.configuration,
            qps=0,
            user_agent=f"{self.api.user_agent} leader-election",
            retry=NO_RETRIES,  # the elector retries on its own clock, within its deadline
        )
        self.elector = LeaderElector(
            election_api,
            lock_name=election.resource_name,
            lock_namespace=election.resource_namespace,
            identity=self.identity,
            lease_duration=election.lease_duration,
            renew_deadline=election.renew_deadline,
            retry_period=election.retry_period,
            on_started_leading=self.run_term,
            on_stopped_leading=lambda: log.info("leadership ended"),
            fence=cloudcalls.FENCE,
            recorder=election_events,
            stop_grace=STOP_DRAIN,
            release_timeout=STOP_RELEASE,
        )
        try:
            while not stop.is_set():
                self.elector.run(stop)
                if stop.is_set():
                    break  # the elector gave the term its time to stop and released the lease
                # Wait for the last term's workers before campaigning again, but not forever.
                if not self._wait_for_term(stop, election.lease_duration + 15):
                    if stop.is_set():
                        break
                    self._stuck = ["the term itself"]
                if self._stuck:
                    log.error(
                        "leadership lost and %s did not stop within %.0fs: exiting so that a "
                        "restart, not a second set of workers, comes next",
                        ", ".join(self._stuck),
                        election.lease_duration,
                    )
                    return EXIT_WORKERS_STUCK
                if self._initialize_failures:
                    first, cap = INITIALIZE_RETRY
                    stop.wait(min(cap, first * 2 ** (self._initialize_failures - 1)))
        finally:
            if stop.is_set():
                self._report_left_running()
            election_events.stop(timeout=STOP_EVENTS if stop.is_set() else 10.0)
            election_api.close()
        return 0

    def _run_alone(self, stop: threading.Event) -> int:
        """Without leader election: one term, on a thread of its own, until ``stop`` is set or
        the term ends by itself; the exit status."""
        ended = threading.Event()

        def term() -> None:
            try:
                self.run_term(stop)
            finally:
                ended.set()

        threading.Thread(target=term, name="term", daemon=True).start()
        while not (stop.is_set() or ended.is_set()):
            ended.wait(POLL)
        if not stop.is_set():
            return EXIT_TERM_FAILED
        if not ended.wait(STOP_DRAIN):
            self._report_left_running()
        return 0

    def _wait_for_term(self, stop: threading.Event, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the last term to end; whether it did. Gives up
        early when ``stop`` is set."""
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            left = deadline - time.monotonic()
            if self._term_lock.acquire(timeout=max(0.0, min(POLL, left))):
                self._term_lock.release()
                return True
            if left <= 0:
                return False
        return False

    def _report_left_running(self) -> None:
        """After a requested stop: say what of the term has not stopped in its time (it is
        left to end with the process)."""
        if not self._term_lock.locked():
            return
        term = self._term
        running = [thread.name for thread in term.threads if thread.is_alive()] if term else []
        log.warning(
            "stopping although %s did not stop in time; it ends with the process",
            ", ".join(running)
            if running
            else "the term (initialising the provider or waiting for the caches)",
        )

    def run_term(self, lost: threading.Event) -> None:
        """Run every selected controller until ``lost`` is set; return when all stopped."""
        with self._term_lock:
            self._term = Term(started=time.monotonic(), lost=lost)
            try:
                self._run_term(lost)
            finally:
                self._term = None

    def _run_term(self, lost: threading.Event) -> None:
        options = self.options
        nodes = Informer(self.api, NODES, slim=slim_node, name="nodes")
        services = Informer(self.api, SERVICES, name="services")
        recorder = EventRecorder(self.api, host=socket.gethostname())
        context = ControllerContext(
            api=self.api,
            provider=self.provider,
            options=options,
            nodes=nodes,
            services=services,
            recorder=recorder,
        )
        controllers: list[Controller] = []
        for name, factory in {**CONTROLLERS, **self.provider_controllers}.items():
            if name not in options.controllers:
                log.info("controller %s is disabled", name)
                continue
            if name == "route" and not options.route_controller_on:
                log.info("controller route is disabled by --configure-cloud-routes=false")
                continue
            try:
                controller = factory(context)
            except Exception:
                # As a controller thread that died: /healthz fails and a restart follows, rather
                # than a term given up and campaigned for again at once, over and over.
                log.exception("controller %s could not be made; /healthz fails", name)
                controller = _Unmade()
            if controller is None:
                log.info(
                    "controller %s not started: provider %s lacks its capability",
                    name,
                    options.provider,
                )
                continue
            controller.name = name  # its thread's name, which logs and /healthz report
            controllers.append(controller)
        recorder.start()
        nodes.start()
        services.start()
        log.info("waiting for the caches of nodes and services to sync")
        frozen = False
        try:
            if not _wait_for_caches((nodes, services), lost):
                if not lost.is_set():
                    log.error("caches did not sync within %.0fs; giving up this term", SYNC_TIMEOUT)
                return
            # The caches are long-lived: move them out of the collector's way so that its
            # passes stop re-scanning thousands of cached objects (see DESIGN-NOTES), until
            # the term ends (below).
            gc.freeze()
            frozen = True
            if not self._initialize_provider(context, lost):
                return
            threads = tuple(
                threading.Thread(target=c.run, args=(lost,), name=c.name, daemon=True)
                for c in controllers
            )
            for thread in threads:
                thread.start()
            self._set_term(synced=True, threads=threads)
            log.info("started controllers: %s", ", ".join(c.name for c in controllers) or "none")
            lost.wait()
            self._stuck = _join_all(threads, self._stop_timeout())
        finally:
            self._set_term(synced=False, threads=())
            nodes.stop()
            services.stop()
            recorder.stop()
            if frozen:
                # Frozen objects are never collected: this term's caches (informers and threads
                # form reference cycles) would outlive it, one set per lost term. Handed back to
                # the collector, they go with the term; the next term freezes its own.
                gc.unfreeze()

    def _set_term(self, *, synced: bool, threads: tuple[threading.Thread, ...]) -> None:
        """Replace the current term with one that differs in ``synced`` and ``threads``."""
        term = self._term
        if term is not None:
            self._term = replace(term, synced=synced, threads=threads)

    def _initialize_provider(self, context: ControllerContext, lost: threading.Event) -> bool:
        """The provider's per-term ``initialize``, with this term's synced caches; whether it
        succeeded (if not, the term ends before any controller starts)."""
        try:
            self.provider.initialize(
                ProviderContext(
                    api=context.api,
                    nodes=context.nodes,
                    services=context.services,
                    recorder=context.recorder,
                    stop=lost,
                )
            )
        except Exception:
            self._initialize_failures += 1
            log.exception(
                "provider %s failed to initialise; ending this term without starting controllers",
                self.options.provider,
            )
            return False
        self._initialize_failures = 0
        return True

    def _stop_timeout(self) -> float:
        """How long a term's controllers get to stop once it ends: with leader election, the
        lease's duration (the elector itself waits less on a requested stop); without, the
        term ends only on a requested stop."""
        election = self.options.leader_election
        return election.lease_duration if election.enabled else STOP_DRAIN


def _join_all(threads: tuple[threading.Thread, ...], timeout: float) -> list[str]:
    """Join ``threads`` within ``timeout`` seconds in all; the names of those still running."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    return [thread.name for thread in threads if thread.is_alive()]


def _wait_for_caches(informers: tuple[Informer, ...], lost: threading.Event) -> bool:
    """Wait until every informer has synced; give up early when ``lost`` is set."""
    deadline = time.monotonic() + SYNC_TIMEOUT
    while time.monotonic() < deadline and not lost.is_set():
        if all(informer.wait_for_sync(0.25) for informer in informers):
            return True
    return False
