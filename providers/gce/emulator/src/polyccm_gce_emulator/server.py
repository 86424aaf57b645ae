"""``python -m polyccm_gce_emulator --port PORT``: serve the emulator (:mod:`.app`) on loopback."""

from __future__ import annotations

import argparse
import ipaddress
import logging

from polyccm_gce_emulator.app import ComputeEmulator
from polyccm_gce_emulator.settings import EmulatorSettings


def _require_loopback(host: str) -> None:
    if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"refusing to serve on {host}: the emulator only serves loopback")


def serve(host: str, port: int, settings: EmulatorSettings, *, verbose: bool = False) -> None:
    """Serve until interrupted (threads reused across connections)."""
    from polyccm_testing.emulation.serving import reuse_threads
    from werkzeug.serving import make_server

    _require_loopback(host)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    if not verbose:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server(host, port, ComputeEmulator(settings), threaded=True)
    reuse_threads(server)
    print(f"polyccm GCE emulator on http://{host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    defaults = EmulatorSettings()
    parser = argparse.ArgumentParser(
        prog="python -m polyccm_gce_emulator",
        description="A local GCE compute v1 API and metadata server on loopback.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    parser.add_argument("--port", type=int, required=True, help="port to serve on")
    parser.add_argument("--project", default=defaults.project, help="the metadata's project")
    parser.add_argument("--pending-seconds", type=float, default=defaults.pending_seconds)
    parser.add_argument("--running-seconds", type=float, default=defaults.running_seconds)
    parser.add_argument(
        "--route-running-seconds", type=float, default=defaults.route_running_seconds
    )
    parser.add_argument(
        "--route-inserts-per-second", type=float, default=defaults.route_inserts_per_second
    )
    parser.add_argument("--route-insert-burst", type=int, default=defaults.route_insert_burst)
    parser.add_argument(
        "--route-quota", type=int, default=defaults.quotas["ROUTES"], help="routes per project"
    )
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    settings = EmulatorSettings(
        project=args.project,
        pending_seconds=args.pending_seconds,
        running_seconds=args.running_seconds,
        route_running_seconds=args.route_running_seconds,
        route_inserts_per_second=args.route_inserts_per_second,
        route_insert_burst=args.route_insert_burst,
    )
    settings.quotas["ROUTES"] = args.route_quota
    serve(args.host, args.port, settings, verbose=args.verbose)
