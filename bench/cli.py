"""``python -m bench``: run the scenarios for each provider, write bench/results/, say progress.

One control plane (etcd and kube-apiserver with an audit log of the benchmark's identities)
serves the whole run, with every provider's emulator. At each scale, the bare client sets the
bound once (it calls no cloud), then for each provider polyccm runs the scenario, then the
provider's upstream Go CCM where this machine has it (and, for AWS, the framework floor) run it
on the same emulator, one after the other.
At the end, ``summary.md`` checks issue 13's targets against every provider's results.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from polyccm.kube.api import KubeApi

from bench import audit, cluster, incluster
from bench.ccms import (
    IDENTITIES,
    IMAGE_ENV,
    POLYCCM,
    Ccm,
    Knobs,
    fake_go,
    is_upstream,
    upstream,
)
from bench.clouds import CLOUDS, BenchCloud
from bench.report import ProviderResult, ScaleResult, load, write
from bench.scenario import Context, Scale, Timing, run_bound, run_ccm
from bench.targets import all_checks, budget_margin, load_results, write_summary

FULL_SCALES = (Scale(100, 10), Scale(1000, 100), Scale(5000, 500))
QUICK_SCALES = (Scale(100, 10),)
RESULTS = Path(__file__).resolve().parent / "results"
#: ``--go-time-box``'s default: from 1,000 nodes each phase of an upstream Go CCM may take
#: 90 s, from 5,000 nodes 60 s (cloud-provider-gcp makes about one network load balancer a
#: second with four workers: 100 take it minutes, 500 ten).
GO_TIME_BOX = "1000:90,5000:60"


def parse_time_box(text: str) -> tuple[tuple[int, float], ...]:
    """``1000:90,5000:60`` -> ((1000, 90.0), (5000, 60.0)): from NODES nodes up, SECONDS a
    phase; a bare number is SECONDS from 5,000 nodes (the flag's earlier meaning)."""
    steps = []
    for item in text.split(","):
        nodes, _, seconds = item.strip().rpartition(":")
        try:
            step = (int(nodes or 5000), float(seconds))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not NODES:SECONDS (e.g. 5000:60)"
            ) from None
        if step[0] < 1 or step[1] <= 0:
            raise argparse.ArgumentTypeError(f"{item!r}: both numbers must be positive")
        steps.append(step)
    return tuple(sorted(steps))


def time_box(steps: Sequence[tuple[int, float]], nodes: int) -> float | None:
    """The seconds each phase of an upstream Go CCM may take at ``nodes`` (``None``: the phase
    timeout): the step with the most nodes at or below ``nodes``."""
    boxes = [seconds for least, seconds in steps if nodes >= least]
    return boxes[-1] if boxes else None


def describe_time_box(steps: Sequence[tuple[int, float]]) -> str:
    return ", ".join(f"{seconds:.0f} s from {nodes:,} nodes" for nodes, seconds in steps)


#: Service addresses for 5,000 Services and more (kube-apiserver's last flag wins).
SERVICE_RANGE = "10.96.0.0/16"


_BEGAN = time.monotonic()


def say(message: str) -> None:
    """A progress line: the time of day and the minutes since the run began."""
    minutes = (time.monotonic() - _BEGAN) / 60
    print(f"[bench {time.strftime('%H:%M:%S')} +{minutes:4.1f} min] {message}", flush=True)


