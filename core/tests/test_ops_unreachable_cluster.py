"""``polyccm plan`` and ``polyccm orphans`` when the API server gives no usable answer: one line
naming the server and the cause, exit 2, at once for a refused connection and after
``--request-timeout`` for a silent server (never a traceback, never the "retrying" warning of
the manager's client). The fake provider here; the providers' own tests repeat the unanswering
servers with their configs.

No upstream counterpart: the commands are polyccm's. The wording follows kubectl's for the same
failures ("The connection to the server ... was refused", "Unable to connect to the server").
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.fake import FakeCloud
from polyccm_testing.fake_main import FakeCloudPlugin
from polyccm_testing.opstools import (
    QUICK_TIMEOUT,
    CommandResult,
    run_command,
    unanswering_api_servers,
)

COMMANDS = ("plan", "orphans")


def run(command: str, kubeconfig: Path, cloud: FakeCloud | None = None) -> CommandResult:
    return run_command(
        command,
        "fake",
        kubeconfig,
        "--controllers=*,-route",
        f"--request-timeout={QUICK_TIMEOUT}",
        plugins=[FakeCloudPlugin(cloud or FakeCloud())],
    )


def assert_one_line(result: CommandResult, command: str, message: str) -> None:
    assert result.status == 2
    assert result.stdout == ""
    assert result.stderr == f"polyccm {command}: error: {message}\n"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_refused_or_silent_api_server_is_one_line_naming_it(command: str, tmp_path: Path) -> None:
    cloud = FakeCloud()
    with unanswering_api_servers(tmp_path) as servers:
        for server in servers:
            result = run(command, server.kubeconfig, cloud)

            assert_one_line(result, command, f"API server {server.server}: {server.cause}")
    assert cloud.calls == [], "nothing was asked of the cloud"


@pytest.fixture
def hanging_up() -> Iterator[int]:
    """A loopback port whose every connection is accepted and closed at once."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    listener.close()
    thread.join(timeout=5)


def kubeconfig(directory: Path, server: str, **cluster: object) -> Path:
    path = directory / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
                "users": [{"name": "u", "user": {"token": "not-used"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_a_server_that_hangs_up_is_one_line(command: str, hanging_up: int, tmp_path: Path) -> None:
    https = f"https://127.0.0.1:{hanging_up}"
    http = f"http://127.0.0.1:{hanging_up}"

    over_tls = run(command, kubeconfig(tmp_path, https, **{"insecure-skip-tls-verify": True}))
    plain = run(command, kubeconfig(tmp_path, http))

    assert_one_line(
        over_tls, command, f"API server {https}: TLS failed: unexpected eof while reading"
    )
    assert plain.status == 2
    assert plain.stderr.startswith(
        f"polyccm {command}: error: API server {http}: the connection broke: "
    )
    assert len(plain.stderr.splitlines()) == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_a_certificate_the_kubeconfig_does_not_trust_is_one_line(
    command: str, control_plane: ControlPlane, tmp_path: Path
) -> None:
    # The real API server, its CA not given: verification fails as it would for kubectl.
    result = run(command, kubeconfig(tmp_path, control_plane.api_url))

    assert result.status == 2
    assert result.stderr.startswith(
        f"polyccm {command}: error: API server {control_plane.api_url}: TLS failed: "
        "certificate verify failed: "
    )
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_credentials_in_the_server_url_are_not_echoed(command: str, tmp_path: Path) -> None:
    with unanswering_api_servers(tmp_path) as servers:
        refused = servers[0]
        with_password = refused.server.replace("https://", "https://admin:hunter2@")

        result = run(command, kubeconfig(tmp_path, with_password))

    assert_one_line(result, command, f"API server {refused.server}: {refused.cause}")


@pytest.mark.parametrize("value", ["0", "-1s", "soon", "10"])
def test_a_bad_request_timeout_is_one_line(value: str, tmp_path: Path) -> None:
    with unanswering_api_servers(tmp_path) as servers:
        result = run_command(
            "plan",
            "fake",
            servers[0].kubeconfig,
            "--controllers=*,-route",
            f"--request-timeout={value}",
            plugins=[FakeCloudPlugin(FakeCloud())],
        )

    assert result.status == 2
    assert result.stderr.startswith("polyccm plan: error: argument --request-timeout: ")
    assert f"'{value}'" in result.stderr
    assert len(result.stderr.splitlines()) == 1
