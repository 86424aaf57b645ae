"""The one rule for a URL a user gives a provider (an API endpoint, a metadata service).

Each check returns the URL unchanged or raises one :class:`~polyccm.errors.ConfigError` line
naming the setting and the cause; it never lets ``urllib``'s ``ValueError`` (an unclosed IPv6
bracket, a port that is no number) escape to become a traceback at the first request:

* :func:`secret_url`: a URL polyccm sends a secret to (an API token, an API key). It must be
  ``https``, except to a loopback host (``localhost``, ``127.0.0.0/8``, ``::1``), where plain
  ``http`` is allowed for an emulator on the same machine: the secret then never leaves it.
  Every provider that sends a secret to a configurable URL goes through it, so plain http means
  the same thing for all of them.
* :func:`plain_url`: a well-formed ``http(s)`` URL with a host, for services that are given no
  secret (a link-local metadata service speaks plain http).

A URL is echoed cut (:func:`polyccm.inputs.quoted`) and without its ``user:password@`` part.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit

from polyccm.errors import ConfigError
from polyccm.inputs import quoted

_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")
_UNSAFE = re.compile(r"[\x00-\x20\x7f-\x9f]")


def secret_url(value: str, setting: str) -> str:
    """``value`` when it is an ``https`` URL, or an ``http`` one to a loopback host;
    :class:`ConfigError` naming ``setting`` otherwise."""
    parts = _split(value, setting, "an https URL")
    if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
        raise ConfigError(
            f"{setting} {shown(value)} must be https: plain http is allowed only to a loopback "
            "host (an emulator on this machine), so that the credentials never cross a network "
            "in clear"
        )
    return value


def plain_url(value: str, setting: str) -> str:
    """``value`` when it is a well-formed ``http(s)`` URL with a host; :class:`ConfigError`
    naming ``setting`` otherwise."""
    _split(value, setting, "an http(s) URL")
    return value


def is_loopback(host: str) -> bool:
    """``host`` (as :attr:`SplitResult.hostname` gives it) names this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def shown(value: str) -> str:
    """``value`` as a message echoes it: quoted, cut, its ``user:password@`` hidden."""
    return quoted(_USERINFO.sub(r"\1…@", value))


def _split(value: str, setting: str, expected: str) -> SplitResult:
    if _UNSAFE.search(value):
        raise ConfigError(f"{setting} {shown(value)} is no URL: it holds spaces or control "
                          "characters")  # fmt: skip
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - parsed on access: a bad port raises here, not at a request
    except ValueError as error:
        raise ConfigError(f"{setting} {shown(value)} is no URL: {error}") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{setting} {shown(value)} must be {expected}")
    if not parts.hostname:
        raise ConfigError(f"{setting} {shown(value)} names no host")
    return parts
