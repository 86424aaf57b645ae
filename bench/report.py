"""Results of one provider as ``bench/results/<provider>.md`` (a table per scale), ``.png`` (a
chart) and ``.json`` (every figure, for tools).

Each figure of a CCM is shown with its ratio to the bare client's bound (where the bound does
the same work) and to the provider's upstream Go CCM (where it ran), every CCM in a column of
its own. A phase that did not finish in the time
allowed shows as ``>T s``; a disagreement between polyccm's call metric and the emulator shows
as MISMATCH, with the operations listed under the table.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.ccms import FAKE_KEY, is_upstream
from bench.scenario import Phase, Run, Scale


def upstream_run(runs: Sequence[Run]) -> Run | None:
    """The provider's upstream Go CCM among ``runs``, if it ran."""
    return next((r for r in runs if is_upstream(r.key)), None)


@dataclass
class ScaleResult:
    scale: Scale
    bound: Run | None
    runs: list[Run]


@dataclass
class ProviderResult:
    provider: str
    balancer_kind: str
    command: str
    settings: list[str]
    scales: list[ScaleResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _seconds(phase: Phase | None) -> str:
    if phase is None:
        return "—"
    if phase.seconds is None:
        return f"not done ({phase.note})" if phase.note else "not done"
    return f"{phase.seconds:.1f} s"


def _ratio(value: float | None, reference: float | None, name: str) -> str:
    if value is None or not reference:
        return ""
    return f"{value / reference:.2g}x {name}"


def _with_ratios(
    text: str, value: float | None, bound: float | None, peer: float | None, is_peer: bool
) -> str:
    ratios = [_ratio(value, bound, "bound")]
    if not is_peer:
        ratios.append(_ratio(value, peer, "Go"))
    shown = ", ".join(r for r in ratios if r)
    return f"{text} ({shown})" if shown else text


def _calls(phase: Phase | None, run: Run) -> str:
    if phase is None or run.key == FAKE_KEY:
        return "—"
    return f"{sum(phase.calls.values()):,}"


def _time_row(
    title: str, name: str, runs: Sequence[Run], bound: Run | None, peer: Run | None
) -> list[str]:
    cells = [title]
    bound_seconds = bound.phases[name].seconds if bound and name in bound.phases else None
    peer_seconds = peer.phases[name].seconds if peer and name in peer.phases else None
    for run in runs:
        phase = run.phases.get(name)
        value = phase.seconds if phase else None
        cells.append(_with_ratios(_seconds(phase), value, bound_seconds, peer_seconds, run is peer))
    cells.append(_seconds(bound.phases.get(name)) if bound else "—")
    return cells


def _at_rest(run: Run, figure: str) -> str:
    """A figure of the quiet period, which is not one when the services were still being made."""
    services = run.phases.get("services")
    if figure != "—" and services is not None and services.seconds is None:
        return f"{figure} (not at rest: services not done)"
    return figure


def _calls_row(title: str, name: str, runs: Sequence[Run]) -> list[str]:
    return [title, *(_calls(run.phases.get(name), run) for run in runs), "—"]


def scale_table(result: ScaleResult, kind: str, quiet: str) -> list[str]:
    scale = result.scale
    runs = result.runs
    bound = result.bound
    peer = upstream_run(runs)
    header = ["figure", *(r.label for r in runs), "bare client (bound)"]
    rows = [
        [
            "start to ready (polyccm /readyz, Go /healthz) (its CPU seconds)",
            *(_ready(r) for r in runs),
            "—",
        ],
        _time_row(f"{scale.nodes:,} tainted nodes initialised", "nodes", runs, bound, peer),
        _calls_row("cloud calls for that", "nodes", runs),
        _time_row(f"{scale.services:,} {kind}, every ingress set", "services", runs, bound, peer),
        _calls_row("cloud calls for that (until quiet)", "services", runs),
        [
            f"cloud calls at rest ({quiet})",
            *(_at_rest(r, _calls(r.phases.get("rest"), r)) for r in runs),
            "—",
        ],
        [
            f"kube-apiserver writes at rest ({quiet})",
            *(
                _at_rest(r, str(r.phases["rest"].writes)) if "rest" in r.phases else "—"
                for r in runs
            ),
            "—",
        ],
        _time_row(f"churn: {scale.churned:,} nodes replaced", "churn", runs, None, peer),
        _calls_row("cloud calls for that (until quiet)", "churn", runs),
        _time_row("every Service deleted", "delete", runs, bound, peer),
        _calls_row("cloud calls for that (until quiet)", "delete", runs),
        [
            "kube-apiserver requests (writes)",
            *(f"{r.requests:,} ({r.writes:,})" for r in runs),
            f"{bound.requests:,} ({bound.writes:,})" if bound else "—",
        ],
        [
            "peak RSS (VmHWM)",
            *(_rss(r, peer) for r in runs),
            "—",
        ],
        [
            "polyccm_cloud_api_calls_total = emulator's count",
            *(_agreement(r) for r in runs),
            "—",
        ],
    ]
    lines = [
        f"### {scale.nodes:,} nodes, {scale.services:,} services",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    for run in runs:
        rest = run.phases.get("rest")
        if rest is not None and rest.write_kinds:
            kinds = ", ".join(
                f"{kind} x{count}" for kind, count in sorted(rest.write_kinds.items())
            )
            lines.append(f"\n{run.label}: kube-apiserver writes at rest: {kinds}")
        for note in run.notes:
            lines.append(f"\n{run.label}: {note}")
        if run.mismatches:
            lines.append(f"\n**MISMATCH** ({run.label}): " + "; ".join(run.mismatches))
    lines.append("")
    lines += calls_by_operation(runs)
    return lines


def _rss(run: Run, peer: Run | None) -> str:
    """Peak RSS, with its ratio to the Go peer's when both ran every phase."""
    if not run.peak_rss_mib:
        return "—"
    text = f"{run.peak_rss_mib:.0f} MiB"
    if not run.complete:
        return f"{text} (phases cut short)"
    if peer is None or run is peer or not peer.peak_rss_mib or not peer.complete:
        return text
    return f"{text} ({run.peak_rss_mib / peer.peak_rss_mib:.2g}x Go)"


def _ready(run: Run) -> str:
    """Start-to-ready and the CPU seconds it took (the figure a busy machine does not change)."""
    if run.ready_seconds is None:
        return "never"
    text = f"{run.ready_seconds:.2f} s"
    if run.ready_cpu_seconds is None:
        return text
    return f"{text} ({run.ready_cpu_seconds:.2f} s CPU)"


def _agreement(run: Run) -> str:
    if run.metric_calls is None:
        return "—"
    return "**MISMATCH**" if run.mismatches else "agree"


def calls_by_operation(runs: Sequence[Run]) -> list[str]:
    """The whole run's cloud calls by operation, one column per CCM that calls the cloud."""
    callers = [r for r in runs if r.key != FAKE_KEY and r.phases]
    totals = {r.key: Counter(r.cloud_calls) for r in callers}
    operations = sorted(
        set().union(*(t.keys() for t in totals.values())) if totals else set(),
        key=lambda op: (-max(t[op] for t in totals.values()), op),
    )
    if not operations:
        return []
    lines = [
        "<details><summary>cloud calls by operation (whole run)</summary>",
        "",
        "| operation | " + " | ".join(r.label for r in callers) + " |",
        "|---|" + "---|" * len(callers),
    ]
    lines += [
        f"| {op} | " + " | ".join(f"{totals[r.key][op]:,}" for r in callers) + " |"
        for op in operations
    ]
    lines += ["", "</details>", ""]
    return lines


def markdown(result: ProviderResult) -> str:
    quiet = result.settings[0] if result.settings else ""
    lines = [
        f"# Benchmark: {result.provider}",
        "",
        f"Made by `{result.command}` in {result.seconds / 60:.1f} min on this machine "
        "(2 cores); see bench/README.md for what each figure means.",
        "",
        *(f"- {item}" for item in result.settings[1:]),
        *(f"- skipped: {item}" for item in result.skipped),
        "",
        f"![chart]({result.provider}.png)",
        "",
    ]
    for scale_result in result.scales:
        lines += scale_table(scale_result, result.balancer_kind, quiet)
    return "\n".join(lines) + "\n"


def chart(result: ProviderResult, path: Path) -> None:
    """Three panels (node initialisation, load balancers, peak RSS), one bar per CCM and the
    bound per scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{s.scale.nodes}/{s.scale.services}" for s in result.scales]
    series: dict[str, list[tuple[float, float, float]]] = {}
    for index, scale_result in enumerate(result.scales):
        entries = list(scale_result.runs)
        if scale_result.bound is not None:
            entries.append(scale_result.bound)
        for run in entries:
            figures = (
                _value(run.phases.get("nodes")),
                _value(run.phases.get("services")),
                run.peak_rss_mib or 0.0,
            )
            series.setdefault(run.label, [(0.0, 0.0, 0.0)] * len(labels))[index] = figures
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    titles = ("nodes initialised (s)", "every ingress set (s)", "peak RSS (MiB)")
    width = 0.8 / max(1, len(series))
    for panel, (axis, title) in enumerate(zip(axes, titles, strict=True)):
        for offset, (label, values) in enumerate(series.items()):
            positions = [i + offset * width for i in range(len(labels))]
            axis.bar(positions, [v[panel] for v in values], width, label=label)
        axis.set_title(title)
        if panel < 2 and len(labels) > 1:
            axis.set_yscale("log", nonpositive="clip")
        axis.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(labels))])
        axis.set_xticklabels([f"{label}\nnodes/services" for label in labels])
    axes[0].legend(fontsize="small")
    figure.suptitle(
        f"polyccm benchmark: {result.provider} (times on a log scale; a phase cut short shows "
        "where it was cut)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _value(phase: Phase | None) -> float:
    if phase is None:
        return 0.0
    return phase.seconds if phase.seconds is not None else phase.limit or 0.0


def write(result: ProviderResult, directory: Path) -> list[Path]:
    """Write the provider's .md, .png and .json into ``directory``; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    md = directory / f"{result.provider}.md"
    png = directory / f"{result.provider}.png"
    raw = directory / f"{result.provider}.json"
    md.write_text(markdown(result))
    chart(result, png)
    raw.write_text(json.dumps(asdict(result), indent=1, sort_keys=True) + "\n")
    return [md, png, raw]


def load(path: Path) -> ProviderResult:
    """A provider's results back from its .json (for tests and tools)."""
    data = json.loads(path.read_text())
    scales = []
    for item in data.pop("scales"):
        scales.append(
            ScaleResult(
                scale=Scale(**item["scale"]),
                bound=_run(item["bound"]) if item["bound"] else None,
                runs=[_run(r) for r in item["runs"]],
            )
        )
    return ProviderResult(**data, scales=scales)


def _run(data: dict[str, object]) -> Run:
    phases = data.pop("phases")
    assert isinstance(phases, dict)
    run = Run(**data)  # type: ignore[arg-type]
    run.phases = {name: Phase(**phase) for name, phase in phases.items()}
    return run


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.report RESULTS.json...``: write each one's .md and .png again."""
    import sys

    paths = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: python -m bench.report RESULTS.json...", file=sys.stderr)
        return 2
    for path in paths:
        result = load(path)
        path.with_suffix(".md").write_text(markdown(result))
        chart(result, path.with_suffix(".png"))
        print(f"wrote {path.with_suffix('.md')} and {path.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
