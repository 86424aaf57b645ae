"""Parsers for flag values in the forms the upstream Go components accept.

Durations follow Go's ``time.ParseDuration`` (``300ms``, ``30s``, ``5m``, ``1h30m``, ``1.5h``);
booleans follow ``strconv.ParseBool`` (``true``, ``false``, ``1``, ``0``, ``t``, ``F`` ...). Each
parser raises ``argparse.ArgumentTypeError`` with a message that names the bad value, which the
command line turns into one line and exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import ipaddress
import math
import re
import threading
import urllib.parse

_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|µs|μs|ms|s|m|h)")
_UNIT_NANOSECONDS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
#: Go's ``time.Duration`` is an int64 of nanoseconds: at most 2562047h47m16.854775807s, about
#: 292 years; ``time.ParseDuration`` calls anything longer an invalid duration.
MAX_DURATION_NANOSECONDS = 2**63 - 1
_LONGEST = "2562047h47m16.854775807s"
#: Go reads at most this many digits of a fraction (the rest change nothing: it stops
#: accumulating precision once the digits overflow an int64).
_FRACTION_DIGITS = 18
#: The largest finite float32.
FLOAT32_MAX = 3.4028234663852886e38
_INFINITY = re.compile(r"[+-]?(inf|infinity)", re.IGNORECASE)
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string; ``0`` alone is allowed without a unit.

    Read as Go's ``time.ParseDuration`` reads it, in whole nanoseconds: a duration longer than
    Go's longest (an int64 of nanoseconds, about 292 years) is invalid, as there. The seconds
    returned are capped at :data:`threading.TIMEOUT_MAX` (9223372036 s on Linux, 0.85 s short
    of Go's longest), the most a Python wait accepts: a period that long never elapses either
    way, and a wait given more raises instead of waiting."""
    value = text.strip()
    negative = value.startswith("-")
    if value.startswith(("-", "+")):
        value = value[1:]
    if value == "0":
        return 0.0
    position = 0
    total = 0
    for match in _DURATION_PART.finditer(value):
        whole, fraction, unit_name = match.groups()
        if match.start() != position or not (whole or fraction):
            break
        position = match.end()
        unit = _UNIT_NANOSECONDS[unit_name]
        # Leading zeros aside, more than 19 digits overflow an int64 whatever the unit; checked
        # before int() so that a 5,000-digit value is refused at once, not converted.
        digits = whole.lstrip("0")
        total += int(digits or "0") * unit if len(digits) <= 19 else 2**64
        if fraction:
            kept = fraction[:_FRACTION_DIGITS]
            total += int(kept) * unit // 10 ** len(kept)
        if total > 2**63:
            break  # Go stops at the first part that overflows
    # A negative duration may reach -2**63 nanoseconds, a positive one 2**63 - 1 (int64).
    if total > 2**63 or (not negative and total > MAX_DURATION_NANOSECONDS):
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: longer than Go's longest duration, {_LONGEST} "
            "(about 292 years)"
        )
    if not value or position != len(value):
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r} (use forms like 30s, 5m, 1h30m)"
        )
    seconds = min(total / 1e9, threading.TIMEOUT_MAX)
    return -seconds if negative else seconds


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


_GO_OCTAL = re.compile(r"[+-]?0[0-7_]+")


def go_int(text: str, bits: int = 64) -> int:
    """An integer as Go's ``strconv.ParseInt(text, 0, bits)`` reads pflag's int flags: decimal,
    or ``0x``/``0o``/``0b``/leading-``0`` prefixed, in range for ``bits``."""
    try:
        if text != text.strip():
            raise ValueError(text)
        value = int(text, 8) if _GO_OCTAL.fullmatch(text) else int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise argparse.ArgumentTypeError(f"integer {text!r} is out of range")
    return value


def int32(text: str) -> int:
    """A Go ``int32`` flag."""
    return go_int(text, 32)


