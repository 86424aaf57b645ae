"""An emulator's threaded server reuses the threads of finished connections, yet a new
connection never waits behind an open or busy one."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from polyccm_testing.emulation.serving import reuse_threads
from werkzeug.serving import BaseWSGIServer, make_server

SLOW = 0.4
#: The threads that answered, kept (so that no two are the same object by reuse of memory).
ANSWERED_BY: list[threading.Thread] = []


def _app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    ANSWERED_BY.append(threading.current_thread())
    if environ["PATH_INFO"] == "/slow":
        time.sleep(SLOW)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


@pytest.fixture
def server() -> Iterator[BaseWSGIServer]:
    served = make_server("127.0.0.1", 0, _app, threaded=True)
    reuse_threads(served)
    thread = threading.Thread(target=served.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield served
    finally:
        served.shutdown()
        served.server_close()
        thread.join(10)


def _get(server: BaseWSGIServer, path: str = "/") -> bytes:
    connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    try:
        connection.request("GET", path)
        return connection.getresponse().read()
    finally:
        connection.close()


def test_sequential_connections_reuse_threads(server: BaseWSGIServer) -> None:
    ANSWERED_BY.clear()
    answers = [_get(server) for _ in range(30)]

    assert answers == [b"ok"] * 30
    # A few (a connection may arrive before the last one's thread is idle again), not 30.
    assert len({id(thread) for thread in ANSWERED_BY}) < 10


def test_an_open_connection_and_slow_requests_hold_up_no_one(server: BaseWSGIServer) -> None:
    idle = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    idle.request("GET", "/")
    assert idle.getresponse().read() == b"ok"  # kept alive: its thread waits for more
    began = time.monotonic()
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: _get(server, "/slow"), range(6)))
    took = time.monotonic() - began
    idle.close()

    assert answers == [b"ok"] * 6
    assert took < 3 * SLOW  # served side by side, not one after another (6 x 0.4 s)
