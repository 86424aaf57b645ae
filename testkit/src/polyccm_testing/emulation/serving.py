"""Serving an emulator: loopback addresses only."""

from __future__ import annotations

import ipaddress


def require_loopback(host: str) -> None:
    """Exit unless ``host`` is ``localhost`` or a loopback address."""
    if host == "localhost":
        return
    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"refusing to serve on {host}: the emulator only serves loopback")
