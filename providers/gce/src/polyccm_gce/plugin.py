"""Hook implementations that register the ``gce`` provider with polyccm (its emulator registers
itself from ``polyccm-gce-emulator``).

Imported for every polyccm command, so it imports no cloud SDK and no web framework:
google-auth is imported inside :func:`polyccm_build_provider`, and only for ``--provider gce``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from polyccm.hookspecs import hookimpl
from polyccm.plugins import ControllerRegistry, ProviderRegistry, ProviderSettings

if TYPE_CHECKING:
    from polyccm.cloud import CloudProvider
    from polyccm.controllers import Controller, ControllerContext
    from polyccm.ops.contract import ServiceChecker

PROVIDER = "gce"


@hookimpl
def polyccm_register_providers(registry: ProviderRegistry) -> None:
    """Register the provider name ``gce``."""
    registry.register(PROVIDER, "Google Compute Engine (instances, network load balancers, routes)")


@hookimpl
def polyccm_register_controllers(provider: str, registry: ControllerRegistry) -> None:
    """Register ``nodeipam``, on by default as upstream's (cmd/cloud-controller-manager/
    main.go:110-116,157-158@4e24531 registers it and is not among the disabled ones): pod CIDRs
    from the instances' alias IP ranges, run with ``--allocate-node-cidrs`` and
    ``--cidr-allocator-type=CloudAllocator`` (:mod:`polyccm_gce.nodeipam`). It patches nodes
    and their status, which the core's rules already allow."""
    if provider != PROVIDER:
        return

    def build(context: ControllerContext) -> Controller | None:
        from polyccm_gce.nodeipam import NodeIpamController

        return NodeIpamController.for_term(context)

    registry.register("nodeipam", build, enabled_by_default=True)


@hookimpl
def polyccm_add_options(provider: str, group: argparse._ArgumentGroup) -> None:
    """Upstream's deny-firewall and node IPAM flags, under upstream's names
    (:mod:`polyccm_gce.flags`)."""
    if provider == PROVIDER:
        from polyccm_gce.flags import add_flags

        add_flags(group)


@hookimpl
def polyccm_build_provider(settings: ProviderSettings) -> CloudProvider | None:
    """Build the GCE provider from gce.conf (``None`` for other providers)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_gce.provider import GceProvider

    return GceProvider.from_settings(settings)


@hookimpl
def polyccm_build_service_checker(settings: ProviderSettings) -> ServiceChecker | None:
    """The offline Service check of ``polyccm check-service`` (gce.conf read, no SDK, no call)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_gce.checker import GceServiceChecker

    return GceServiceChecker.from_settings(settings)
