"""A CCM that stops making progress, for tests/test_bench_stall.py: started by the benchmark
as an upstream peer (the flags it is given are the Go CCMs'), it answers ``/healthz`` on its
secure port, initialises the first ``STALLING_CCM_NODES`` nodes it sees (removes their
uninitialised taint, one request each, as a cloud-node controller would), one every
``STALLING_CCM_EVERY`` seconds (0: at once), and then does nothing more until it is stopped, as
upstream Metal's CCM does once it has the first page of devices."""

from __future__ import annotations

import argparse
import os
import ssl
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from polyccm.kube.api import NODES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT
from polyccm.serving.certs import generate_self_signed


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        del format, args


def _serve(port: int) -> None:
    certificate, key = generate_self_signed("127.0.0.1")
    directory = Path(tempfile.mkdtemp(prefix="stalling-ccm-"))
    (directory / "tls.crt").write_bytes(certificate)
    (directory / "tls.key").write_bytes(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    server = ThreadingHTTPServer(("127.0.0.1", port), _Health)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--secure-port", type=int, required=True)
    args, _ = parser.parse_known_args()
    limit = int(os.environ.get("STALLING_CCM_NODES", "3"))
    every = float(os.environ.get("STALLING_CCM_EVERY", "0"))
    api = KubeApi.from_kubeconfig(args.kubeconfig)
    _serve(args.secure_port)
    done: set[str] = set()
    while len(done) < limit:
        for node in api.list(NODES)["items"]:
            name = node["metadata"]["name"]
            taints = node.get("spec", {}).get("taints") or []
            if name in done or len(done) >= limit:
                continue
            kept = [t for t in taints if t.get("key") != UNINITIALIZED_TAINT]
            api.patch(NODES, name, {"spec": {"taints": kept or None}})
            done.add(name)
            time.sleep(every)
        time.sleep(0.2)
    while True:  # no more progress, until SIGTERM
        time.sleep(3600)


if __name__ == "__main__":
    main()
