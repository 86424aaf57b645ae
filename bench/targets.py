"""Issue 13's targets checked against the results, and the summary of every provider.

Each target is checked where the results can tell (a target against the Go peer only where the
peer ran; the memory cap only at 5,000 nodes and more); a figure not measured (a phase cut
short) fails its target rather than passing it. ``bench/results/summary.md`` holds one table of
the headline figures per provider and scale, then every check with its measured value, so a
missed target shows without reading each provider's tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.report import ProviderResult, ScaleResult, upstream_run
from bench.scenario import Phase, Run

#: Node initialisation within this many times the bare client's bound (at 1,000 nodes).
NODE_BOUND_RATIO = 1.5
#: Peak RSS cap (MiB) at 5,000 nodes and more.
LARGE_SCALE_RSS_MIB = 250.0
LARGE_SCALE_NODES = 5000
#: Start to ready under this many seconds.
READY_SECONDS = 2.0
#: At rest: fewer than this many cloud calls a minute per 100 nodes.
REST_CALLS_PER_MINUTE_PER_100 = 1.0
#: ``make bench`` (every provider, scale and peer) is meant to take at most this long.
BUDGET_MINUTES = 30.0


def budget_margin(minutes: float, whole: bool = True) -> str:
    """How ``minutes`` compares with the full run's budget of :data:`BUDGET_MINUTES`
    (``whole``: the run was the full one, every provider, scale and peer)."""
    margin = BUDGET_MINUTES - minutes
    budget = f"the {BUDGET_MINUTES:.0f}-minute budget"
    if not whole:
        budget += " (the full run's: this run was part of it)"
    if margin >= 0:
        return f"{margin:.1f} min inside {budget}"
    return f"{-margin:.1f} min OVER {budget}"


@dataclass(frozen=True)
class Check:
    """One target at one provider and scale: what was measured and whether it was met."""

    provider: str
    scale: str
    target: str
    measured: str
    met: bool


def _seconds(phase: Phase | None) -> float | None:
    return None if phase is None else phase.seconds


def _calls(phase: Phase | None) -> int:
    return 0 if phase is None else sum(phase.calls.values())


def _polyccm(result: ScaleResult) -> Run | None:
    return next((r for r in result.runs if r.key == "polyccm"), None)


def _peer(result: ScaleResult) -> Run | None:
    return upstream_run(result.runs)


def _not_done(phase: Phase | None) -> str:
    if phase is None:
        return "not run"
    return f"not done ({phase.note})" if phase.note else "not done"


def _load_balancer_checks(
    provider: str, label: str, services: Phase | None, theirs: Phase
) -> list[Check]:
    """polyccm's services phase against the upstream peer's: as fast, no more calls."""
    checks: list[Check] = []
    mine_s, peer_s = _seconds(services), _seconds(theirs)
    if peer_s is None:
        text, met = f"Go {_not_done(theirs)}; polyccm {_not_done(services)}", False
        if mine_s is not None:
            text, met = f"{mine_s:.1f} s; Go {_not_done(theirs)}", True
    elif mine_s is None:
        text, met = f"{_not_done(services)}; Go {peer_s:.1f} s", False
    else:
        text, met = f"{mine_s:.1f} s vs Go {peer_s:.1f} s", mine_s <= peer_s
    checks.append(
        Check(provider, label, "load balancers: at least as fast as the Go peer", text, met)
    )
    mine_c, peer_c = _calls(services), _calls(theirs)
    if mine_s is not None and peer_s is None:
        # A peer cut short made at least peer_c calls for fewer Services than polyccm
        # served: polyccm's count at or below it is fewer calls than the peer's whole run
        # would have made; above it, the two cannot be compared.
        text = f"{mine_c:,} vs Go at least {peer_c:,} ({_not_done(theirs)})"
        met = mine_c <= peer_c
    else:
        text = f"{mine_c:,} vs Go {peer_c:,}"
        met = mine_s is not None and peer_s is not None and mine_c <= peer_c
    checks.append(
        Check(provider, label, "load balancers: no more cloud calls than the Go peer", text, met)
    )
    return checks


def checks_for(provider: str, result: ScaleResult, quiet: float) -> list[Check]:
    """Every target that applies to ``provider`` at this scale."""
    ours = _polyccm(result)
    if ours is None:
        return []
    scale = result.scale
    label = scale.label
    checks: list[Check] = []

    def check(target: str, measured: str, met: bool) -> None:
        checks.append(Check(provider, label, target, measured, met))

    nodes = ours.phases.get("nodes")
    node_seconds = _seconds(nodes)
    node_budget = scale.nodes // 100 + 10
    node_calls = _calls(nodes)
    check(
        f"node init: at most N/100 + 10 = {node_budget} cloud calls",
        f"{node_calls}" if node_seconds is not None else _not_done(nodes),
        node_seconds is not None and node_calls <= node_budget,
    )
    bound_nodes = _seconds(result.bound.phases.get("nodes")) if result.bound else None
    if scale.nodes == 1000 and bound_nodes:
        ratio = None if node_seconds is None else node_seconds / bound_nodes
        check(
            f"node init: within {NODE_BOUND_RATIO:g}x the bound",
            _not_done(nodes) if ratio is None
            else f"{node_seconds:.1f} s = {ratio:.2f}x the bound's {bound_nodes:.1f} s",
            ratio is not None and ratio <= NODE_BOUND_RATIO,
        )  # fmt: skip
    peer = _peer(result)
    services = ours.phases.get("services")
    if peer is not None and "services" in peer.phases:
        checks.extend(_load_balancer_checks(provider, label, services, peer.phases["services"]))
    rest = ours.phases.get("rest")
    if rest is not None:
        allowed = REST_CALLS_PER_MINUTE_PER_100 * quiet / 60 * scale.nodes / 100
        calls = _calls(rest)
        check(
            f"at rest: under {REST_CALLS_PER_MINUTE_PER_100:g} cloud call a minute per 100 "
            "nodes, no kube-apiserver write",
            f"{calls} calls, "
            + (f"{rest.writes} writes" if ours.requests_counted else "writes not counted")
            + f" in {quiet:g} s"
            + ("" if _seconds(services) is not None else " (not at rest: services not done)"),
            calls < allowed
            and ours.requests_counted
            and rest.writes == 0
            and _seconds(services) is not None,
        )
    rss = ours.peak_rss_mib
    if peer is not None and peer.peak_rss_mib and peer.complete:
        check(
            "peak RSS at or below the Go peer's",
            f"{rss or 0:.0f} MiB vs Go {peer.peak_rss_mib:.0f} MiB",
            rss is not None and ours.complete and rss <= peer.peak_rss_mib,
        )
    if scale.nodes >= LARGE_SCALE_NODES:
        complete = ours.complete
        check(
            f"peak RSS under {LARGE_SCALE_RSS_MIB:g} MiB",
            f"{rss or 0:.0f} MiB" + ("" if complete else " (phases cut short)"),
            rss is not None and complete and rss < LARGE_SCALE_RSS_MIB,
        )
    ready = ours.ready_seconds
    check(
        f"start to ready under {READY_SECONDS:g} s",
        "never" if ready is None else f"{ready:.2f} s",
        ready is not None and ready < READY_SECONDS,
    )
    for name in ("services", "churn", "delete"):
        phase = ours.phases.get(name)
        if phase is not None and phase.seconds is None:
            check(f"{name} phase done in time", _not_done(phase), False)
    return checks


def quiet_seconds(result: ProviderResult) -> float:
    """The quiet period of a provider's run (its first setting: ``"30 s"``)."""
    try:
        return float(result.settings[0].split()[0])
    except (IndexError, ValueError):
        return 30.0


