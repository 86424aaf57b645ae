"""``python -m polyccm.testing.fake_main ARGS``: the real ``polyccm`` command with the fake cloud
registered as provider ``fake``. Tests use it to run the whole process (flags, signals, leader
election, health endpoints) without any cloud."""

from __future__ import annotations

import sys

from polyccm.cli import main
from polyccm.cloud import CloudProvider
from polyccm.hookspecs import hookimpl
from polyccm.plugins import ProviderRegistry, ProviderSettings, plugin_manager
from polyccm.testing.fake import FakeCloud

COMMAND: tuple[str, ...] = (sys.executable, "-m", "polyccm.testing.fake_main", "--provider=fake")
"""The command line that runs it, for tests that start the whole process."""


class FakeCloudPlugin:
    """Registers and builds the ``fake`` provider."""

    @hookimpl
    def polyccm_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register("fake", "in-memory test cloud")

    @hookimpl
    def polyccm_build_provider(self, settings: ProviderSettings) -> CloudProvider | None:
        return FakeCloud() if settings.provider == "fake" else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], plugin_manager([FakeCloudPlugin()])))
