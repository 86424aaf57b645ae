"""Detached background processes for the development environment: spawn, identify, stop, probe.

Every component (etcd, kube-apiserver, a cloud emulator) runs in its own session, so its process
group id equals its pid and survives the command that started it. A pid alone is not an identity:
pids are reused, and an orphan that nobody reaps stays behind as a zombie. On Linux a process is
therefore identified by its pid plus its start time from ``/proc/<pid>/stat``, and zombies count
as dead. Elsewhere ``kill(pid, 0)`` is the fallback.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")

#: Popen handles of children started by this process, so stopping them also reaps them.
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ProcessStat:
    """The fields of ``/proc/<pid>/stat`` that matter here."""

    state: str
    process_group: int
    session: int
    start_time: int


def read_stat(pid: int) -> ProcessStat | None:
    """The stat fields of ``pid``, or ``None`` when there is no such process (or no /proc)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name sits in parentheses and may itself contain spaces or parentheses.
    fields = text[text.rindex(")") + 2 :].split()
    return ProcessStat(
        state=fields[0],
        process_group=int(fields[2]),
        session=int(fields[3]),
        start_time=int(fields[19]),
    )


def start_time_of(pid: int) -> int | None:
    """The start time (clock ticks since boot) of ``pid``, when /proc is there to tell it."""
    stat = read_stat(pid)
    return stat.start_time if stat else None


def is_alive(pid: int, start_time: int | None = None) -> bool:
    """Whether ``pid`` runs and is still the process that started at ``start_time``."""
    if _PROC.is_dir():
        stat = read_stat(pid)
        if stat is None or stat.state in ("Z", "X"):
            return False
        return start_time is None or stat.start_time == start_time
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_members(leader: int) -> list[int]:
    """Live processes of the session and process group that ``leader`` started."""
    if not _PROC.is_dir():
        try:
            os.killpg(leader, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [leader]
    members = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        stat = read_stat(int(entry.name))
        if (
            stat is not None
            and stat.process_group == leader
            and stat.session == leader
            and stat.state not in ("Z", "X")
        ):
            members.append(int(entry.name))
    return members


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]


def stop_group(pid: int, start_time: int | None = None, *, grace: float = 5.0) -> None:
    """Stop the process group led by ``pid``: SIGTERM, then SIGKILL after ``grace`` seconds.

    Nothing is signalled when ``pid`` now belongs to another process: Linux never reuses a pid
    while a process group or session of that id exists, so ours is then gone entirely.
    """
    stat = read_stat(pid)
    if stat is not None and start_time is not None and stat.start_time != start_time:
        return
    members = group_members(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not members:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            _reap(pid)
            members = group_members(pid)
            if not members:
                break
            time.sleep(0.05)
    child = _children.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=1.0)


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now (others may take them later)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def spawn_detached(
    argv: Sequence[str],
    *,
    log_path: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    die_with_parent: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session with its output appended to ``log_path``.

    Standard input is /dev/null and no other descriptor is inherited, so the process keeps
    running (and holds no pipe open) after the caller exits, unless ``die_with_parent`` asks
    the kernel to kill it with SIGKILL when the caller dies (test sessions, which may be killed
    before their clean-up runs). That takes util-linux's ``setpriv``, which sets the parent-death
    signal and then runs ``argv`` in the same process; without it the request is ignored.
    """
    command = list(argv)
    setpriv = shutil.which("setpriv") if die_with_parent else None
    if setpriv:
        command = [setpriv, "--pdeathsig", "SIGKILL", "--", *command]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            close_fds=True,
        )
    _children[child.pid] = child
    return child


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file (empty when it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class NotReadyError(Exception):
    """A probed URL did not answer in time, or its process died first."""


def http_status(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    timeout: float = 5.0,
) -> tuple[int, bytes]:
    """GET ``url`` and return its status and body; connection errors raise :class:`OSError`."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())


def wait_until_answers(
    url: str,
    *,
    accept: Callable[[int, bytes], bool],
    timeout: float,
    alive: Callable[[], bool],
    headers: Mapping[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> None:
    """Poll ``url`` until ``accept(status, body)``; raise :class:`NotReadyError` after ``timeout``
    seconds or as soon as ``alive()`` turns false."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while True:
        try:
            status, body = http_status(url, headers=headers, context=context)
            if accept(status, body):
                return
            last = f"HTTP {status}: {body[:200].decode(errors='replace').strip()}"
        except (OSError, ssl.SSLError) as error:
            last = str(error)
        if not alive():
            raise NotReadyError(f"the process serving {url} exited ({last})")
        if time.monotonic() >= deadline:
            raise NotReadyError(f"{url} not ready after {timeout:.0f} s ({last})")
        time.sleep(0.2)
