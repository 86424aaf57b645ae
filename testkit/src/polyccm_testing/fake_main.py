"""``python -m polyccm_testing.fake_main ARGS``: the real ``polyccm`` command with the fake cloud
registered as provider ``fake``. Tests use it to run the whole process (flags, signals, leader
election, health endpoints) without any cloud."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from polyccm.cli import main
from polyccm.cloud import CloudProvider
from polyccm.hookspecs import hookimpl
from polyccm.ops.contract import ServiceChecker
from polyccm.plugins import ProviderRegistry, ProviderSettings, plugin_manager

from polyccm_testing.fake import FakeCloud, FakeServiceChecker

COMMAND: tuple[str, ...] = (sys.executable, "-m", "polyccm_testing.fake_main", "--provider=fake")
"""The command line that runs it, for tests that start the whole process."""
CALL_LOG_VARIABLE = "POLYCCM_FAKE_CALL_LOG"
"""When set, the fake cloud appends every call it serves to this file (see FakeCloud.call_log)."""


class FakeCloudPlugin:
    """Registers and builds the ``fake`` provider (``cloud``, when given: a test arranges it
    and runs the command in-process)."""

    def __init__(self, cloud: FakeCloud | None = None) -> None:
        self.cloud = cloud

    @hookimpl
    def polyccm_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register("fake", "in-memory test cloud")

    @hookimpl
    def polyccm_build_provider(self, settings: ProviderSettings) -> CloudProvider | None:
        if settings.provider != "fake":
            return None
        if self.cloud is not None:
            return self.cloud
        call_log = os.environ.get(CALL_LOG_VARIABLE)
        return FakeCloud(call_log=Path(call_log) if call_log else None)

    @hookimpl
    def polyccm_build_service_checker(self, settings: ProviderSettings) -> ServiceChecker | None:
        return FakeServiceChecker() if settings.provider == "fake" else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], plugin_manager([FakeCloudPlugin()])))
