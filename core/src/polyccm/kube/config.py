"""Connection settings for the Kubernetes API, loaded by the ``kubernetes`` package's
``kubernetes.config``: a kubeconfig file, or the pod's service account.

* **kubeconfig**: ``--kubeconfig``, else (outside a pod) ``$KUBECONFIG`` (several files
  separated by ``:``, merged; the files that do not exist are skipped, as client-go skips them)
  or ``~/.kube/config``. :mod:`polyccm.kube.validation` checks the files first, so that a
  mistake stops start-up with one line naming the file and the field, then hands the current
  context to ``kubernetes.config.load_kube_config_from_dict``, which reads the cluster (server,
  CA, ``insecure-skip-tls-verify``, ``tls-server-name``, ``proxy-url``) and the user's
  ``token``, ``tokenFile``, ``username``/``password`` and client certificate. An ``exec``
  credential plugin runs through the package's ``ExecProvider`` (:mod:`polyccm.kube.exec_plugin`).
  Impersonation (``as``, ``as-groups``...), which the package ignores, is sent as client-go sends
  it: ``Impersonate-*`` headers on every request. ``auth-provider`` plugins are refused.
* **in-cluster**: ``kubernetes.config``'s ``InClusterConfigLoader`` reads
  ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the service account's token and CA.

The package reads ``HTTPS_PROXY``/``HTTP_PROXY`` and ``NO_PROXY`` from the environment (a
kubeconfig's ``proxy-url`` wins); a proxy it cannot use (SOCKS, without PySocks) is refused.

When the credential is fetched again is polyccm's (:mod:`polyccm.kube.credentials`): a token
file (``tokenFile``, the service account's) is read again by the package's loader a minute after
it was read, as client-go reads it, and at once when the API server answers 401; an exec plugin
runs again before its credential expires and after a 401, in the background, so no request
waits on a lock while a plugin runs. The package would do each on the request path (an exec
plugin only once expired, a kubeconfig's ``tokenFile`` never).

The package is imported when settings are first made, not with this module: commands that never
connect (``--help``, ``rbac``, a bad flag) do not pay for it.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import urllib3

from polyccm.kube import exec_plugin, package
from polyccm.kube.credentials import Credential, Credentials
from polyccm.kube.kubeconfig_file import escaped, shown
from polyccm.kube.validation import (
    Chosen,
    FileError,
    KubeconfigError,
    check_token_file,
    choose,
    fits_a_header,
    proxy_problem,
)

__all__ = [
    "SERVICE_ACCOUNT",
    "TOKEN_REREAD_SECONDS",
    "Configuration",
    "KubeconfigError",
    "default_kubeconfig_paths",
    "load_configuration",
    "load_in_cluster",
]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
"""How long a token read from a file is used before the file is read again (client-go: 1m)."""
POOL_SIZE = 32
"""Connections kept open: more than the threads that send at once (workers, their writers,
informers, events), or each extra one is a new TLS handshake per request."""


def _package(name: str) -> Any:
    """A module of the ``kubernetes`` package (:mod:`polyccm.kube.package`)."""
    return package.module(name)


class Configuration:
    """Where the API server is and how to authenticate to it.

    ``settings`` is the package's ``kubernetes.client.Configuration`` (the server, TLS, proxy),
    from which the package's REST client (``kubernetes.client.rest.RESTClientObject``) makes its
    connection pool; :attr:`credentials` what requests authenticate with now;
    :attr:`impersonation` the ``Impersonate-*`` headers every request carries."""

    def __init__(
        self,
        host: str = "http://localhost",
        *,
        settings: Any = None,
        credentials: Credentials | None = None,
    ) -> None:
        if settings is None:
            settings = _settings()
            settings.host = host
        self.settings: Any = settings
        self.credentials = credentials if credentials is not None else Credentials()
        self.impersonation: list[tuple[str, str]] = []
        """``Impersonate-*`` headers (name, value; a name may repeat) for every request."""
        self.password: str | None = None
        """The kubeconfig's password, when it authenticates with one (to mask it in logs)."""

    @property
    def host(self) -> str:
        return str(self.settings.host)

    @host.setter
    def host(self, value: str) -> None:
        self.settings.host = value

    @property
    def verify_ssl(self) -> bool:
        return bool(self.settings.verify_ssl)

    @property
    def ssl_ca_cert(self) -> str | None:
        value = self.settings.ssl_ca_cert
        return str(value) if value else None

    @property
    def proxy(self) -> str | None:
        value = self.settings.proxy
        return str(value) if value else None

    @property
    def cert_file(self) -> str | None:
        return self.credentials.now.cert_file

    @property
    def key_file(self) -> str | None:
        return self.credentials.now.key_file

    @property
    def api_key(self) -> dict[str, str]:
        """``{"authorization": "Bearer <token>"}`` (or ``Basic ...``), as the package's
        ``Configuration.api_key``; empty without one."""
        value = self.credentials.now.authorization
        return {"authorization": value} if value else {}

    def authorization(self) -> str | None:
        """The ``Authorization`` header to send now (fetched again when due)."""
        return self.credentials.current().authorization

    def get_api_key_with_prefix(self, identifier: str, alias: str | None = None) -> str | None:
        """The ``Authorization`` value, as the package's method of this name returns it
        (``identifier`` and ``alias`` are accepted for compatibility)."""
        del identifier, alias
        return self.authorization()

    def rest_client(self, credential: Credential) -> Any:
        """The package's REST client (one connection pool) for requests sending
        ``credential``: its client certificate goes in the pool's TLS settings."""
        rest = _package("kubernetes.client.rest")
        settings = self.settings
        if (credential.cert_file, credential.key_file) != (settings.cert_file, settings.key_file):
            settings = _copy(settings)
            settings.cert_file, settings.key_file = credential.cert_file, credential.key_file
        if not settings.verify_ssl:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        return rest.RESTClientObject(settings)


