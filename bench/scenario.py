"""One scenario, for one CCM (or the bare client) at one scale, phase by phase:

1. **start**: the CCM starts; until its health path answers (instances already exist);
2. **nodes**: N nodes registered at once (tainted, then Ready), until every one is initialised;
3. **services**: M LoadBalancer Services created at once, until every one has an ingress;
4. **rest**: once the cloud calls have stopped, a quiet period of several node-monitor periods;
5. **churn**: 10% of the instances terminated (their nodes turn NotReady, as without kubelet)
   and as many new ones registered, until the old nodes are deleted by the CCM and the new
   ones initialised (then until the cloud calls stop, for the load balancers' updates);
6. **delete**: every Service deleted at once, until every one is gone (finalizer removed).

For each phase: its seconds, the CCM's cloud calls by operation (the emulator's count, the
harness's own calls left out) and its kube-apiserver requests and writes (audit log). For the
run: start-to-ready, peak RSS, and, for polyccm, its own call metric compared with the
emulator's count.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyccm.kube.api import KubeApi

from bench import cluster, incluster
from bench.audit import AuditLog, Window
from bench.ccms import Ccm, Knobs, metric_calls
from bench.clouds import BenchCloud, normalise
from bench.processes import CcmProcess

PHASES = ("start", "nodes", "services", "rest", "churn", "delete")

Say = Callable[[str], None]


@dataclass(frozen=True)
class Scale:
    nodes: int
    services: int

    @property
    def label(self) -> str:
        return f"{self.nodes}/{self.services}"

    @property
    def churned(self) -> int:
        return max(1, self.nodes // 10)


@dataclass(frozen=True)
class Timing:
    """How long phases may take and how long the quiet period lasts."""

    quiet: float = 20.0
    phase_timeout: float = 300.0
    #: A phase that makes no progress (no new node initialised, no new ingress, no Service
    #: gone...) for this many seconds ends there, not done; ``None``: never.
    stall: float | None = 30.0
    #: Each phase of this CCM may take this many seconds (instead of ``phase_timeout``); a
    #: phase cut by it ends the CCM's run: its later phases are not run.
    time_box: float | None = None
    #: This CCM runs the start and node phases only (``--go-nodes-only-from``).
    nodes_only: bool = False
    #: How long the cloud calls after a phase may go on before the next phase starts anyway.
    settle_limit: float = 30.0
    #: The cloud calls have "stopped" once none came for this long.
    settled_after: float = 2.0


@dataclass
class Phase:
    seconds: float | None = None
    """``None``: not done within the time allowed (or not run)."""
    limit: float | None = None
    """Not done: the time allowed, or, when it stopped progressing, the time it ran for."""
    calls: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    writes: int = 0
    write_kinds: dict[str, int] = field(default_factory=dict)
    """The writes by ``verb resource[/subresource]``."""
    note: str = ""


@dataclass
class Run:
    """What one CCM did at one scale."""

    key: str
    label: str
    nodes: int
    services: int
    ready_seconds: float | None = None
    ready_cpu_seconds: float | None = None
    """CPU seconds the CCM (with its descendants) had used when it became ready: start-to-ready
    on a machine of its own, whatever else ran beside it."""
    peak_rss_mib: float | None = None
    phases: dict[str, Phase] = field(default_factory=dict)
    requests: int = 0
    """kube-apiserver requests of the whole run (the audit log's count), and the writes."""
    writes: int = 0
    cloud_calls: dict[str, int] = field(default_factory=dict)
    """The CCM's cloud calls of the whole run, by operation (the emulator's count)."""
    metric_calls: dict[str, int] | None = None
    requests_counted: bool = True
    """Whether ``requests``, ``writes`` and each phase's were counted (not when the audit log
    was rotated during the run)."""
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    connection: str = ""
    """How it reached the API server, as the kernel showed its process once ready:
    ``in-cluster`` or ``kubeconfig`` (:func:`bench.incluster.observed`)."""

    @property
    def complete(self) -> bool:
        """Whether every phase ran and was done in time."""
        return len(self.phases) == len(PHASES) and all(
            p.seconds is not None for p in self.phases.values()
        )


@dataclass
class Context:
    """What every run of one provider shares."""

    admin: KubeApi
    cloud: BenchCloud
    kubeconfigs: Mapping[str, Path]
    audit_log: Path
    directory: Path
    """Where the run's files go (cloud configs, kubeconfigs)."""
    logs: Path
    """Where each CCM's log is kept (the results' ``logs/``)."""
    knobs: Knobs
    timing: Timing
    say: Say


def compare(polyccm: Counter[str], emulator: Counter[str]) -> list[str]:
    """One line per operation whose counts differ (names compared in a normal form)."""
    ours: Counter[str] = Counter()
    for name, count in polyccm.items():
        ours[normalise(name)] += count
    theirs: Counter[str] = Counter()
    shown: dict[str, str] = {}
    for name, count in emulator.items():
        theirs[normalise(name)] += count
        shown[normalise(name)] = name
    for name in ours:
        shown.setdefault(name, name)
    return [
        f"{shown[key]}: polyccm counted {ours[key]}, the emulator received {theirs[key]}"
        for key in sorted(set(ours) | set(theirs))
        if ours[key] != theirs[key]
    ]


class _Clock:
    """Phase windows in wall-clock time (for the audit log) and their call snapshots."""

    def __init__(self, cloud: BenchCloud | None) -> None:
        self.cloud = cloud
        self.windows: list[Window] = []
        self._name = ""
        self._wall = 0.0
        self._mono = 0.0
        self._calls: Counter[str] = Counter()

    def begin(self, name: str) -> None:
        self._name = name
        self._wall = time.time()
        self._mono = time.monotonic()
        self._calls = self.cloud.calls() if self.cloud is not None else Counter()

    def elapsed(self) -> float:
        return time.monotonic() - self._mono

    def end(self, seconds: float | None, limit: float | None = None) -> Phase:
        """Close the phase: ``seconds`` it took (``None``: not done within ``limit``) and the
        CCM's cloud calls during it."""
        self.windows.append(Window(self._name, self._wall, time.time()))
        calls = {} if self.cloud is None else dict(self.cloud.ccm_calls(self._calls))
        return Phase(seconds=seconds, limit=None if seconds is not None else limit, calls=calls)


def settle(cloud: BenchCloud | None, limit: float, quiet_for: float) -> bool:
    """Whether the emulator received no call for ``quiet_for`` seconds within ``limit``
    seconds (it returns as soon as it did)."""
    if cloud is None:
        return True
    deadline = time.monotonic() + limit
    last = cloud.calls()
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cloud.calls()
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_for:
            return True
    return False


def _all_initialised(expected: set[str]) -> Callable[[Mapping[str, bool]], bool]:
    def done(items: Mapping[str, bool]) -> bool:
        return all(items.get(name) for name in expected)

    return done


def _initialised(items: Mapping[str, bool], names: set[str]) -> int:
    """How many of ``names`` are initialised."""
    return sum(1 for name in names if items.get(name))


def _services_served(count: int) -> Callable[[Mapping[str, bool]], bool]:
    return lambda items: len(items) == count and all(items.values())


def run_ccm(context: Context, ccm: Ccm, scale: Scale) -> Run:
    """The whole scenario for ``ccm`` at ``scale``, on a cleared cluster and a reset cloud."""
    say = context.say
    cloud = context.cloud
    admin = context.admin
    run = Run(ccm.key, ccm.label, scale.nodes, scale.services)
    wanted = [f"node-{i:05d}" for i in range(scale.nodes)]
    if ccm.calls_cloud:
        # The cluster is emptied while the emulator makes the instances: neither waits.
        with ThreadPoolExecutor(1) as background:
            clearing = background.submit(cluster.clear, admin)
            cloud.reset()
            say(f"creating {scale.nodes} instances through the {cloud.name} emulator's API")
            names = cloud.create(wanted)
            clearing.result()
    else:  # a CCM that calls no cloud answers for any node name: no instance to make
        cluster.clear(admin)
        names = wanted
    clock = _Clock(cloud if ccm.calls_cloud else None)
    audit = AuditLog(context.audit_log)
    nodes = cluster.node_tracker(admin)
    services = cluster.service_tracker(admin)
    clock.begin("start")
    before = cloud.calls()
    process = ccm.start(cloud, context.kubeconfigs[ccm.identity], context.knobs,
                        context.logs / f"{cloud.name}-{ccm.key}-{scale.nodes}.log")  # fmt: skip
    try:
        run.ready_seconds = process.wait_ready()
        if run.ready_seconds is not None:
            run.ready_cpu_seconds = process.cpu_seconds()
            run.connection = incluster.observed(process.process.pid)
        run.phases["start"] = clock.end(run.ready_seconds)
        if run.ready_seconds is None:
            run.notes.append(f"never ready; last lines of its log:\n{process.tail()}")
            say(f"{ccm.label} did not become ready:\n{process.tail()}")
            return run
        say(f"{ccm.label} ready in {run.ready_seconds:.2f} s "
            f"({run.ready_cpu_seconds or 0:.2f} s of CPU)")  # fmt: skip
        _Phases(context, scale, run, clock, names, nodes, services).all()
        run.peak_rss_mib = process.peak_rss_mib()
        _totals(run, ccm, cloud, before, process)
    finally:
        process.stop()
        nodes.stop()
        services.stop()
    if run.metric_calls is not None:
        run.mismatches = compare(Counter(run.metric_calls), Counter(run.cloud_calls))
        if run.mismatches:
            say("!" * 78)
            say(f"MISMATCH: polyccm's polyccm_cloud_api_calls_total and the {cloud.name} emulator")
            for line in run.mismatches:
                say(f"  {line}")
            say("!" * 78)
    _count_requests(run, audit, cluster.username(ccm.identity), clock.windows)
    say(f"{ccm.label} peak RSS {run.peak_rss_mib or 0:.0f} MiB")
    return run


def _totals(
    run: Run, ccm: Ccm, cloud: BenchCloud, before: Counter[str], process: CcmProcess
) -> None:
    """The whole run's calls by the emulator's count and, for polyccm, by its metric, read
    together: the emulator's count before and after the scrape must be the same (else again)."""
    if not ccm.calls_cloud:
        return
    for _ in range(5):
        counted = cloud.ccm_calls(before)
        scraped = metric_calls(process.metrics(), cloud.name) if ccm.has_call_metric else None
        if cloud.ccm_calls(before) == counted:
            break
        time.sleep(1.0)
    run.cloud_calls = dict(counted)
    run.metric_calls = dict(scraped) if scraped is not None else None


@dataclass
class _Phases:
    """The phases after start, in order; each records its :class:`Phase` in ``run``."""

    context: Context
    scale: Scale
    run: Run
    clock: _Clock
    names: list[str]
    nodes: cluster.Tracker[bool]
    services: cluster.Tracker[bool]
    bodies: list[dict[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0
    """Seconds the last phase took (or ran for, when not done)."""

    def say(self, message: str) -> None:
        self.context.say(f"{self.run.label} {self.scale.label}: {message}")

    def all(self) -> None:
        if not self.register_nodes():
            return
        if self.context.timing.nodes_only:
            self.run.notes.append(
                "the node phase only, as asked for the Go CCMs at this scale "
                "(--go-nodes-only-from); later phases not run"
            )
            return
        for phase in (self.create_services, self.rest, self.churn, self.delete_services):
            if not phase():
                return

    @property
    def limit(self) -> float:
        """The seconds a phase may take: the time box where this CCM has one."""
        timing = self.context.timing
        return timing.time_box or timing.phase_timeout

    def _wait(
        self,
        tracker: cluster.Tracker[bool],
        done: Callable[[Mapping[str, bool]], bool],
        progress: Callable[[Mapping[str, bool]], int],
    ) -> cluster.Outcome:
        return tracker.wait_progress(done, self.limit, progress, self.context.timing.stall)

    def _why(self, outcome: cluster.Outcome) -> str:
        """Why a phase is not done, to follow how far it got: ``, no progress for S s`` or
        `` in L s`` (``, time-boxed`` when this CCM's time box cut it)."""
        if outcome.stalled is not None:
            return f", no progress for {self.context.timing.stall:.0f} s"
        boxed = ", time-boxed" if self.context.timing.time_box else ""
        return f" in {self.limit:.0f} s{boxed}"

    def _boxed_out(self, name: str, outcome: cluster.Outcome) -> bool:
        """Whether ``name`` was cut by this CCM's time box (its later phases are then not
        run; a note says so)."""
        if outcome.done or outcome.stalled is not None or not self.context.timing.time_box:
            return False
        self.run.notes.append(
            f"{name} phase cut by the time box ({self.limit:.0f} s); later phases not run"
        )
        return True

    def _close(self, name: str, outcome: cluster.Outcome, note: str = "") -> Phase:
        """End phase ``name`` (after the cloud is quiet, for the calls it caused); not done,
        its ``limit`` is the time allowed, or, when it stopped progressing, the time it ran."""
        self.elapsed = self.clock.elapsed()
        done = outcome.done
        limit = self.elapsed if outcome.stalled is not None else self.limit
        timing = self.context.timing
        if name in ("services", "churn", "delete") and not settle(
            self.clock.cloud, timing.settle_limit, timing.settled_after
        ):
            self.run.notes.append(
                f"the cloud calls after the {name} phase had not stopped "
                f"{timing.settle_limit:.0f} s after it"
            )
        phase = self.run.phases[name] = self.clock.end(self.elapsed if done else None, limit)
        if not done:
            phase.note = note
        return phase

    def register_nodes(self) -> bool:
        self.clock.begin("nodes")
        cluster.register_nodes(self.context.admin, self.names)
        expected = set(self.names)
        outcome = self._wait(
            self.nodes, _all_initialised(expected), lambda items: _initialised(items, expected)
        )
        count = sum(self.nodes.snapshot().values())
        note = f"{count} of {self.scale.nodes}{self._why(outcome)}"
        phase = self._close("nodes", outcome, note)
        what = "" if outcome.done else f" (not done: {self._why(outcome).lstrip(', ')})"
        self.say(f"{count}/{self.scale.nodes} nodes initialised{what} in {self.elapsed:.1f} s, "
                 f"{sum(phase.calls.values())} cloud calls")  # fmt: skip
        if not outcome.done:
            self.run.notes.append(f"node initialisation not done ({note}); later phases not run")
        return outcome.done

    def create_services(self) -> bool:
        cloud = self.context.cloud
        self.bodies = [
            cluster.service_body(i, cloud.service_annotations(i))
            for i in range(self.scale.services)
        ]
        self.clock.begin("services")
        cluster.create_services(self.context.admin, self.bodies)
        outcome = self._wait(
            self.services, _services_served(self.scale.services), lambda i: sum(i.values())
        )
        served = sum(self.services.snapshot().values())
        note = f"{served} of {self.scale.services}{self._why(outcome)}"
        phase = self._close("services", outcome, note)
        self.say(f"{served}/{self.scale.services} services with an ingress in "
                 f"{self.elapsed:.1f} s, {sum(phase.calls.values())} cloud calls")  # fmt: skip
        return not self._boxed_out("services", outcome)

    def rest(self) -> bool:
        quiet = self.context.timing.quiet
        self.clock.begin("rest")
        time.sleep(quiet)
        phase = self.run.phases["rest"] = self.clock.end(quiet)
        self.say(f"{sum(phase.calls.values())} cloud calls in {quiet:.0f} s at rest")
        return True

    def churn(self) -> bool:
        admin = self.context.admin
        cloud = self.context.cloud
        self.clock.begin("churn")
        victims = self.names[: self.scale.churned]
        calls_cloud = self.clock.cloud is not None
        if calls_cloud:
            cloud.terminate(victims)
        cluster.burst(lambda name: cluster.node_gone(admin, name), victims)
        fresh = [f"node-new-{i:05d}" for i in range(self.scale.churned)]
        if calls_cloud:
            fresh = cloud.create(fresh)
        cluster.register_nodes(admin, fresh)
        gone, expected = set(victims), set(fresh)

        def replaced(items: Mapping[str, bool]) -> int:
            return len(gone - items.keys()) + _initialised(items, expected)

        outcome = self._wait(
            self.nodes,
            lambda items: not gone & items.keys() and all(items.get(n) for n in expected),
            replaced,
        )
        snapshot = self.nodes.snapshot()
        left = len(gone & snapshot.keys())
        note = (
            f"{left} terminated nodes still there, {_initialised(snapshot, expected)} of "
            f"{len(expected)} new ones initialised{self._why(outcome)}"
        )
        phase = self._close("churn", outcome, note)
        what = "replaced" if outcome.done else f"not replaced ({note})"
        self.say(f"{self.scale.churned} nodes {what} in {self.elapsed:.1f} s, "
                 f"{sum(phase.calls.values())} cloud calls until quiet")  # fmt: skip
        return not self._boxed_out("churn", outcome)

    def delete_services(self) -> bool:
        self.clock.begin("delete")
        names = [str(body["metadata"]["name"]) for body in self.bodies]
        cluster.delete_services(self.context.admin, names)
        outcome = self._wait(self.services, lambda items: not items, len)
        left = len(self.services.snapshot())
        note = f"{left} of {len(names)} still there{self._why(outcome)}"
        phase = self._close("delete", outcome, note)
        what = "every service deleted" if outcome.done else f"services not deleted ({note})"
        self.say(f"{what} in {self.elapsed:.1f} s, {sum(phase.calls.values())} cloud calls")
        return True


def _count_requests(run: Run, audit: AuditLog, user: str, windows: list[Window]) -> None:
    if audit.rotated:
        run.requests_counted = False
        run.notes.append("kube-apiserver requests not counted: the audit log was rotated")
        return
    for name, requests in audit.count(user, windows).items():
        run.requests += requests.total
        run.writes += requests.writes
        if name in run.phases:
            run.phases[name].requests = requests.total
            run.phases[name].writes = requests.writes
            run.phases[name].write_kinds = requests.kinds


def run_bound(context: Context, scale: Scale) -> Run:
    """The bare client through the nodes, services and delete phases."""
    say = context.say
    admin = context.admin
    run = Run("bound", "bare client (bound)", scale.nodes, scale.services)
    cluster.clear(admin)
    clock = _Clock(None)
    audit = AuditLog(context.audit_log)
    nodes = cluster.node_tracker(admin)
    services = cluster.service_tracker(admin)
    knobs = context.knobs
    client = subprocess.Popen(
        [sys.executable, "-m", "bench.bound",
         f"--kubeconfig={context.kubeconfigs['bench-bound']}",
         f"--kube-api-qps={knobs.kube_api_qps:g}", f"--kube-api-burst={knobs.kube_api_burst}",
         f"--workers={max(knobs.node_workers, knobs.service_workers)}"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert client.stdout is not None
    if client.stdout.readline().strip() != "ready":
        client.kill()
        raise RuntimeError("the bare client did not start")
    limit = context.timing.phase_timeout
    try:
        names = [f"node-{i:05d}" for i in range(scale.nodes)]
        clock.begin("nodes")
        cluster.register_nodes(admin, names)
        done = nodes.wait(_all_initialised(set(names)), limit)
        run.phases["nodes"] = clock.end(clock.elapsed() if done else None, limit)
        clock.begin("services")
        bodies = [cluster.service_body(i, {}) for i in range(scale.services)]
        cluster.create_services(admin, bodies)
        done = services.wait(_services_served(scale.services), limit)
        run.phases["services"] = clock.end(clock.elapsed() if done else None, limit)
        clock.begin("delete")
        cluster.delete_services(admin, [str(b["metadata"]["name"]) for b in bodies])
        done = services.wait(lambda items: not items, limit)
        run.phases["delete"] = clock.end(clock.elapsed() if done else None, limit)
    finally:
        client.terminate()
        client.wait(timeout=30)
        nodes.stop()
        services.stop()
    _count_requests(run, audit, cluster.username("bench-bound"), clock.windows)
    seconds = {name: phase.seconds for name, phase in run.phases.items()}
    say(f"bound {scale.label}: " + ", ".join(
        f"{name} {value:.1f} s" if value is not None else f"{name} timed out"
        for name, value in seconds.items()
    ))  # fmt: skip
    return run
