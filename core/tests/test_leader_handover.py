"""Two polyccm processes, one Lease: when the leader's connection to the API server hangs, its
cloud calls stop before the standby's begin, and the standby takes over in time.

The leader reaches the real kube-apiserver through a loopback TCP proxy that the test freezes
(connections stay open, nothing is answered: the failure that makes Lease calls hang). Both
processes run the fake cloud, which appends every call it serves, with the calling process and
the time, to one shared file: the cloud's own view of who acted when.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm.kube.api import KubeApi
from polyccm_testing.conformance.faults import CAMPAIGNING
from polyccm_testing.fake_main import CALL_LOG_VARIABLE
from polyccm_testing.fake_main import COMMAND as FAKE_MAIN
from polyccm_testing.kubeobjects import lease_holder as holder
from polyccm_testing.kubeobjects import wait_for

LEASE_DURATION = 6.0
RENEW_DEADLINE = 4.0
RETRY_PERIOD = 0.5


class FreezableProxy:
    """Forwards TCP connections to ``upstream`` until :meth:`freeze`; then it keeps every
    connection open, accepts new ones, and passes nothing on in either direction."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.frozen = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = [self._listener]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            if self.frozen.is_set():
                continue  # accepted, never answered
            server = socket.create_connection(self.upstream)
            self._sockets.append(server)
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            while self.frozen.is_set() and not self._closed:
                time.sleep(0.05)  # hold the bytes: the peer waits for an answer forever
            try:
                target.sendall(data)
            except OSError:
                return

    def freeze(self) -> None:
        self.frozen.set()

    def close(self) -> None:
        self._closed = True
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


def calls_by_process(log: Path) -> dict[int, list[float]]:
    """When each process's cloud calls were served, from the fake cloud's shared log."""
    calls: dict[int, list[float]] = {}
    if not log.exists():
        return calls
    for line in log.read_text().splitlines():
        stamp, pid, _operation, _identity = line.split()
        calls.setdefault(int(pid), []).append(float(stamp))
    return calls


@pytest.fixture
def proxied_kubeconfig(control_plane: Any, tmp_path: Path) -> Iterator[tuple[Path, FreezableProxy]]:
    config = yaml.safe_load(Path(control_plane.kubeconfig).read_text())
    server = config["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    proxy = FreezableProxy((host, int(port)))
    config["clusters"][0]["cluster"]["server"] = f"https://{host}:{proxy.port}"
    path = tmp_path / "proxied-kubeconfig"
    path.write_text(yaml.safe_dump(config))
    try:
        yield path, proxy
    finally:
        proxy.close()


def test_a_leader_cut_off_from_the_api_server_stops_its_cloud_calls_before_the_standby_starts(
    control_plane: Any,
    kube_api: KubeApi,
    namespace: str,
    proxied_kubeconfig: tuple[Path, FreezableProxy],
    tmp_path: Path,
) -> None:
    kubeconfig, proxy = proxied_kubeconfig
    call_log = tmp_path / "cloud-calls"
    environment = {**os.environ, CALL_LOG_VARIABLE: str(call_log)}
    processes: list[subprocess.Popen[str]] = []

    def launch(config: Path, log: Path) -> subprocess.Popen[str]:
        with log.open("w") as stderr:
            process = subprocess.Popen(
                [
                    *FAKE_MAIN,
                    f"--kubeconfig={config}",
                    "--secure-port=0",
                    f"--leader-elect-resource-namespace={namespace}",
                    f"--leader-elect-lease-duration={LEASE_DURATION:.0f}s",
                    f"--leader-elect-renew-deadline={RENEW_DEADLINE:.0f}s",
                    f"--leader-elect-retry-period={RETRY_PERIOD * 1000:.0f}ms",
                    "--cluster-cidr=10.244.0.0/16",
                    "--route-reconciliation-period=200ms",  # a steady stream of cloud calls
                ],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                text=True,
                env=environment,
            )
        processes.append(process)
        return process

    try:
        old = launch(kubeconfig, tmp_path / "old.log")
        wait_for(lambda: holder(kube_api, namespace), 30, "the first process to lead")
        wait_for(lambda: old.pid in calls_by_process(call_log), 30, "the leader's cloud calls")
        new_log = tmp_path / "new.log"
        new = launch(Path(control_plane.kubeconfig), new_log)
        # Cut the leader off once the standby campaigns, not after a fixed pause: on a loaded
        # machine its start-up alone can outlast a lease and would be counted as hand-over.
        wait_for(lambda: CAMPAIGNING in new_log.read_bytes(), 60, "the standby to campaign")
        time.sleep(2 * RETRY_PERIOD)
        assert new.pid not in calls_by_process(call_log), "a standby makes no cloud call"

        frozen_at = time.time()
        proxy.freeze()
        wait_for(
            lambda: new.pid in calls_by_process(call_log),
            3 * LEASE_DURATION + 10,
            "the standby to take over and act",
        )
        time.sleep(RENEW_DEADLINE)  # room for any late call of the old leader to show up
        calls = calls_by_process(call_log)
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)

    old_calls = calls[old.pid]
    new_first = min(calls[new.pid])
    old_last = max(old_calls)
    assert old_last < new_first, (
        f"the old leader called the cloud {old_last - new_first:.2f}s after the new one began"
    )
    assert [t for t in old_calls if t > frozen_at + RENEW_DEADLINE + 0.5] == [], (
        "the old leader's calls stop within the renew deadline of being cut off"
    )
    assert new_first - old_last < LEASE_DURATION, (
        f"the hand-over took {new_first - old_last:.1f}s, more than the lease duration"
    )
