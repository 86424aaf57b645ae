"""Fixtures for controller tests: the manager running in-process against the real control plane
and :class:`polyccm_testing.fake.FakeCloud`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from polyccm_testing.fake import FakeCloud
from polyccm_testing.manager import RunningManager, manager_options
from polyccm_testing.manager import start_manager as start_manager_with

CLUSTER_CIDR = "10.244.0.0/16"


@pytest.fixture
def fake_cloud() -> FakeCloud:
    return FakeCloud()


@pytest.fixture
def start_manager(control_plane: Any, clean_nodes: None) -> Iterator[Callable[..., RunningManager]]:
    """Start a manager for a cloud; options default to fast periods and no leader election."""
    running: list[RunningManager] = []

    def start(cloud: FakeCloud, **overrides: Any) -> RunningManager:
        options = manager_options(
            "fake",
            control_plane.kubeconfig,
            cluster_cidrs=(CLUSTER_CIDR,),
            node_monitor_period=0.5,
            route_reconciliation_period=1.0,
            node_status_update_frequency=1.0,
        )
        handle = start_manager_with(dataclasses.replace(options, **overrides), cloud)
        running.append(handle)
        return handle

    yield start
    for handle in running:
        handle.stop()
