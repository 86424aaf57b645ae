"""``python -m polyccm_testing.fake_main ARGS``: the real ``polyccm`` command with the fake cloud
registered as provider ``fake``. Tests use it to run the whole process (flags, signals, leader
election, health endpoints) without any cloud.

:data:`HANG_VARIABLE` makes the process hang at chosen places, as a cloud that never answers
does: while the provider adds its flags (``add_options``), while it is built
(``build_provider``), or in any call of the fake cloud (``initialize``, ``list_routes``, ...).
Each place prints :data:`HANG_MARKER` and its name to stderr when reached, so a test knows the
process is there.

With ``POLYCCM_FAKE_STATE`` set the cloud is a
:class:`~polyccm_testing.durable_fake.DurableFakeCloud` on that file (it survives a SIGKILL),
or one of :mod:`polyccm_testing.broken_fakes` named by ``POLYCCM_FAKE_VARIANT``."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

from polyccm.cli import main
from polyccm.cloud import CloudProvider
from polyccm.hookspecs import hookimpl
from polyccm.ops.contract import ServiceChecker
from polyccm.plugins import ProviderRegistry, ProviderSettings, plugin_manager

from polyccm_testing.broken_fakes import VARIANT_VARIABLE, VARIANTS
from polyccm_testing.durable_fake import STATE_VARIABLE
from polyccm_testing.fake import FakeCloud, FakeServiceChecker

COMMAND: tuple[str, ...] = (sys.executable, "-m", "polyccm_testing.fake_main", "--provider=fake")
"""The command line that runs it, for tests that start the whole process."""
CALL_LOG_VARIABLE = "POLYCCM_FAKE_CALL_LOG"
"""When set, the fake cloud appends every call it serves to this file (see FakeCloud.call_log)."""
HANG_VARIABLE = "POLYCCM_FAKE_HANG"
"""Comma-separated places where the process hangs (see the module's docstring)."""
HANG_MARKER = "fake: hanging in"
HANG_SECONDS = 3600.0


def _hangs() -> set[str]:
    return {place for place in os.environ.get(HANG_VARIABLE, "").split(",") if place}


def _hang_here(place: str) -> None:
    print(f"{HANG_MARKER} {place}", file=sys.stderr, flush=True)
    time.sleep(HANG_SECONDS)


def _hang_in_call(operation: str, _subjects: tuple[str, ...]) -> None:
    _hang_here(operation)


class FakeCloudPlugin:
    """Registers and builds the ``fake`` provider (``cloud``, when given: a test arranges it
    and runs the command in-process)."""

    def __init__(self, cloud: FakeCloud | None = None) -> None:
        self.cloud = cloud

    @hookimpl
    def polyccm_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register("fake", "in-memory test cloud")

    @hookimpl
    def polyccm_add_options(self, provider: str, group: argparse._ArgumentGroup) -> None:
        if provider == "fake" and "add_options" in _hangs():
            _hang_here("add_options")

    @hookimpl
    def polyccm_build_provider(self, settings: ProviderSettings) -> CloudProvider | None:
        if settings.provider != "fake":
            return None
        if self.cloud is not None:
            return self.cloud
        hangs = _hangs()
        if "build_provider" in hangs:
            _hang_here("build_provider")
        call_log = os.environ.get(CALL_LOG_VARIABLE)
        log_path = Path(call_log) if call_log else None
        state = os.environ.get(STATE_VARIABLE)
        cloud: FakeCloud
        if state:
            variant = VARIANTS[os.environ.get(VARIANT_VARIABLE, "")]
            cloud = variant(Path(state), call_log=log_path)
        else:
            cloud = FakeCloud(call_log=log_path)
        for operation in hangs - {"add_options", "build_provider"}:
            cloud.observe(operation, functools.partial(_hang_in_call, operation))
        return cloud

    @hookimpl
    def polyccm_build_service_checker(self, settings: ProviderSettings) -> ServiceChecker | None:
        return FakeServiceChecker() if settings.provider == "fake" else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], plugin_manager([FakeCloudPlugin()])))
