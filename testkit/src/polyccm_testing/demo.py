"""What every provider's ``make demo PROVIDER=<name>`` shares: a narrated scenario against the
local control plane and the cloud's emulator, with the real ``polyccm`` process in between.

Each provider's ``polyccm_<name>.demo`` builds its cloud through the emulator's API, registers
nodes as kubelets do, runs :func:`running_polyccm` and prints what a user would look at. The
helpers here are the parts that do not depend on the cloud.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from polyccm.kube.api import NODES, SERVICES, ApiError, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT

T = TypeVar("T")


def say(message: str) -> None:
    """One step of the story."""
    print(f"==> {message}", flush=True)


def wait(what: str, check: Callable[[], T | None], timeout: float = 45.0) -> T:
    """The first truthy answer of ``check``; the demo stops with a one-line reason after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.25)
    raise SystemExit(f"demo: timed out waiting for {what}")


def table(headers: list[str], rows: list[list[str]]) -> str:
    """``rows`` under ``headers``, in columns as kubectl prints them."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])


def register_node(api: KubeApi, name: str, *, pod_cidr: str | None = None) -> None:
    """Register ``name`` as ``kubelet --cloud-provider=external`` does: tainted uninitialised
    (with the pod CIDR the node IPAM would give it, where routes are shown)."""
    spec: dict[str, Any] = {
        "taints": [{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]
    }
    if pod_cidr:
        spec.update(podCIDR=pod_cidr, podCIDRs=[pod_cidr])
    api.create(
        NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec}
    )


@contextmanager
def running_polyccm(
    provider: str,
    *,
    state: Path,
    env: Mapping[str, str],
    kubeconfig: Path,
    args: Sequence[str] = (),
) -> Iterator[Path]:
    """``polyccm --provider PROVIDER`` as a process on the demo's control plane (no leader
    election, health on a free loopback port, a short monitor period), with ``env`` added to
    the environment; yields its log file and stops it afterwards."""
    log = state / "polyccm.log"
    command = [
        sys.executable,
        "-m",
        "polyccm.cli",
        f"--provider={provider}",
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        "--secure-port=0",
        "--node-monitor-period=2s",
        *args,
    ]
    with log.open("w") as output:
        process = subprocess.Popen(
            command, env={**os.environ, **env}, stdout=output, stderr=subprocess.STDOUT
        )
        try:
            yield log
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def service_gone(api: KubeApi, namespace: str, name: str) -> bool:
    """Whether the Service is deleted for good (its finalizer removed)."""
    try:
        api.get(SERVICES, name, namespace)
    except ApiError as error:
        return error.not_found
    return False
