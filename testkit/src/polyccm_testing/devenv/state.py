"""The files a running development environment keeps in its state directory.

Layout of ``DIR``::

    state.json     what runs: pids, start times, URLs, log files (written as each part starts,
                   so a start that fails half-way can still be stopped)
    kubeconfig     admin access to the API server, verified against the generated CA
    env            shell ``KEY=value`` lines: KUBECONFIG and each emulator's variables
    tokens.csv     the API server's static token file (the admin token)
    pki/           CA, serving certificate, service-account keys
    etcd/          etcd's data
    logs/          one log per component; kept by ``down`` for post-mortems
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from polyccm import inputs
from polyccm.errors import ConfigError

STATE_FILE = "state.json"
ENV_FILE = "env"
KUBECONFIG_FILE = "kubeconfig"
TOKEN_FILE = "tokens.csv"
PKI_DIR = "pki"
ETCD_DIR = "etcd"
LOG_DIR = "logs"
LOCK_FILE = ".lock"

#: Files and folders ``down`` removes (the logs stay).
RUNTIME_PATHS: tuple[str, ...] = (
    STATE_FILE,
    ENV_FILE,
    KUBECONFIG_FILE,
    TOKEN_FILE,
    PKI_DIR,
    ETCD_DIR,
)

FORMAT_VERSION = 1


@dataclass
class Component:
    """One background process of the environment."""

    name: str
    """``etcd``, ``kube-apiserver`` or ``emulator/<cloud>``."""
    pid: int
    """Its pid, which is also its process group and session id."""
    start_time: int | None
    """Its start time from /proc, to tell it from a later process that reuses the pid."""
    url: str
    """Where it serves."""
    log: str
    """Its log file."""
    argv: list[str] = field(default_factory=list)
    """The command it runs, so that it can be started again the same way."""
    die_with_caller: bool = False
    """Whether the kernel kills it when the process that started it dies (test sessions)."""


@dataclass
class DevState:
    """Contents of ``state.json``."""

    api_url: str = ""
    admin_token: str = ""
    components: list[Component] = field(default_factory=list)
    emulator_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per cloud, the variables its emulator asked to export."""
    emulator_files: list[str] = field(default_factory=list)
    """Files the emulators asked to have written into the state dir (removed by ``down``)."""
    started_at: float = 0.0

    def component(self, name: str) -> Component | None:
        return next((item for item in self.components if item.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DevState:
        """The state ``data`` (``state.json`` read) records; :class:`ValueError` naming the
        field when it cannot be one, since ``down`` signals its pids and removes its files."""
        components = _typed(data, "components", list, [])
        env = _typed(data, "emulator_env", dict, {})
        files = _typed(data, "emulator_files", list, [])
        for name in files:
            # As they are written: a file directly inside the state dir, nothing elsewhere.
            if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
                raise ValueError(f"emulator_files: not a file name of the state dir: {name!r}")
        for cloud, variables in env.items():
            if not isinstance(variables, dict):
                raise ValueError(f"emulator_env.{cloud}: must be an object")
        return cls(
            api_url=str(data.get("api_url", "")),
            admin_token=str(data.get("admin_token", "")),
            components=[_component(item, index) for index, item in enumerate(components)],
            emulator_env={
                str(cloud): {str(k): str(v) for k, v in variables.items()}
                for cloud, variables in env.items()
            },
            started_at=float(data.get("started_at", 0.0)),
            emulator_files=list(files),
        )


def _typed(data: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    value = data.get(key, default)
    if not isinstance(value, kind):
        raise ValueError(f"{key}: must be a JSON {'list' if kind is list else 'object'}")
    return value


def _component(item: Any, index: int) -> Component:
    where = f"components[{index}]"
    if not isinstance(item, dict):
        raise ValueError(f"{where}: must be an object")
    pid = item.get("pid")
    # down signals the process group of each pid: never 0, 1 or a negative id (whole groups).
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        raise ValueError(f"{where}.pid: not a process id: {pid!r}")
    start_time = item.get("start_time")
    if start_time is not None and (not isinstance(start_time, int) or isinstance(start_time, bool)):
        raise ValueError(f"{where}.start_time: not a start time: {start_time!r}")
    argv = item.get("argv", [])
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"{where}.argv: must be a list of strings")
    return Component(
        name=str(item.get("name", "")),
        pid=pid,
        start_time=start_time,
        url=str(item.get("url", "")),
        log=str(item.get("log", "")),
        argv=argv,
        die_with_caller=item.get("die_with_caller") is True,
    )


class StateError(RuntimeError):
    """``state.json`` exists but cannot be read, or is not one (one line that says why)."""


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` atomically, readable by the owner only (it may hold the admin token)."""
    partial = path.with_name(path.name + ".tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    partial.replace(path)


def load(state_dir: Path) -> DevState | None:
    """The recorded state, or ``None`` when nothing was started in ``state_dir``."""
    path = state_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        data = inputs.load_json(inputs.read_text(path, what="state file"), str(path))
    except ConfigError as error:
        raise StateError(f"not a polyccm-dev state file: {error}") from None
    if not isinstance(data, Mapping):
        raise StateError(f"not a polyccm-dev state file: {path}: not a JSON object")
    try:
        return DevState.from_json(data)
    except (ValueError, TypeError, AttributeError) as error:
        reason = inputs.cut(" ".join(str(error).split()), 200)
        raise StateError(f"not a polyccm-dev state file: {path}: {reason}") from None


def save(state_dir: Path, state: DevState) -> None:
    _write_private(state_dir / STATE_FILE, json.dumps(state.to_json(), indent=2) + "\n")


def environment(state_dir: Path, state: DevState) -> dict[str, str]:
    """The variables a client of this environment needs: KUBECONFIG and the emulators'."""
    env = {"KUBECONFIG": str((state_dir / KUBECONFIG_FILE).resolve())}
    for cloud_env in state.emulator_env.values():
        env.update(cloud_env)
    return env


def write_env(state_dir: Path, env: Mapping[str, str]) -> None:
    """Write ``env`` as ``KEY=value`` lines that a POSIX shell can source."""
    lines = [f"{key}={shlex.quote(value)}" for key, value in env.items()]
    _write_private(state_dir / ENV_FILE, "\n".join(lines) + "\n")


def read_env(path: Path) -> dict[str, str]:
    """Parse an ``env`` file written by :func:`write_env`."""
    env = {}
    for line in path.read_text().splitlines():
        if "=" not in line or line.lstrip().startswith("#"):
            continue
        key, value = line.split("=", 1)
        parts = shlex.split(value)
        env[key.strip()] = parts[0] if parts else ""
    return env


def write_kubeconfig(
    state_dir: Path, *, server: str, ca_cert: Path, token: str, name: str = "polyccm-dev"
) -> Path:
    """Write an admin kubeconfig for ``server`` that verifies it against ``ca_cert``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority": str(ca_cert.resolve())},
            }
        ],
        "users": [{"name": f"{name}-admin", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin"}}],
        "current-context": name,
        "preferences": {},
    }
    path = state_dir / KUBECONFIG_FILE
    _write_private(path, yaml.safe_dump(config, sort_keys=False))
    return path


def remove_runtime_files(state_dir: Path) -> None:
    """Remove what a stopped environment leaves behind, except the logs."""
    for name in RUNTIME_PATHS:
        path = state_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
