"""The provider's ``initialize(ProviderContext)``: once per leadership term, with the term's
synced caches, before any controller starts, never on a standby; a provider that fails there
gets no controllers (upstream: ``Initialize`` inside the leader's run, UPSTREAM.md)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from polyccm import cloudcalls
from polyccm.app.manager import ControllerManager
from polyccm.app.options import LeaderElection
from polyccm.kube.api import NODES, KubeApi, load_configuration
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_testing.fake import FakeCloud
from polyccm_testing.fake_main import CALL_LOG_VARIABLE
from polyccm_testing.fake_main import COMMAND as FAKE_MAIN
from polyccm_testing.kubeobjects import lease_holder as holder
from polyccm_testing.kubeobjects import make_node, make_service, stays, wait_for
from polyccm_testing.manager import manager_options


def initialised(api: KubeApi, name: str) -> bool:
    return not Node(api.get(NODES, name)).has_taint(UNINITIALIZED_TAINT)


@pytest.fixture
def fence_reopened() -> Iterator[None]:
    """An in-process manager with leader election closes the process-wide fence when it stops;
    open it again for the tests that follow (as a manager without election does)."""
    yield
    cloudcalls.FENCE.open_always()


def test_initialize_gets_the_synced_caches_before_any_controller_starts(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.add_instance("waiting")
    make_node(kube_api, "waiting")  # tainted: the node controller asks the cloud at once
    make_service(kube_api, namespace, "web")
    seen: dict[str, object] = {}

    def at_initialize(_subjects: tuple[str, ...]) -> None:
        context = fake_cloud.contexts[-1]
        seen["synced"] = context.nodes.has_synced() and context.services.has_synced()
        seen["cached"] = (
            context.nodes.get("waiting") is not None
            and context.services.get(f"{namespace}/web") is not None
        )
        time.sleep(1.0)  # a controller running now would call the cloud meanwhile
        seen["cloud calls meanwhile"] = fake_cloud.counts() - Counter({"initialize": 1})

    fake_cloud.observe("initialize", at_initialize)
    running = start_manager(fake_cloud)
    wait_for(lambda: initialised(kube_api, "waiting"), what="the node initialised afterwards")

    assert seen == {"synced": True, "cached": True, "cloud calls meanwhile": Counter()}
    (context,) = fake_cloud.contexts
    assert not context.stop.is_set()
    running.stop()
    assert context.stop.is_set(), "the stop signal tells the provider the term is over"


def test_a_failing_initialize_ends_the_term_and_gives_the_lease_up(
    kube_api: KubeApi,
    namespace: str,
    fake_cloud: FakeCloud,
    start_manager: Any,
    fence_reopened: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    fake_cloud.fail("initialize", RuntimeError("credentials not there yet"))
    started: list[float] = []
    fake_cloud.observe("initialize", lambda _subjects: started.append(time.monotonic()))
    fake_cloud.add_instance("patient")
    make_node(kube_api, "patient")
    start_manager(
        fake_cloud,
        leader_election=LeaderElection(
            lease_duration=4.0, renew_deadline=3.0, retry_period=0.5, resource_namespace=namespace
        ),
    )

    wait_for(lambda: initialised(kube_api, "patient"), what="the node initialised in a new term")
    operations = [call.operation for call in fake_cloud.calls]
    assert operations[:2] == ["initialize", "initialize"], "no controller ran in the failed term"
    assert started[1] - started[0] >= 1.5, "a pause before the next campaign, not a spin"
    messages = [record.getMessage() for record in caplog.records]
    failed = next(i for i, m in enumerate(messages) if "failed to initialise" in m)
    assert "credentials not there yet" in (caplog.records[failed].exc_text or "")
    assert any("released" in m for m in messages[failed:]), "the lease was given up"


def test_without_leader_election_a_failing_initialize_ends_the_process_with_status_1(
    control_plane: Any, fake_cloud: FakeCloud
) -> None:
    fake_cloud.fail("initialize", RuntimeError("no credentials"))
    options = manager_options("fake", control_plane.kubeconfig, cluster_cidrs=("10.244.0.0/16",))
    api = KubeApi(load_configuration(options.kubeconfig), qps=0)
    try:
        assert ControllerManager(options, fake_cloud, api).run(threading.Event()) == 1
    finally:
        api.close()
    assert [call.operation for call in fake_cloud.calls] == ["initialize"]


def initializations(log: Path) -> Counter[int]:
    """``initialize`` calls per process, from the fake cloud's shared call log."""
    if not log.exists():
        return Counter()
    return Counter(
        int(pid)
        for _stamp, pid, operation, _identity in (
            line.split() for line in log.read_text().splitlines()
        )
        if operation == "initialize"
    )


def test_initialize_runs_once_per_term_and_never_on_a_standby(
    control_plane: Any, kube_api: KubeApi, namespace: str, tmp_path: Path
) -> None:
    call_log = tmp_path / "cloud-calls"
    processes: list[subprocess.Popen[str]] = []

    def launch() -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [
                *FAKE_MAIN,
                f"--kubeconfig={control_plane.kubeconfig}",
                "--secure-port=0",
                f"--leader-elect-resource-namespace={namespace}",
                "--leader-elect-lease-duration=4s",
                "--leader-elect-renew-deadline=3s",
                "--leader-elect-retry-period=500ms",
                "--cluster-cidr=10.244.0.0/16",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, CALL_LOG_VARIABLE: str(call_log)},
        )
        processes.append(process)
        return process

    try:
        first = launch()
        wait_for(lambda: initializations(call_log)[first.pid] == 1, 30, "the leader's initialize")
        second = launch()
        # The leader renews several times meanwhile; the standby campaigns all along.
        assert stays(lambda: initializations(call_log) == {first.pid: 1}, 4.0)

        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
        wait_for(lambda: initializations(call_log)[second.pid] == 1, 30, "the new leader's")
        assert holder(kube_api, namespace)
        assert stays(lambda: initializations(call_log) == {first.pid: 1, second.pid: 1}, 2.0)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)
