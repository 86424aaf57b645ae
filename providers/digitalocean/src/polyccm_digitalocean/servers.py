"""Upstream's two plain-HTTP servers, started once per manager process: ``METRICS_ADDR`` serves
``/metrics`` (polyccm's :data:`polyccm.metrics.REGISTRY`, so polyccm's metric names, not
upstream's ``digitalocean_api_*``), ``DEBUG_ADDR`` serves ``/healthz``, 200 when the
DigitalOcean API answers ``GET /v2/account`` and 500 with the reason otherwise, as upstream's
godoHealthChecker (health.go:35-47@v0.1.68).

Upstream starts them in ``Initialize``, on the leader only (cloud.go:194-195@v0.1.68); polyccm
binds them when the manager starts, on every replica, so a taken port is one line at start-up
(exit 2) rather than a warning nobody reads, and a standby can be scraped and probed too. The
health probe is a read that changes nothing, so it is counted but not fenced: a standby answers
for the API like the leader.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from polyccm import metrics
from polyccm.errors import CloudError, ConfigError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from polyccm_digitalocean.api import PROVIDER, DigitalOceanApi, RateLimited

log = logging.getLogger(__name__)

#: What the probe's call is counted as (``polyccm_cloud_api_calls_total{operation=...}``).
PROBE_OPERATION = "account.get"

Answer = tuple[int, str, bytes]


class ProbeApi(DigitalOceanApi):
    """The API as the health probe calls it: the same limiter and counter, without the fence
    (a standby's probe asks the API too; reading the account changes nothing)."""

    def spend(self, operation: str) -> None:
        wait = self.limiter.reserve()
        if wait > 0:
            self.limiter.give_back()  # the probe never waits behind the controllers' calls
            raise RateLimited(f"DigitalOcean {operation}: client-side rate limit reached", wait)
        metrics.cloud_api_calls_total.labels(provider=PROVIDER, operation=operation).inc()


def metrics_answer(path: str) -> Answer:
    if path == "/metrics":
        return 200, CONTENT_TYPE_LATEST, generate_latest(metrics.REGISTRY)
    return 404, "text/plain; charset=utf-8", b"404 page not found\n"


def health_answer(api: DigitalOceanApi) -> Callable[[str], Answer]:
    """``/healthz``: whether the DigitalOcean API answers, as upstream's godoHealthChecker."""

    def answer(path: str) -> Answer:
        if path != "/healthz":
            return 404, "text/plain; charset=utf-8", b"404 page not found\n"
        try:
            api.call(PROBE_OPERATION)
        except CloudError as error:  # the API's error is the answer, as upstream's http.Error
            message = f"health check failed: {error}"
            log.error("%s", message)
            return 500, "text/plain; charset=utf-8", (message + "\n").encode()
        return 200, "text/plain; charset=utf-8", b""

    return answer


def serve(
    serving: contextlib.ExitStack,
    what: str,
    address: tuple[str, int],
    answer: Callable[[str], Answer],
) -> int:
    """Serve ``answer`` over plain HTTP on ``address`` until ``serving`` closes; the port bound.
    :class:`ConfigError` naming ``what`` when the address cannot be bound."""
    host, port = address
    try:
        server = _Server((host, port), _handler(answer))
    except OSError as error:
        raise ConfigError(
            f"{what}: cannot serve on {host}:{port}: {error.strerror or error}"
        ) from None
    thread = threading.Thread(target=server.serve_forever, name=what, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    serving.callback(stop)
    return int(server.server_address[1])


def start(serving: contextlib.ExitStack, api: DigitalOceanApi) -> None:
    """Start the servers ``api``'s settings ask for (none when neither variable is set); the
    probe shares ``api``'s limiter."""
    config = api.config
    if config.metrics_addr is not None:
        port = serve(serving, "METRICS_ADDR", config.metrics_addr, metrics_answer)
        log.info("serving /metrics over HTTP on %s:%d (METRICS_ADDR)", config.metrics_addr[0], port)
    if config.debug_addr is not None:
        probe = ProbeApi(config, limiter=api.limiter)
        port = serve(serving, "DEBUG_ADDR", config.debug_addr, health_answer(probe))
        log.info("serving /healthz over HTTP on %s:%d (DEBUG_ADDR)", config.debug_addr[0], port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)


def _handler(answer: Callable[[str], Answer]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = 30.0

        def do_GET(self) -> None:
            status, content_type, body = answer(self.path.split("?", 1)[0])
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http: " + format, *args)

    return Handler
