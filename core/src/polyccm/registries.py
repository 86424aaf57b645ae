"""What the provider-level plugin hooks receive: the registries of provider names and cloud
emulators, and the settings a provider is built from.

These sit below :mod:`polyccm.hookspecs` (which names them) and :mod:`polyccm.plugins` (which
hands them over), so that neither of the two imports the other's types back. The registry of a
provider's own controllers speaks in controllers and lives with them, in
:mod:`polyccm.controllers.registry`. Plugins import all of these from :mod:`polyccm.plugins`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DISABLE_VARIABLE = "POLYCCM_DISABLE_PLUGINS"


class PluginError(Exception):
    """Plugins disagree (two claim one provider name) or one is broken."""


@dataclass(frozen=True)
class ProviderInfo:
    """A registered provider name and who registered it."""

    name: str
    description: str
    plugin: str


class ProviderRegistry:
    """Collects provider names from ``polyccm_register_providers``."""

    def __init__(self) -> None:
        self._providers: dict[str, ProviderInfo] = {}
        self.current_plugin = "?"

    def register(self, name: str, description: str = "") -> None:
        """Register provider ``name``; a name claimed twice is a :class:`PluginError`."""
        existing = self._providers.get(name)
        if existing is not None:
            raise PluginError(
                f"provider {name!r} is registered by both {existing.plugin!r} and "
                f"{self.current_plugin!r}; uninstall one or block it with {DISABLE_VARIABLE}"
            )
        self._providers[name] = ProviderInfo(name, description, self.current_plugin)

    @property
    def providers(self) -> Mapping[str, ProviderInfo]:
        return dict(self._providers)


@dataclass(frozen=True)
class EmulatorLaunch:
    """How to run one cloud emulator as a background process on a loopback port."""

    argv: Sequence[str]
    """The command line; it must serve on the port it was given, on 127.0.0.1 only."""
    env: Mapping[str, str]
    """Variables written to the state dir's ``env`` file for the provider (endpoint, fake keys)."""
    health_path: str = "/"
    """Path polled over HTTP until the emulator answers (any status below 500)."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Files the provider needs beside the variables (for example ``gce.conf``), by name in the
    state directory: written (mode 0600) once the emulator answers, removed by ``down``."""


EmulatorLauncher = Callable[[int, Path], EmulatorLaunch]
"""Called with a free loopback port and the state directory; returns the launch description."""


class EmulatorRegistry:
    """Collects cloud emulators from ``polyccm_register_emulators``."""

    def __init__(self) -> None:
        self._emulators: dict[str, EmulatorLauncher] = {}

    def register(self, name: str, launcher: EmulatorLauncher) -> None:
        if name in self._emulators:
            raise PluginError(f"emulator {name!r} is registered twice")
        self._emulators[name] = launcher

    @property
    def emulators(self) -> Mapping[str, EmulatorLauncher]:
        return dict(self._emulators)


@dataclass(frozen=True)
class ProviderSettings:
    """What a plugin gets to build its provider."""

    provider: str
    """The provider name given with ``--provider``."""
    cloud_config: Path | None
    """The ``--cloud-config`` file, or ``None`` when not given."""
    cluster_name: str
    """``--cluster-name`` (default ``kubernetes``)."""
    options: argparse.Namespace = field(default_factory=argparse.Namespace)
    """All parsed command-line options, including the provider's own."""
