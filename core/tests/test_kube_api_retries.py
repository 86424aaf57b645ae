"""The API client rides out an API server that sheds load or restarts (client-go's retry rules),
against a small HTTP server on loopback that answers what each test scripts."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import urllib3
from polyccm.kube.api import NODES, ApiError, KubeApi, RetryPolicy
from polyccm.kube.config import Configuration

FAST = RetryPolicy(initial_backoff=0.05, max_backoff=0.2)
"""The default rules with short connection backoffs, so the tests take milliseconds."""

Answer = tuple[int, dict[str, str], object]
"""Status (0: no answer at all), headers, JSON body."""

OK: Answer = (200, {}, {"kind": "Node", "metadata": {"name": "n1"}})
DROP: Answer = (0, {}, None)
"""Read the request, then close the connection without answering (a server going down)."""


@dataclass
class Script:
    """What the server answers, request by request (the last answer repeats), and what it saw."""

    answers: list[Answer]
    seen: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, method: str, path: str) -> Answer:
        with self.lock:
            self.seen.append((method, path))
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def serve(script: Script, port: int = 0) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: object) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            status, headers, body = script.next(self.command, self.path)
            if status == 0:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        # http.server dispatches on these names.
        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer  # noqa: N815

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def client(port: int, policy: RetryPolicy = FAST) -> KubeApi:
    configuration = Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    return KubeApi(configuration, qps=0, retry=policy)


@pytest.fixture
def script() -> Iterator[Script]:
    yield Script([OK])


@pytest.fixture
def server(script: Script) -> Iterator[ThreadingHTTPServer]:
    running = serve(script)
    yield running
    running.shutdown()
    running.server_close()


def api_for(server: ThreadingHTTPServer, policy: RetryPolicy = FAST) -> KubeApi:
    return client(server.server_address[1], policy)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_429_waits_the_seconds_the_server_asks_then_succeeds(
    script: Script, server: ThreadingHTTPServer
) -> None:
    script.answers = [(429, {"Retry-After": "1"}, {"reason": "TooManyRequests"}), OK]
    started = time.monotonic()
    assert api_for(server).get(NODES, "n1")["metadata"]["name"] == "n1"
    assert time.monotonic() - started >= 0.9, "Retry-After: 1 is honoured"
    assert len(script.seen) == 2


def test_a_write_refused_with_503_retry_after_is_sent_again(
    script: Script, server: ThreadingHTTPServer
) -> None:
    script.answers = [(503, {"Retry-After": "0"}, {"reason": "ServiceUnavailable"}), OK]
    api_for(server).patch(NODES, "n1", {"metadata": {"labels": {"a": "b"}}})
    assert [method for method, _ in script.seen] == ["PATCH", "PATCH"]


def test_a_5xx_without_retry_after_is_not_retried(
    script: Script, server: ThreadingHTTPServer
) -> None:
    script.answers = [(500, {}, {"reason": "InternalError", "message": "boom"}), OK]
    with pytest.raises(ApiError) as raised:
        api_for(server).get(NODES, "n1")
    assert raised.value.status == 500
    assert len(script.seen) == 1


def test_retry_after_is_capped(script: Script, server: ThreadingHTTPServer) -> None:
    script.answers = [(429, {"Retry-After": "3600"}, {}), OK]
    started = time.monotonic()
    api_for(server, RetryPolicy(max_retry_after=0.2)).get(NODES, "n1")
    assert time.monotonic() - started < 5, "an hour-long Retry-After is cut to the cap"


def test_retries_are_bounded(script: Script, server: ThreadingHTTPServer) -> None:
    script.answers = [(429, {"Retry-After": "0"}, {"reason": "TooManyRequests"})]
    with pytest.raises(ApiError) as raised:
        api_for(server, RetryPolicy(max_retries=3)).get(NODES, "n1")
    assert raised.value.status == 429
    assert len(script.seen) == 4, "the first attempt and 3 retries, then the error"


def test_a_read_is_retried_when_the_connection_drops_mid_request(
    script: Script, server: ThreadingHTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    script.answers = [DROP, DROP, OK]
    assert api_for(server).get(NODES, "n1")["metadata"]["name"] == "n1"
    assert len(script.seen) == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "one warning per request, not one per attempt"
    assert "GET /api/v1/nodes/n1" in warnings[0].getMessage()


@pytest.mark.parametrize("method", ["PATCH", "POST", "DELETE"])
def test_a_write_is_not_sent_again_after_the_connection_drops(
    method: str, script: Script, server: ThreadingHTTPServer
) -> None:
    script.answers = [DROP, OK]
    with pytest.raises(urllib3.exceptions.ProtocolError):
        api_for(server).request(method, "/api/v1/nodes/n1", body={})
    assert len(script.seen) == 1, "the write may have been applied: never sent blindly twice"


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_refused_connection_is_retried_until_the_server_is_back(
    method: str, script: Script
) -> None:
    port = free_port()
    started: list[ThreadingHTTPServer] = []
    timer = threading.Timer(0.5, lambda: started.append(serve(script, port)))
    timer.start()
    try:
        answer = client(port).request(
            method, "/api/v1/nodes", body={} if method == "POST" else None
        )
        assert answer["metadata"]["name"] == "n1"
        assert script.seen == [(method, "/api/v1/nodes")], "nothing was sent while refused"
    finally:
        timer.join()
        for server in started:
            server.shutdown()
            server.server_close()


def test_a_refused_connection_gives_up_after_the_retry_budget() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.NewConnectionError):
        client(port, RetryPolicy(initial_backoff=0.05, max_backoff=0.1, connection_budget=0.5)).get(
            NODES, "n1"
        )
    assert time.monotonic() - started < 1.5
