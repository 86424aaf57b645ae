"""The checks a kubeconfig passes before ``kubernetes.config`` loads it: validation, not a loader.

The ``kubernetes`` package's loader (:mod:`polyccm.kube.config` hands it the result) reports a
bad kubeconfig late or badly: a field of the wrong type is a Python ``TypeError`` at the first
request, a CA that is not PEM an OpenSSL error naming no field, an empty ``tokenFile`` or a
failing exec plugin no error at all (the plugin's standard error, which may hold a credential,
goes to the log), a ``null`` field an error about a missing key, and a 5 MB context name is
quoted whole. client-go refuses these when it loads the file (typed structs,
``tools/clientcmd/loader.go``) or builds its transport (``transport/transport.go``), so polyccm
does too, here, with one line naming the file and the field (:mod:`polyccm.kube.kubeconfig_file`
checks each field's type):

* the files are merged as client-go merges ``$KUBECONFIG`` (the first to name a context,
  cluster or user, or the current context, wins; the package's merger lets the last
  ``current-context`` win and refuses an empty file), and the current context's cluster and
  user are found;
* ``*-data`` must be base64, certificates PEM, and a client key must match its certificate;
* a token (or ``tokenFile``'s content) must fit an HTTP header;
* what the package does not do is refused by name: ``auth-provider`` plugins, a ``proxy-url``
  urllib3 cannot use (SOCKS needs PySocks, which polyccm does not install), an exec plugin
  that must be ``interactiveMode: Always`` without a terminal (client-go refuses it too);
* impersonation (``as``, ``as-uid``, ``as-groups``, ``as-user-extra``), which the package
  ignores, becomes client-go's ``Impersonate-*`` headers (checked to fit a header).

What goes to the package is the chosen context alone, its relative paths made absolute from the
file that names them (client-go's ``ResolvePaths``) and its ``null`` fields dropped.
"""

from __future__ import annotations

import base64
import binascii
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from polyccm.kube import kubeconfig_file
from polyccm.kube.kubeconfig_file import shown

PROXY_SCHEMES = ("http", "https")
"""Proxy URL schemes the package's urllib3 connection pools can use without PySocks."""


class KubeconfigError(Exception):
    """No usable connection settings: a missing or malformed kubeconfig, or none at all."""


class FileError(KubeconfigError):
    """A reason that concerns one kubeconfig file, which the message names."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(reason)
        self.path = path


@dataclass(frozen=True)
class Chosen:
    """The current context of a kubeconfig, checked: what the package's loader gets, and what
    polyccm does itself around it."""

    document: dict[str, Any]
    """A kubeconfig of the chosen context alone, for ``kubernetes.config``."""
    exec_plugin: Mapping[str, Any] | None = None
    """The user's ``exec`` section, when it is the credential (not given to the package)."""
    exec_dir: Path = Path()
    """Where the exec plugin runs: the directory of the file naming it."""
    exec_file: Path = Path()
    """The file that names the exec plugin, for messages."""
    user_label: str = "user"
    """How messages name the user (``user 'admin'``)."""
    cluster: Mapping[str, Any] = field(default_factory=dict)
    """The cluster's fields (as an exec plugin with ``provideClusterInfo`` is told them)."""
    impersonation: list[tuple[str, str]] = field(default_factory=list)
    """``Impersonate-*`` headers, each (name, value); a name may repeat."""
    token_file: Path | None = None
    """The user's ``tokenFile``, read again now and then."""
    password: str | None = None


