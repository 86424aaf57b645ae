"""The controller manager: connects to the API, serves health and metrics on the secure port
(:mod:`polyccm.serving`), elects a leader and runs the selected controllers for one leadership
term at a time.

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
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from types import FrameType

from polyccm import cloudcalls, logredact
from polyccm.app.options import ManagerOptions
from polyccm.cloud import CloudProvider, ProviderContext
from polyccm.controllers.base import Controller, ControllerContext
from polyccm.controllers.node import CloudNodeController
from polyccm.controllers.nodelifecycle import CloudNodeLifecycleController
from polyccm.controllers.route import RouteController
from polyccm.controllers.service import ServiceController
from polyccm.events import EventRecorder
from polyccm.health import HealthServer
from polyccm.kube.api import NO_RETRIES, NODES, SERVICES, KubeApi
from polyccm.kube.config import Configuration
from polyccm.kube.informer import Informer, slim_node
from polyccm.leaderelection import LeaderElector
from polyccm.serving import certs
from polyccm.serving.delegated import DelegatedAuth

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
        self.identity = f"{socket.gethostname()}_{uuid.uuid4()}"
        self._term_lock = threading.Lock()
        self._synced = threading.Event()
        self.elector: LeaderElector | None = None
        # The current term, as the health checks see it.
        self._term_started: float | None = None
        self._term_lost: threading.Event | None = None
        self._controller_threads: list[threading.Thread] = []
        self._stuck: list[str] = []
        self._initialize_failures = 0

    # -- health -------------------------------------------------------------------------

    def ready(self) -> bool:
        """Ready once this process leads (or election is off) and its caches are synced, or
        while it waits as a standby candidate."""
        if self.elector is not None and not self.elector.is_leader():
            return True
        return self._synced.is_set()

    def healthy(self) -> bool:
        """Liveness: the lease is being renewed and the controllers run when they should."""
        election_ok = self.elector is None or self.elector.healthy()
        return election_ok and self.controllers_healthy()

    def controllers_healthy(self) -> bool:
        """False while this process should run controllers and does not: its caches have not
        synced within :data:`SYNC_TIMEOUT`, or a controller's thread has died."""
        started, lost = self._term_started, self._term_lost
        if started is None or lost is None or lost.is_set():
            return True  # a standby, or a term that is ending
        if self._synced.is_set():
            return all(thread.is_alive() for thread in self._controller_threads)
        return time.monotonic() - started <= SYNC_TIMEOUT

    # -- running ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> int:
        """Run until ``stop`` is set; returns the process exit status."""
        if not self.options.leader_election.enabled:
            cloudcalls.FENCE.open_always()
            self.run_term(stop)
            return 0 if stop.is_set() else EXIT_TERM_FAILED
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
        )
        try:
            while not stop.is_set():
                self.elector.run(stop)
                # Wait for the last term's workers before campaigning again, but not forever.
                if not self._term_lock.acquire(timeout=election.lease_duration + 15):
                    self._stuck = ["the term itself"]
                else:
                    self._term_lock.release()
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
            election_events.stop()
            election_api.close()
        return 0

    def run_term(self, lost: threading.Event) -> None:
        """Run every selected controller until ``lost`` is set; return when all stopped."""
        with self._term_lock:
            self._term_lost = lost
            self._term_started = time.monotonic()
            try:
                self._run_term(lost)
            finally:
                self._term_started = None
                self._term_lost = None

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
            threads = [
                threading.Thread(target=c.run, args=(lost,), name=c.name, daemon=True)
                for c in controllers
            ]
            self._controller_threads = threads
            for thread in threads:
                thread.start()
            self._synced.set()
            log.info("started controllers: %s", ", ".join(c.name for c in controllers) or "none")
            lost.wait()
            self._stuck = _join_all(threads, self._stop_timeout())
        finally:
            self._synced.clear()
            self._controller_threads = []
            nodes.stop()
            services.stop()
            recorder.stop()
            if frozen:
                # Frozen objects are never collected: this term's caches (informers and threads
                # form reference cycles) would outlive it, one set per lost term. Handed back to
                # the collector, they go with the term; the next term freezes its own.
                gc.unfreeze()

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
        """How long a term's controllers get to stop once it ends."""
        election = self.options.leader_election
        return election.lease_duration if election.enabled else 60.0


def _join_all(threads: list[threading.Thread], timeout: float) -> list[str]:
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


def run_manager(
    options: ManagerOptions,
    provider: CloudProvider,
    configuration: Configuration,
    *,
    provider_controllers: Mapping[str, ControllerFactory] | None = None,
    authentication: Configuration | None = None,
    authorization: Configuration | None = None,
) -> int:
    """Run the controller manager until SIGTERM or SIGINT; returns the exit status.
    ``provider_controllers`` are the provider's own, selected by name like the built-in ones.
    ``authentication`` and ``authorization`` are the API servers that review the secure port's
    requests (``--authentication-kubeconfig``, ``--authorization-kubeconfig``); by default
    ``configuration``'s."""
    api = KubeApi(
        configuration,
        qps=options.kube_api_qps,
        burst=options.kube_api_burst,
        user_agent=f"polyccm/{options.provider} (cloud-controller-manager)",
    )
    manager = ControllerManager(options, provider, api, provider_controllers=provider_controllers)
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    health: HealthServer | None = None
    access: DelegatedAuth | None = None
    if options.secure_port:
        try:
            tls = certs.server_context(
                cert_file=options.tls_cert_file,
                key_file=options.tls_private_key_file,
                cert_dir=options.cert_dir,
                bind_address=options.bind_address,
                min_version=options.tls_min_version,
                cipher_suites=options.tls_cipher_suites,
                client_ca_file=options.client_ca_file,
            )
        except certs.CertificateError as error:
            print(logredact.error_line("polyccm", error), file=sys.stderr)
            return 2
        auth = options.delegated_auth
        access = DelegatedAuth.connect(
            authentication or configuration,
            authorization or configuration,
            user_agent=api.user_agent,
            always_allow_paths=auth.always_allow_paths,
            token_ttl=auth.token_cache_ttl,
            authorized_ttl=auth.authorized_cache_ttl,
            unauthorized_ttl=auth.unauthorized_cache_ttl,
            certificate_uids=options.feature_gates.enabled("AllowParsingUserUIDFromCertAuth"),
        )
        try:
            health = HealthServer(
                options.bind_address,
                options.secure_port,
                tls=tls,
                checks={
                    "leader-election": lambda: manager.elector is None or manager.elector.healthy(),
                    "controllers": manager.controllers_healthy,
                },
                ready_checks={"informers-synced": manager.ready},
                access=access.check,
            )
        except OSError as error:
            access.close()
            print(
                logredact.error_line(
                    "polyccm",
                    f"cannot serve on {options.bind_address}:{options.secure_port}: "
                    f"{error.strerror or error}",
                ),
                file=sys.stderr,
            )
            return 2
        health.start()
        log.info(
            "serving /healthz, /livez, /readyz and /metrics over HTTPS on %s:%d; "
            "answered without review: %s",
            options.bind_address,
            health.port,
            ", ".join(auth.always_allow_paths) or "nothing",
        )
    log.info("polyccm %s starting (pid %d)", options.provider, os.getpid())
    try:
        return manager.run(stop)
    finally:
        if health is not None:
            health.stop()
        if access is not None:
            access.close()
        api.close()
