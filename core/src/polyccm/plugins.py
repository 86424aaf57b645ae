"""Discovery of provider plugins through entry points, and the registries handed to their hooks.

Every distribution with an entry point in the group ``polyccm`` is loaded, except those named in
``POLYCCM_DISABLE_PLUGINS`` (comma-separated entry-point names). Loading imports only each
plugin's small hook module; a provider's cloud SDK is imported when that provider is built.
A provider's own controllers are asked for only from the plugin that registered the chosen
provider, so an installed plugin never adds controllers to another provider's process.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

from polyccm import hookspecs
from polyccm.app.options import CONTROLLER_ALIASES
from polyccm.rbac import PolicyRule

if TYPE_CHECKING:
    from polyccm.cloud import CloudProvider
    from polyccm.controllers.base import Controller, ControllerContext

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


ControllerConstructor = Callable[["ControllerContext"], "Controller | None"]
"""Makes a provider controller for one leadership term, or returns ``None`` when it has nothing
to do with this provider's configuration (it is then logged as not started)."""

_CONTROLLER_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


@dataclass(frozen=True)
class ControllerInfo:
    """A controller a provider registered, and who registered it."""

    name: str
    """Its name in ``--controllers`` (and the name of its thread and work-queue metrics)."""
    constructor: ControllerConstructor
    enabled_by_default: bool
    """Whether ``--controllers=*`` (the default) includes it."""
    rbac_rules: tuple[PolicyRule, ...]
    """API permissions it needs beyond the core's (``polyccm rbac`` prints them)."""
    plugin: str


class ControllerRegistry:
    """Collects the chosen provider's controllers from ``polyccm_register_controllers``."""

    def __init__(self, provider: str, *, reserved: Iterable[str] = ()) -> None:
        self.provider = provider
        self._reserved = frozenset(reserved)
        self._controllers: dict[str, ControllerInfo] = {}
        self.current_plugin = "?"

    def register(
        self,
        name: str,
        constructor: ControllerConstructor,
        *,
        enabled_by_default: bool,
        rbac_rules: Sequence[PolicyRule] = (),
    ) -> None:
        """Register controller ``name``, made by ``constructor(context)`` at the start of each
        leadership term. A name that is not a lowercase DNS label, that a built-in controller
        (or its upstream alias) already has, or that is registered twice is a
        :class:`PluginError`."""
        where = f"provider {self.provider!r} (plugin {self.current_plugin!r})"
        if not _CONTROLLER_NAME.fullmatch(name):
            raise PluginError(
                f"{where} registers controller {name!r}: a controller name is lowercase "
                "letters, digits and '-' (it is written in --controllers)"
            )
        if name in self._reserved:
            raise PluginError(
                f"{where} registers controller {name!r}, the name of a built-in controller; "
                "choose another name"
            )
        if name in self._controllers:
            raise PluginError(f"{where} registers controller {name!r} twice")
        if not callable(constructor):
            raise PluginError(f"{where}: the constructor of controller {name!r} is not callable")
        rules = tuple(rbac_rules)
        for rule in rules:
            if not isinstance(rule, PolicyRule):
                raise PluginError(
                    f"{where}: controller {name!r} gives {rule!r} as an RBAC rule; "
                    "use polyccm.rbac.PolicyRule"
                )
        self._controllers[name] = ControllerInfo(
            name, constructor, bool(enabled_by_default), rules, self.current_plugin
        )

    @property
    def controllers(self) -> Mapping[str, ControllerInfo]:
        return dict(self._controllers)


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


def provider_controllers(
    manager: pluggy.PluginManager, provider: ProviderInfo
) -> Mapping[str, ControllerInfo]:
    """The controllers of ``provider``, asked of the plugin that registered it and of no other.

    Raises :class:`PluginError` for a name clash (with a built-in controller or twice)."""
    owner = manager.get_plugin(provider.plugin)
    registry = ControllerRegistry(provider.name, reserved=_built_in_controller_names())
    if owner is None:
        return registry.controllers
    others = [plugin for plugin in manager.get_plugins() if plugin is not owner]
    registry.current_plugin = provider.plugin
    hook = manager.subset_hook_caller("polyccm_register_controllers", remove_plugins=others)
    hook(provider=provider.name, registry=registry)
    return registry.controllers


def _built_in_controller_names() -> set[str]:
    names = set(CONTROLLER_ALIASES)
    for aliases in CONTROLLER_ALIASES.values():
        names.update(aliases)
    return names