def non_negative_int(text: str) -> int:
    """An integer of zero or more."""
    value = go_int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def non_negative_int32(text: str) -> int:
    """An ``int32`` of zero or more."""
    value = int32(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def positive_int(text: str) -> int:
    """An integer of one or more."""
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def positive_int32(text: str) -> int:
    """An ``int32`` of one or more."""
    value = non_negative_int32(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def log_level(text: str) -> int:
    """A klog verbosity (``-v``): an unsigned decimal that fits 31 bits, as component-base's
    ``VerbosityLevel`` flag parses it."""
    if not text.isascii() or not text.isdigit() or int(text) >= 2**31:
        raise argparse.ArgumentTypeError(f"invalid log level {text!r} (use 0 to 2147483647)")
    return int(text)


def float32(text: str) -> float:
    """A Go ``float32`` flag (``--kube-api-qps``), as ``strconv.ParseFloat(text, 32)`` reads it:
    a finite number beyond float32's range is refused (Go's ``ErrRange``, which pflag reports),
    while ``inf`` and ``nan`` are numbers there and come back as such: the flag decides what
    they mean."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if math.isfinite(value) and abs(value) > FLOAT32_MAX:
        raise argparse.ArgumentTypeError(f"number {text!r} is out of range")
    if math.isinf(value) and not _INFINITY.fullmatch(text.strip()):
        # Python reads 1e309 as infinity; Go reads it as out of float32's range (ErrRange).
        raise argparse.ArgumentTypeError(f"number {text!r} is out of range")
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
    """Comma-separated CIDRs (``--cluster-cidr=10.244.0.0/16,fd00::/48``), normalised; empty
    gives none."""
    networks: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            networks.append(str(ipaddress.ip_network(part, strict=False)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid CIDR {part!r}") from None
    # Empty is upstream's default (a string flag): only the route controller needs CIDRs.
    return tuple(networks)


def ip_address(text: str) -> str:
    """An IP address (``--bind-address``)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid IP address {text!r}") from None


#: The characters Go's ``net/url`` accepts in a host name (unreserved and sub-delims, and
#: percent escapes); anything else, a space first, is "invalid character in host name" there.
_HOST = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=%]+")


def server_url(text: str) -> str:
    """``--master``: the API server as client-go's ``rest.DefaultServerURL`` reads it: an
    http(s) URL with a host, or a bare ``host[:port]`` (which client-go makes a URL by adding a
    scheme, and then allows no path). Empty means "the kubeconfig's server". Returned as given.

    Refused here what client-go refuses when the controller manager builds its clients (it then
    exits), and the schemes no API server speaks: polyccm would otherwise start and fail every
    request forever."""
    if text == "":
        return text
    bare = "://" not in text
    candidate = f"https://{text}" if bare else text
    problem = ""
    try:
        parts = urllib.parse.urlsplit(candidate)
        port = parts.port  # a port that is not a number in range raises here
        del port
    except ValueError as error:
        problem = str(error)
    else:
        host = parts.hostname or ""
        if parts.scheme.lower() not in ("http", "https"):
            problem = f"scheme {parts.scheme!r} is not http or https"
        elif not host:
            problem = "no host"
        elif not (parts.netloc.rpartition("@")[2].startswith("[") or _HOST.fullmatch(host)):
            problem = "invalid character in host name"
        elif bare and parts.path not in ("", "/"):
            problem = "a host:port pair has no path"
        elif any(character.isspace() or not character.isprintable() for character in text):
            problem = "it holds white space or control characters"
    if problem:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an API server URL (a URL or a host:port pair): {problem}"
        )
    return text


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0 disables serving, as upstream)."""
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"port {text!r} is out of range")
    return value


def string_slice(text: str) -> tuple[str, ...]:
    """A pflag ``stringSlice`` value: comma-separated, read as one CSV record (so a quoted item
    may hold a comma); empty means no item."""
    if text == "":
        return ()
    try:
        (record,) = list(csv.reader([text], strict=True))
    except (csv.Error, ValueError):
        raise argparse.ArgumentTypeError(f"invalid comma-separated list {text!r}") from None
    return tuple(record)


_QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?")


def quantity(text: str) -> str:
    """A Kubernetes resource quantity (``512``, ``1K``, ``2Ki``, ``5Mi``), checked and kept as
    written."""
    if not _QUANTITY.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"invalid quantity {text!r} (use forms like 512, 2Ki, 1M)")
    return text.strip()


def quantity_is_zero(text: str) -> bool:
    """Whether a checked :func:`quantity` is zero."""
    digits = re.match(r"[+-]?([\d.]*)", text)
    return digits is not None and not digits.group(1).strip("0.")


def vmodule(text: str) -> tuple[tuple[str, int], ...]:
    """``--vmodule``: ``pattern=N`` items separated by commas, as component-base parses it."""
    items = []
    for item in text.split(","):
        if not item:
            continue
        parts = item.split("=")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise argparse.ArgumentTypeError(f"{item!r} does not have the pattern=N format")
        try:
            level = log_level(parts[1])
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"invalid verbosity in {item!r}") from None
        items.append((parts[0], level))
    return tuple(items)


def named_cert_key(text: str) -> tuple[str, str, tuple[str, ...]]:
    """``--tls-sni-cert-key``: ``certfile,keyfile`` or ``certfile,keyfile:name,name``, as
    component-base's ``NamedCertKey`` reads it."""
    pair, colon, names_text = text.partition(":")
    names: tuple[str, ...] = ()
    if colon:
        if not names_text.strip():
            raise argparse.ArgumentTypeError("empty names list is not allowed")
        names = tuple(name.strip() for name in names_text.strip().split(","))
    files = pair.strip().split(",")
    if len(files) != 2:
        raise argparse.ArgumentTypeError("expected comma separated certificate and key file paths")
    return files[0].strip(), files[1].strip(), names


def version_request(text: str) -> str:
    """``--version``: a boolean, ``raw``, or a version to report (``v1.35.4``); normalised to
    ``true``, ``false``, ``raw`` or the version."""
    if text == "raw" or re.fullmatch(r"v\d+\.\d+\.\d+([-+][0-9A-Za-z.+-]*)?", text):
        return text
    return "true" if parse_bool(text) else "false"