def _settings() -> Any:
    """A fresh ``kubernetes.client.Configuration`` as polyccm's client wants it."""
    settings = _package("kubernetes.client.configuration").Configuration()
    settings.retries = False  # polyccm.kube.api retries as client-go does
    settings.connection_pool_maxsize = POOL_SIZE
    settings.keep_alive = True  # client-go's TCP keep-alive: a silent peer is noticed
    return settings


def _copy(settings: Any) -> Any:
    return copy.copy(settings)


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
    """:func:`_load_kubeconfig`, its error said in one line naming the file."""
    origin = " (listed in KUBECONFIG)" if listed_in_environment else ""
    try:
        return _load_kubeconfig(paths)
    except FileError as error:
        where = f"{error.path}{origin}"
        reason = str(error)
    except KubeconfigError as error:
        where = f"{os.pathsep.join(map(str, paths))}{origin}"
        reason = str(error)
    except (OSError, ValueError) as error:
        # What no check foresaw (a path with a NUL byte...): still one line, and only the
        # system's reason, which quotes no content.
        where = f"{os.pathsep.join(map(str, paths))}{origin}"
        reason = str(error.strerror) if isinstance(error, OSError) else shown(str(error))
    raise KubeconfigError(escaped(f"cannot load kubeconfig {where}: {reason}")) from None


def _load_kubeconfig(paths: list[Path]) -> Configuration:
    """The current context of the kubeconfig files ``paths``, checked, then loaded by the
    package."""
    chosen = choose(paths)
    kube_config = _package("kubernetes.config.kube_config")

    def load() -> Any:
        settings = _settings()
        try:
            kube_config.load_kube_config_from_dict(
                chosen.document, client_configuration=settings, persist_config=False
            )
        except kube_config.ConfigException as error:
            raise KubeconfigError(_package_reason(error)) from None
        return settings

    settings = load()
    _check_environment_proxy(settings)
    fetch: Callable[[], Credential] | None = None
    if chosen.exec_plugin is not None:
        fetch = _exec_fetch(chosen, _credential(settings))
        try:
            first = fetch()
        except exec_plugin.ExecPluginError as error:
            raise FileError(chosen.exec_file, f"{chosen.user_label}: {error}") from None
    elif chosen.token_file is not None:
        fetch = _file_fetch(load, chosen.token_file)
        first = _reread_later(_credential(settings))
    else:
        first = _credential(settings)
    configuration = Configuration(settings=settings, credentials=Credentials(first, fetch))
    configuration.impersonation = chosen.impersonation
    configuration.password = chosen.password
    return configuration


