"""Connection settings for the Kubernetes API: a kubeconfig file, or the pod's service account.

Read as client-go reads them, for what a controller manager needs:

* **kubeconfig**: the current context's cluster (``server``, ``certificate-authority`` or
  ``-data``, ``insecure-skip-tls-verify``, ``tls-server-name``) and user, whose credentials are
  tried in the order the official Python client tries them: ``token`` or ``tokenFile``, an
  ``exec`` credential plugin (``client.authentication.k8s.io`` ExecCredential: a token, or a
  client certificate and key; run again once its ``expirationTimestamp`` passes), ``username``
  and ``password``; a client certificate and key (``client-certificate``/``client-key`` or their
  ``-data``) go with any of them. Relative paths are relative to the file that names them.
  Without an explicit file, ``$KUBECONFIG`` (several files separated by ``:``, merged: the
  first file to name a cluster, user or context wins) or ``~/.kube/config``.
* **in-cluster**: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the service account's token and CA.

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
import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
"""How long a token read from a file is used before the file is read again (client-go: 1m)."""
EXEC_TIMEOUT = 60.0


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

    Raises :class:`KubeconfigError` with a one-line reason when none can be loaded."""
    try:
        if kubeconfig:
            configuration = load_kubeconfig([Path(kubeconfig)])
        else:
            try:
                configuration = load_in_cluster()
            except KubeconfigError:
                configuration = load_kubeconfig(default_kubeconfig_paths())
    except (KubeconfigError, OSError, ValueError, yaml.YAMLError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "in-cluster config or ~/.kube/config"
        raise KubeconfigError(f"cannot load {where}: {reason}") from None
    if master:
        configuration.host = master
    return configuration


def default_kubeconfig_paths() -> list[Path]:
    """``$KUBECONFIG``'s files, else ``~/.kube/config``."""
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in listed] or [Path("~/.kube/config").expanduser()]


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
    _use_token_file(configuration, token)
    return configuration


def load_kubeconfig(paths: list[Path]) -> Configuration:
    """The current context of the kubeconfig files ``paths`` (merged)."""
    merged = _merge(paths)
    current = merged.current_context
    if not current:
        raise KubeconfigError("no current-context")
    context = merged.find("contexts", "context", current)
    cluster_name = str(context.value.get("cluster") or "")
    cluster = merged.find("clusters", "cluster", cluster_name)
    user_name = context.value.get("user")
    user = merged.find("users", "user", str(user_name)) if user_name else _Entry({}, Path())
    server = str(cluster.value.get("server") or "")
    if not server:
        raise KubeconfigError(f"cluster {cluster_name!r} has no server")
    configuration = Configuration(server.rstrip("/"))
    if cluster.value.get("insecure-skip-tls-verify"):
        configuration.verify_ssl = False
    configuration.tls_server_name = cluster.value.get("tls-server-name") or None
    if configuration.host.startswith("https"):
        configuration.ssl_ca_cert = cluster.file_or_data("certificate-authority")
        configuration.cert_file = user.file_or_data("client-certificate")
        configuration.key_file = user.file_or_data("client-key")
    _authenticate(configuration, user, cluster)
    return configuration


# -- kubeconfig files -------------------------------------------------------------------------


class _Entry:
    """One cluster's or user's settings, and the directory its relative paths start from."""

    def __init__(self, value: Mapping[str, Any], base: Path) -> None:
        self.value = value
        self.base = base

    def path(self, key: str) -> Path:
        return (self.base / str(self.value[key])).expanduser()

    def file_or_data(self, key: str) -> str | None:
        """The path of ``key``, or of a private file holding ``key-data`` (base64)."""
        if self.value.get(f"{key}-data"):
            try:
                data = base64.b64decode(str(self.value[f"{key}-data"]), validate=True)
            except (binascii.Error, ValueError):
                raise KubeconfigError(f"{key}-data is not base64") from None
            return _private_file(data)
        if self.value.get(key):
            path = self.path(key)
            if not path.is_file():
                raise KubeconfigError(f"{key} {path} does not exist")
            return str(path)
        return None


class _Merged:
    """Kubeconfig files merged as kubectl merges them: the first one to name an entry wins."""

    def __init__(self) -> None:
        self.current_context = ""
        self.entries: dict[str, dict[str, _Entry]] = {"clusters": {}, "contexts": {}, "users": {}}

    def find(self, section: str, field: str, name: str) -> _Entry:
        entry = self.entries[section].get(name)
        if entry is None:
            raise KubeconfigError(f"{section[:-1]} {name!r} not found")
        body = entry.value.get(field)
        if not isinstance(body, Mapping):
            raise KubeconfigError(f"{section[:-1]} {name!r} has no {field}")
        return _Entry(body, entry.base)


