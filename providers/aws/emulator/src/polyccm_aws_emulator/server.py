"""``python -m polyccm_aws_emulator --port PORT``: moto's server with polyccm's fault injection,
call counting and instance metadata on 127.0.0.1 (see :mod:`.app`)."""

from __future__ import annotations

import argparse
import ipaddress
import logging

from polyccm_aws_emulator.app import build_app


def _require_loopback(host: str) -> None:
    if host == "localhost":
        return
    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"refusing to serve on {host}: the emulator only serves loopback")


def serve(host: str, port: int, *, verbose: bool = False) -> None:
    """Serve until interrupted."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    _require_loopback(host)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    if not verbose:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server(host, port, build_app(), threaded=True, request_handler=MotoRequestHandler)
    print(f"polyccm AWS emulator on http://{host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m polyccm_aws_emulator",
        description="A local AWS for tests and demos: moto's server on 127.0.0.1, plus fault "
        "injection and counting.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    parser.add_argument("--port", type=int, required=True, help="port to serve on")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    serve(args.host, args.port, verbose=args.verbose)
