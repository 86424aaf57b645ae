"""The emulator's tunables: how long things take and how much a token may ask.

Given on the command line, changed at run time through ``PUT /_polyccm/settings`` (see
:class:`polyccm_digitalocean_emulator.control.EmulatorControl`), and kept across resets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class EmulatorSettings:
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
    droplet_limit: int = 1000
    """Droplets the account may hold (``account.droplet_limit``)."""
    token: str | None = None
    """The only bearer token accepted; ``None`` accepts any non-empty token."""
    validate_responses: bool = False
    """Check every answer against the OpenAPI document; an answer that does not match becomes
    a 500 naming the mismatch (tests turn this on)."""

    def updated(self, changes: dict[str, Any]) -> EmulatorSettings:
        """A copy with ``changes`` applied; unknown names and wrong types are refused."""
        known = {item.name: item for item in fields(self)}
        for name, value in changes.items():
            if name not in known:
                raise ValueError(f"unknown setting {name!r}; known: {sorted(known)}")
            current = getattr(self, name)
            if isinstance(current, bool) or name == "validate_responses":
                if not isinstance(value, bool):
                    raise ValueError(f"{name} must be true or false")
            elif name == "token":
                if value is not None and not isinstance(value, str):
                    raise ValueError("token must be a string or null")
            elif isinstance(current, int) and not isinstance(current, bool):
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ValueError(f"{name} must be a positive integer")
            elif not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a number of seconds >= 0")
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
