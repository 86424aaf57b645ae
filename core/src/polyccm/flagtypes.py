"""Parsers for flag values in the forms the upstream Go components accept.

Durations follow Go's ``time.ParseDuration`` (``300ms``, ``30s``, ``5m``, ``1h30m``, ``1.5h``);
booleans follow ``strconv.ParseBool`` (``true``, ``false``, ``1``, ``0``, ``t``, ``F`` ...). Each
parser raises ``argparse.ArgumentTypeError`` with a message that names the bad value, which the
command line turns into one line and exit status 2.
"""

from __future__ import annotations

import argparse
import ipaddress
import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string; ``0`` alone is allowed without a unit."""
    value = text.strip()
    sign = 1.0
    if value[:1] in "+-" and value:
        sign = -1.0 if value[0] == "-" else 1.0
        value = value[1:]
    if value == "0":
        return 0.0
    position = 0
    total = 0.0
    for match in _DURATION_PART.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if not value or position != len(value):
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r} (use forms like 30s, 5m, 1h30m)"
        )
    return sign * total


def positive_duration(text: str) -> float:
    """A duration that must be greater than zero."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must be greater than zero")
    return seconds


def non_negative_duration(text: str) -> float:
    """A duration of zero or more (zero turns a cache off)."""
    seconds = parse_duration(text)
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must not be negative")
    return seconds


def parse_bool(text: str) -> bool:
    """A boolean as Go's ``strconv.ParseBool`` reads it."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r} (use true or false)")


def non_negative_int(text: str) -> int:
    """An integer of zero or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def positive_int(text: str) -> int:
    """An integer of one or more."""
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def non_negative_float(text: str) -> float:
    """A number of zero or more (``--kube-api-qps``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def cidr_list(text: str) -> tuple[str, ...]:
    """Comma-separated CIDRs (``--cluster-cidr=10.244.0.0/16,fd00::/48``), normalised."""
    networks: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            networks.append(str(ipaddress.ip_network(part, strict=False)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid CIDR {part!r}") from None
    if not networks:
        raise argparse.ArgumentTypeError("no CIDR given")
    return tuple(networks)


def ip_address(text: str) -> str:
    """An IP address (``--bind-address``)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid IP address {text!r}") from None


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0 disables serving, as upstream)."""
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"port {text!r} is out of range")
    return value
