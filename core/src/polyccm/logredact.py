"""Keeps credentials out of the log, at every verbosity.

``--v=6`` and above let botocore and urllib3 log their wire traffic, which carries credentials:
an STS AssumeRole answer holds ``SecretAccessKey`` and ``SessionToken``, each signed AWS request
carries ``X-Amz-Security-Token``, and botocore's signer prints its canonical request with that
header. Rather than trusting every library to stay quiet, :class:`RedactingFilter` sits on the
handlers that print (the message, the formatted traceback and the stack are all masked) and
replaces

* every secret value the process knows (:func:`add_secret`: keys and tokens from the
  environment, those a provider reads, the Kubernetes bearer token and client key, credentials
  fetched at run time), and
* every value that has the shape of a secret, known or not: XML elements, quoted or unquoted
  ``key: value`` / ``key=value`` pairs whose key names a secret (``SecretAccessKey``,
  ``SessionToken``, ``X-Amz-Security-Token``, ``Authorization``, ``password``,
  ``client-key-data``...), ``Bearer`` credentials, JSON Web Tokens (Kubernetes service-account
  tokens), PEM private keys, plain or base64-encoded, and the password of any URL
  (``https://user:***@host/``).

The one-line errors of the commands pass the same :func:`redact` (:func:`error_line`), so a
secret that lands in another setting's error message is masked there too.

Shapes matter because a secret can be printed before the process learns its value: botocore
logs the AssumeRole answer while parsing it, before the credentials reach polyccm.
Identifiers stay readable (access key ids, role ARNs, request ids, request paths such as
``/apis/authentication.k8s.io/v1/tokenreviews``), so the log stays useful.
"""

from __future__ import annotations

import logging
import re
import threading
import urllib.parse
from collections.abc import Iterable, Mapping

MASK = "***"
#: A secret this long or longer is masked wherever it appears, inside longer words too.
MIN_SECRET_LENGTH = 8
#: A shorter secret is masked only as a whole word (``hunter2`` in "password hunter2 refused",
#: not in "hunter2x"), so that it does not eat into ordinary words; and only when it was named a
#: secret by whoever read it (:func:`add_secret`), not guessed from a variable's name (where
#: ``ENABLE_TOKEN_REFRESH=true`` would mask every "true"). One or two characters are not
#: masked at all: they keep nothing secret (a few thousand tries find them) and masking every
#: lone "t" or "1" would garble the log.
MIN_WORD_SECRET_LENGTH = 3

# A key that names a secret: matched inside longer names (``X-Amz-Security-Token``,
# ``aws_secret_access_key``, ``client-key-data``).
_SECRET_WORD = (
    r"secret|token|passw(?:or)?d|credential|private[_-]?key|api[_-]?key|authorization"
    r"|client[_-]key[_-]data|signature"
)
# Bounded, and starting where a name starts: a key is matched in linear time even inside a long
# base64 blob (an unanchored, unbounded prefix made that quadratic: 14 s for 10 kB). A word right
# after a slash is the end of a path, not a key: "POST .../v1/tokenreviews: <error>" (a request
# and what went wrong with it) and "ns/web-token: <error>" (an object) hold no secret, and taking
# them for keys masked the error, host and port included.
_KEY = rf"(?<![A-Za-z0-9_./-])[A-Za-z0-9_.-]{{0,40}}?(?:{_SECRET_WORD})[A-Za-z0-9_.-]{{0,40}}"
# Names that contain a secret word but hold none: pagination and idempotency tokens, EC2's
# instance-metadata option (``httpTokens``: required or optional), and names of where a secret
# is, who it belongs to, or of settings about one (``--tls-private-key-file``, ``token-url``,
# ``--authorization-kubeconfig``, ``--authentication-token-webhook-cache-ttl``), as
# :func:`secrets_in_environment` reads variable names.
_NOT_SECRET = re.compile(
    r"(?:next|client|continuation|idempotency|http)[_-]?tokens?$"
    r"|[_-](?:file|path|paths|dir|kubeconfig|ttl|url|uri|id|arn|name)$",
    re.IGNORECASE,
)

