"""The emulator's tunables: how long things take and how much a token may ask.

Given on the command line, changed at run time through ``PUT /_polyccm/settings`` (see
:class:`polyccm_digitalocean_emulator.control.EmulatorControl`), and kept across resets; what a
field may become follows from its type (:class:`polyccm_testing.emulation.settings.
EmulatorSettings`).
"""

from __future__ import annotations

from dataclasses import dataclass

from polyccm_testing.emulation import settings as emulation


@dataclass(frozen=True)
class EmulatorSettings(emulation.EmulatorSettings):
    lb_active_delay: float = 3.0
    """Seconds a load balancer stays ``new`` (without an ``ip``) before it turns ``active``."""
    droplet_active_delay: float = 0.0
    """Seconds a droplet stays ``new`` (and locked) after its create call."""
    action_delay: float = 0.0
    """Seconds a droplet action (power_off, power_on, ...) stays ``in-progress``; the droplet
    changes state when it completes."""
    certificate_delay: float = 0.0
    """Seconds a Let's Encrypt certificate stays ``pending``."""
    rate_limit_per_hour: int = 5000
    """Requests one token may make in any sliding hour (DigitalOcean's budget)."""
    rate_limit_per_minute: int = 250
    """Requests one token may make in any sliding minute (DigitalOcean's burst budget)."""
    throttled_until: float = 0.0
    """Epoch seconds until which every API request is answered 429 with
    ``ratelimit-remaining: 0`` and ``ratelimit-reset`` at that moment, as a spent budget is
    (the fault kit's throttling stretch); 0: never."""
    droplet_limit: int = 1000
    """Droplets the account may hold (``account.droplet_limit``)."""
    token: str | None = None
    """The only bearer token accepted; ``None`` accepts any non-empty token."""
    validate_responses: bool = False
    """Check every answer against the OpenAPI document; an answer that does not match becomes
    a 500 naming the mismatch (tests turn this on)."""