def parse_scales(text: str) -> tuple[Scale, ...]:
    """``100/10,1000/100`` -> scales (nodes/services)."""
    scales = []
    for item in text.split(","):
        nodes, _, services = item.strip().partition("/")
        try:
            scale = Scale(int(nodes), int(services))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not NODES/SERVICES (e.g. 1000/100)"
            ) from None
        if scale.nodes < 1 or scale.services < 1:
            raise argparse.ArgumentTypeError(f"{item!r}: both numbers must be at least 1")
        scales.append(scale)
    return tuple(scales)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark polyccm against the emulators, the Go CCM and the bound.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="the smallest scale only, short quiet period"
    )
    parser.add_argument(
        "--providers",
        default=",".join(CLOUDS),
        help=f"comma-separated providers (default {','.join(CLOUDS)})",
    )
    parser.add_argument("--scales", type=parse_scales, help="e.g. 100/10,1000/100 (NODES/SERVICES)")
    parser.add_argument("--no-peers", action="store_true", help="polyccm and the bound only")
    parser.add_argument(
        "--quiet",
        type=float,
        help="seconds of the quiet period (default 20: four node-monitor periods, two route "
        "reconciliation periods; quick 10)",
    )
    parser.add_argument(
        "--phase-timeout", type=float, default=300.0, help="seconds a phase may take (300)"
    )
    parser.add_argument(
        "--stall",
        type=float,
        default=30.0,
        help="a phase of any CCM that makes no progress (no new node initialised, no new "
        "ingress, no Service gone) for this many seconds ends there, not done (30; 0: never)",
    )
    parser.add_argument(
        "--go-time-box",
        type=parse_time_box,
        default=parse_time_box(GO_TIME_BOX),
        help="NODES:SECONDS,...: from NODES nodes up, each phase of an upstream Go CCM may "
        f"take SECONDS; a phase cut by it ends that CCM's run ({GO_TIME_BOX})",
    )
    parser.add_argument(
        "--go-nodes-only-from",
        type=int,
        metavar="NODES",
        help="from NODES nodes up, the upstream Go CCMs and the framework floor run the start "
        "and node phases only (a shorter run; the tables say 'not run'); default: every phase",
    )
    parser.add_argument("--out", type=Path, help="results directory (bench/results)")
    parser.add_argument(
        "--add",
        action="store_true",
        help="keep the other scales already in the results directory (a scale measured "
        "again is replaced)",
    )
    args = parser.parse_args(argv)
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    unknown = [p for p in providers if p not in CLOUDS]
    if unknown or not providers:
        parser.error(
            f"unknown provider {', '.join(unknown) or '(none)'}; known: {', '.join(CLOUDS)}"
        )
    args.providers = providers
    if args.scales is None:
        args.scales = QUICK_SCALES if args.quick else FULL_SCALES
    if args.quiet is None:
        args.quiet = 10.0 if args.quick else 20.0
    if args.out is None:
        args.out = RESULTS / "quick" if args.quick else RESULTS
    return args


def peers_for(provider: str, no_peers: bool) -> tuple[list[Ccm], list[str]]:
    """The Go CCMs run beside polyccm for ``provider`` (its upstream CCM where this machine
    has it; for AWS also the framework floor), and what was skipped."""
    if no_peers:
        return [], ["Go peers (--no-peers)"]
    from bench.peers import find_peers

    peers = find_peers(provider, say)
    ccms = []
    if peers.upstream is not None:
        ccms.append(upstream(provider, peers.upstream))
    if peers.fake is not None:
        ccms.append(fake_go(peers.fake))
    for reason in peers.missing:
        say(reason)
    return ccms, list(peers.missing)


def compile_bytecode() -> None:
    """Byte code on disk for every installed package and workspace source: at level 2, which
    polyccm runs at as its image runs it (``PYTHONOPTIMIZE=2``, :data:`bench.ccms.IMAGE_ENV`),
    and at level 0 for the harness, the bound and the emulators. Without it, with
    ``PYTHONDONTWRITEBYTECODE`` set, each CCM start compiles every module it imports
    (google-cloud-compute alone: seconds of CPU and ~100 MiB of peak RSS). Up-to-date files
    are skipped, so only the first run pays."""
    import compileall
    import site

    root = Path(__file__).resolve().parents[1]
    sources = [root / "core" / "src", root / "testkit" / "src", *root.glob("providers/*/src")]
    for directory in [*map(Path, site.getsitepackages()), *sources]:
        if directory.is_dir():
            for level in (0, 2):
                compileall.compile_dir(directory, quiet=2, workers=0, optimize=level)


def _put(result: ProviderResult, measured: ScaleResult) -> None:
    """Add ``measured`` to ``result``, in place of the same scale measured before."""
    kept = [s for s in result.scales if s.scale != measured.scale]
    result.scales = sorted([*kept, measured], key=lambda s: (s.scale.nodes, s.scale.services))


@dataclass
class _Provider:
    """One provider's side of the run: its emulator, its peers and its results so far."""

    name: str
    cloud: BenchCloud
    peers: list[Ccm]
    result: ProviderResult
    broken: str = ""


