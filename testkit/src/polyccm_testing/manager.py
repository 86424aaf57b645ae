"""The controller manager run in-process on a thread, against the real control plane, for tests
that drive a provider through the whole set of controllers without starting a process."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from polyccm import cloudcalls
from polyccm.app.manager import ControllerManager
from polyccm.app.options import LeaderElection, ManagerOptions
from polyccm.cloud import CloudProvider
from polyccm.kube.api import KubeApi, load_configuration

from polyccm_testing.kubeobjects import wait_for


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
        self.manager.api.close()
        assert not self.thread.is_alive(), "the manager did not stop"
        # The fence is this test process's: a real polyccm exits with its last term, a manager
        # run under leader election here leaves it closed for the tests that run after it.
        cloudcalls.FENCE.open_always()


def manager_options(provider: str, kubeconfig: str | Path, **fields: Any) -> ManagerOptions:
    """Options of a manager under test for ``provider`` on the API server of ``kubeconfig``: no
    leader election, no client-side rate limit, no serving port, unless ``fields`` (any other
    :class:`~polyccm.app.options.ManagerOptions` field too) say otherwise."""
    defaults: dict[str, Any] = {
        "secure_port": 0,
        "kube_api_qps": 0,
        "leader_election": LeaderElection(enabled=False),
    }
    return ManagerOptions(provider=provider, kubeconfig=str(kubeconfig), **{**defaults, **fields})


def start_manager(options: ManagerOptions, provider: CloudProvider) -> RunningManager:
    """Run ``provider``'s controllers as ``options`` say (its kubeconfig and client rate limit),
    and return once the caches have synced."""
    api = KubeApi(load_configuration(options.kubeconfig), qps=options.kube_api_qps)
    running = RunningManager(ControllerManager(options, provider, api)).start()
    wait_for(running.manager.ready, 30, "the manager's caches to sync")
    return running
