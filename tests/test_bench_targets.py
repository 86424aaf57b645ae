"""Issue 13's targets as the benchmark checks them (pure functions over made-up results): a
missed target shows as missed, a phase cut short never passes, and targets against the Go peer
or the large-scale memory cap apply only where they can be measured."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def _bench_importable() -> Iterator[None]:
    sys.path.insert(0, str(ROOT))
    yield
    sys.path.remove(str(ROOT))


def _run(key: str, nodes: int, *, node_s: float | None = 9.0, lb_s: float | None = 20.0,
         node_calls: int = 5, lb_calls: int = 100, rest_calls: int = 0, rest_writes: int = 0,
         rss: float = 100.0, ready: float = 1.0):  # type: ignore[no-untyped-def]  # fmt: skip
    from bench.scenario import Phase, Run

    run = Run(key, key, nodes, nodes // 10, ready_seconds=ready, peak_rss_mib=rss)
    run.phases = {
        "start": Phase(seconds=ready),
        "nodes": Phase(seconds=node_s, calls={"op": node_calls},
                       note="" if node_s is not None else f"10 of {nodes} in 300 s"),
        "services": Phase(seconds=lb_s, calls={"op": lb_calls},
                          note="" if lb_s is not None else "3 of 100 in 300 s"),
        "rest": Phase(seconds=30.0, calls={"op": rest_calls} if rest_calls else {},
                      writes=rest_writes),
        "churn": Phase(seconds=5.0),
        "delete": Phase(seconds=5.0),
    }  # fmt: skip
    return run


def _scale(nodes: int, *runs, bound_nodes: float = 6.0):  # type: ignore[no-untyped-def]
    from bench.report import ScaleResult
    from bench.scenario import Phase, Run, Scale

    bound = Run("bound", "bound", nodes, nodes // 10)
    bound.phases = {"nodes": Phase(seconds=bound_nodes)}
    return ScaleResult(Scale(nodes, nodes // 10), bound, list(runs))


def test_a_run_within_every_target_meets_them_all() -> None:
    from bench.targets import checks_for

    ours = _run("polyccm", 1000, node_s=8.0, lb_s=20.0, rss=100)
    peer = _run("aws-go", 1000, node_s=50.0, lb_s=25.0, lb_calls=200, rss=150)
    result = _scale(1000, ours, peer)
    checks = checks_for("aws", result, quiet=30.0)
    assert checks and all(c.met for c in checks), [c for c in checks if not c.met]
    targets = {c.target for c in checks}
    assert "node init: within 1.5x the bound" in targets
    assert "load balancers: at least as fast as the Go peer" in targets
    assert "peak RSS at or below the Go peer's" in targets


def test_each_missed_target_is_reported_missed() -> None:
    from bench.targets import checks_for

    # 6 calls in 30 s at 1,000 nodes: 12 a minute, over the 10 allowed.
    result = _scale(1000, _run("polyccm", 1000, node_s=10.0, node_calls=25, lb_s=30.0,
                               lb_calls=300, rest_calls=6, rss=200, ready=2.5),
                    _run("aws-go", 1000, lb_s=25.0, lb_calls=200, rss=150))  # fmt: skip
    missed = {c.target for c in checks_for("aws", result, quiet=30.0) if not c.met}
    assert missed == {
        "node init: at most N/100 + 10 = 20 cloud calls",
        "node init: within 1.5x the bound",
        "load balancers: at least as fast as the Go peer",
        "load balancers: no more cloud calls than the Go peer",
        "at rest: under 1 cloud call a minute per 100 nodes, no kube-apiserver write",
        "peak RSS at or below the Go peer's",
        "start to ready under 2 s",
    }


def test_a_phase_cut_short_fails_its_targets_and_says_how_far_it_got() -> None:
    from bench.targets import checks_for

    result = _scale(5000, _run("polyccm", 5000, lb_s=None, rss=200))
    checks = {c.target: c for c in checks_for("packet", result, quiet=30.0)}
    cut = checks["services phase done in time"]
    assert not cut.met and "3 of 100 in 300 s" in cut.measured
    memory = checks["peak RSS under 250 MiB"]
    assert not memory.met and "cut short" in memory.measured, "memory of a partial run"
    rest = checks["at rest: under 1 cloud call a minute per 100 nodes, no kube-apiserver write"]
    assert not rest.met and "not at rest" in rest.measured


def test_targets_apply_only_where_they_can_be_measured() -> None:
    from bench.targets import checks_for

    small = {c.target for c in checks_for("gce", _scale(100, _run("polyccm", 100)), 30.0)}
    assert not any("Go peer" in t for t in small), "no peer, no comparison with it"
    assert not any("250 MiB" in t for t in small), "the memory cap is for 5,000 nodes"
    assert not any("the bound" in t for t in small), "the bound ratio is set at 1,000 nodes"


def test_the_summary_lists_every_provider_and_counts_the_targets_met() -> None:
    from bench.report import ProviderResult
    from bench.targets import summary

    good = ProviderResult("aws", "lbs", "python -m bench", ["30 s"], seconds=600.0,
                          scales=[_scale(100, _run("polyccm", 100, node_s=1.0))])  # fmt: skip
    bad = ProviderResult("packet", "eips", "python -m bench", ["30 s"], seconds=300.0,
                         scales=[_scale(100, _run("polyccm", 100, node_calls=40))])  # fmt: skip
    text = summary([good, bad], minutes=15.0)
    assert "The last run took 15.0 min" in text
    assert "| aws | 100/10 |" in text and "| packet | 100/10 |" in text
    assert "## Targets: 5 of 6 met" in text
    row = "| packet | 100/10 | node init: at most N/100 + 10 = 11 cloud calls | 40 | **no** |"
    assert row in text


def test_writes_at_rest_that_were_not_counted_never_pass_as_none(tmp_path: Path) -> None:
    from bench.audit import AuditLog
    from bench.targets import checks_for

    log = tmp_path / "audit.log"
    log.write_text('{"auditID": "1"}\n')
    audit = AuditLog(log)
    assert not audit.rotated
    log.rename(tmp_path / "audit-2026-12-01T23-00-00.000.log")  # the API server rotates it
    log.write_text("")
    assert audit.rotated

    ours = _run("polyccm", 1000, node_s=5.0)
    ours.requests_counted = False
    checks = checks_for("aws", _scale(1000, ours), quiet=30.0)
    (rest,) = [c for c in checks if "at rest" in c.target]
    assert not rest.met and "writes not counted" in rest.measured
