"""The HTTPS endpoints a kubelet and Prometheus scrape: /healthz, /livez, /readyz and /metrics.

Checks are named callables returning ``True`` when healthy (an exception counts as failing).
``/healthz`` and ``/livez`` run the liveness checks; ``/readyz`` runs those and the readiness
checks. Like the Kubernetes components, a healthy answer is ``200 ok``; a failing one is ``500``
with one ``[+]name ok`` / ``[-]name failed`` line per check (also shown on success with
``?verbose``), and ``/healthz/<name>`` runs a single check. ``/metrics`` serves
:data:`polyccm.metrics.REGISTRY` in the Prometheus text format. The server speaks TLS only
(:mod:`polyccm.serving.certs` makes its context) and asks ``access`` first whether each request
may be answered (:class:`polyccm.serving.delegated.DelegatedAuth` in the process). It runs on a
daemon thread, one thread per request, so a slow scrape never blocks a probe.
"""

from __future__ import annotations

import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from polyccm import metrics

log = logging.getLogger(__name__)

Check = Callable[[], bool]
Answer = tuple[int, str, bytes]
"""Status, content type and body."""
Access = Callable[[str, str | None, bytes | None], Answer | None]
"""Whether a GET may be answered, from its path, ``Authorization`` header and the client's
verified certificate (DER; ``None`` without one): ``None`` if so, else the refusal."""


def _run_checks(checks: Mapping[str, Check]) -> list[tuple[str, bool]]:
    results = []
    for name, check in checks.items():
        try:
            ok = bool(check())
        except Exception:
            log.exception("health check %s raised", name)
            ok = False
        results.append((name, ok))
    return results


class _TlsServer(ThreadingHTTPServer):
    """HTTPS: each accepted connection is wrapped, and its handshake happens on the handler's
    thread, so a slow client never holds up the accept loop."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        context: ssl.SSLContext,
    ) -> None:
        super().__init__(address, handler)
        self.context = context

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        wrapped = self.context.wrap_socket(
            connection, server_side=True, do_handshake_on_connect=False
        )
        return wrapped, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that fails the handshake (plain HTTP, an untrusted certificate) or hangs up
        is its own problem: one debug line, not a traceback on stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # ssl.SSLError, resets, timeouts
            log.debug("secure port: %s from %s", error, client_address[0])
            return
        log.exception("secure port: error answering %s", client_address[0])


class HealthServer:
    """Serves health, readiness and metrics over HTTPS on ``bind_address:port`` (port 0 picks
    one). ``access(path, authorization_header, client_certificate)`` returns ``None`` for a
    request that may be answered, else the refusal (status, content type, body); without it
    everyone is answered."""

    def __init__(
        self,
        bind_address: str,
        port: int,
        *,
        tls: ssl.SSLContext,
        checks: Mapping[str, Check] | None = None,
        ready_checks: Mapping[str, Check] | None = None,
        access: Access | None = None,
    ) -> None:
        self.checks: dict[str, Check] = {"ping": lambda: True, **(checks or {})}
        self.ready_checks: dict[str, Check] = dict(ready_checks or {})
        self.access = access
        self._server = _TlsServer((bind_address, port), self._handler_class(), tls)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port actually bound (useful when 0 was asked for)."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health-server", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    # -- answering ------------------------------------------------------------------------

    def answer(self, path: str, query: Mapping[str, list[str]]) -> Answer:
        """Status, content type and body for a GET of ``path``."""
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(metrics.REGISTRY)
        endpoint, _, single = path.strip("/").partition("/")
        if endpoint in ("healthz", "livez"):
            checks = self.checks
        elif endpoint == "readyz":
            checks = {**self.checks, **self.ready_checks}
        else:
            return 404, "text/plain; charset=utf-8", b"404 page not found\n"
        if single:
            if single not in checks:
                return 404, "text/plain; charset=utf-8", b"404 page not found\n"
            checks = {single: checks[single]}
        results = _run_checks(checks)
        healthy = all(ok for _, ok in results)
        lines = [f"[+]{name} ok" if ok else f"[-]{name} failed" for name, ok in results]
        if healthy and "verbose" not in query:
            body = "ok"
        elif healthy:
            body = "\n".join([*lines, f"{endpoint} check passed"]) + "\n"
        else:
            body = "\n".join([*lines, f"{endpoint} check failed"]) + "\n"
        return (200 if healthy else 500), "text/plain; charset=utf-8", body.encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 30.0  # seconds a connection may idle, the TLS handshake included

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                refusal = None
                if server.access is not None:
                    certificate = None
                    if isinstance(self.connection, ssl.SSLSocket):
                        certificate = self.connection.getpeercert(binary_form=True)
                    refusal = server.access(
                        parts.path, self.headers.get("Authorization"), certificate
                    )
                status, content_type, body = refusal or server.answer(
                    parts.path, parse_qs(parts.query, keep_blank_values=True)
                )
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-Content-Type-Options", "nosniff")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("health: " + format, *args)

        return Handler
