"""Hook implementations that register the ``digitalocean`` provider with polyccm.

Imported for every polyccm command, so it imports no cloud SDK.
"""

from __future__ import annotations

from polyccm.hookspecs import hookimpl
from polyccm.plugins import ProviderRegistry


@hookimpl
def polyccm_register_providers(registry: ProviderRegistry) -> None:
    """Register the provider name ``digitalocean``."""
    registry.register("digitalocean", "DigitalOcean (droplets and load balancers)")
