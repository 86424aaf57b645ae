"""Test support shared by the emulators' ``testing`` modules: running an emulator as its
plugin launches it, and a plain JSON client of an emulated API (over a socket, or in-process
on the WSGI app) whose answers come back whatever their status.

A cloud's ``testing`` module subclasses :class:`JsonApi` with its authentication and its own
requests (``create_droplets``, ``create_devices``, ...); nothing here knows a cloud.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyccm.plugins import EmulatorLaunch


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def launched(
    launch: EmulatorLaunch, port: int, log_path: Path, *, name: str
) -> Iterator[Mapping[str, str]]:
    """Run ``launch`` (serving on ``port``, its output in ``log_path``) until it answers its
    health path over http; yield its environment, and stop it afterwards. ``name`` (``"Metal
    emulator"``) names it in the error raised when it does not start."""
    with log_path.open("w") as log:
        process = subprocess.Popen(list(launch.argv), stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(f"http://127.0.0.1:{port}{launch.health_path}", process, log_path, name)
            yield dict(launch.env)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log_path: Path, name: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"{name} did not start; see {log_path}") from None
            time.sleep(0.1)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: Any


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, answer: Answer) -> None:
        super().__init__(f"{method} {path}: HTTP {answer.status} {answer.body}")
        self.answer = answer


class JsonApi:
    """JSON requests to an emulated API: subclasses give :meth:`call`, and get :meth:`ok`."""

    def call(self, method: str, path: str, body: object | None = None) -> Answer:
        raise NotImplementedError

    def ok(self, method: str, path: str, body: object | None = None) -> Any:
        """The body of a successful request; :class:`ApiError` otherwise."""
        answer = self.call(method, path, body)
        if answer.status >= 400:
            raise ApiError(method, path, answer)
        return answer.body


def http_call(
    method: str,
    url: str,
    body: object | None,
    headers: Mapping[str, str],
    *,
    context: ssl.SSLContext | None = None,
) -> Answer:
    """One JSON request over a socket; any status comes back as an :class:`Answer` (header
    names in lower case, the body parsed)."""
    data = None if body is None else json.dumps(body).encode()
    sent = {**headers, "Content-Type": "application/json"}
    request = urllib.request.Request(url, data, sent, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            raw, status, answer_headers = response.read(), response.status, response.headers
    except urllib.error.HTTPError as error:
        raw, status, answer_headers = error.read(), error.code, error.headers
    parsed = json.loads(raw) if raw else None
    return Answer(status, {k.lower(): v for k, v in answer_headers.items()}, parsed)


class InProcessApi(JsonApi):
    """JSON requests answered in-process by a WSGI app (no socket: for fast tests of an
    emulator itself). Subclasses give :meth:`call` (their authentication) over
    :meth:`local_call`."""

    def __init__(self, app: Any) -> None:
        from werkzeug.test import Client

        self.app = app
        self.client = Client(app)
        self.last: Any = None
        """The last werkzeug test response."""
        self.sent: Any = None
        """The last request, as a werkzeug request whose body can still be read."""

    def local_call(
        self,
        method: str,
        path: str,
        body: object | None,
        *,
        base_url: str,
        headers: Sequence[tuple[str, str]] = (),
    ) -> Answer:
        from werkzeug.test import EnvironBuilder
        from werkzeug.wrappers import Request

        def build() -> EnvironBuilder:
            return EnvironBuilder(
                path,
                method=method,
                base_url=base_url,
                headers=list(headers),
                data=None if body is None else json.dumps(body),
                content_type="application/json" if body is not None else None,
            )

        self.sent = Request(build().get_environ())
        response = self.client.open(build())
        raw = response.get_data()
        self.last = response
        return Answer(
            response.status_code,
            {k.lower(): v for k, v in response.headers.items()},
            json.loads(raw) if raw else None,
        )
