"""A requested stop (SIGTERM, SIGINT) ends the manager in a bounded time even when its term does
not stop (issue 34): a provider whose ``initialize`` never returns holds neither the manager
without leader election nor the one that leads, and the leader still gives the Lease up.

Upstream's command ends at the first signal without waiting for anything (k8s.io/cloud-provider
v0.35.4 sample/basic_main.go:49 passes ``wait.NeverStop``, and no handler is installed); polyccm
waits for its controllers, but only :data:`polyccm.app.manager.STOP_DRAIN` seconds at most."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from polyccm import cloudcalls
from polyccm.app import manager as manager_module
from polyccm.app.manager import ControllerManager
from polyccm.app.options import LeaderElection
from polyccm.kube.api import KubeApi, load_configuration
from polyccm_testing.fake import FakeCloud
from polyccm_testing.kubeobjects import lease_holder, wait_for
from polyccm_testing.manager import manager_options

DRAIN = 0.5
"""STOP_DRAIN for these tests: short, so that they take seconds."""


@pytest.fixture
def hung_cloud() -> Iterator[FakeCloud]:
    """A cloud whose ``initialize`` does not return until the test ends."""
    cloud = FakeCloud()
    release = threading.Event()
    cloud.observe("initialize", lambda _subjects: release.wait())
    yield cloud
    release.set()
    cloudcalls.FENCE.open_always()  # the process's fence, closed by the lease given up


def run_until_stopped(manager: ControllerManager, cloud: FakeCloud) -> tuple[int | None, bool]:
    """Run ``manager`` on a thread, stop it once its term is inside ``initialize``; its exit
    status and whether it returned within a few seconds of the stop."""
    stop = threading.Event()
    status: list[int] = []
    runner = threading.Thread(target=lambda: status.append(manager.run(stop)), daemon=True)
    runner.start()
    wait_for(lambda: cloud.count("initialize"), 30, "the term to reach initialize")
    stop.set()
    runner.join(timeout=10)
    return (status[0] if status else None), not runner.is_alive()


def test_without_leader_election_a_term_stuck_in_initialize_does_not_hold_the_stop(
    control_plane: Any, hung_cloud: FakeCloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manager_module, "STOP_DRAIN", DRAIN)
    options = manager_options("fake", control_plane.kubeconfig, controllers=frozenset())
    api = KubeApi(load_configuration(options.kubeconfig), qps=0)
    try:
        # Before issue 34 the term ran on the caller's thread: run() never returned.
        status, returned = run_until_stopped(
            ControllerManager(options, hung_cloud, api), hung_cloud
        )
    finally:
        api.close()
    assert returned, "the manager returned although its term is stuck"
    assert status == 0, "a requested stop is an orderly exit"


def test_a_leader_stuck_in_initialize_stops_at_once_and_gives_the_lease_up(
    control_plane: Any,
    kube_api: KubeApi,
    namespace: str,
    hung_cloud: FakeCloud,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(manager_module, "STOP_DRAIN", DRAIN)
    options = manager_options(
        "fake",
        control_plane.kubeconfig,
        controllers=frozenset(),
        leader_election=LeaderElection(
            resource_namespace=namespace, lease_duration=4, renew_deadline=3, retry_period=1
        ),
    )
    api = KubeApi(load_configuration(options.kubeconfig), qps=0)
    manager = ControllerManager(options, hung_cloud, api)
    try:
        status, returned = run_until_stopped(manager, hung_cloud)
    finally:
        api.close()
    # Before issue 34, after the release the manager waited lease_duration + 15 s (19 s) for
    # the stuck term, then exited 1 as if leadership had been lost.
    assert returned, "the manager returned within seconds of the stop"
    assert status == 0, "a requested stop is an orderly exit"
    assert lease_holder(kube_api, namespace) == "", "the Lease is given up"
