"""Runs a kubeconfig ``exec`` credential plugin and reads the ExecCredential it prints.

Run as client-go runs it (``plugin/pkg/client/auth/exec/exec.go``): the kubeconfig's ``env``
added to polyccm's environment, ``KUBERNETES_EXEC_INFO`` describing the request, never
interactive (no standard input). One difference, on purpose: client-go connects the plugin's
standard error to its own, while here it is discarded. A failing plugin may print the credential
it could not use, and polyccm's standard error is its log (masked for secrets it knows; not for
these) and must stay one line when start-up fails. So a failure says how the plugin failed (not
found, its exit status, no answer within :data:`TIMEOUT`, an answer that is no ExecCredential),
never what it printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from polyccm.kube.kubeconfig_file import shown

TIMEOUT = 60.0
"""Seconds a plugin may take (client-go waits forever; a hung plugin would hang start-up)."""


class ExecPluginError(Exception):
    """The plugin gave no credential; the message says how it failed, not what it printed."""


def run(plugin: Mapping[str, Any], cwd: Path, cluster: Mapping[str, Any]) -> Mapping[str, Any]:
    """Run ``plugin`` (a kubeconfig ``exec`` section) in ``cwd``; its answer's ``status``."""
    api_version = str(plugin.get("apiVersion") or "")
    wanted = shown(api_version)
    command = shown(str(plugin["command"]))
    request: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }
    if plugin.get("provideClusterInfo"):
        request["spec"]["cluster"] = dict(cluster)
    env = dict(os.environ)
    env.update({str(v["name"]): str(v.get("value") or "") for v in plugin.get("env") or ()})
    env["KUBERNETES_EXEC_INFO"] = json.dumps(request)
    argv = [str(plugin["command"]), *(str(a) for a in plugin.get("args") or ())]
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise ExecPluginError(f"exec plugin {command}: executable not found") from None
    except subprocess.TimeoutExpired:
        raise ExecPluginError(
            f"exec plugin {command}: no answer within {TIMEOUT:g}s (stopped)"
        ) from None
    except OSError as error:
        # Only the system's reason: the exception's text would repeat the arguments.
        raise ExecPluginError(f"exec plugin {command}: cannot run: {error.strerror}") from None
    except ValueError:
        raise ExecPluginError(
            f"exec plugin {command}: cannot run: a NUL byte in its command, args or env"
        ) from None
    if done.returncode != 0:
        raise ExecPluginError(f"exec plugin {command}: {_how_it_ended(done.returncode)}")
    return _status(done.stdout, command, api_version, wanted)


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


def _status(stdout: bytes, command: str, api_version: str, wanted: str) -> Mapping[str, Any]:
    """The ``status`` of the ExecCredential in ``stdout``."""
    try:
        answer = json.loads(stdout)
    except ValueError:
        answer = None
    if not isinstance(answer, Mapping) or answer.get("kind") != "ExecCredential":
        raise ExecPluginError(f"exec plugin {command}: its output is not an ExecCredential")
    if api_version and answer.get("apiVersion") != api_version:
        answered = shown(str(answer.get("apiVersion")))
        raise ExecPluginError(f"exec plugin {command} answered {answered}, not {wanted}")
    status = answer.get("status")
    if not isinstance(status, Mapping):
        raise ExecPluginError(f"exec plugin {command}: its ExecCredential has no status")
    for field in ("token", "clientCertificateData", "clientKeyData", "expirationTimestamp"):
        if status.get(field) is not None and not isinstance(status[field], str):
            raise ExecPluginError(f"exec plugin {command}: status.{field} is not a string")
    return status