def _provider(name: str, args: argparse.Namespace, command: str, cloud: BenchCloud) -> _Provider:
    knobs = Knobs()
    peers, skipped = peers_for(name, args.no_peers)
    cloud_class = CLOUDS[name]
    result = ProviderResult(
        provider=name,
        balancer_kind=cloud_class.balancer_kind,
        command=command,
        settings=[
            f"{args.quiet:.0f} s",
            f"every CCM: --kube-api-qps={knobs.kube_api_qps:g} "
            f"--kube-api-burst={knobs.kube_api_burst} "
            f"--concurrent-node-syncs={knobs.node_workers} "
            f"--concurrent-service-syncs={knobs.service_workers} "
            f"--node-monitor-period={knobs.node_monitor_period:g}s, routes off, no leader "
            "election, its own ServiceAccount",
            incluster.setting(),
            "polyccm as its image runs it: "
            + " ".join(f"{k}={v}" for k, v in IMAGE_ENV.items())
            + ", from byte code compiled ahead at that level",
            f"quiet period {args.quiet:.0f} s; a phase may take {args.phase_timeout:.0f} s"
            + (
                f" and ends, not done, after {args.stall:.0f} s without progress"
                if args.stall
                else ""
            ),
            "each phase of the upstream Go CCM time-boxed: "
            f"{describe_time_box(args.go_time_box)}; a phase cut by it ends that CCM's run",
            *(
                [
                    f"from {args.go_nodes_only_from:,} nodes the Go CCMs ran the start and node "
                    "phases only (--go-nodes-only-from)"
                ]
                if args.go_nodes_only_from
                else []
            ),
            *cloud_class.notes,
        ],
        skipped=skipped,
    )
    earlier = args.out / f"{name}.json"
    if args.add and earlier.exists():
        before = load(earlier)
        result.seconds = before.seconds
        result.scales = before.scales
        result.command = f"{before.command}, then {command}"
        result.skipped = sorted(set(before.skipped) | set(skipped))
    return _Provider(name, cloud, peers, result)


@dataclass(frozen=True)
class _Plane:
    """What every run shares: the control plane's admin client, the CCMs' identities, the
    audit log, the run's directory and where CCM logs go."""

    admin: KubeApi
    kubeconfigs: dict[str, Path]
    audit_log: Path
    directory: Path
    logs: Path

    def context(self, args: argparse.Namespace, cloud: BenchCloud) -> Context:
        return Context(
            admin=self.admin,
            cloud=cloud,
            kubeconfigs=self.kubeconfigs,
            audit_log=self.audit_log,
            directory=self.directory,
            logs=self.logs,
            knobs=Knobs(),
            timing=Timing(
                quiet=args.quiet,
                phase_timeout=args.phase_timeout,
                stall=args.stall or None,
                settle_limit=10.0 if args.quick else 30.0,
                settled_after=2.0,
            ),
            say=say,
        )


def run_all(args: argparse.Namespace, command: str) -> list[_Provider]:
    """Every scale, smallest first; at each, the bound once, then each provider's CCMs.

    One control plane serves every provider (each with its own emulator, all started with it):
    the bound is the control plane's, the same for every provider, so it is measured once per
    scale, and the cluster is emptied before each CCM's run.
    """
    from polyccm_testing.devenv import controlplane

    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="polyccm-bench-") as name:
        directory = Path(name)
        users = [cluster.username(identity) for identity in IDENTITIES]
        flags, audit_log = audit.apiserver_args(directory / "audit", users)
        # The local control plane's /24 of service addresses holds 254 Services.
        flags.append(f"--service-cluster-ip-range={SERVICE_RANGE}")
        say(f"starting etcd, kube-apiserver and the {', '.join(args.providers)} emulator(s)")
        for provider in args.providers:
            os.environ.update(CLOUDS[provider].emulator_env)
        plane = controlplane.start(
            directory / "plane",
            clouds=tuple(args.providers),
            die_with_caller=True,
            apiserver_args=flags,
        )
        providers: list[_Provider] = []
        try:
            admin = plane.kube_api(qps=0)
            cluster.ensure_namespace(admin)
            kubeconfigs = {
                identity: cluster.make_identity(admin, identity, directory, plane.ca_cert)
                for identity in IDENTITIES
            }
            for provider in args.providers:
                cloud = CLOUDS[provider](plane.env, directory)
                cloud.reset()
                cloud.learn_harness_operations()
                say(f"{provider}: the harness's own cloud operations: "
                    f"{', '.join(sorted(cloud.harness_operations))}")  # fmt: skip
                providers.append(_provider(provider, args, command, cloud))
            shared = _Plane(admin, kubeconfigs, audit_log, directory, logs)
            for scale in args.scales:
                _run_scale(args, scale, providers, shared)
        finally:
            for made in providers:
                made.cloud.close()
            plane.stop()
    return providers