class _Entry:
    """One cluster's, context's or user's settings, the file they come from (relative paths
    start from its directory) and how messages name them (``user 'admin'``)."""

    def __init__(self, value: Mapping[str, Any], file: Path, label: str) -> None:
        self.value = value
        self.file = file
        self.base = file.resolve().parent
        self.label = label

    def error(self, reason: str) -> FileError:
        return FileError(self.file, f"{self.label}: {reason}")

    def path(self, key: str) -> Path:
        return (self.base / str(self.value[key])).expanduser()

    def pem(self, key: str) -> tuple[bytes, str] | None:
        """The bytes of ``key-data`` (base64) or of the file ``key`` names, with the field to
        name when they are wrong; ``None`` when neither is set (``-data`` first, as client-go
        and the package read them)."""
        data = self.value.get(f"{key}-data")
        if data:
            try:
                # A Go []byte in JSON: standard base64, line breaks ignored.
                decoded = base64.b64decode(data.replace("\r", "").replace("\n", ""), validate=True)
            except (binascii.Error, ValueError):
                raise self.error(f"{key}-data is not base64") from None
            return decoded, f"{key}-data"
        if self.value.get(key):
            path = self.path(key)
            described = f"{key} {shown(str(path))}"
            if not path.is_file():
                raise self.error(f"{described} is not a file")
            try:
                return path.read_bytes(), described
            except OSError as error:
                raise self.error(f"{described}: {error.strerror}") from None
        return None


# -- choosing the context -----------------------------------------------------------------------


def choose(paths: list[Path]) -> Chosen:
    """The current context of the kubeconfig files ``paths`` (merged; each must exist),
    checked; :class:`FileError` or :class:`KubeconfigError` says what is wrong."""
    current, entries = _merge(paths)
    if not current:
        raise KubeconfigError("no current-context")
    context = _find(entries, "contexts", "context", current)
    cluster = _find(entries, "clusters", "cluster", str(context.value.get("cluster") or ""))
    user_name = context.value.get("user")
    user = (
        _find(entries, "users", "user", str(user_name))
        if user_name
        else _Entry({}, context.file, "user ''")
    )
    server = str(cluster.value.get("server") or "")
    if not server:
        raise cluster.error("no server")
    _check_proxy(cluster)
    if server.startswith("https"):
        _check_certificate_authority(cluster)
        _check_client_certificate(user)
    impersonation = _impersonation(user)
    credential = _credential(user)
    package_user = {
        key: value
        for key, value in _resolved(user, _USER_PATHS).items()
        if key != "exec" and not key.startswith("as")
    }
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "context",
        "contexts": [{"name": "context", "context": {"cluster": "cluster", "user": "user"}}],
        "clusters": [{"name": "cluster", "cluster": _resolved(cluster, _CLUSTER_PATHS)}],
        "users": [{"name": "user", "user": package_user}],
    }
    password = user.value.get("password") if user.value.get("username") else None
    return Chosen(
        document=document,
        exec_plugin=user.value["exec"] if credential == "exec" else None,
        exec_dir=user.base,
        exec_file=user.file,
        user_label=user.label,
        cluster=_without_nulls(cluster.value),
        impersonation=impersonation,
        token_file=user.path("tokenFile") if credential == "tokenFile" else None,
        password=password,
    )


def _merge(paths: list[Path]) -> tuple[str, dict[str, dict[str, tuple[Mapping[str, Any], Path]]]]:
    """The current context and every named entry, as kubectl merges files: the first file to
    name an entry (or a current context) wins."""
    current = ""
    entries: dict[str, dict[str, tuple[Mapping[str, Any], Path]]] = {
        "clusters": {},
        "contexts": {},
        "users": {},
    }
    for path in paths:
        try:
            loaded = kubeconfig_file.read(path)
        except OSError as error:
            raise FileError(path, error.strerror or type(error).__name__) from None
        except kubeconfig_file.KubeconfigFileError as error:
            raise FileError(path, str(error)) from None
        current = current or str(loaded.get("current-context") or "")
        for section, named in entries.items():
            for item in loaded.get(section) or ():
                if item.get("name"):
                    named.setdefault(item["name"], (item, path))
    return current, entries


def _find(
    entries: dict[str, dict[str, tuple[Mapping[str, Any], Path]]],
    section: str,
    field_name: str,
    name: str,
) -> _Entry:
    label = f"{section[:-1]} {shown(repr(name))}"
    found = entries[section].get(name)
    if found is None:
        raise KubeconfigError(f"{label} not found")
    item, file = found
    return _Entry(item.get(field_name) or {}, file, label)


# -- what the package gets ----------------------------------------------------------------------

_CLUSTER_PATHS = ("certificate-authority",)
_USER_PATHS = ("client-certificate", "client-key", "tokenFile")


