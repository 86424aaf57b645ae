"""A CCM under measurement, as a process: started, watched until its health endpoint answers,
its peak memory read from the kernel, its metrics scraped, and stopped.

Peak RSS is ``VmHWM`` (the high-water mark of resident memory) of the process and each of its
descendants still alive, added up, read just before the process is stopped. CPU seconds are the
user and system time of the process and its living descendants (``/proc/PID/stat``), read when it
became ready: what start-to-ready costs, which, unlike the wall time, does not grow when other
work shares the machine's cores.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from polyccm_testing.secureport import secure_get


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The parent pid is the second field after the command name in parentheses.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _vm_hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def stat_fields(pid: int) -> list[str]:
    """``/proc/PID/stat``'s fields after the command name (the state is the first)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()


def _cpu_ticks(pid: int) -> int:
    try:
        fields = stat_fields(pid)
    except OSError:
        return 0
    # utime and stime: the 14th and 15th fields of stat, the 12th and 13th after the name.
    return int(fields[11]) + int(fields[12])


def start_seconds(pid: int) -> float:
    """The process's start, in seconds since boot (``CLOCK_BOOTTIME``)."""
    return int(stat_fields(pid)[19]) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of the process alone, every thread's."""
    return _cpu_ticks(pid) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    """VmHWM of the process alone, in MiB."""
    return _vm_hwm_kib(pid) / 1024


def _tree(pid: int) -> list[int]:
    """``pid`` and its living descendants."""
    found: list[int] = []
    pending = [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(_children(current))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of ``pid`` and its living descendants."""
    return sum(cpu_seconds(each) for each in _tree(pid))


def tree_peak_rss_mib(pid: int) -> float:
    """VmHWM of ``pid`` and its living descendants, in MiB."""
    return sum(peak_rss_mib(each) for each in _tree(pid))


@dataclass(frozen=True)
class Health:
    """Where a CCM says it is ready: its secure port and the path."""

    port: int
    path: str


class CcmProcess:
    """One CCM run: ``argv`` with ``env`` added, its output in ``log``."""

    def __init__(
        self, argv: Sequence[str], env: Mapping[str, str], log: Path, health: Health
    ) -> None:
        self.argv = list(argv)
        self.log = log
        self.health = health
        self._output = log.open("w")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            self.argv,
            env={**os.environ, **env},
            stdout=self._output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 120.0) -> float | None:
        """Seconds from start until the health path answered 200; ``None`` if it never did."""
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return None
            if secure_get(self.health.port, self.health.path, timeout=2.0).status == 200:
                return time.monotonic() - self.started
            time.sleep(0.05)
        return None

    def alive(self) -> bool:
        return self.process.poll() is None

    def metrics(self) -> str:
        """The text of its /metrics (empty when it does not answer)."""
        reply = secure_get(self.health.port, "/metrics", timeout=10.0)
        return reply.body if reply.status == 200 else ""

    def peak_rss_mib(self) -> float:
        return tree_peak_rss_mib(self.process.pid)

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._output.close()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
