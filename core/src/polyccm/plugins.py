"""Discovery of provider plugins through entry points, and the registries handed to their hooks.

Every distribution with an entry point in the group ``polyccm`` is loaded, except those named in
``POLYCCM_DISABLE_PLUGINS`` (comma-separated entry-point names). Loading imports only each
plugin's small hook module; a provider's cloud SDK is imported when that provider is built.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

from polyccm import hookspecs

if TYPE_CHECKING:
    from polyccm.cloud import CloudProvider

ENTRY_POINT_GROUP = "polyccm"
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


def _blocked() -> set[str]:
    return {
        name.strip() for name in os.environ.get(DISABLE_VARIABLE, "").split(",") if name.strip()
    }


def plugin_manager(extra_plugins: Sequence[object] = ()) -> pluggy.PluginManager:
    """A plugin manager with every installed plugin loaded (minus blocked ones) and
    ``extra_plugins`` registered too (tests register in-process plugins this way)."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    for name in _blocked():
        manager.set_blocked(name)
    manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for plugin in extra_plugins:
        manager.register(plugin)
    return manager


def installed_providers(manager: pluggy.PluginManager) -> Mapping[str, ProviderInfo]:
    """Every provider name registered by the loaded plugins."""
    registry = ProviderRegistry()
    for plugin in manager.get_plugins():
        implementation = getattr(plugin, "polyccm_register_providers", None)
        if implementation is None:
            continue
        registry.current_plugin = manager.get_name(plugin) or repr(plugin)
        implementation(registry=registry)
    return registry.providers


def installed_emulators(manager: pluggy.PluginManager) -> Mapping[str, EmulatorLauncher]:
    """Every cloud emulator registered by the loaded plugins."""
    registry = EmulatorRegistry()
    manager.hook.polyccm_register_emulators(registry=registry)
    return registry.emulators


def build_provider(manager: pluggy.PluginManager, settings: ProviderSettings) -> CloudProvider:
    """Ask the plugins to build ``settings.provider``."""
    provider: CloudProvider | None = manager.hook.polyccm_build_provider(settings=settings)
    if provider is None:
        raise PluginError(f"no installed plugin builds provider {settings.provider!r}")
    return provider