def all_checks(results: Iterable[ProviderResult]) -> list[Check]:
    checks: list[Check] = []
    for result in results:
        quiet = quiet_seconds(result)
        for scale_result in result.scales:
            checks.extend(checks_for(result.provider, scale_result, quiet))
    return checks


def _headline(result: ProviderResult, scale_result: ScaleResult) -> list[list[str]]:
    """polyccm's row (with its ratios to the bound and to the upstream CCM) and, where it ran,
    the upstream CCM's row beneath it, the same figures side by side."""
    ours = _polyccm(scale_result)
    if ours is None:
        return []
    peer = _peer(scale_result)
    bound = scale_result.bound

    def timed(run: Run, name: str) -> str:
        phase = run.phases.get(name)
        seconds = _seconds(phase)
        if seconds is None:
            return _not_done(phase)
        if run is not ours:
            return f"{seconds:.1f} s"
        parts = [f"{seconds:.1f} s"]
        reference = _seconds(bound.phases.get(name)) if bound else None
        if reference and name == "nodes":
            parts.append(f"{seconds / reference:.2g}x bound")
        peer_seconds = _seconds(peer.phases.get(name)) if peer else None
        if peer_seconds:
            parts.append(f"{seconds / peer_seconds:.2g}x Go")
        return f"{parts[0]} ({', '.join(parts[1:])})" if len(parts) > 1 else parts[0]

    def row(run: Run) -> list[str]:
        rest = run.phases.get("rest")

        def calls(name: str) -> str:
            return f"{_calls(run.phases[name]):,}" if name in run.phases else "—"

        return [
            result.provider,
            scale_result.scale.label,
            run.label,
            timed(run, "nodes"),
            calls("nodes"),
            timed(run, "services"),
            calls("services"),
            "—" if rest is None else f"{_calls(rest)} / {rest.writes}",
            timed(run, "churn"),
            timed(run, "delete"),
            f"{run.peak_rss_mib:.0f} MiB" if run.peak_rss_mib else "—",
            f"{run.ready_seconds:.2f} s" if run.ready_seconds is not None else "never",
        ]

    return [row(ours), *([row(peer)] if peer is not None else [])]