def _run_scale(
    args: argparse.Namespace, scale: Scale, providers: list[_Provider], shared: _Plane
) -> None:
    live = [p for p in providers if not p.broken]
    if not live:
        return
    say(f"{scale.label}: the bare client's bound (the control plane's, for every provider)")
    began = time.monotonic()
    bound = run_bound(shared.context(args, live[0].cloud), scale)
    share = (time.monotonic() - began) / len(live)
    for provider in live:
        began = time.monotonic()
        context = shared.context(args, provider.cloud)
        try:
            say(f"{provider.name} {scale.label}: polyccm")
            runs = [run_ccm(context, POLYCCM, scale)]
            for peer in provider.peers:
                say(f"{provider.name} {scale.label}: {peer.label}")
                box = time_box(args.go_time_box, scale.nodes) if is_upstream(peer.key) else None
                short = args.go_nodes_only_from is not None and (
                    scale.nodes >= args.go_nodes_only_from
                )
                boxed = replace(
                    context, timing=replace(context.timing, time_box=box, nodes_only=short)
                )
                runs.append(run_ccm(boxed, peer, scale))
        except Exception:  # noqa: BLE001 (the other providers still run; the trace is shown)
            say(f"{provider.name}: the benchmark broke:\n{traceback.format_exc()}")
            provider.broken = f"{provider.name} {scale.label}: the benchmark broke (see above)"
            continue
        finally:
            # The provider's CCMs, with its share of the bound.
            provider.result.seconds += share + time.monotonic() - began
        _put(provider.result, ScaleResult(scale, bound, runs))
        paths = write(provider.result, args.out)
        say(f"{provider.name} {scale.label}: results in {', '.join(str(p) for p in paths)}")


def _terminated(signum: int, _frame: object) -> None:
    """SIGTERM ends the run as Ctrl-C does: the running CCM, the bare client and the control
    plane are stopped on the way out, not left behind."""
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)
    command = "python -m bench " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    global _BEGAN
    _BEGAN = time.monotonic()
    say("compiling byte code (once; skipped when up to date)")
    compile_bytecode()
    failures: list[str] = []
    for provider in run_all(args, command.strip()):
        if provider.broken:
            failures.append(provider.broken)
        for scale_result in provider.result.scales:
            for run in scale_result.runs:
                if run.mismatches:
                    failures.append(
                        f"{provider.name} {scale_result.scale.label}: call counts differ"
                    )
                if not run.requests_counted:
                    failures.append(f"{provider.name} {scale_result.scale.label} {run.label}: "
                                    "kube-apiserver requests not counted")  # fmt: skip
                for name, phase in run.phases.items():
                    if phase.seconds is None:
                        say(f"NOT DONE: {provider.name} {scale_result.scale.label} {run.label}: "
                            f"{name} ({phase.note or 'not done'})")  # fmt: skip
    minutes = (time.monotonic() - _BEGAN) / 60
    written = load_results(args.out)
    whole = (set(args.providers) == set(CLOUDS) and args.scales == FULL_SCALES
             and not args.no_peers and not args.add)  # fmt: skip
    path = write_summary(written, args.out, minutes, whole)
    for check in all_checks(written):
        if not check.met:
            say(f"target missed: {check.provider} {check.scale}: {check.target}: {check.measured}")
    say(f"summary in {path}")
    say(f"done in {minutes:.1f} min: {budget_margin(minutes, whole)}")
    for failure in failures:
        say(f"FAILED: {failure}")
    return 1 if failures else 0
