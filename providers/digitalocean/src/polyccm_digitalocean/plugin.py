"""Hook implementations that register the ``digitalocean`` provider with polyccm (its emulator
registers itself from ``polyccm-digitalocean-emulator``).

Imported for every polyccm command, so it imports no cloud SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from polyccm.hookspecs import hookimpl
from polyccm.plugins import ControllerRegistry, ProviderRegistry, ProviderSettings

if TYPE_CHECKING:
    from polyccm.cloud import CloudProvider
    from polyccm.controllers import Controller, ControllerContext
    from polyccm.ops.contract import ServiceChecker

PROVIDER = "digitalocean"


@hookimpl
def polyccm_register_providers(registry: ProviderRegistry) -> None:
    """Register the provider name ``digitalocean``."""
    registry.register(PROVIDER, "DigitalOcean (droplets and load balancers)")


@hookimpl
def polyccm_register_controllers(provider: str, registry: ControllerRegistry) -> None:
    """Register upstream's two controllers of its own, on by default (cloud.go:184-213@v0.1.68):
    ``firewall``, the public-access firewall, started when ``PUBLIC_ACCESS_FIREWALL_NAME`` is
    set, and ``cluster-tags``, the tags syncer, started when ``DO_CLUSTER_ID`` is set."""
    if provider != PROVIDER:
        return

    def build(context: ControllerContext) -> Controller | None:
        from polyccm_digitalocean.firewall_controller import FirewallController

        return FirewallController.for_term(context)

    def build_tags(context: ControllerContext) -> Controller | None:
        from polyccm_digitalocean.cluster_tags import ClusterTagsController

        return ClusterTagsController.for_term(context)

    # Both read Services only (the core's rules already allow that) and write to DigitalOcean.
    registry.register("firewall", build, enabled_by_default=True)
    registry.register("cluster-tags", build_tags, enabled_by_default=True)


@hookimpl
def polyccm_build_provider(settings: ProviderSettings) -> CloudProvider | None:
    """Build the DigitalOcean provider from the environment (``None`` for other providers)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_digitalocean.provider import DigitalOceanProvider

    return DigitalOceanProvider.from_settings(settings)


@hookimpl
def polyccm_build_service_checker(settings: ProviderSettings) -> ServiceChecker | None:
    """The offline Service check of ``polyccm check-service`` (no token, no call)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_digitalocean.checker import DigitalOceanServiceChecker

    return DigitalOceanServiceChecker.from_settings(settings)
