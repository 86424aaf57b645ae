"""Connection settings for the Kubernetes API: a kubeconfig file, or the pod's service account.

Read as client-go reads them, for what a controller manager needs:

* **kubeconfig**: the current context's cluster (``server``, ``certificate-authority`` or
  ``-data``, ``insecure-skip-tls-verify``, ``tls-server-name``) and user, whose credentials are
  tried in the order the official Python client tries them: ``token`` or ``tokenFile``, an
  ``exec`` credential plugin (:mod:`polyccm.kube.exec_plugin`: a token, or a client certificate
  and key; run again once its ``expirationTimestamp`` passes), ``username`` and ``password``; a
  client certificate and key (``client-certificate``/``client-key`` or their ``-data``) go with
  any of them. The user's ``as``, ``as-uid``, ``as-groups`` and ``as-user-extra`` impersonate
  as client-go does: ``Impersonate-*`` headers on every request. Relative paths are relative to
  the file that names them. Without an explicit file, ``$KUBECONFIG`` (several files separated
  by ``:``, merged: the first file to name a cluster, user or context wins; the files that do
  not exist are skipped, as client-go skips them) or ``~/.kube/config``.
* **in-cluster**: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the service account's token and CA.

Everything is checked when loaded, so that a mistake stops start-up with one line naming the file
and the field (:mod:`polyccm.kube.kubeconfig_file` checks each field's type), not later at every
request: certificates and keys must be PEM (and the key must match the certificate). A cluster's
``proxy-url`` is refused, as polyccm would otherwise connect directly.

A token read from a file (``tokenFile``, the service account's projected token) is read again
once a minute, as client-go does, so a rotated token is picked up. ``*-data`` certificates and
keys are written to private temporary files (urllib3 wants paths), removed at exit.

The legacy ``auth-provider`` plugins are refused with a clear message: client-go removed the
gcp and azure ones, and an exec plugin does what they did.

This replaces the official ``kubernetes`` package's loaders, whose import alone (every generated
model) cost polyccm about 29 MiB of memory and several seconds of start-up.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import contextlib
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3

from polyccm.kube import exec_plugin, kubeconfig_file
from polyccm.kube.kubeconfig_file import escaped, shown

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
"""How long a token read from a file is used before the file is read again (client-go: 1m)."""


class KubeconfigError(Exception):
    """No usable connection settings: a missing or malformed kubeconfig, or none at all."""


class Configuration:
    """Where the API server is and how to authenticate to it.

    The attribute names are those of the official client's ``Configuration``, which this
    replaces: ``host``, ``verify_ssl``, ``ssl_ca_cert``, ``cert_file``, ``key_file``,
    ``tls_server_name``, ``api_key``, ``username``, ``password``."""

    def __init__(self, host: str = "http://localhost") -> None:
        self.host = host
        self.verify_ssl = True
        self.ssl_ca_cert: str | None = None
        self.cert_file: str | None = None
        self.key_file: str | None = None
        self.tls_server_name: str | None = None
        self.api_key: dict[str, str] = {}
        """``{"authorization": "Bearer <token>"}`` (or ``Basic ...``) once loaded."""
        self.username: str | None = None
        self.password: str | None = None
        self.refresh: Callable[[], str | None] | None = None
        """Returns a fresh ``Authorization`` value when the credential source has a new one."""
        self.impersonation: list[tuple[str, str]] = []
        """``Impersonate-*`` headers (name, value; a name may repeat) for every request."""
        self._lock = threading.Lock()

    def authorization(self) -> str | None:
        """The ``Authorization`` header to send now (refreshed from its source when due)."""
        if self.refresh is not None:
            with self._lock:
                fresh = self.refresh()
                if fresh:
                    self.api_key["authorization"] = fresh
        return self.api_key.get("authorization")

    def get_api_key_with_prefix(self, identifier: str, alias: str | None = None) -> str | None:
        """The ``Authorization`` value, as the official client's method of this name returns
        it (``identifier`` and ``alias`` are accepted for compatibility)."""
        del identifier, alias
        return self.authorization()


# -- loading ----------------------------------------------------------------------------------


def load_configuration(kubeconfig: str | None = None, master: str | None = None) -> Configuration:
    """Connection settings from ``kubeconfig``, else in-cluster, else the default kubeconfig.

    Raises :class:`KubeconfigError` with a one-line reason, naming the file and field at fault,
    when none can be loaded."""
    if kubeconfig:
        configuration = _from_files([Path(kubeconfig)], listed_in_environment=False)
    else:
        try:
            configuration = load_in_cluster()
        except KubeconfigError as outside:
            configuration = _from_default_files(str(outside))
    if master:
        configuration.host = master
    return configuration


def default_kubeconfig_paths() -> list[Path]:
    """``$KUBECONFIG``'s files (each once, in order), else ``~/.kube/config``."""
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    unique = list(dict.fromkeys(listed))  # client-go reads a file named twice once
    return [Path(p).expanduser() for p in unique] or [Path("~/.kube/config").expanduser()]


