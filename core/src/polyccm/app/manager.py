"""The controller manager: connects to the API, serves health and metrics, elects a leader and
runs the selected controllers for one leadership term at a time.

Controllers are wired from one table, :data:`CONTROLLERS`, mapping each stable name to a
constructor that returns ``None`` when the provider lacks the capability (the controller then
logs that and does not start). A term starts fresh informers, runs every controller until the
lease is lost or the process is asked to stop, and waits for each worker to finish the item in
hand; the manager then campaigns again, so losing the lease never needs a restart.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Callable
from types import FrameType

from kubernetes.client import Configuration

from polyccm.app.options import ManagerOptions
from polyccm.cloud import CloudProvider
from polyccm.controllers.base import Controller, ControllerContext
from polyccm.controllers.node import CloudNodeController
from polyccm.controllers.nodelifecycle import CloudNodeLifecycleController
from polyccm.controllers.route import RouteController
from polyccm.controllers.service import ServiceController
from polyccm.events import EventRecorder
from polyccm.health import HealthServer, tls_context
from polyccm.kube.api import NODES, SERVICES, KubeApi
from polyccm.kube.informer import Informer, slim_node
from polyccm.leaderelection import LeaderElector

log = logging.getLogger(__name__)

SYNC_TIMEOUT = 120.0

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
    if routes is None or not context.options.configure_cloud_routes:
        return None
    return RouteController(context, routes)


CONTROLLERS: dict[str, ControllerFactory] = {
    "cloud-node": _cloud_node,
    "cloud-node-lifecycle": _cloud_node_lifecycle,
    "service": _service,
    "route": _route,
}


def route_controller_problem(options: ManagerOptions, provider: CloudProvider) -> str | None:
    """Why the route controller cannot start as configured, if it cannot."""
    wanted = "route" in options.controllers and options.configure_cloud_routes
    if wanted and provider.routes() is not None and not options.cluster_cidrs:
        return (
            "the route controller needs --cluster-cidr (or disable it with "
            "--configure-cloud-routes=false or --controllers=*,-route)"
        )
    return None


class ControllerManager:
    """Runs the selected controllers against one API server for one provider."""

    def __init__(self, options: ManagerOptions, provider: CloudProvider, api: KubeApi) -> None:
        self.options = options
        self.provider = provider
        self.api = api
        self.identity = f"{socket.gethostname()}_{uuid.uuid4()}"
        self._term_lock = threading.Lock()
        self._synced = threading.Event()
        self.elector: LeaderElector | None = None

    # -- health -------------------------------------------------------------------------

    def ready(self) -> bool:
        """Ready once this process leads (or election is off) and its caches are synced, or
        while it waits as a standby candidate."""
        if self.elector is not None and not self.elector.is_leader():
            return True
        return self._synced.is_set()

    def healthy(self) -> bool:
        return self.elector is None or self.elector.healthy()

    # -- running ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set."""
        if not self.options.leader_election.enabled:
            self.run_term(stop)
            return
        election = self.options.leader_election
        self.elector = LeaderElector(
            self.api,
            lock_name=election.resource_name,
            lock_namespace=election.resource_namespace,
            identity=self.identity,
            lease_duration=election.lease_duration,
            renew_deadline=election.renew_deadline,
            retry_period=election.retry_period,
            on_started_leading=self.run_term,
            on_stopped_leading=lambda: log.info("leadership ended"),
        )
        while not stop.is_set():
            self.elector.run(stop)
            # A lost lease: wait for the last term's workers before campaigning again.
            with self._term_lock:
                pass

    def run_term(self, lost: threading.Event) -> None:
        """Run every selected controller until ``lost`` is set; return when all stopped."""
        with self._term_lock:
            self._run_term(lost)

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
        for name, factory in CONTROLLERS.items():
            if name not in options.controllers:
                log.info("controller %s is disabled", name)
                continue
            if name == "route" and not options.configure_cloud_routes:
                log.info("controller route is disabled by --configure-cloud-routes=false")
                continue
            controller = factory(context)
            if controller is None:
                log.info(
                    "controller %s not started: provider %s lacks its capability",
                    name,
                    options.provider,
                )
                continue
            controllers.append(controller)
        recorder.start()
        nodes.start()
        services.start()
        try:
            if not _wait_for_caches((nodes, services), lost):
                if not lost.is_set():
                    log.error("caches did not sync within %.0fs; giving up this term", SYNC_TIMEOUT)
                return
            # The caches are long-lived: move them out of the collector's way so that its
            # passes stop re-scanning thousands of cached objects (see DESIGN-NOTES).
            gc.freeze()
            self._synced.set()
            threads = [
                threading.Thread(target=c.run, args=(lost,), name=c.name, daemon=True)
                for c in controllers
            ]
            for thread in threads:
                thread.start()
            log.info("started controllers: %s", ", ".join(c.name for c in controllers) or "none")
            lost.wait()
            for thread in threads:
                thread.join(timeout=60)
        finally:
            self._synced.clear()
            nodes.stop()
            services.stop()
            recorder.stop()


def _wait_for_caches(informers: tuple[Informer, ...], lost: threading.Event) -> bool:
    """Wait until every informer has synced; give up early when ``lost`` is set."""
    deadline = time.monotonic() + SYNC_TIMEOUT
    while time.monotonic() < deadline and not lost.is_set():
        if all(informer.wait_for_sync(0.25) for informer in informers):
            return True
    return False


def run_manager(
    options: ManagerOptions, provider: CloudProvider, configuration: Configuration
) -> int:
    """Run the controller manager until SIGTERM or SIGINT; returns the exit status."""
    api = KubeApi(
        configuration,
        qps=options.kube_api_qps,
        burst=options.kube_api_burst,
        user_agent=f"polyccm/{options.provider} (cloud-controller-manager)",
    )
    provider.initialize(api)
    manager = ControllerManager(options, provider, api)
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    health: HealthServer | None = None
    if options.secure_port:
        tls = None
        if options.tls_cert_file and options.tls_private_key_file:
            try:
                tls = tls_context(options.tls_cert_file, options.tls_private_key_file)
            except (OSError, ssl.SSLError) as error:
                print(
                    f"polyccm: error: cannot load --tls-cert-file {options.tls_cert_file} / "
                    f"--tls-private-key-file {options.tls_private_key_file}: "
                    f"{error.strerror or error}",
                    file=sys.stderr,
                )
                return 2
        try:
            health = HealthServer(
                options.bind_address,
                options.secure_port,
                checks={"leader-election": manager.healthy},
                ready_checks={"informers-synced": manager.ready},
                tls=tls,
            )
        except OSError as error:
            print(
                f"polyccm: error: cannot serve on {options.bind_address}:{options.secure_port}: "
                f"{error.strerror or error}",
                file=sys.stderr,
            )
            return 2
        health.start()
        log.info(
            "serving /healthz, /readyz and /metrics over %s on %s:%d",
            "HTTPS" if options.tls_cert_file else "HTTP",
            options.bind_address,
            health.port,
        )
    log.info("polyccm %s starting (pid %d)", options.provider, os.getpid())
    try:
        manager.run(stop)
    finally:
        if health is not None:
            health.stop()
        api.close()
    return 0
