"""/healthz tells the truth about the controllers: it fails while this process should be running
them and is not, so the kubelet restarts it instead of keeping a leader that does nothing."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from polyccm.app import manager as manager_module
from polyccm.controllers.base import Controller, ControllerContext
from polyccm_testing.fake import FakeCloud
from polyccm_testing.kubeobjects import stays, wait_for


class _Crashing(Controller):
    """A controller whose thread dies: what a bug outside every per-item guard looks like."""

    name = "crashing"

    def run(self, stop: threading.Event) -> None:
        raise RuntimeError("a bug outside every guard")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_healthz_fails_when_a_controller_thread_has_died(
    fake_cloud: FakeCloud, start_manager: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crashing(_context: ControllerContext) -> Controller:
        return _Crashing()

    monkeypatch.setitem(manager_module.CONTROLLERS, "crashing", crashing)
    running = start_manager(fake_cloud, controllers=frozenset({"crashing", "cloud-node"}))
    wait_for(lambda: not running.manager.healthy(), 10, "/healthz to report the dead controller")
    assert not running.manager.controllers_healthy()


def test_healthz_passes_while_every_controller_runs(
    fake_cloud: FakeCloud, start_manager: Any
) -> None:
    running = start_manager(fake_cloud)
    assert stays(running.manager.healthy, 2.0)
