"""Hook implementations that register the ``packet`` provider with polyccm.

Imported for every polyccm command, so it imports no cloud SDK.
"""

from __future__ import annotations

from polyccm.hookspecs import hookimpl
from polyccm.plugins import ProviderRegistry


@hookimpl
def polyccm_register_providers(registry: ProviderRegistry) -> None:
    """Register the provider name ``packet``."""
    registry.register("packet", "Equinix Metal, formerly Packet (devices, elastic IPs over BGP)")
