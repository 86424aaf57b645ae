"""Run an upstream cloud-controller-manager (a peer) against a kubeconfig and an emulator, with
the flags, environment and cloud config an operator's deployment would give it, and stop it.

The process gets no environment of ours but ``PATH``/``HOME``/``TMPDIR`` and what the caller
gives, and every URL in that environment must name a loopback host: a peer must never reach a
real cloud (its SDK's defaults would) or a proxy of this machine. Its output goes to a log
file, read back when a step fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

#: The controllers a switch compares: upstream's cloud-node, node-lifecycle and service
#: controllers (the route controller is added by the caller when a cluster CIDR is given).
SWITCH_CONTROLLERS = (
    "cloud-node-controller",
    "cloud-node-lifecycle-controller",
    "service-lb-controller",
)

_KEPT = ("PATH", "HOME", "TMPDIR")
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class PeerError(RuntimeError):
    """A peer would not start, or stopped by itself."""


def common_flags(kubeconfig: Path, *, controllers: Sequence[str] = SWITCH_CONTROLLERS) -> list[str]:
    """The flags every upstream CCM takes here: this kubeconfig, no leader election, no secure
    port (nothing scrapes it), the named controllers only, no node CIDR allocation and no
    routes (polyccm's switch compares load balancers and nodes)."""
    return [
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--secure-port=0",
        f"--controllers={','.join(controllers)}",
        "--allocate-node-cidrs=false",
        "--configure-cloud-routes=false",
        "--v=2",
    ]


def loopback_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` over the few variables a process needs (``PATH``, ``HOME``, ``TMPDIR``), proxies
    cleared; raises ValueError when a value is a URL whose host is not loopback."""
    for name, value in env.items():
        if "://" not in value:
            continue
        host = urllib.parse.urlsplit(value).hostname or ""
        if host not in _LOOPBACK:
            raise ValueError(f"{name}={value} is not a loopback address: a peer stays on loopback")
    kept = {name: os.environ[name] for name in _KEPT if name in os.environ}
    # A proxy of this machine would take the peer's requests elsewhere; the caller may set its
    # own (a loopback recorder) in ``env``.
    return {**kept, "NO_PROXY": "", "HTTP_PROXY": "", "HTTPS_PROXY": "", **env}


def aws_environment(
    emulator_env: Mapping[str, str], *, region: str, metadata: bool = False
) -> dict[str, str]:
    """What aws-cloud-controller-manager needs to reach the AWS emulator alone: its endpoint
    (``AWS_ENDPOINT_URL``, which aws-sdk-go-v2 honours for every service), fake keys, the
    region, no shared config files; and the instance metadata service disabled
    (``AWS_EC2_METADATA_DISABLED``) unless ``metadata`` (then the emulator's IMDS endpoint)."""
    env = {
        "AWS_ENDPOINT_URL": emulator_env["AWS_ENDPOINT_URL"],
        "AWS_ACCESS_KEY_ID": emulator_env.get("AWS_ACCESS_KEY_ID", "testing"),
        "AWS_SECRET_ACCESS_KEY": emulator_env.get("AWS_SECRET_ACCESS_KEY", "testing"),
        "AWS_REGION": region,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    if metadata:
        env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = emulator_env["AWS_EC2_METADATA_SERVICE_ENDPOINT"]
    else:
        env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


@dataclass
class RunningPeer:
    """A started peer: its process and the log file its output goes to."""

    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of its log, for a failure message."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_running(self) -> None:
        """Raise :class:`PeerError` (with its log's tail) if the peer has exited."""
        code = self.process.poll()
        if code is not None:
            raise PeerError(f"{self.argv[0]} exited with {code}:\n{self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


def start_peer(
    binary: Path, flags: Sequence[str], env: Mapping[str, str], log_path: Path
) -> RunningPeer:
    """Start ``binary`` with ``flags`` in :func:`loopback_environment` of ``env``, its output
    appended to ``log_path``."""
    argv = [str(binary), *flags]
    full_env = loopback_environment(env)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(argv, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    return RunningPeer(argv, full_env, log_path, process)


@contextmanager
def running_peer(
    binary: Path, flags: Sequence[str], env: Mapping[str, str], log_path: Path
) -> Iterator[RunningPeer]:
    """:func:`start_peer`, stopped when the block ends."""
    peer = start_peer(binary, flags, env, log_path)
    try:
        yield peer
    finally:
        peer.stop()