def _exec_fetch(chosen: Chosen, static: Credential) -> Callable[[], Credential]:
    """Runs the user's exec plugin: its credential, with the user's own client certificate
    (or password) where the plugin answers none."""
    plugin = chosen.exec_plugin
    assert plugin is not None

    def fetch() -> Credential:
        answer = exec_plugin.fetch(plugin, chosen.exec_dir, chosen.cluster)
        return Credential(
            answer.authorization or static.authorization,
            answer.cert_file or static.cert_file,
            answer.key_file or static.key_file,
            expires=answer.expires,
            due=answer.due,
        )

    return fetch


def _file_fetch(load: Callable[[], Any], token_file: Path) -> Callable[[], Credential]:
    """A token file read again: the package's loader run again (it reads the file), once the
    file is checked to hold a token (a file being rewritten may not yet)."""

    def fetch() -> Credential:
        try:
            check_token_file(token_file)
        except KubeconfigError as error:
            raise KubeconfigError(f"token file {shown(str(token_file))}: {error}") from None
        return _reread_later(_credential(load()))

    return fetch


def _reread_later(credential: Credential) -> Credential:
    return Credential(
        credential.authorization,
        credential.cert_file,
        credential.key_file,
        due=time.time() + TOKEN_REREAD_SECONDS,
    )


def _credential(settings: Any) -> Credential:
    """What the package loaded into ``settings``: its ``Authorization`` value (which it keeps
    in ``api_key["BearerToken"]``, with a token file's line break and, in-cluster, as
    ``bearer``) and client certificate."""
    value = str(settings.api_key.get("BearerToken") or "").strip()
    scheme, _, secret = value.partition(" ")
    authorization: str | None = None
    if secret.strip():
        # client-go trims a token read from a file; "Bearer" as every client writes it.
        scheme = "Bearer" if scheme.lower() == "bearer" else scheme
        authorization = f"{scheme} {secret.strip()}"
        if not fits_a_header(authorization):
            raise KubeconfigError(
                "the token has a control character, which no HTTP header can hold"
            )
    return Credential(authorization, settings.cert_file or None, settings.key_file or None)


def _check_environment_proxy(settings: Any) -> None:
    """The proxy the package took from the environment (or ``proxy-url``, checked already)
    must be one it can use for this server."""
    proxy = settings.proxy
    if not proxy:
        return
    rest = _package("kubernetes.client.rest")
    if rest.should_bypass_proxies(settings.host, settings.no_proxy or ""):
        return
    reason = proxy_problem(str(proxy))
    if reason:
        raise KubeconfigError(
            f"the proxy HTTPS_PROXY, HTTP_PROXY or ALL_PROXY names is not supported ({reason})"
        )


def _package_reason(error: Exception) -> str:
    """A ``ConfigException``'s message on one line, cut (it names fields and files)."""
    lines = str(error).splitlines()
    return shown(lines[0] if lines else type(error).__name__)


# -- in-cluster ---------------------------------------------------------------------------------


def load_in_cluster(account: Path = SERVICE_ACCOUNT) -> Configuration:
    """The pod's service account (``account``: where its token and CA are), loaded by the
    package's ``InClusterConfigLoader``; :class:`KubeconfigError` outside a pod."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
    token, ca = account / "token", account / "ca.crt"
    if not token.is_file() or not ca.is_file():
        raise KubeconfigError(f"service account token or CA missing in {account}")
    try:
        check_token_file(token)
    except KubeconfigError as error:
        raise KubeconfigError(f"service account token {token}: {error}") from None
    incluster = _package("kubernetes.config.incluster_config")

    def load() -> Any:
        settings = _settings()
        loader = incluster.InClusterConfigLoader(
            token_filename=str(token), cert_filename=str(ca), try_refresh_token=False
        )
        try:
            loader.load_and_set(settings)
        except incluster.ConfigException as error:
            raise KubeconfigError(
                f"service account in {account}: {_package_reason(error)}"
            ) from None
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
            raise KubeconfigError(f"service account in {account}: {reason}") from None
        return settings

    settings = load()
    _check_environment_proxy(settings)
    credentials = Credentials(
        _reread_later(_credential(settings)),
        _file_fetch(load, token),
    )
    return Configuration(settings=settings, credentials=credentials)
