"""Serving an emulator: loopback addresses only, and the command line's common parts."""

from __future__ import annotations

import argparse
import ipaddress
import logging

from werkzeug.serving import BaseWSGIServer


def require_loopback(host: str) -> None:
    """Exit unless ``host`` is ``localhost`` or a loopback address."""
    if host == "localhost":
        return
    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"refusing to serve on {host}: the emulator only serves loopback")


def add_checking_options(parser: argparse.ArgumentParser) -> None:
    """``--validate-responses`` and ``--verbose``, the last options of every emulator."""
    parser.add_argument(
        "--validate-responses",
        action="store_true",
        help="check every answer against the OpenAPI document (a mismatch becomes a 500)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request")


def configure_logging(verbose: bool) -> None:
    """Warnings only (werkzeug's request lines too), unless ``verbose``."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    if not verbose:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)


def serve(server: BaseWSGIServer, banner: str) -> None:
    """Print ``banner`` and serve until interrupted, then close the server."""
    print(banner, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