def _resolved(entry: _Entry, path_fields: tuple[str, ...]) -> dict[str, Any]:
    """``entry``'s fields without ``null`` ones, the paths among them absolute."""
    value = _without_nulls(entry.value)
    for key in path_fields:
        if value.get(key):
            value[key] = str(entry.path(key))
    return value


def _without_nulls(value: Mapping[str, Any]) -> dict[str, Any]:
    """``value``'s fields but the ``null`` ones: client-go reads null as absent, the package
    fails on it ("Expected key ..."). One level: deeper ones the package reads with ``get``."""
    return {key: item for key, item in value.items() if item is not None}


# -- the cluster --------------------------------------------------------------------------------


def _check_proxy(cluster: _Entry) -> None:
    """A ``proxy-url`` urllib3 can use: http or https (client-go also takes socks5, which
    urllib3 does only with PySocks)."""
    proxy = cluster.value.get("proxy-url")
    if not proxy:
        return
    reason = proxy_problem(proxy)
    if reason:
        shown_url = shown(_without_userinfo(proxy))
        raise cluster.error(f"proxy-url is not supported: {shown_url} ({reason})")


def proxy_problem(url: str) -> str | None:
    """Why the package could not send requests through the proxy ``url``; ``None`` if it can."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a port that is no number
    except ValueError:
        return "not a URL"
    scheme = parts.scheme.lower()
    if scheme.startswith("socks"):
        return "SOCKS proxies need the PySocks package, which polyccm does not install"
    if scheme not in PROXY_SCHEMES or not parts.hostname:
        return "only http:// and https:// proxies can be used"
    return None


def _without_userinfo(url: str) -> str:
    scheme, _, rest = url.rpartition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}" if scheme else url.rpartition("@")[2]


def _check_certificate_authority(cluster: _Entry) -> None:
    """The CA must be PEM: one that is not fails every request, with an OpenSSL message naming
    no field (client-go refuses it when it builds its transport)."""
    found = cluster.pem("certificate-authority")
    if found is None:
        return
    data, field_name = found
    if not _certificates(data):
        raise cluster.error(f"{field_name} is not a PEM certificate")


def _check_client_certificate(user: _Entry) -> None:
    """The client certificate and key must be a PEM pair."""
    certificate = user.pem("client-certificate")
    key = user.pem("client-key")  # decoded even when unused, as client-go decodes it
    if certificate is None:
        return  # client-go uses a key only with a certificate
    if key is None:
        raise user.error(f"{certificate[1]} without client-key or client-key-data")
    reason = pem_pair_problem(certificate[0], key[0])
    if reason == "certificate":
        raise user.error(f"{certificate[1]} is not a PEM certificate")
    if reason == "key":
        raise user.error(f"{key[1]} is not a PEM private key matching {certificate[1]}")


def _certificates(data: bytes) -> list[Any]:
    from cryptography import x509

    try:
        return list(x509.load_pem_x509_certificates(data))
    except ValueError:
        return []


def pem_pair_problem(certificate: bytes, key: bytes) -> str | None:
    """``"certificate"`` or ``"key"``: which of a PEM certificate and key is wrong (the key
    must be unencrypted and match the certificate, as Go's ``tls.X509KeyPair`` wants)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    found = _certificates(certificate)
    if not found:
        return "certificate"
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return "key"  # TypeError: encrypted, which client-go cannot use either
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if private.public_key().public_bytes(der, spki) != found[0].public_key().public_bytes(
        der, spki
    ):
        return "key"
    return None


# -- the user -----------------------------------------------------------------------------------


def _credential(user: _Entry) -> str | None:
    """Which of the user's credentials authenticates, checked: ``token``, ``tokenFile``,
    ``exec`` or ``basic`` (the package's order), or ``None``."""
    value = user.value
    if value.get("auth-provider"):
        name = value["auth-provider"].get("name") or ""
        raise user.error(
            f"auth-provider {shown(repr(name))} is not supported "
            "(a legacy plugin, removed from client-go); use an exec credential plugin"
        )
    if value.get("token"):
        if not fits_a_header(value["token"]):
            raise user.error("token has a control character, which no HTTP header can hold")
        return "token"
    if value.get("tokenFile"):
        path = user.path("tokenFile")
        try:
            check_token_file(path)
        except KubeconfigError as error:
            raise user.error(f"tokenFile {shown(str(path))}: {error}") from None
        return "tokenFile"
    if value.get("exec"):
        _check_exec(user)
        return "exec"
    if value.get("username") and value.get("password"):
        return "basic"
    return None


def check_token_file(path: Path) -> str:
    """The token ``path`` holds (surrounding space removed, as client-go reads it), or
    :class:`KubeconfigError` saying why it cannot be sent."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        raise KubeconfigError("not UTF-8 text") from None
    except OSError as error:
        raise KubeconfigError(str(error.strerror)) from None
    if not token:
        raise KubeconfigError("empty")
    if not fits_a_header(token):
        raise KubeconfigError("has a control character, which no HTTP header can hold")
    return token


def _check_exec(user: _Entry) -> None:
    plugin: Mapping[str, Any] = user.value["exec"]
    if not plugin.get("command"):
        raise user.error("exec plugin without a command")
    if not plugin.get("apiVersion"):
        # client-go: "exec plugin: invalid apiVersion"; the package: "missing key".
        raise user.error(f"exec plugin {shown(str(plugin['command']))} has no apiVersion")
    for index, variable in enumerate(plugin.get("env") or ()):
        if not variable.get("name"):
            raise user.error(f"exec.env[{index}] has no name")
    # client-go v0.35.4 exec.go:233-255; the package ignores the field (it runs the plugin
    # interactively when standard output is a terminal).
    mode = plugin.get("interactiveMode") or ""
    if mode not in ("", "Never", "IfAvailable", "Always"):
        raise user.error(f"exec.interactiveMode {shown(repr(mode))} is unknown")
    if mode == "Always" and not _stdin_is_a_terminal():
        raise user.error(
            "exec.interactiveMode Always needs a terminal on standard input, which polyccm has not"
        )


def _stdin_is_a_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (OSError, ValueError):
        return False


def _impersonation(user: _Entry) -> list[tuple[str, str]]:
    """The ``Impersonate-*`` headers of the user's ``as``, ``as-uid``, ``as-groups`` and
    ``as-user-extra``, as client-go's impersonating round tripper sends them."""
    value = user.value
    name = value.get("as") or ""
    uid = value.get("as-uid") or ""
    groups: list[str] = value.get("as-groups") or []
    extra: Mapping[str, list[str] | None] = value.get("as-user-extra") or {}
    if not name:
        if uid or groups or extra:
            raise user.error("as-uid, as-groups or as-user-extra without as (whom to impersonate)")
        return []
    headers = [("as", "Impersonate-User", name)]
    if uid:
        headers.append(("as-uid", "Impersonate-Uid", uid))
    headers += [(f"as-groups[{i}]", "Impersonate-Group", group) for i, group in enumerate(groups)]
    for key, values in extra.items():
        header = "Impersonate-Extra-" + _escape_header_key(key)
        headers += [(f"as-user-extra.{shown(key)}", header, v) for v in values or ()]
    for field_name, _, text in headers:
        if not fits_a_header(text):
            raise user.error(f"{field_name} has a control character, which no HTTP header can hold")
    # http.client sends str values as Latin-1: these bytes make it send the UTF-8 that Go does.
    return [(header, text.encode().decode("latin-1")) for _, header, text in headers]


def fits_a_header(text: str) -> bool:
    """Whether ``text`` can be a header's value (no control character but tab), as Go's
    net/http requires; http.client would refuse it later, quoting the value in its error."""
    return not any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in text)


_HEADER_KEY_BYTES = frozenset(
    b"!#$&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)


def _escape_header_key(key: str) -> str:
    """An extra's key as a header name: bytes that are no HTTP token, and ``%``, as ``%XX``
    (client-go's ``headerKeyEscape``; the server unescapes them)."""
    return "".join(chr(b) if b in _HEADER_KEY_BYTES else f"%{b:02X}" for b in key.encode())
