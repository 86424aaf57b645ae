"""Tests of the development environment's parts that need no control plane: keys and
certificates, detached processes, the state files, and the CLI's answers to user mistakes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from polyccm_testing.devenv import controlplane, pki, processes
from polyccm_testing.devenv import state as state_files
from polyccm_testing.devenv.binaries import ControlPlaneBinaries

POLYCCM_DEV = Path(sys.executable).parent / "polyccm-dev"


def run_dev(*arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(POLYCCM_DEV), *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )


# -- keys and certificates ---------------------------------------------------------------------


def _tls_handshake(keys: pki.Pki) -> str:
    """Serve once with the generated serving certificate; connect trusting only the CA."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(keys.serving_cert, keys.serving_key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        with server_context.wrap_socket(connection, server_side=True) as tls:
            tls.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_context = ssl.create_default_context(cafile=str(keys.ca_cert))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        client_context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        answer = tls.recv(5).decode()
    thread.join(timeout=10)
    listener.close()
    return answer


@pytest.mark.parametrize("use_openssl", [False, True], ids=["cryptography", "openssl"])
def test_generated_serving_certificate_is_trusted_through_the_ca_for_127_0_0_1(
    tmp_path: Path, use_openssl: bool
) -> None:
    if use_openssl and shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed for this test")
    keys = pki.generate(tmp_path / "pki", use_openssl=use_openssl)

    assert _tls_handshake(keys) == "hello"
    for key in (keys.ca_key, keys.serving_key, keys.service_account_key):
        assert key.stat().st_mode & 0o077 == 0, f"{key} is readable by others"


@pytest.mark.parametrize("use_openssl", [False, True], ids=["cryptography", "openssl"])
def test_service_account_public_key_matches_its_private_key(
    tmp_path: Path, use_openssl: bool
) -> None:
    from cryptography.hazmat.primitives import serialization

    keys = pki.generate(tmp_path / "pki", use_openssl=use_openssl)
    private = serialization.load_pem_private_key(keys.service_account_key.read_bytes(), None)
    public = serialization.load_pem_public_key(keys.service_account_public_key.read_bytes())
    assert private.public_key().public_numbers() == public.public_numbers()  # type: ignore[union-attr]


# -- processes ---------------------------------------------------------------------------------


