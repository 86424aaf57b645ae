"""Fixtures for controller tests: the manager running in-process against the real control plane
and :class:`polyccm_testing.fake.FakeCloud`."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from polyccm.app.manager import ControllerManager
from polyccm.app.options import LeaderElection, ManagerOptions
from polyccm.kube.api import KubeApi, load_configuration
from polyccm_testing.fake import FakeCloud
from polyccm_testing.kubeobjects import wait_for

CLUSTER_CIDR = "10.244.0.0/16"


class RunningManager:
    """A controller manager running on a thread until :meth:`stop`."""

    def __init__(self, manager: ControllerManager) -> None:
        self.manager = manager
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=manager.run, args=(self.stop_event,), daemon=True)

    def start(self) -> RunningManager:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=90)
        assert not self.thread.is_alive(), "the manager did not stop"


@pytest.fixture
def fake_cloud() -> FakeCloud:
    return FakeCloud()


@pytest.fixture
def start_manager(control_plane: Any, clean_nodes: None) -> Iterator[Callable[..., RunningManager]]:
    """Start a manager for a cloud; options default to fast periods and no leader election."""
    running: list[RunningManager] = []

    def start(cloud: FakeCloud, **overrides: Any) -> RunningManager:
        options = ManagerOptions(
            provider="fake",
            kubeconfig=str(control_plane.kubeconfig),
            cluster_cidrs=(CLUSTER_CIDR,),
            node_monitor_period=0.5,
            route_reconciliation_period=1.0,
            node_status_update_frequency=1.0,
            secure_port=0,
            kube_api_qps=0,
            leader_election=LeaderElection(enabled=False),
        )
        options = dataclasses.replace(options, **overrides)
        api = KubeApi(load_configuration(options.kubeconfig), qps=options.kube_api_qps)
        manager = ControllerManager(options, cloud, api)
        handle = RunningManager(manager).start()
        running.append(handle)
        wait_for(manager.ready, 30, "the manager's caches to sync")
        return handle

    yield start
    for handle in running:
        handle.stop()