def _from_default_files(outside: str) -> Configuration:
    """The kubeconfig of ``$KUBECONFIG`` or ``~/.kube/config``, outside a pod (``outside``
    says why in-cluster settings did not apply).

    As client-go's loader (``tools/clientcmd/loader.go``), the files of ``$KUBECONFIG`` that do
    not exist are skipped; only when none is left is that an error, which names them."""
    paths = default_kubeconfig_paths()
    listed = bool(os.environ.get("KUBECONFIG", "").strip(os.pathsep))
    existing = [path for path in paths if path.exists()]
    if not existing:
        if listed:
            names = ", ".join(map(str, paths))
            missing = f"no file KUBECONFIG names exists ({names})"
        else:
            missing = f"{paths[0]} does not exist"
        where = "KUBECONFIG" if listed else "~/.kube/config"
        raise KubeconfigError(
            escaped(f"cannot load in-cluster config or {where}: {outside}; {missing}")
        )
    return _from_files(existing, listed_in_environment=listed)


def _from_files(paths: list[Path], *, listed_in_environment: bool) -> Configuration:
    """:func:`load_kubeconfig`, its error said in one line naming the file."""
    origin = " (listed in KUBECONFIG)" if listed_in_environment else ""
    try:
        return load_kubeconfig(paths)
    except _FileError as error:
        where = f"{error.path}{origin}"
        reason = str(error)
    except KubeconfigError as error:
        where = f"{os.pathsep.join(map(str, paths))}{origin}"
        reason = str(error)
    except (OSError, ValueError) as error:
        # What no check above foresaw (a path with a NUL byte...): still one line, and only
        # the system's reason, which quotes no content.
        where = f"{os.pathsep.join(map(str, paths))}{origin}"
        reason = str(error.strerror) if isinstance(error, OSError) else shown(str(error))
    raise KubeconfigError(escaped(f"cannot load kubeconfig {where}: {reason}")) from None


