"""``polyccm-dev up``, ``status`` and ``down`` as a user runs them: real etcd and kube-apiserver
processes, plus a small test emulator registered by an in-test plugin.

The environment is brought up once for the module; the last test takes it down. Each command
runs as a subprocess through a tiny script that calls ``polyccm_testing.devenv.cli.main`` with a
plugin manager that also holds the test plugin.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from polyccm.kube.api import NAMESPACES, KubeApi
from polyccm_testing.devenv import processes
from polyccm_testing.devenv import state as state_files

pytestmark = pytest.mark.controlplane

PLUGIN_SCRIPT = textwrap.dedent(
    """
    import sys
    from polyccm_testing.devenv.cli import main
    from polyccm.hookspecs import hookimpl
    from polyccm.plugins import EmulatorLaunch, plugin_manager


    def testcloud(port, state_dir):
        root = state_dir / "testcloud"
        root.mkdir(exist_ok=True)
        (root / "health").write_text("ok")
        argv = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                "--directory", str(root), str(port)]
        return EmulatorLaunch(
            argv,
            {"TESTCLOUD_ENDPOINT": f"http://127.0.0.1:{port}"},
            "/health",
            files={"testcloud.conf": f"endpoint = http://127.0.0.1:{port}"},
        )


    def broken(port, state_dir):
        argv = [sys.executable, "-c", "print('broken emulator: no cloud today'); exit(3)"]
        return EmulatorLaunch(argv, {"BROKEN_ENDPOINT": "nowhere"})


    class TestClouds:
        @hookimpl
        def polyccm_register_emulators(self, registry):
            registry.register("testcloud", testcloud)
            registry.register("broken", broken)


    raise SystemExit(main(sys.argv[1:], manager=plugin_manager(extra_plugins=[TestClouds()])))
    """
)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("cli") / "polyccm_dev_with_test_clouds.py"
    script.write_text(PLUGIN_SCRIPT)
    return script


def run(script: Path, *arguments: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def state_dir(dev: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("dev-state")
    began = time.monotonic()
    result = run(dev, "up", "--state-dir", str(directory), "--cloud", "testcloud")
    assert result.returncode == 0, f"up failed:\n{result.stdout}\n{result.stderr}"
    print(f"polyccm-dev up took {time.monotonic() - began:.1f} s")
    try:
        yield directory
    finally:
        run(dev, "down", "--state-dir", str(directory))


def recorded(state_dir: Path) -> state_files.DevState:
    loaded = state_files.load(state_dir)
    assert loaded is not None
    return loaded


def test_up_writes_a_kubeconfig_that_reaches_the_api_server_as_admin(state_dir: Path) -> None:
    api = KubeApi.from_kubeconfig(str(state_dir / "kubeconfig"))
    try:
        names = {item["metadata"]["name"] for item in api.list(NAMESPACES)["items"]}
    finally:
        api.close()
    assert {"default", "kube-system"} <= names
    assert api.configuration.verify_ssl, "TLS is verified against the generated CA"
    assert recorded(state_dir).api_url.startswith("https://127.0.0.1:")


def test_up_writes_an_env_file_with_kubeconfig_and_the_emulator_endpoint(state_dir: Path) -> None:
    env = state_files.read_env(state_dir / "env")

    assert env["KUBECONFIG"] == str(state_dir / "kubeconfig")
    with urllib.request.urlopen(env["TESTCLOUD_ENDPOINT"] + "/health", timeout=10) as answer:
        assert answer.read() == b"ok"


def test_up_writes_the_files_an_emulator_asks_for_readable_by_its_owner_only(
    state_dir: Path,
) -> None:
    config = state_dir / "testcloud.conf"
    endpoint = state_files.read_env(state_dir / "env")["TESTCLOUD_ENDPOINT"]
    assert config.read_text() == f"endpoint = {endpoint}"
    assert config.stat().st_mode & 0o777 == 0o600


def test_status_lists_every_component_alive_and_exits_0(dev: Path, state_dir: Path) -> None:
    result = run(dev, "status", "--state-dir", str(state_dir))

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for component in ("etcd", "kube-apiserver", "emulator/testcloud"):
        line = next(line for line in lines if line.startswith(component + " "))
        assert line.endswith("alive")
        assert "127.0.0.1:" in line


def test_every_process_listens_on_loopback_only(state_dir: Path) -> None:
    listening = []
    for component in recorded(state_dir).components:
        for pid in processes.group_members(component.pid):
            listening += [(component.name, address) for address in _listen_addresses(pid)]

    assert {name for name, _ in listening} == {"etcd", "kube-apiserver", "emulator/testcloud"}
    assert all(address == "127.0.0.1" for _, address in listening), listening


def test_up_again_says_already_up_and_keeps_the_same_processes(dev: Path, state_dir: Path) -> None:
    before = [(item.name, item.pid) for item in recorded(state_dir).components]

    result = run(dev, "up", "--state-dir", str(state_dir), "--cloud", "testcloud")

    assert result.returncode == 0, result.stderr
    assert "already up" in result.stdout
    assert [(item.name, item.pid) for item in recorded(state_dir).components] == before


def test_an_emulator_that_dies_at_start_fails_up_with_its_log_and_changes_nothing(
    dev: Path, state_dir: Path
) -> None:
    before = recorded(state_dir)

    result = run(dev, "up", "--state-dir", str(state_dir), "--cloud", "broken")

    assert result.returncode == 1
    assert "broken emulator: no cloud today" in result.stderr
    assert "Traceback" not in result.stderr
    assert recorded(state_dir) == before
    assert "BROKEN_ENDPOINT" not in state_files.read_env(state_dir / "env")
    assert run(dev, "status", "--state-dir", str(state_dir)).returncode == 0


SESSION_TEST = textwrap.dedent(
    """
    from polyccm.kube.api import NODES


    def test_uses_the_control_plane(control_plane, kube_api):
        assert control_plane.reused
        assert kube_api.list(NODES)["kind"] == "NodeList"
    """
)


def run_pytest(directory: Path, state_dir: Path) -> subprocess.CompletedProcess[str]:
    (directory / "test_session.py").write_text(SESSION_TEST)
    env = {**os.environ, "POLYCCM_TEST_STATE_DIR": str(state_dir)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_session.py"],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_pytest_plugin_reuses_an_environment_that_is_up_and_leaves_it_running(
    dev: Path, state_dir: Path, tmp_path: Path
) -> None:
    result = run_pytest(tmp_path, state_dir)

    assert result.returncode == 0, result.stdout + result.stderr
    assert run(dev, "status", "--state-dir", str(state_dir)).returncode == 0


def test_the_pytest_plugin_fails_loudly_when_the_environment_to_reuse_is_not_up(
    tmp_path: Path,
) -> None:
    result = run_pytest(tmp_path, tmp_path / "never-started")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "is not up" in result.stdout
    assert "1 error" in result.stdout
    assert "skipped" not in result.stdout


def test_status_reports_a_dead_component_and_down_stops_everything(
    dev: Path, state_dir: Path
) -> None:
    components = recorded(state_dir).components
    emulator = next(item for item in components if item.name == "emulator/testcloud")
    os.kill(emulator.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while processes.is_alive(emulator.pid, emulator.start_time) and time.monotonic() < deadline:
        time.sleep(0.05)

    status = run(dev, "status", "--state-dir", str(state_dir))
    assert status.returncode == 1
    assert any(
        line.startswith("emulator/testcloud") and line.endswith("dead")
        for line in status.stdout.splitlines()
    ), status.stdout

    down = run(dev, "down", "--state-dir", str(state_dir))

    assert down.returncode == 0, down.stderr
    for item in components:
        assert not processes.is_alive(item.pid, item.start_time), f"{item.name} still runs"
    for name in ("state.json", "env", "kubeconfig", "tokens.csv", "pki", "etcd", "testcloud.conf"):
        assert not (state_dir / name).exists(), f"{name} left behind"
    assert (state_dir / "logs" / "kube-apiserver.log").exists()
    assert run(dev, "status", "--state-dir", str(state_dir)).returncode == 1


def _listen_addresses(pid: int) -> list[str]:
    """IPv4/IPv6 addresses on which ``pid`` has listening TCP sockets (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addresses = []
    for table, decode in (("tcp", _ipv4), ("tcp6", _ipv6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, listen_state, inode = fields[1], fields[3], fields[9]
            if listen_state == "0A" and inode in inodes:
                addresses.append(decode(local.split(":")[0]))
    return addresses


def _ipv4(hex_address: str) -> str:
    return ".".join(str(int(hex_address[i : i + 2], 16)) for i in (6, 4, 2, 0))


def _ipv6(hex_address: str) -> str:
    mapped = "0000000000000000FFFF0000"  # ::ffff:a.b.c.d, an IPv4 address on an IPv6 socket
    if hex_address.upper().startswith(mapped):
        return _ipv4(hex_address[len(mapped) :])
    return "::" if set(hex_address) == {"0"} else hex_address


TIED_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from polyccm_testing.devenv import controlplane

    plane = controlplane.start(sys.argv[1], die_with_caller=True)
    print(json.dumps([[item.pid, item.start_time] for item in plane.components]), flush=True)
    time.sleep(600)
    """
)


def test_a_control_plane_tied_to_its_caller_dies_when_the_caller_is_killed(
    tmp_path: Path,
) -> None:
    script = tmp_path / "tied.py"
    script.write_text(TIED_SCRIPT)
    caller = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "state")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert caller.stdout is not None
        line = caller.stdout.readline()
        started = json.loads(line)
        assert len(started) == 2, line
        assert all(processes.is_alive(pid, start_time) for pid, start_time in started)
    finally:
        caller.kill()
        caller.wait()

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if not any(processes.is_alive(pid, start_time) for pid, start_time in started):
            break
        time.sleep(0.1)
    survivors = [pid for pid, start_time in started if processes.is_alive(pid, start_time)]
    for pid in survivors:
        processes.stop_group(pid)
    assert survivors == []
