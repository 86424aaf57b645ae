"""The whole ``polyccm`` process (the fake cloud, the real kube-apiserver) sent one to three
SIGTERMs and SIGINTs at random moments of each phase of its life ends within the bound every
time (issue 34): flag parsing, building the provider, waiting for the caches, a running term, a
term whose API server has gone (cut: connections refused; or frozen: nothing answered), a term
whose cloud hangs (in ``initialize``, in a controller's call, in a thread pool's worker), and a
leader election campaign. Where the API server answers, the Lease is given up (or never taken);
a second and third signal change nothing: one "stopping" line, no traceback.

The moments are random but seeded: ``POLYCCM_SHUTDOWN_STRESS_SEED`` (default 34) repeats a run.
``make test`` runs :data:`ITERATIONS` per phase (``POLYCCM_SHUTDOWN_STRESS_ITERATIONS``, default
2); ``make stress-shutdown`` runs 40 per phase, 280 in all, and prints each one's figures.

Upstream ends at the first signal by Go's default disposition (k8s.io/cloud-provider v0.35.4
sample/basic_main.go:49 runs the command with ``wait.NeverStop``; app/controllermanager.go:
264-266 exits when leading stops) and releases nothing; polyccm releases the Lease on the way
out, which is why its way out has to be bounded.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from polyccm.app.shutdown import BOUND
from polyccm.kube.api import LEASES, KubeApi
from polyccm.leaderelection import micro_time
from polyccm_testing.fake_main import COMMAND as FAKE_MAIN
from polyccm_testing.fake_main import HANG_MARKER, HANG_VARIABLE
from polyccm_testing.kubeobjects import lease_holder, make_node
from polyccm_testing.tcpproxy import TcpProxy, proxied_kubeconfig

ITERATIONS = int(os.environ.get("POLYCCM_SHUTDOWN_STRESS_ITERATIONS", "2"))
"""Iterations per phase."""
SEED = int(os.environ.get("POLYCCM_SHUTDOWN_STRESS_SEED", "34"))
SIGNALS = (signal.SIGTERM, signal.SIGINT)
STARTED = 90.0
"""Seconds a process may take to reach its phase on a loaded machine."""
OTHER = "another-polyccm"


@dataclass(frozen=True)
class Election:
    """Leader election's timings: each iteration draws the fast ones or upstream's defaults
    (whose longer renew deadline gives a hung term and a hung Lease request more time)."""

    lease: float
    renew: float
    retry: float

    def flags(self) -> list[str]:
        return [
            f"--leader-elect-lease-duration={self.lease:g}s",
            f"--leader-elect-renew-deadline={self.renew:g}s",
            f"--leader-elect-retry-period={self.retry:g}s",
        ]


FAST = Election(4, 3, 1)
UPSTREAM_DEFAULTS = Election(15, 10, 2)  # cloud-provider v0.35.4, component-base defaults


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Polyccm:
    """One ``polyccm`` process (the fake cloud) with its output collected as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **env},
        )
        self.lines: list[str] = []
        self.ended_at = 0.0
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        self.process.wait()
        self.ended_at = time.monotonic()
        with self._changed:
            self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def wait_for_line(self, text: str) -> None:
        """Until a line holds ``text``; fails if the process ends or takes too long first."""
        deadline = time.monotonic() + STARTED
        with self._changed:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if self.ended_at or left <= 0:
                    pytest.fail(f"never saw {text!r}:\n{''.join(self.lines)[-4000:]}")
                self._changed.wait(left)

    def ended(self, timeout: float) -> bool:
        self._reader.join(timeout)
        return not self._reader.is_alive()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self._reader.join(30)


@dataclass
class Plan:
    """The signals of one iteration: which, and when after the phase was reached."""

    signals: list[signal.Signals]
    offsets: list[float]

    @classmethod
    def draw(cls, rng: random.Random, window: float) -> Plan:
        count = rng.randint(1, 3)
        signals = [rng.choice(SIGNALS) for _ in range(count)]
        if rng.random() < 1 / 3:  # back to back, as a wrapper forwarding its own signal
            offsets = [rng.uniform(0, window)] * count
        else:
            offsets = sorted(rng.uniform(0, window) for _ in range(count))
        return cls(signals, offsets)

    def __str__(self) -> str:
        return ", ".join(
            f"{s.name}@{o:.2f}s" for s, o in zip(self.signals, self.offsets, strict=True)
        )