def load_in_cluster(account: Path = SERVICE_ACCOUNT) -> Configuration:
    """The pod's service account; :class:`KubeconfigError` outside a pod."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
    token, ca = account / "token", account / "ca.crt"
    if not token.is_file() or not ca.is_file():
        raise KubeconfigError(f"service account token or CA missing in {account}")
    if ":" in host:
        host = f"[{host}]"
    configuration = Configuration(f"https://{host}:{port}")
    configuration.ssl_ca_cert = str(ca)
    try:
        _use_token_file(configuration, token)
    except OSError as error:
        raise KubeconfigError(f"service account token {token}: {error.strerror}") from None
    return configuration


def load_kubeconfig(paths: list[Path]) -> Configuration:
    """The current context of the kubeconfig files ``paths`` (merged; each must exist)."""
    merged = _merge(paths)
    current = merged.current_context
    if not current:
        raise KubeconfigError("no current-context")
    context = merged.find("contexts", "context", current)
    cluster_name = str(context.value.get("cluster") or "")
    cluster = merged.find("clusters", "cluster", cluster_name)
    user_name = context.value.get("user")
    user = (
        merged.find("users", "user", str(user_name))
        if user_name
        else _Entry({}, context.file, "user ''")
    )
    server = str(cluster.value.get("server") or "")
    if not server:
        raise cluster.error("no server")
    if cluster.value.get("proxy-url"):
        # client-go sends requests through it; polyccm would silently connect directly.
        raise cluster.error("proxy-url is not supported (polyccm connects to the server directly)")
    configuration = Configuration(server.rstrip("/"))
    if cluster.value.get("insecure-skip-tls-verify"):
        configuration.verify_ssl = False
    configuration.tls_server_name = cluster.value.get("tls-server-name") or None
    if configuration.host.startswith("https"):
        configuration.ssl_ca_cert = _certificate_authority(cluster)
        configuration.cert_file, configuration.key_file = _client_certificate(user)
    configuration.impersonation = _impersonation(user)
    _authenticate(configuration, user, cluster)
    return configuration


# -- kubeconfig files -------------------------------------------------------------------------


class _FileError(KubeconfigError):
    """A reason that concerns one kubeconfig file, which :func:`load_configuration` names."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(reason)
        self.path = path


class _Entry:
    """One cluster's, context's or user's settings, the file they come from (relative paths
    start from its directory) and how messages name them (``user 'admin'``)."""

    def __init__(self, value: Mapping[str, Any], file: Path, label: str) -> None:
        self.value = value
        self.file = file
        self.base = file.resolve().parent
        self.label = label

    def error(self, reason: str) -> _FileError:
        return _FileError(self.file, f"{self.label}: {reason}")

    def path(self, key: str) -> Path:
        return (self.base / str(self.value[key])).expanduser()

    def pem_file(self, key: str) -> tuple[str, str] | None:
        """The path of ``key``, or of a private file holding ``key-data`` (base64), with the
        field to name when its content is wrong."""
        data = self.value.get(f"{key}-data")
        if data:
            try:
                # A Go []byte in JSON: standard base64, line breaks ignored.
                decoded = base64.b64decode(data.replace("\r", "").replace("\n", ""), validate=True)
            except (binascii.Error, ValueError):
                raise self.error(f"{key}-data is not base64") from None
            return _private_file(decoded), f"{key}-data"
        if self.value.get(key):
            path = self.path(key)
            if not path.is_file():
                raise self.error(f"{key} {shown(str(path))} is not a file")
            return str(path), f"{key} {shown(str(path))}"
        return None


class _Merged:
    """Kubeconfig files merged as kubectl merges them: the first one to name an entry wins."""

    def __init__(self) -> None:
        self.current_context = ""
        self.entries: dict[str, dict[str, tuple[Mapping[str, Any], Path]]] = {
            "clusters": {},
            "contexts": {},
            "users": {},
        }

    def find(self, section: str, field: str, name: str) -> _Entry:
        label = f"{section[:-1]} {shown(repr(name))}"
        found = self.entries[section].get(name)
        if found is None:
            raise KubeconfigError(f"{label} not found")
        item, file = found
        return _Entry(item.get(field) or {}, file, label)


def _merge(paths: list[Path]) -> _Merged:
    merged = _Merged()
    for path in paths:
        try:
            loaded = kubeconfig_file.read(path)
        except OSError as error:
            raise _FileError(path, error.strerror or type(error).__name__) from None
        except kubeconfig_file.KubeconfigFileError as error:
            raise _FileError(path, str(error)) from None
        merged.current_context = merged.current_context or str(loaded.get("current-context") or "")
        for section, entries in merged.entries.items():
            for item in loaded.get(section) or ():
                if item.get("name"):
                    entries.setdefault(item["name"], (item, path))
    return merged


