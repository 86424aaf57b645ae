"""The emulator's tunables: how long things take, the token, the rate-limit headers.

Given on the command line, changed at run time through ``PUT /_polyccm/settings``, and kept
across resets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class EmulatorSettings:
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

    def updated(self, changes: dict[str, Any]) -> EmulatorSettings:
        """A copy with ``changes`` applied; unknown names and wrong types are refused."""
        known = {item.name for item in fields(self)}
        for name, value in changes.items():
            if name not in known:
                raise ValueError(f"unknown setting {name!r}; known: {sorted(known)}")
            if name == "validate_responses":
                if not isinstance(value, bool):
                    raise ValueError(f"{name} must be true or false")
            elif name in ("token", "metadata_device"):
                if value is not None and not isinstance(value, str):
                    raise ValueError(f"{name} must be a string or null")
            elif name == "rate_limit":
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ValueError(f"{name} must be a positive integer")
            elif not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a number of seconds >= 0")
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
