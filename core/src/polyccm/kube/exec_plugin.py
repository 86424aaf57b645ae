"""A credential from a kubeconfig ``exec`` plugin, run by the ``kubernetes`` package.

The package's ``ExecProvider`` runs the plugin as client-go does
(``plugin/pkg/client/auth/exec/exec.go``): the kubeconfig's ``env`` added to polyccm's
environment, ``KUBERNETES_EXEC_INFO`` describing the request (with the cluster when
``provideClusterInfo`` asks), the answer's ``apiVersion`` checked. What polyccm adds:

* **failures in one line, without what the plugin printed**: the package puts the plugin's
  standard error in its exception, and its kubeconfig loader logs that and goes on without a
  credential. A failing plugin may print the credential it could not use, and polyccm's standard
  error is its log and must stay one line when start-up fails, so a failure says how the plugin
  failed (not found, its exit status or signal, an answer that is no ExecCredential), never its
  output;
* **the answer checked**: a token fit for a header, or a client certificate and key that are a
  PEM pair (written to private files, as the package writes them), and an
  ``expirationTimestamp`` that is RFC 3339;
* **when it runs again**: :mod:`polyccm.kube.credentials` (ahead of expiry, after a 401, off
  the request path), where the package would run it on the request path once expired.

As the package does, a plugin runs interactively (polyccm's terminal as its standard input and
error) only when polyccm's standard output is a terminal; a daemon's never is.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from polyccm.kube import package
from polyccm.kube.credentials import Credential
from polyccm.kube.kubeconfig_file import shown
from polyccm.kube.validation import fits_a_header, pem_pair_problem


class ExecPluginError(Exception):
    """The plugin gave no credential; the message says how it failed, not what it printed."""


def fetch(plugin: Mapping[str, Any], cwd: Path, cluster: Mapping[str, Any]) -> Credential:
    """Run ``plugin`` (a kubeconfig ``exec`` section) in ``cwd``: the credential it answers."""
    command = shown(str(plugin["command"]))
    status = _run(plugin, cwd, cluster, command)
    for key in ("token", "clientCertificateData", "clientKeyData", "expirationTimestamp"):
        if status.get(key) is not None and not isinstance(status[key], str):
            raise ExecPluginError(f"exec plugin {command}: status.{key} is not a string")
    stamp = status.get("expirationTimestamp")
    expires = _timestamp(stamp, command) if stamp else None
    due = Credential.due_before(expires, time.time()) if expires is not None else None
    if status.get("token"):
        if not fits_a_header(status["token"]):
            raise ExecPluginError(
                f"exec plugin {command}: its token has a control character, "
                "which no HTTP header can hold"
            )
        return Credential(f"Bearer {status['token']}", expires=expires, due=due)
    if status.get("clientCertificateData") and status.get("clientKeyData"):
        certificate, key = status["clientCertificateData"], status["clientKeyData"]
        if pem_pair_problem(certificate.encode(), key.encode()) is not None:
            raise ExecPluginError(
                f"exec plugin {command} returned a client certificate and key "
                "that are not a PEM pair"
            )
        kube_config: Any = package.module("kubernetes.config.kube_config")

        def written(name: str) -> str:
            data = kube_config.FileOrData(status, None, name, base64_file_content=False)
            return str(data.as_file())

        return Credential(
            cert_file=written("clientCertificateData"),
            key_file=written("clientKeyData"),
            expires=expires,
            due=due,
        )
    raise ExecPluginError(
        f"exec plugin {command} returned neither a token nor a client certificate and key"
    )


def _run(
    plugin: Mapping[str, Any], cwd: Path, cluster: Mapping[str, Any], command: str
) -> Mapping[str, Any]:
    """The ``status`` of the plugin's ExecCredential, as the package's ``ExecProvider`` reads
    it; its errors said in one line without the plugin's output."""
    kube_config: Any = package.module("kubernetes.config.kube_config")
    provider: Any = package.module("kubernetes.config.exec_provider")
    section = dict(plugin)
    # The package reads each variable's value as a required key; client-go takes none as "".
    section["env"] = [
        {"name": str(v["name"]), "value": str(v.get("value") or "")}
        for v in plugin.get("env") or ()
    ]
    try:
        status = provider.ExecProvider(
            kube_config.ConfigNode("exec", section),
            str(cwd),
            kube_config.ConfigNode("cluster", dict(cluster)),
        ).run()
    except FileNotFoundError:
        raise ExecPluginError(f"exec plugin {command}: executable not found") from None
    except OSError as error:
        # Only the system's reason: the exception's text would repeat the arguments.
        raise ExecPluginError(f"exec plugin {command}: cannot run: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ExecPluginError(
            f"exec plugin {command}: its output is not an ExecCredential"
        ) from None
    except ValueError:
        raise ExecPluginError(
            f"exec plugin {command}: cannot run: a NUL byte in its command, args or env"
        ) from None
    except TypeError:
        raise ExecPluginError(
            f"exec plugin {command}: its output is not an ExecCredential"
        ) from None
    except provider.ConfigException as error:
        raise ExecPluginError(f"exec plugin {command}{_reason(str(error))}") from None
    if not isinstance(status, Mapping):
        raise ExecPluginError(f"exec plugin {command}: its ExecCredential has no status")
    return status


_EXIT = re.compile(r"exec: process returned (-?\d+)")
_VERSION = re.compile(r"exec: plugin api version (.*) does not match (.*)", re.DOTALL)


def _reason(message: str) -> str:
    """The package's ``ConfigException`` message, said without what the plugin printed (the
    message that follows the command's name: ``: ...`` or `` answered ...``)."""
    exited = _EXIT.match(message)
    if exited:
        return f": {_how_it_ended(int(exited.group(1)))}"
    mismatch = _VERSION.match(message)
    if mismatch:
        return f" answered {shown(mismatch.group(1))}, not {shown(mismatch.group(2))}"
    if "missing key 'status'" in message:
        return ": its ExecCredential has no status"
    if message.startswith(("exec: failed to decode", "exec: malformed response")):
        return ": its output is not an ExecCredential"
    return f": {shown(message.splitlines()[0] if message else 'failed')}"


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        how = f"killed by {name}"
    else:
        how = f"failed with exit code {returncode}"
    return f"{how} (what it printed is not shown: it may hold a credential)"


def _timestamp(text: str, command: str) -> float:
    dateutil: Any = package.module("kubernetes.config.dateutil")
    try:
        return float(dateutil.parse_rfc3339(text).timestamp())
    except (ValueError, OverflowError):
        raise ExecPluginError(
            f"exec plugin {command}: status.expirationTimestamp is not RFC 3339"
        ) from None