# -- TLS files --------------------------------------------------------------------------------


def _certificate_authority(cluster: _Entry) -> str | None:
    """The CA file, checked now: a CA that is not PEM fails every request, with an OpenSSL
    message naming no field (client-go refuses it when it builds its transport)."""
    found = cluster.pem_file("certificate-authority")
    if found is None:
        return None
    path, field = found
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except ssl.SSLError:
        raise cluster.error(f"{field} is not a PEM certificate") from None
    except OSError as error:
        raise cluster.error(f"{field}: {error.strerror}") from None
    return path


def _client_certificate(user: _Entry) -> tuple[str | None, str | None]:
    """The client certificate and key files, checked now to be a PEM pair."""
    certificate = user.pem_file("client-certificate")
    key = user.pem_file("client-key")  # decoded even when unused, as client-go decodes it
    if certificate is None:
        return None, None  # client-go uses a key only with a certificate
    if key is None:
        raise user.error(f"{certificate[1]} without client-key or client-key-data")
    reason = _pem_pair_problem(certificate[0], key[0])
    if reason == "certificate":
        raise user.error(f"{certificate[1]} is not a PEM certificate")
    if reason == "key":
        raise user.error(f"{key[1]} is not a PEM private key matching {certificate[1]}")
    return certificate[0], key[0]


