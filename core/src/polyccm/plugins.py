"""Discovery of provider plugins through entry points, and the registries handed to their hooks.

Every distribution with an entry point in the group ``polyccm`` is loaded, except those named in
``POLYCCM_DISABLE_PLUGINS`` (comma-separated entry-point names). Loading imports only each
plugin's small hook module; a provider's cloud SDK is imported when that provider is built.
A provider's own controllers are asked for only from the plugin that registered the chosen
provider, so an installed plugin never adds controllers to another provider's process.

The registries and settings are defined below this module (:mod:`polyccm.registries`,
:mod:`polyccm.controllers.registry`), where :mod:`polyccm.hookspecs` can name them without
importing this module back; plugins import them from here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pluggy

from polyccm import hookspecs
from polyccm.app.options import CONTROLLER_ALIASES
from polyccm.controllers.registry import ControllerConstructor, ControllerInfo, ControllerRegistry
from polyccm.registries import (
    DISABLE_VARIABLE,
    EmulatorLaunch,
    EmulatorLauncher,
    EmulatorRegistry,
    PluginError,
    ProviderInfo,
    ProviderRegistry,
    ProviderSettings,
)

if TYPE_CHECKING:
    from polyccm.cloud import CloudProvider

__all__ = [
    "DISABLE_VARIABLE",
    "ENTRY_POINT_GROUP",
    "ControllerConstructor",
    "ControllerInfo",
    "ControllerRegistry",
    "EmulatorLaunch",
    "EmulatorLauncher",
    "EmulatorRegistry",
    "PluginError",
    "ProviderInfo",
    "ProviderRegistry",
    "ProviderSettings",
    "build_provider",
    "installed_emulators",
    "installed_providers",
    "plugin_manager",
    "provider_controllers",
]

ENTRY_POINT_GROUP = "polyccm"


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
