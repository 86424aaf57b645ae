"""The pluggy hook specifications through which provider packages extend polyccm.

A provider package exposes a module in the entry-point group ``polyccm`` (for example
``aws = "polyccm_aws.plugin"``) whose functions, decorated with :data:`hookimpl`, implement some
of these hooks. Installing the distribution is all it takes to register it. The plugin module is
imported for every command, so it must import nothing heavy: the cloud SDK is imported only
inside :func:`polyccm_build_provider` (and emulator start-up), for the provider that was chosen.
core/CONTRACT.md gives the order of these calls and of the contract's, and their threading rules.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from polyccm.cloud import CloudProvider
    from polyccm.controllers.registry import ControllerRegistry
    from polyccm.ops.contract import ServiceChecker
    from polyccm.registries import EmulatorRegistry, ProviderRegistry, ProviderSettings

PROJECT = "polyccm"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def polyccm_register_providers(registry: ProviderRegistry) -> None:
    """Register the provider names this package serves.

    Called once at start-up for every installed plugin, before the command line is parsed.
    Call ``registry.register(name, description)`` for each provider; two plugins registering
    the same name is an error that stops polyccm. Import nothing heavy here.
    """


@hookspec
def polyccm_register_controllers(provider: str, registry: ControllerRegistry) -> None:
    """Register the controllers of your own that ``provider`` runs beside the built-in ones.

    Called once at start-up (and by ``polyccm rbac``), after ``--provider`` is known and before
    the rest of the command line is parsed, and only on the plugin that registered ``provider``.
    Call ``registry.register(name, constructor, enabled_by_default=..., rbac_rules=[...])`` for
    each controller: ``--controllers`` then selects it like a built-in one (``*`` means every
    controller enabled by default, ``name`` enables, ``-name`` disables). ``constructor`` gets
    the term's :class:`polyccm.controllers.ControllerContext` at the start of every leadership
    term and returns a :class:`polyccm.controllers.Controller` (or ``None`` to stay off);
    ``rbac_rules`` are the :class:`polyccm.rbac.PolicyRule` values it needs beyond the core's.
    A name a built-in controller has is an error. Importing your controller module here is
    fine; keep the cloud SDK for :func:`polyccm_build_provider`.
    """


@hookspec
def polyccm_add_options(provider: str, group: argparse._ArgumentGroup) -> None:
    """Add command-line options for ``provider`` to ``group``.

    Called after ``--provider`` is known, once per plugin; a plugin adds options only when
    ``provider`` is one of its own names. Option names should start with the provider name
    (``--aws-...``) so they never collide with the upstream flags.
    """


@hookspec(firstresult=True)
def polyccm_build_provider(settings: ProviderSettings) -> CloudProvider | None:
    """Build the provider named ``settings.provider`` from the cloud config and options.

    Return ``None`` when the name is not yours. Read ``settings.cloud_config`` (path or
    ``None``) and raise :class:`polyccm.errors.ConfigError` with the file and line for a
    malformed config; the command then exits with status 2 and that one line. This is the place
    to import the cloud SDK.
    """


@hookspec(firstresult=True)
def polyccm_build_service_checker(settings: ProviderSettings) -> ServiceChecker | None:
    """Build the offline Service validator of ``settings.provider`` for ``polyccm
    check-service``; ``None`` when the name is not yours (or you offer none).

    No cloud call, no cluster, no credentials: read the cloud config if given (the validation
    may depend on it) and return an object whose ``check_service`` runs the validation your
    ``ensure_load_balancer`` runs. Raise :class:`polyccm.errors.ConfigError` for a malformed
    config.
    """


@hookspec
def polyccm_register_emulators(registry: EmulatorRegistry) -> None:
    """Register local cloud emulators for ``polyccm-dev up --cloud NAME``.

    Call ``registry.register(name, launcher)``; ``launcher(port, state_dir)`` returns a
    :class:`polyccm.plugins.EmulatorLaunch`: the command line that serves the emulator on
    ``127.0.0.1:port``, the environment variables a provider needs to reach it (endpoint, fake
    credentials), and a path to poll until it answers.
    """