def _spawn_parent_with_child(tmp_path: Path) -> tuple[int, int]:
    """A detached process that starts a child ignoring SIGTERM; returns both pids."""
    script = textwrap.dedent(
        """
        import signal, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(600)"])
        print(f"child={child.pid}", flush=True)
        time.sleep(600)
        """
    )
    log = tmp_path / "logs" / "parent.log"
    parent = processes.spawn_detached([sys.executable, "-c", script], log_path=log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        lines = log.read_text().splitlines()
        if "ready" in lines:
            child = next(line for line in lines if line.startswith("child="))
            return parent.pid, int(child.removeprefix("child="))
        time.sleep(0.05)
    raise AssertionError(f"the test processes did not start: {log.read_text()}")


def test_stop_group_ends_the_whole_group_even_a_child_ignoring_sigterm(tmp_path: Path) -> None:
    parent, child = _spawn_parent_with_child(tmp_path)
    assert os.getpgid(parent) == parent, "a spawned process leads its own group"
    assert set(processes.group_members(parent)) == {parent, child}

    began = time.monotonic()
    processes.stop_group(parent, processes.start_time_of(parent), grace=0.5)

    assert not processes.is_alive(parent)
    assert not processes.is_alive(child)
    assert time.monotonic() - began < 10


def test_a_reused_pid_is_not_the_recorded_process_and_is_left_alone(tmp_path: Path) -> None:
    sleeper = processes.spawn_detached(["sleep", "60"], log_path=tmp_path / "sleep.log")
    try:
        recorded_start = processes.start_time_of(sleeper.pid)
        assert recorded_start is not None
        assert processes.is_alive(sleeper.pid, recorded_start)
        assert not processes.is_alive(sleeper.pid, recorded_start + 1)

        processes.stop_group(sleeper.pid, recorded_start + 1, grace=0.2)

        assert sleeper.poll() is None, "a process with another start time must not be signalled"
    finally:
        processes.stop_group(sleeper.pid, processes.start_time_of(sleeper.pid), grace=0.2)


def test_an_unreaped_dead_child_counts_as_dead(tmp_path: Path) -> None:
    zombie = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(zombie.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while processes.is_alive(zombie.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not processes.is_alive(zombie.pid)
    finally:
        zombie.wait()


def test_free_ports_are_distinct_and_bindable_on_loopback() -> None:
    ports = processes.free_ports(3)
    assert len(set(ports)) == 3
    for port in ports:
        with socket.create_server(("127.0.0.1", port)):
            pass


# -- state files -------------------------------------------------------------------------------


def test_env_file_reads_back_and_sources_in_a_shell(tmp_path: Path) -> None:
    env = {
        "KUBECONFIG": str(tmp_path / "a dir" / "kubeconfig"),
        "AWS_SECRET_ACCESS_KEY": "it's $ecret",
        "EMPTY": "",
    }
    state_files.write_env(tmp_path, env)

    assert state_files.read_env(tmp_path / "env") == env
    shell = subprocess.run(
        ["sh", "-c", '. "$1"; printf "%s|%s|%s" "$KUBECONFIG" "$AWS_SECRET_ACCESS_KEY" "$EMPTY"',
         "sh", str(tmp_path / "env")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert shell.stdout == f"{env['KUBECONFIG']}|it's $ecret|"
    assert (tmp_path / "env").stat().st_mode & 0o077 == 0


def test_state_round_trips_through_state_json(tmp_path: Path) -> None:
    recorded = state_files.DevState(
        api_url="https://127.0.0.1:1234",
        admin_token="t",
        components=[state_files.Component("etcd", 42, 7, "http://127.0.0.1:1", "/x.log", ["e"])],
        emulator_env={"aws": {"AWS_ENDPOINT_URL": "http://127.0.0.1:2"}},
        started_at=1.5,
    )
    state_files.save(tmp_path, recorded)
    assert state_files.load(tmp_path) == recorded


def test_a_corrupt_state_file_is_reported_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    result = run_dev("status", "--state-dir", str(tmp_path))
    assert result.returncode == 2
    assert "not a polyccm-dev state file" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        (b'{"api_url": "\xff\xfe"}', "state file is not UTF-8 text (byte 0xff at offset 13)"),
        (b"\x8c\xa1\x07\xd2", "state file is not UTF-8 text (byte 0x8c at offset 0)"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 100 levels"),
        (b"[1]", "not a JSON object"),
        (b'{"components": 5}', "components: must be a JSON list"),
        (b'{"components": [{"pid": "abc"}]}', "components[0].pid: not a process id: 'abc'"),
    ],
    ids=["utf8-in-a-string", "random-bytes", "deep", "a-list", "components", "pid"],
)
def test_a_state_file_that_is_not_one_is_one_line_and_exit_2(
    content: bytes, cause: str, tmp_path: Path
) -> None:
    (tmp_path / "state.json").write_bytes(content)

    for command in ("status", "down"):
        result = run_dev(command, "--state-dir", str(tmp_path))

        assert (result.returncode, result.stdout) == (2, ""), result.stderr[-2000:]
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr[-2000:]
        assert lines[0].startswith("polyccm-dev: error: not a polyccm-dev state file: ")
        assert lines[0].endswith(cause)
    assert (tmp_path / "state.json").read_bytes() == content, "down removed nothing"


@pytest.mark.parametrize(
    ("recorded", "cause"),
    [
        (
            {"components": [{"name": "etcd", "pid": 0, "start_time": None, "url": "", "log": ""}]},
            "components[0].pid: not a process id: 0",
        ),
        ({"emulator_files": ["../victim"]}, "emulator_files: not a file name of the state dir"),
        ({"emulator_files": ["{victim}"]}, "emulator_files: not a file name of the state dir"),
    ],
    ids=["pid-0-is-our-own-group", "a-file-above", "an-absolute-path"],
)
def test_down_signals_and_removes_nothing_a_forged_state_file_names(
    recorded: dict[str, object], cause: str, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    victim = tmp_path / "victim"
    (state_dir / "state.json").write_text(json.dumps(recorded).replace("{victim}", str(victim)))
    victim.write_text("keep me")
    # Its own session: were pid 0 signalled, only this polyccm-dev would be hit, not pytest.
    result = subprocess.run(
        [str(POLYCCM_DEV), "down", "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        start_new_session=True,
    )

    assert result.returncode == 2, result.stderr[-2000:]
    assert cause in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert victim.read_text() == "keep me"


# -- failures while starting ---------------------------------------------------------------------


def test_a_failing_etcd_stops_the_start_and_reports_its_log(tmp_path: Path) -> None:
    fake_etcd = tmp_path / "etcd"
    fake_etcd.write_text("#!/bin/sh\necho 'etcd: cannot open the data dir: disk on fire'\nexit 1\n")
    fake_etcd.chmod(0o755)
    binaries = ControlPlaneBinaries(kube_apiserver=Path("/bin/false"), etcd=fake_etcd)
    state_dir = tmp_path / "state"

    with pytest.raises(controlplane.ControlPlaneError) as failure:
        controlplane.start(state_dir, binaries=binaries, timeout=20)

    message = str(failure.value)
    assert "etcd did not start" in message
    assert "disk on fire" in message
    assert not (state_dir / "state.json").exists()
    assert not (state_dir / "kubeconfig").exists()
    assert (state_dir / "logs" / "etcd.log").exists(), "the log stays for a post-mortem"


# -- the command line ----------------------------------------------------------------------------


def test_up_with_an_unknown_cloud_exits_2_naming_the_installed_emulators(tmp_path: Path) -> None:
    result = run_dev("up", "--state-dir", str(tmp_path / "s"), "--cloud", "no-such-cloud")

    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "no-such-cloud" in lines[0]
    assert "installed emulators:" in lines[0]
    assert not (tmp_path / "s" / "state.json").exists(), "nothing may start"


@pytest.mark.parametrize(
    "arguments",
    [["up", "--no-such-flag"], ["up", "--timeout", "soon"], ["sideways"], []],
    ids=["unknown-flag", "bad-timeout", "unknown-command", "no-command"],
)
def test_bad_command_lines_exit_2_without_a_traceback(arguments: list[str]) -> None:
    result = run_dev(*arguments)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "error:" in result.stderr


def test_status_of_a_state_dir_that_never_started_exits_1(tmp_path: Path) -> None:
    result = run_dev("status", "--state-dir", str(tmp_path))
    assert result.returncode == 1
    assert "not up" in result.stdout


def test_down_of_a_state_dir_that_never_started_exits_0(tmp_path: Path) -> None:
    result = run_dev("down", "--state-dir", str(tmp_path))
    assert result.returncode == 0
    assert "nothing was running" in result.stdout


def test_the_default_state_dir_is_dot_state_dev_under_the_current_directory(
    tmp_path: Path,
) -> None:
    result = run_dev("status", cwd=tmp_path)
    assert result.returncode == 1
    assert str(Path(".state") / "dev") in result.stdout