_XML_ELEMENT = re.compile(rf"<({_KEY})>[^<]*</\1>", re.IGNORECASE)
_QUOTED_PAIR = re.compile(
    rf"""(?P<q>["']?)(?P<key>{_KEY})(?P=q)(?P<sep>\s*[:=]\s*)(?P<b>b?)(?P<v>["'])"""
    r"""(?:\\.|(?!(?P=v)).)*(?P=v)""",
    re.IGNORECASE,
)
_BARE_PAIR = re.compile(
    rf"""(?P<q>["']?)(?P<key>{_KEY})(?P=q)(?P<sep>\s*[:=]\s*)(?!b?["'])(?P<value>[^\s"',;&)}}\]]+)""",
    re.IGNORECASE,
)
# Case-sensitive and long, so that prose ("basic checks") is left alone.
_SCHEME_CREDENTIAL = re.compile(r"\b(Bearer|Basic|bearer)\s+[A-Za-z0-9._~+/=-]{16,}")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_PEM_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)
# base64 of "-----BEGIN ": a PEM block as a kubeconfig's *-data fields hold it.
_BASE64_PEM = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]{16,}")
# The password of a URL's user information (``scheme://user:password@host``), whatever the
# scheme: up to the last "@" before the host, as URL parsers split it.
_URL_PASSWORD = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:)[^\s/?#]+@")


class _Secrets:
    """The secret values known so far, as one compiled alternation (longest first)."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()
        self.pattern: re.Pattern[str] | None = None

    def add(self, value: str) -> None:
        # As it is, and as it would appear in a URL or a form-encoded body.
        variants = {
            value,
            urllib.parse.quote(value),
            urllib.parse.quote(value, safe=""),
            urllib.parse.quote_plus(value),
        }
        with self._lock:
            if variants <= self._values:
                return
            self._values |= variants
            ordered = sorted(self._values, key=len, reverse=True)
            self.pattern = re.compile("|".join(_alternative(v) for v in ordered))

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self.pattern = None


def _alternative(value: str) -> str:
    """``value`` as a pattern: anywhere when long, as a whole word when short."""
    if len(value) >= MIN_SECRET_LENGTH:
        return re.escape(value)
    return rf"(?<!\w){re.escape(value)}(?!\w)"


_known = _Secrets()


def add_secret(value: str | bytes | None, *, guessed: bool = False) -> None:
    """Mask ``value`` wherever it appears, in the log and in every error line, from now on.

    A value of :data:`MIN_SECRET_LENGTH` characters or more is masked anywhere; a shorter one
    as a whole word, and only when it is not ``guessed`` (a value taken for a secret because
    of its variable's name, :func:`secrets_in_environment`): those are ignored when short, as
    they may be ordinary words."""
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if not value:
        return
    value = value.strip()
    if value.lower().startswith(("bearer ", "basic ")):
        value = value.split(None, 1)[1].strip()
    shortest = MIN_SECRET_LENGTH if guessed else MIN_WORD_SECRET_LENGTH
    if len(value) >= shortest:
        _known.add(value)


def forget_secrets() -> None:
    """Forget every value given to :func:`add_secret` (for tests)."""
    _known.clear()


#: Environment variables whose names say they hold a secret.
_SECRET_VARIABLE = re.compile(
    r"SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|PRIVATE_?KEY|CREDENTIAL", re.IGNORECASE
)
#: ... unless the name says the value is where a secret is, or who it belongs to.
_REFERENCE_SUFFIXES = ("_FILE", "_PATH", "_DIR", "_URL", "_URI", "_ID", "_ARN", "_NAME")


def secrets_in_environment(environ: Mapping[str, str]) -> list[str]:
    """The values of ``environ`` whose variable names say they are secrets (such as
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``DO_ACCESS_TOKEN``, ``METAL_API_KEY``)."""
    return [
        value
        for name, value in environ.items()
        if _SECRET_VARIABLE.search(name) and not name.upper().endswith(_REFERENCE_SUFFIXES)
    ]


def _mask_pair(match: re.Match[str]) -> str:
    key = match.group("key")
    if _NOT_SECRET.search(key):
        return match.group(0)
    if key.startswith("--") and match.group("sep").strip() == ":":
        # "argument --use-service-account-credentials: invalid boolean": a command-line flag
        # and what is wrong with it (a flag's value is given as --flag=value).
        return match.group(0)
    quote = match.group("q")
    head = f"{quote}{match.group('key')}{quote}{match.group('sep')}"
    if "v" in match.groupdict():
        return f"{head}{match.group('b')}{match.group('v')}{MASK}{match.group('v')}"
    return f"{head}{MASK}"


def _mask_element(match: re.Match[str]) -> str:
    name = match.group(1)
    if _NOT_SECRET.search(name):
        return match.group(0)
    return f"<{name}>{MASK}</{name}>"


def redact(text: str) -> str:
    """``text`` with every known secret value and every secret-shaped value masked."""
    known = _known.pattern
    if known is not None:
        text = known.sub(MASK, text)
    text = _PEM_PRIVATE_KEY.sub(MASK, text)
    text = _BASE64_PEM.sub(MASK, text)
    text = _JWT.sub(MASK, text)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    text = _SCHEME_CREDENTIAL.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _XML_ELEMENT.sub(_mask_element, text)
    text = _QUOTED_PAIR.sub(_mask_pair, text)
    return _BARE_PAIR.sub(_mask_pair, text)


#: An error line longer than this is cut: a 5 MB value echoed whole helps no one.
MAX_ERROR_LINE = 1000


def error_line(prefix: str, error: object) -> str:
    """The one line a command prints for a user mistake: ``<prefix>: error: <message>``, with
    every known secret and every secret-shaped value masked (as in the log), white space
    (newlines included) collapsed, and cut to :data:`MAX_ERROR_LINE` characters."""
    message = " ".join(redact(str(error)).split()) or type(error).__name__
    line = f"{prefix}: error: {message}"
    if len(line) > MAX_ERROR_LINE:
        line = f"{line[:MAX_ERROR_LINE]}... ({len(line) - MAX_ERROR_LINE} more characters)"
    return line


class RedactingFilter(logging.Filter):
    """A handler filter that masks secrets in the message, traceback and stack of each record.

    The record is rewritten in place (message formatted once, arguments dropped), so every
    handler after it prints the masked text whatever its formatter."""

    _exceptions = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._exceptions.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def install(handlers: Iterable[logging.Handler]) -> None:
    """Put a :class:`RedactingFilter` on each of ``handlers`` that has none yet."""
    for handler in handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