@dataclass
class Setting:
    """What one iteration of a phase starts: the process's extra flags and environment, the
    line that shows it is in the phase, and what to do once it is."""

    marker: str
    window: float
    flags: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    kubeconfig: str = ""
    when_there: Callable[[], None] = lambda: None
    manager_running: bool = True
    lease_after: str | None = None
    """The Lease's holder expected once the process has ended (None: not checked)."""
    variant: str = ""


@dataclass
class Context:
    control_plane: Any
    kube_api: KubeApi
    namespace: str
    tmp_path: Path
    rng: random.Random
    lease: str
    proxies: list[TcpProxy]
    election: Election

    def proxy(self, *, frozen: bool = False) -> tuple[str, TcpProxy]:
        path, proxy = proxied_kubeconfig(
            self.control_plane.kubeconfig, self.tmp_path / f"kubeconfig-{self.lease}"
        )
        self.proxies.append(proxy)
        if frozen:
            proxy.freeze()
        return str(path), proxy


def flag_parsing(ctx: Context) -> Setting:
    return Setting(
        marker=f"{HANG_MARKER} add_options",
        window=1.0,
        env={HANG_VARIABLE: "add_options"},
        manager_running=False,
    )


def provider_start(ctx: Context) -> Setting:
    return Setting(
        marker=f"{HANG_MARKER} build_provider",
        window=1.0,
        env={HANG_VARIABLE: "build_provider"},
        manager_running=False,
    )


def waiting_for_caches(ctx: Context) -> Setting:
    # Without leader election the term starts at once; its lists are never answered.
    kubeconfig, _ = ctx.proxy(frozen=True)
    return Setting(
        marker="waiting for the caches of nodes and services to sync",
        window=1.5,
        flags=["--leader-elect=false"],
        kubeconfig=kubeconfig,
    )


def running_term(ctx: Context) -> Setting:
    return Setting(marker="started controllers", window=2.0, lease_after="")


def api_server_gone(ctx: Context) -> Setting:
    kubeconfig, proxy = ctx.proxy()
    gone = ctx.rng.choice([proxy.cut, proxy.freeze])
    # Signals land while the term still runs (informers in backoff, renewals failing) and,
    # after the renew deadline, while it campaigns again against no API server.
    return Setting(
        marker="started controllers",
        window=ctx.election.renew + 1,
        kubeconfig=kubeconfig,
        when_there=gone,
        variant=gone.__name__,
    )


def cloud_hangs(ctx: Context) -> Setting:
    where = ctx.rng.choice(["initialize", "list_routes", "create_route"])
    if where == "create_route":  # on a thread pool's worker, which the interpreter waits for
        make_node(ctx.kube_api, f"stress-{ctx.lease}", tainted=False, pod_cidrs=("10.244.7.0/24",))
    return Setting(
        marker=f"{HANG_MARKER} {where}",
        window=2.0,
        flags=["--route-reconciliation-period=1s"],
        env={HANG_VARIABLE: where},
        lease_after="",
        variant=where,
    )


def campaigning(ctx: Context) -> Setting:
    now = micro_time()
    ctx.kube_api.create(
        LEASES,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": ctx.lease, "namespace": ctx.namespace},
            "spec": {
                "holderIdentity": OTHER,
                "leaseDurationSeconds": 3600,
                "acquireTime": now,
                "renewTime": now,
            },
        },
        ctx.namespace,
    )
    kubeconfig, proxy = ctx.proxy()
    freeze = ctx.rng.random() < 0.5  # a campaign whose Lease requests hang
    return Setting(
        marker="is campaigning for",
        window=3 * ctx.election.retry,
        kubeconfig=kubeconfig,
        when_there=proxy.freeze if freeze else lambda: None,
        lease_after=OTHER,
        variant="frozen" if freeze else "",
    )


PHASES: dict[str, Callable[[Context], Setting]] = {
    "flag parsing": flag_parsing,
    "provider start": provider_start,
    "waiting for caches": waiting_for_caches,
    "running term": running_term,
    "API server gone": api_server_gone,
    "cloud hangs": cloud_hangs,
    "campaigning": campaigning,
}


