"""Serving the emulator: https for the API, plain http for the control endpoints, one port.

The provider's client sends its bearer token only over https (as DigitalOcean's SDK, pydo,
does), so the API is served over TLS with a certificate the client trusts (the local control
plane's CA, handed to clients in ``REQUESTS_CA_BUNDLE``); nothing on the client side is
weakened. Each connection's first byte tells a TLS handshake (0x16) from plain http, so health
checks and the control client may still speak http on the same loopback port. Only loopback
addresses are served.
"""

from __future__ import annotations

import argparse
import logging
import socket
import ssl
from pathlib import Path
from typing import Any

from polyccm_testing.emulation.serving import (
    add_checking_options,
    configure_logging,
    require_loopback,
    serve,
)
from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

from polyccm_digitalocean_emulator.app import EmulatorApp
from polyccm_digitalocean_emulator.settings import EmulatorSettings

#: Seconds a connection may stay silent (before its first byte, or between requests).
IDLE_TIMEOUT = 30.0
TLS_HANDSHAKE = b"\x16"

log = logging.getLogger(__name__)


class _Handler(WSGIRequestHandler):
    def make_environ(self) -> Any:
        environ = super().make_environ()
        environ["wsgi.url_scheme"] = (
            "https" if isinstance(self.connection, ssl.SSLSocket) else "http"
        )
        return environ


class DualServer(ThreadedWSGIServer):
    """werkzeug's threaded WSGI server, with TLS chosen per connection by its first byte."""

    def __init__(self, host: str, port: int, app: Any, tls: ssl.SSLContext) -> None:
        super().__init__(host, port, app, handler=_Handler)
        self.tls = tls

    def finish_request(self, request: Any, client_address: Any) -> None:
        connection: socket.socket = request
        connection.settimeout(IDLE_TIMEOUT)
        try:
            first = connection.recv(1, socket.MSG_PEEK)
            if first == TLS_HANDSHAKE:
                connection = self.tls.wrap_socket(connection, server_side=True)
        except (OSError, ssl.SSLError) as error:
            log.debug("connection from %s dropped before a request: %s", client_address, error)
            return
        try:
            _Handler(connection, client_address, self)
        finally:
            if connection is not request:
                connection.close()


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    return context


def make_server(host: str, port: int, app: EmulatorApp, *, cert: Path, key: Path) -> DualServer:
    require_loopback(host)
    return DualServer(host, port, app, tls_context(cert, key))


def _parser() -> argparse.ArgumentParser:
    defaults = EmulatorSettings()
    parser = argparse.ArgumentParser(
        prog="python -m polyccm_digitalocean_emulator",
        description="A local DigitalOcean API v2 (droplets, load balancers, ...) checked "
        "against DigitalOcean's OpenAPI document, with fault injection and call counting.",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="loopback address to bind")
    add("--port", type=int, required=True, help="port to serve on (https API, http control)")
    add("--tls-cert", type=Path, required=True, help="PEM certificate for 127.0.0.1")
    add("--tls-key", type=Path, required=True, help="PEM private key of --tls-cert")
    add("--token", default=None, help="the only bearer token accepted (default: any)")
    add(
        "--lb-active-delay",
        type=float,
        default=defaults.lb_active_delay,
        help="seconds a load balancer stays new (default %(default)s)",
    )
    add(
        "--droplet-active-delay",
        type=float,
        default=defaults.droplet_active_delay,
        help="seconds a droplet stays new (default %(default)s)",
    )
    add(
        "--action-delay",
        type=float,
        default=defaults.action_delay,
        help="seconds a droplet action stays in-progress (default %(default)s)",
    )
    add(
        "--certificate-delay",
        type=float,
        default=defaults.certificate_delay,
        help="seconds a Let's Encrypt certificate stays pending (default %(default)s)",
    )
    add(
        "--rate-limit-per-hour",
        type=int,
        default=defaults.rate_limit_per_hour,
        help="requests per token per sliding hour (default %(default)s)",
    )
    add(
        "--rate-limit-per-minute",
        type=int,
        default=defaults.rate_limit_per_minute,
        help="requests per token per sliding minute (default %(default)s)",
    )
    add(
        "--droplet-limit",
        type=int,
        default=defaults.droplet_limit,
        help="droplets the account may hold (default %(default)s)",
    )
    add_checking_options(parser)
    return parser  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    configure_logging(args.verbose)
    settings = EmulatorSettings(
        lb_active_delay=args.lb_active_delay,
        droplet_active_delay=args.droplet_active_delay,
        action_delay=args.action_delay,
        certificate_delay=args.certificate_delay,
        rate_limit_per_hour=args.rate_limit_per_hour,
        rate_limit_per_minute=args.rate_limit_per_minute,
        droplet_limit=args.droplet_limit,
        token=args.token,
        validate_responses=args.validate_responses,
    )
    server = make_server(
        args.host, args.port, EmulatorApp(settings), cert=args.tls_cert, key=args.tls_key
    )
    serve(server, f"polyccm DigitalOcean emulator on https://{args.host}:{server.server_port}")