def summary(results: Sequence[ProviderResult], minutes: float | None, whole: bool = True) -> str:
    """``summary.md``: the headline figures of every provider and scale, then the checks."""
    lines = ["# Benchmark summary", ""]
    if minutes is not None:
        lines += [
            f"The last run took {minutes:.1f} min on this machine (2 cores): "
            f"{budget_margin(minutes, whole)}.",
            "",
        ]
    lines += [f"- {r.provider}: `{r.command}`, {r.seconds / 60:.1f} min of it" for r in results] + [
        ""
    ]
    lines += [
        "polyccm's figures, and beneath them the same figures of the provider's upstream Go CCM "
        "where it ran; polyccm's ratios are to the control plane's bound (a bare client making "
        "only the writes a CCM must make) and to that upstream CCM (Go). Each provider's own "
        "table (`<provider>.md`) has every CCM and every figure.",
        "",
        "| provider | nodes/services | CCM | nodes initialised | calls | load balancers served "
        "| calls | at rest: calls / writes | churn | every Service deleted | peak RSS | ready |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for scale_result in result.scales:
            for row in _headline(result, scale_result):
                lines.append("| " + " | ".join(row) + " |")
    checks = all_checks(results)
    missed = [c for c in checks if not c.met]
    lines += [
        "",
        f"## Targets: {len(checks) - len(missed)} of {len(checks)} met",
        "",
        "| provider | nodes/services | target | measured | met |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {c.provider} | {c.scale} | {c.target} | {c.measured} | {'yes' if c.met else '**no**'} |"
        for c in checks
    ]
    return "\n".join(lines) + "\n"


def write_summary(
    results: Sequence[ProviderResult], directory: Path, minutes: float | None, whole: bool = True
) -> Path:
    path = directory / "summary.md"
    path.write_text(summary(results, minutes, whole))
    return path


def load_results(directory: Path) -> list[ProviderResult]:
    """Every provider's results in ``directory``, in the providers' usual order."""
    from bench.clouds import CLOUDS
    from bench.report import load

    # Only the providers' files: the image tool's image.json sits beside them.
    return [
        load(directory / f"{name}.json") for name in CLOUDS if (directory / f"{name}.json").exists()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.targets [DIR] [--minutes M]``: write DIR's ``summary.md`` again from the
    providers' ``.json`` results there (default bench/results), e.g. after a run stopped part-way
    (``--minutes``: how long the whole run took, for the summary's margin line)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    minutes: float | None = None
    if "--minutes" in args:
        at = args.index("--minutes")
        try:
            minutes = float(args[at + 1])
        except (IndexError, ValueError):
            minutes = -1.0
        del args[at : at + 2]
    if len(args) > 1 or (minutes is not None and minutes < 0):
        print("usage: python -m bench.targets [RESULTS-DIR] [--minutes WHOLE-RUN]", file=sys.stderr)
        return 2
    directory = Path(args[0]) if args else Path(__file__).resolve().parent / "results"
    results = load_results(directory)
    if not results:
        print(f"no results in {directory}", file=sys.stderr)
        return 2
    print(f"wrote {write_summary(results, directory, minutes)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