def _pem_pair_problem(certificate: str, key: str) -> str | None:
    """``"certificate"`` or ``"key"``: which of the two files is wrong; ``None`` if neither."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=certificate)
    except (ssl.SSLError, OSError):
        return "certificate"
    try:
        # An encrypted key is wrong too (client-go cannot use one): the empty password fails it
        # instead of letting OpenSSL ask for one on the terminal.
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(certificate, key, lambda: b"")
    except (ssl.SSLError, OSError):
        return "key"
    return None


# -- impersonation ----------------------------------------------------------------------------


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
    for field, _, text in headers:
        if not _fits_a_header(text):
            raise user.error(f"{field} has a control character, which no HTTP header can hold")
    # http.client sends str values as Latin-1: these bytes make it send the UTF-8 that Go does.
    return [(header, text.encode().decode("latin-1")) for _, header, text in headers]


def _fits_a_header(text: str) -> bool:
    """Whether ``text`` can be a header's value (no control character but tab), as Go's
    net/http requires; http.client would refuse it later, quoting the value in its error."""
    return not any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in text)


def _bearer(token: str, source: str) -> str:
    """The ``Authorization`` value of ``token``, refused when no header can carry it."""
    if not _fits_a_header(token):
        raise KubeconfigError(f"{source} has a control character, which no HTTP header can hold")
    return f"Bearer {token}"


_HEADER_KEY_BYTES = frozenset(
    b"!#$&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)


def _escape_header_key(key: str) -> str:
    """An extra's key as a header name: bytes that are no HTTP token, and ``%``, as ``%XX``
    (client-go's ``headerKeyEscape``; the server unescapes them)."""
    return "".join(chr(b) if b in _HEADER_KEY_BYTES else f"%{b:02X}" for b in key.encode())


# -- credentials ------------------------------------------------------------------------------


def _authenticate(configuration: Configuration, user: _Entry, cluster: _Entry) -> None:
    value = user.value
    if value.get("auth-provider"):
        name = value["auth-provider"].get("name") or ""
        raise user.error(
            f"auth-provider {shown(repr(name))} is not supported "
            "(client-go removed these plugins); use an exec credential plugin"
        )
    if value.get("token"):
        try:
            configuration.api_key["authorization"] = _bearer(value["token"], "token")
        except KubeconfigError as error:
            raise user.error(str(error)) from None
    elif value.get("tokenFile"):
        try:
            _use_token_file(configuration, user.path("tokenFile"))
        except (OSError, ValueError) as error:
            reason = error.strerror if isinstance(error, OSError) else str(error)
            raise user.error(f"tokenFile {shown(str(user.path('tokenFile')))}: {reason}") from None
        except KubeconfigError as error:
            raise user.error(str(error)) from None
    elif value.get("exec"):
        _use_exec_plugin(configuration, user, cluster)
    elif value.get("username") and value.get("password"):
        configuration.username = str(value["username"])
        configuration.password = str(value["password"])
        header = urllib3.util.make_headers(
            basic_auth=f"{configuration.username}:{configuration.password}"
        )
        configuration.api_key["authorization"] = header["authorization"]


def _use_token_file(configuration: Configuration, path: Path) -> None:
    """Bearer token from ``path``, read again every :data:`TOKEN_REREAD_SECONDS`."""

    def read() -> str:
        try:
            token = path.read_text().strip()
        except UnicodeDecodeError:
            raise KubeconfigError(f"token file {shown(str(path))} is not UTF-8 text") from None
        if not token:
            raise KubeconfigError(f"token file {shown(str(path))} is empty")
        return _bearer(token, f"token file {shown(str(path))}")

    configuration.api_key["authorization"] = read()
    read_at = time.monotonic()

    def refresh() -> str | None:
        nonlocal read_at
        if time.monotonic() - read_at < TOKEN_REREAD_SECONDS:
            return None
        read_at = time.monotonic()
        try:
            return read()
        except (OSError, KubeconfigError):
            return None  # keep the last token: it may still be valid

    configuration.refresh = refresh


def _use_exec_plugin(configuration: Configuration, user: _Entry, cluster: _Entry) -> None:
    """Credentials from an exec plugin; the plugin runs again once they expire."""
    plugin: Mapping[str, Any] = user.value["exec"]
    if not plugin.get("command"):
        raise user.error("exec plugin without a command")
    for index, variable in enumerate(plugin.get("env") or ()):
        if not variable.get("name"):
            raise user.error(f"exec.env[{index}] has no name")
    command = shown(plugin["command"])
    expires: float | None = None

    def run() -> str | None:
        nonlocal expires
        try:
            status = exec_plugin.run(plugin, user.base, cluster.value)
        except exec_plugin.ExecPluginError as error:
            raise KubeconfigError(str(error)) from None
        stamp = status.get("expirationTimestamp")
        expires = _timestamp(stamp, command) if stamp else None
        if status.get("token"):
            return _bearer(status["token"], f"the token of exec plugin {command}")
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            certificate = _private_file(status["clientCertificateData"].encode())
            key = _private_file(status["clientKeyData"].encode())
            if _pem_pair_problem(certificate, key) is not None:
                raise KubeconfigError(
                    f"exec plugin {command} returned a client certificate and key "
                    "that are not a PEM pair"
                )
            configuration.cert_file, configuration.key_file = certificate, key
            return None
        raise KubeconfigError(
            f"exec plugin {command} returned neither a token nor a client certificate"
        )

    try:
        token = run()
    except KubeconfigError as error:
        raise user.error(str(error)) from None
    if token:
        configuration.api_key["authorization"] = token

    def refresh() -> str | None:
        if expires is None or time.time() < expires:
            return None
        return run()

    configuration.refresh = refresh


def _timestamp(text: str, command: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).timestamp()
    except ValueError:
        raise KubeconfigError(
            f"exec plugin {command}: status.expirationTimestamp is not RFC 3339"
        ) from None


# -- private files ----------------------------------------------------------------------------

_files: list[str] = []


def _private_file(data: bytes) -> str:
    """A file only this user can read, holding ``data``; removed when the process exits."""
    handle, name = tempfile.mkstemp(prefix="polyccm-kube-")
    with os.fdopen(handle, "wb") as file:
        file.write(data)
    if not _files:
        atexit.register(_remove_files)
    _files.append(name)
    return name


def _remove_files() -> None:
    for name in _files:
        with contextlib.suppress(OSError):
            os.unlink(name)