@pytest.fixture
def proxies() -> Iterator[list[TcpProxy]]:
    made: list[TcpProxy] = []
    yield made
    for proxy in made:
        proxy.cut()


@dataclass
class Ending:
    """How one process ended: seconds from its first signal, exit status, output."""

    seconds: float
    status: int
    output: str


def one_iteration(ctx: Context, setting: Setting, plan: Plan) -> Ending:
    """Start, reach the phase, signal as planned, wait for the end."""
    kubeconfig = setting.kubeconfig or str(ctx.control_plane.kubeconfig)
    polyccm = Polyccm(
        [
            *FAKE_MAIN,
            f"--kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--leader-elect-resource-namespace={ctx.namespace}",
            f"--leader-elect-resource-name={ctx.lease}",
            *ctx.election.flags(),
            "--cluster-cidr=10.244.0.0/16",
            *setting.flags,
        ],
        setting.env,
    )
    try:
        polyccm.wait_for_line(setting.marker)
        setting.when_there()
        reached = time.monotonic()
        first = 0.0
        for signum, offset in zip(plan.signals, plan.offsets, strict=True):
            time.sleep(max(0.0, reached + offset - time.monotonic()))
            if polyccm.process.poll() is not None:
                break
            polyccm.process.send_signal(signum)
            first = first or time.monotonic()
        assert first, f"the process ended before the first signal:\n{polyccm.output[-4000:]}"
        assert polyccm.ended(BOUND + 10), f"still running {BOUND + 10:.0f}s after {plan}"
        status = polyccm.process.returncode
        return Ending(polyccm.ended_at - first, status, polyccm.output)
    finally:
        polyccm.kill()


@pytest.mark.timeout(120 + 60 * ITERATIONS)
@pytest.mark.parametrize("phase", list(PHASES))
def test_signals_at_random_moments_of_each_phase_end_the_process_within_the_bound(
    control_plane: Any,
    kube_api: KubeApi,
    namespace: str,
    clean_nodes: None,
    tmp_path: Path,
    proxies: list[TcpProxy],
    phase: str,
) -> None:
    for iteration in range(ITERATIONS):
        rng = random.Random(f"{SEED}/{phase}/{iteration}")
        lease = f"stress-{iteration}"
        election = rng.choice([FAST, UPSTREAM_DEFAULTS])
        ctx = Context(control_plane, kube_api, namespace, tmp_path, rng, lease, proxies, election)
        setting = PHASES[phase](ctx)
        plan = Plan.draw(rng, setting.window)
        end = one_iteration(ctx, setting, plan)
        what = (
            f"{' '.join(filter(None, (phase, setting.variant)))}, seed {SEED}, iteration "
            f"{iteration}, renew deadline "
            f"{election.renew:g}s ({plan}): {end.seconds:.1f}s"
        )
        tail = end.output[-6000:]
        print(what, f"status {end.status}")  # the figures, with -s (make stress-shutdown)
        assert end.seconds <= BOUND, f"{what}: ended after the bound\n{tail}"
        assert "Traceback" not in end.output, f"{what}\n{tail}"
        stopping = end.output.count("stopping (polyccm ends within")
        exiting = end.output.count("before the controller manager started: exiting")
        if setting.manager_running:
            assert (stopping, exiting) == (1, 0), f"{what}: one orderly stop\n{tail}"
            assert end.status == 0, f"{what}: exit status {end.status}\n{tail}"
        else:
            assert (stopping, exiting) == (0, 1), f"{what}: ended at once\n{tail}"
            # 128 + the signal it says it received: the first one sent, unless several were
            # pending at once (the kernel then hands them over lowest number first).
            sent = {int(signum) for signum in plan.signals}
            assert end.status - 128 in sent, f"{what}: exit status {end.status}\n{tail}"
            received = signal.Signals(end.status - 128)
            assert f"received {received.name} before" in end.output, f"{what}\n{tail}"
        if setting.lease_after is not None:
            holder = lease_holder(kube_api, namespace, lease)
            assert holder == setting.lease_after, f"{what}: the Lease's holder {holder!r}\n{tail}"
