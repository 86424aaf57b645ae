"""The emulator's tunables: how long things take, the token, the rate-limit headers.

Given on the command line, changed at run time through ``PUT /_polyccm/settings``, and kept
across resets; what a field may become follows from its type
(:class:`polyccm_testing.emulation.settings.EmulatorSettings`).
"""

from __future__ import annotations

from dataclasses import dataclass

from polyccm_testing.emulation import settings as emulation


@dataclass(frozen=True)
class EmulatorSettings(emulation.EmulatorSettings):
    device_active_delay: float = 0.0
    """Seconds a new device stays ``queued`` then ``provisioning`` (half each) before it is
    ``active``; 0: the first read after the create sees it ``active``."""
    action_delay: float = 0.0
    """Seconds a power action leaves the device ``powering_off``/``powering_on``."""
    token: str | None = None
    """The only ``X-Auth-Token`` accepted; ``None`` accepts any non-empty token."""
    rate_limit: int = 1000
    """``X-RateLimit-Limit`` on every answer (the budget is only spent by injected 429s)."""
    metadata_device: str | None = None
    """The device (id or hostname) ``GET /metadata`` answers for: the machine the caller is
    on. ``None``: the oldest device of the project."""
    validate_responses: bool = False
    """Check every API answer against the OpenAPI document; a mismatch becomes a 500."""
