"""A loopback proxy that records what a CCM asks of its cloud: :class:`Recorder`.

It stands between a CCM (upstream's or polyccm) and an emulator and keeps every exchange
(:class:`Exchange`: method, path with query, request body, status, response body), so a switch
test can say what each CCM wrote and a golden can hold what upstream sent. Two ways in:

* as the cloud's base URL (``DO_OVERRIDE_URL``, gce.conf's ``api-endpoint``, polyccm's
  endpoint settings): plain HTTP on loopback, forwarded to the emulator's base URL;
* as an HTTPS proxy (``HTTPS_PROXY``) for a CCM that always dials the real cloud's name
  (upstream's Equinix Metal CCM and ``api.equinix.com``): ``CONNECT`` to a name in
  ``intercept`` is answered by terminating TLS with a throwaway CA
  (:attr:`Recorder.client_ca_file`, the CCM's ``SSL_CERT_FILE``), then forwarded likewise.
  ``CONNECT`` to any other name is refused (403): nothing leaves the machine.

Headers are not recorded (they carry tokens), and ``Accept-Encoding`` is not passed on, so a
recorded body is the text the emulator wrote. With ``keep=False`` it only relays, keeping
nothing (the benchmark runs upstream's Equinix Metal CCM through it for thousands of calls).
"""

from __future__ import annotations

import http.client
import json
import ssl
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from polyccm_testing.devenv.pki import generate, serving_certificate

#: Methods that read; every other method is a write.
READS = frozenset({"GET", "HEAD", "OPTIONS"})
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "accept-encoding",
        "host",
    }
)


@dataclass(frozen=True)
class Exchange:
    """One request a CCM made and the answer it got. ``request`` and ``response`` are the
    bodies as JSON values when they parse, else text, else ``None`` when empty."""

    method: str
    path: str
    request: Any
    status: int
    response: Any

    @property
    def is_write(self) -> bool:
        return self.method not in READS

    def as_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "request": self.request,
            "status": self.status,
            "response": self.response,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Exchange:
        return cls(
            method=str(value["method"]),
            path=str(value["path"]),
            request=value.get("request"),
            status=int(value["status"]),
            response=value.get("response"),
        )

    def __str__(self) -> str:
        return f"{self.method} {self.path} -> {self.status}"


def parse_body(data: bytes) -> Any:
    """A body as recorded: its JSON value, else its text, else ``None`` when empty."""
    if not data:
        return None
    text = data.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def writes(exchanges: Iterable[Exchange]) -> list[Exchange]:
    """The exchanges that changed (or tried to change) the cloud."""
    return [exchange for exchange in exchanges if exchange.is_write]


class Recorder:
    """Records the exchanges between CCMs and the emulator at ``target`` (its base URL; ``https``
    is verified against ``ca_file``). Use as a context manager; :attr:`url` is the base URL (and
    HTTPS proxy) to give the CCM. ``keep=False``: relay only, record nothing."""

    def __init__(
        self,
        target: str,
        *,
        ca_file: Path | None = None,
        intercept: Iterable[str] = (),
        keep: bool = True,
    ) -> None:
        parts = urlsplit(target)
        if parts.hostname not in {"127.0.0.1", "localhost", "::1"}:
            raise ValueError(f"the recorder forwards to loopback only, not {target!r}")
        self.target = parts
        self._target_context = (
            ssl.create_default_context(cafile=str(ca_file)) if parts.scheme == "https" else None
        )
        self.intercept = frozenset(name.lower() for name in intercept)
        self.keep = keep
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self._taken = 0
        self._workdir = tempfile.TemporaryDirectory(prefix="polyccm-recorder-")
        self.client_ca_file: Path | None = None
        self._tunnel_context: ssl.SSLContext | None = None
        if self.intercept:
            pki = generate(Path(self._workdir.name) / "ca")
            cert, key = serving_certificate(
                pki, Path(self._workdir.name), dns_names=tuple(sorted(self.intercept))
            )
            self.client_ca_file = pki.ca_cert
            self._tunnel_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._tunnel_context.load_cert_chain(cert, key)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="polyccm-recorder", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def trust_bundle(self, *others: Path) -> Path:
        """One PEM file with the interception CA and ``others`` (a CCM that takes a single
        ``SSL_CERT_FILE`` and also talks TLS to the API server needs both)."""
        bundle = Path(self._workdir.name) / "trust.pem"
        pieces = [path.read_text() for path in (self.client_ca_file, *others) if path]
        bundle.write_text("".join(piece.rstrip("\n") + "\n" for piece in pieces))
        return bundle

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self._workdir.cleanup()

    def exchanges(self) -> list[Exchange]:
        """Every exchange recorded so far."""
        with self._lock:
            return list(self._exchanges)

    def take(self) -> list[Exchange]:
        """The exchanges since the last :meth:`take` (or the start)."""
        with self._lock:
            taken = self._exchanges[self._taken :]
            self._taken = len(self._exchanges)
            return taken

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    def _forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        host = self.target.hostname or "127.0.0.1"
        connection: http.client.HTTPConnection
        if self._target_context is not None:
            connection = http.client.HTTPSConnection(
                host, self.target.port, context=self._target_context, timeout=60
            )
        else:
            connection = http.client.HTTPConnection(host, self.target.port, timeout=60)
        prefix = self.target.path.rstrip("/")
        try:
            connection.putrequest(method, prefix + path, skip_accept_encoding=True)
            for name, value in headers:
                connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            answer = connection.getresponse()
            data = answer.read()
            return answer.status, answer.getheaders(), data
        finally:
            connection.close()


def _handler_for(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the exchanges are the record."""

        def do_CONNECT(self) -> None:
            host = self.path.rsplit(":", 1)[0].lower()
            context = recorder._tunnel_context
            if host not in recorder.intercept or context is None:
                self.send_error(403, f"the recorder only intercepts {sorted(recorder.intercept)}")
                return
            self.send_response(200, "Connection established")
            self.end_headers()
            self.wfile.flush()
            try:
                tunnel = context.wrap_socket(self.connection, server_side=True)
            except (ssl.SSLError, OSError):
                self.close_connection = True
                return
            self.connection = tunnel
            self.rfile = tunnel.makefile("rb")
            self.wfile = tunnel.makefile("wb")
            self.close_connection = False
            while not self.close_connection:
                try:
                    self.handle_one_request()
                except (ssl.SSLError, OSError):
                    break
            self.close_connection = True

        def _relay(self) -> None:
            path = self.path
            if "://" in path:  # absolute form, as sent to a plain-HTTP proxy
                parts = urlsplit(path)
                path = parts.path + (f"?{parts.query}" if parts.query else "")
            body = self._body()
            headers = [
                (name, value)
                for name, value in self.headers.items()
                if name.lower() not in _HOP_BY_HOP
            ]
            try:
                status, answer_headers, data = recorder._forward(self.command, path, headers, body)
            except (OSError, http.client.HTTPException) as error:
                status, answer_headers, data = 502, [], f"recorder: {error}".encode()
            if recorder.keep:
                recorder._record(
                    Exchange(self.command, path, parse_body(body), status, parse_body(data))
                )
            self.send_response(status)
            for name, value in answer_headers:
                if name.lower() not in _HOP_BY_HOP:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks: list[bytes] = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _relay  # noqa: N815

    return Handler
