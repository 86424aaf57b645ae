"""The whole ``polyccm`` process against the real API server: health and metrics endpoints,
leader election on a Lease, clean shutdown on SIGTERM, and start-up checks."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from polyccm.kube.api import KubeApi
from polyccm_testing.fake_main import COMMAND as FAKE_MAIN
from polyccm_testing.kubeobjects import lease_holder as holder
from polyccm_testing.kubeobjects import wait_for
from polyccm_testing.secureport import secure_get


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def launch(control_plane: Any, namespace: str) -> Iterator[Any]:
    processes: list[subprocess.Popen[str]] = []

    def start(*extra: str) -> tuple[subprocess.Popen[str], int]:
        port = free_port()
        args = [
            *FAKE_MAIN,
            f"--kubeconfig={control_plane.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--leader-elect-resource-namespace={namespace}",
            "--leader-elect-lease-duration=4s",
            "--leader-elect-renew-deadline=3s",
            "--leader-elect-retry-period=1s",
            "--cluster-cidr=10.244.0.0/16",
            *extra,
        ]
        process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        processes.append(process)
        return process, port

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def test_process_serves_health_metrics_and_releases_the_lease_on_sigterm(
    kube_api: KubeApi, namespace: str, launch: Any
) -> None:
    # /metrics opened as the probes are, so that a scrape needs no token (test_secure_port).
    process, port = launch("--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics")
    wait_for(lambda: secure_get(port, "/healthz").status == 200, 30, "/healthz")
    wait_for(lambda: holder(kube_api, namespace), 30, "the lease to be taken")
    wait_for(lambda: secure_get(port, "/readyz").status == 200, 30, "/readyz")
    scrape = secure_get(port, "/metrics")
    assert scrape.status == 200
    assert "service_controller_loadbalancer_sync_total" in scrape.body
    assert "leader_election_master_status" in scrape.body
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert holder(kube_api, namespace) == "", "the lease is released on shutdown"


def test_standby_takes_over_when_the_leader_stops(
    kube_api: KubeApi, namespace: str, launch: Any
) -> None:
    first, _ = launch()
    leader = wait_for(lambda: holder(kube_api, namespace), 30, "a leader")
    second, _ = launch()
    # The standby does not steal a lease that is being renewed.
    import time

    time.sleep(5)
    assert holder(kube_api, namespace) == leader
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0
    new = wait_for(lambda: (h := holder(kube_api, namespace)) and h != leader and h, 30)
    assert new and second.poll() is None


def test_route_controller_refuses_to_start_without_cluster_cidr(control_plane: Any) -> None:
    result = subprocess.run(
        [
            *FAKE_MAIN,
            f"--kubeconfig={control_plane.kubeconfig}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "the route controller needs --cluster-cidr" in result.stderr
    assert result.stderr.count("\n") == 1


def test_route_controller_can_be_disabled_instead(control_plane: Any) -> None:
    process = subprocess.Popen(
        [
            *FAKE_MAIN,
            f"--kubeconfig={control_plane.kubeconfig}",
            "--configure-cloud-routes=false",
            "--leader-elect=false",
            "--secure-port=0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=4)
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert (
        "controller route not started" in output
        or "route" not in output.split("started controllers:")[-1].splitlines()[0]
    )


def test_a_missing_tls_key_is_a_one_line_error(control_plane: Any, tmp_path: Any) -> None:
    result = subprocess.run(
        [
            *FAKE_MAIN,
            f"--kubeconfig={control_plane.kubeconfig}",
            "--configure-cloud-routes=false",
            f"--tls-cert-file={tmp_path}/nope.crt",
            f"--tls-private-key-file={tmp_path}/nope.key",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"cannot read --tls-cert-file {tmp_path}/nope.crt: No such file" in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize("leader_elect", ["true", "false"])
def test_an_unreachable_api_server_is_retried_and_sigterm_still_stops_at_once(
    tmp_path: Any, leader_elect: str
) -> None:
    import time

    dead = tmp_path / "kubeconfig"
    dead.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: do-not-log-me}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    process = subprocess.Popen(
        [
            *FAKE_MAIN,
            f"--kubeconfig={dead}",
            "--configure-cloud-routes=false",
            "--secure-port=0",
            f"--leader-elect={leader_elect}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # Signal only once the process reports the refused connection: by then its handlers are
    # installed, however long the start took on a loaded machine.
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any("Connection refused" in x for x in lines):
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
    assert any("Connection refused" in x for x in lines), "the failure is reported"
    time.sleep(1)
    assert process.poll() is None, "no crash while the API server is away"
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=10)
    output = "".join(lines) + rest
    assert process.returncode == 0
    assert "do-not-log-me" not in output, "the token never reaches the log"
    assert "Traceback" not in output
