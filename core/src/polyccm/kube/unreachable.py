"""One line for an API server that gave no answer: who it is and what went wrong.

:class:`~polyccm.kube.api.KubeApi` lets the connection errors of its last attempt through as
urllib3 raised them: exceptions whose text repeats the connection pool, the host and a nested
cause. :func:`describe` says the same in the words an operator acts on, as kubectl does ("The
connection to the server ... was refused"): refused, name not found, no answer within the
timeout, the TLS failure, the connection cut. :func:`server` names the server without any
credential its URL may hold.
"""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

import urllib3

from polyccm.inputs import cut


def server(host: str) -> str:
    """``host`` (the configured server URL) with any ``user:password@`` removed."""
    try:
        parts = urlsplit(host)
        netloc = parts.netloc.rpartition("@")[2]
        return cut(parts._replace(netloc=netloc, query="", fragment="").geturl(), 200)
    except ValueError:
        return cut(host.rpartition("@")[2], 200)


def describe(error: urllib3.exceptions.HTTPError, *, timeout: float, flag: str = "") -> str:
    """Why a request got no answer, in a few words. ``timeout`` is the one the request had
    (``flag`` names the option that sets it, for the message)."""
    setting = f" ({flag})" if flag else ""
    if isinstance(error, urllib3.exceptions.NameResolutionError):
        return f"cannot resolve its host name ({_os_reason(error) or 'unknown host'})"
    if isinstance(error, urllib3.exceptions.NewConnectionError):
        reason = _os_reason(error)
        if reason and "timed out" not in reason:
            return f"cannot connect: {reason.lower()}"
    if isinstance(error, urllib3.exceptions.TimeoutError):
        return f"no answer within {timeout:g}s{setting}"
    if isinstance(error, urllib3.exceptions.SSLError):
        return f"TLS failed: {_tls_reason(error)}"
    if isinstance(error, urllib3.exceptions.ProtocolError):
        return f"the connection broke: {_os_reason(error) or _last_words(error)}"
    return _last_words(error)


def _causes(error: BaseException) -> list[BaseException]:
    """``error``, what it was raised from, and so on (a bounded walk: causes can loop)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for item in list(chain):
        chain += [a for a in getattr(item, "args", ()) if isinstance(a, BaseException)]
    return chain


def _os_reason(error: BaseException) -> str:
    for cause in _causes(error):
        if isinstance(cause, OSError) and cause.strerror:
            return " ".join(str(cause.strerror).split())
    return ""


def _tls_reason(error: BaseException) -> str:
    for cause in _causes(error):
        if isinstance(cause, ssl.SSLCertVerificationError) and cause.verify_message:
            return f"certificate verify failed: {cause.verify_message}"
        if isinstance(cause, ssl.SSLError) and cause.reason:
            return str(cause.reason).lower().replace("_", " ")
    return _last_words(error)


def _last_words(error: BaseException) -> str:
    """The text after urllib3's prefixes (``HTTPSConnectionPool(...): ``), on one line."""
    text = " ".join(str(error).split()) or type(error).__name__
    return cut(text.rpartition("): ")[2] or text, 200)