def _merge(paths: list[Path]) -> _Merged:
    merged = _Merged()
    read = 0
    for path in paths:
        if len(paths) > 1 and not path.exists():
            continue  # kubectl skips missing files of a $KUBECONFIG list
        loaded = yaml.safe_load(path.read_text())
        read += 1
        if loaded is None:
            continue
        if not isinstance(loaded, Mapping):
            raise KubeconfigError(f"{path} is not a kubeconfig (a mapping)")
        merged.current_context = merged.current_context or str(loaded.get("current-context") or "")
        base = path.resolve().parent
        for section, entries in merged.entries.items():
            for item in loaded.get(section) or ():
                if isinstance(item, Mapping) and item.get("name"):
                    entries.setdefault(str(item["name"]), _Entry(item, base))
    if not read:
        raise KubeconfigError("no such file")
    return merged


# -- credentials ------------------------------------------------------------------------------


def _authenticate(configuration: Configuration, user: _Entry, cluster: _Entry) -> None:
    value = user.value
    if value.get("auth-provider"):
        name = (value["auth-provider"] or {}).get("name", "")
        raise KubeconfigError(
            f"auth-provider {name!r} is not supported (client-go removed these plugins); "
            "use an exec credential plugin"
        )
    if value.get("token"):
        configuration.api_key["authorization"] = f"Bearer {value['token']}"
    elif value.get("tokenFile"):
        _use_token_file(configuration, user.path("tokenFile"))
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
        token = path.read_text().strip()
        if not token:
            raise KubeconfigError(f"token file {path} is empty")
        return f"Bearer {token}"

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
    plugin = user.value["exec"]
    if not isinstance(plugin, Mapping) or not plugin.get("command"):
        raise KubeconfigError("exec plugin without a command")
    expires: float | None = None

    def run() -> str | None:
        nonlocal expires
        status = _run_exec_plugin(plugin, user.base, cluster.value)
        stamp = status.get("expirationTimestamp")
        expires = _timestamp(str(stamp)) if stamp else None
        if status.get("token"):
            return f"Bearer {status['token']}"
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            configuration.cert_file = _private_file(str(status["clientCertificateData"]).encode())
            configuration.key_file = _private_file(str(status["clientKeyData"]).encode())
            return None
        raise KubeconfigError("exec plugin returned neither a token nor a client certificate")

    token = run()
    if token:
        configuration.api_key["authorization"] = token

    def refresh() -> str | None:
        if expires is None or time.time() < expires:
            return None
        return run()

    configuration.refresh = refresh


def _run_exec_plugin(
    plugin: Mapping[str, Any], base: Path, cluster: Mapping[str, Any]
) -> Mapping[str, Any]:
    api_version = str(plugin.get("apiVersion") or "")
    request: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }
    if plugin.get("provideClusterInfo"):
        request["spec"]["cluster"] = dict(cluster)
    env = dict(os.environ)
    env.update({str(v["name"]): str(v["value"]) for v in plugin.get("env") or ()})
    env["KUBERNETES_EXEC_INFO"] = json.dumps(request)
    argv = [str(plugin["command"]), *(str(a) for a in plugin.get("args") or ())]
    try:
        done = subprocess.run(
            argv,
            cwd=base,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=EXEC_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KubeconfigError(f"exec plugin {argv[0]}: {error}") from None
    if done.returncode != 0:
        detail = " ".join(done.stderr.split())[:200]
        raise KubeconfigError(f"exec plugin {argv[0]} exited {done.returncode}: {detail}")
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        raise KubeconfigError(f"exec plugin {argv[0]} printed no ExecCredential") from None
    if not isinstance(answer, Mapping) or not isinstance(answer.get("status"), Mapping):
        raise KubeconfigError(f"exec plugin {argv[0]} printed no ExecCredential status")
    if api_version and answer.get("apiVersion") != api_version:
        raise KubeconfigError(
            f"exec plugin {argv[0]} answered {answer.get('apiVersion')}, not {api_version}"
        )
    status: Mapping[str, Any] = answer["status"]
    return status


def _timestamp(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).timestamp()
    except ValueError:
        raise KubeconfigError(f"exec plugin expirationTimestamp {text!r} is not RFC 3339") from None


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
