"""How the emulated compute API behaves in time and in quota: one small dataclass.

The process takes these from its command line; tests and demos change them at run time through
``PUT /_polyccm/settings`` (:meth:`polyccm_gce_emulator.control.EmulatorControl.configure`), and
a reset restores what the process started with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

#: Resource quotas per project, by Google's quota metric name (the defaults of a new project,
#: raised where a 1,000-node cluster needs more).
DEFAULT_QUOTAS: dict[str, int] = {
    "ROUTES": 2000,
    "FIREWALLS": 500,
    "FORWARDING_RULES": 150,
    "TARGET_POOLS": 150,
    "STATIC_ADDRESSES": 100,
    "INSTANCES": 5000,
    "NETWORKS": 15,
    "SUBNETWORKS": 275,
    "HEALTH_CHECKS": 150,
}


@dataclass
class EmulatorSettings:
    """Timings, limits and the default project of one emulator."""

    project: str = "polyccm-dev"
    """The project the metadata server reports when no instance is labelled as the host."""
    network: str = "default"
    """The auto-mode network every project starts with (with one subnetwork per region)."""
    pending_seconds: float = 0.2
    """How long a new operation stays PENDING."""
    running_seconds: float = 0.5
    """How long it then stays RUNNING before it is DONE and its effect is visible."""
    route_running_seconds: float = 3.0
    """RUNNING time of a route insert or delete: route changes are GCE's slow ones."""
    route_inserts_per_second: float = 5.0
    """Per-project rate of ``routes.insert`` calls (token bucket); above it, 403
    ``rateLimitExceeded``. 0 disables the limit."""
    route_insert_burst: int = 20
    """How many route inserts may come at once before the rate applies."""
    wait_timeout_seconds: float = 120.0
    """The longest ``operations.wait`` blocks before answering a not yet DONE operation (GCE:
    about two minutes)."""
    require_auth: bool = True
    """Refuse API calls without ``Authorization: Bearer ...`` (401), as GCE does. Any bearer
    token passes: the metadata server's, or a fixed one for plain HTTP clients."""
    quotas: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_QUOTAS))
    """Resource quotas per project; exceeding one answers 403 ``quotaExceeded``."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def updated(self, changes: dict[str, Any]) -> EmulatorSettings:
        """A copy with ``changes`` applied; :class:`ValueError` names an unknown setting."""
        known = {item.name: item for item in fields(self)}
        values: dict[str, Any] = {}
        for name, value in changes.items():
            if name not in known:
                raise ValueError(f"unknown setting {name!r}; known: {sorted(known)}")
            if name == "quotas":
                values[name] = {**self.quotas, **{str(k): int(v) for k, v in value.items()}}
            elif name in ("project", "network"):
                values[name] = str(value)
            elif name == "route_insert_burst":
                values[name] = int(value)
            elif name == "require_auth":
                values[name] = bool(value)
            else:
                values[name] = float(value)
        return replace(self, **values)
