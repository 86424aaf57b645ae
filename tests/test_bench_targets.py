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


# -- the upstream peers of GCE, DigitalOcean and Equinix Metal (issue 33) ----------------------

PEER_TARGETS = {
    "load balancers: at least as fast as the Go peer",
    "load balancers: no more cloud calls than the Go peer",
    "peak RSS at or below the Go peer's",
}


@pytest.mark.parametrize("provider", ["gce", "digitalocean", "packet"])
def test_each_providers_upstream_peer_is_held_to_the_same_targets_as_aws(provider: str) -> None:
    from bench.targets import checks_for

    faster = _scale(100, _run("polyccm", 100, lb_s=2.0, lb_calls=40, rss=90),
                    _run(f"{provider}-go", 100, lb_s=3.0, lb_calls=60, rss=60))  # fmt: skip
    checks = {c.target: c for c in checks_for(provider, faster, quiet=20.0)}
    assert checks.keys() >= PEER_TARGETS, "the Go peer's targets apply where it ran"
    assert checks["load balancers: at least as fast as the Go peer"].met
    assert checks["load balancers: no more cloud calls than the Go peer"].measured == "40 vs Go 60"
    rss = checks["peak RSS at or below the Go peer's"]
    assert not rss.met and rss.measured == "90 MiB vs Go 60 MiB"


def test_a_peer_that_never_served_its_services_does_not_fail_polyccm() -> None:
    from bench.targets import checks_for

    # DigitalOcean's upstream CCM on an emulator that refuses its requests: no ingress in time.
    result = _scale(100, _run("polyccm", 100, lb_s=4.0, lb_calls=1000),
                    _run("digitalocean-go", 100, lb_s=None, lb_calls=900))  # fmt: skip
    checks = {c.target: c for c in checks_for("digitalocean", result, quiet=20.0)}
    speed = checks["load balancers: at least as fast as the Go peer"]
    assert speed.met and speed.measured == "4.0 s; Go not done (3 of 100 in 300 s)"
    calls = checks["load balancers: no more cloud calls than the Go peer"]
    assert not calls.met, "more calls than a peer cut short made: the two are not comparable"


def test_a_peer_cut_short_after_more_calls_than_polyccms_whole_phase_counts_as_a_minimum() -> None:
    from bench.targets import checks_for

    # GCE's upstream CCM time-boxed at 1,000/100: 51 of 100 ingresses and 1,798 calls in 90 s;
    # polyccm served all 100 with 1,213: fewer than the peer made for half the work.
    result = _scale(1000, _run("polyccm", 1000, lb_s=8.0, lb_calls=1213),
                    _run("gce-go", 1000, lb_s=None, lb_calls=1798))  # fmt: skip
    calls = {c.target: c for c in checks_for("gce", result, quiet=20.0)}[
        "load balancers: no more cloud calls than the Go peer"
    ]
    assert calls.met
    assert calls.measured.startswith("1,213 vs Go at least 1,798 (not done")
    more = _scale(1000, _run("polyccm", 1000, lb_s=8.0, lb_calls=1800),
                  _run("gce-go", 1000, lb_s=None, lb_calls=1798))  # fmt: skip
    assert not {c.target: c for c in checks_for("gce", more, quiet=20.0)}[
        "load balancers: no more cloud calls than the Go peer"
    ].met


def test_the_framework_floor_is_never_taken_for_the_upstream_peer() -> None:
    from bench.targets import checks_for

    result = _scale(100, _run("polyccm", 100), _run("fake-go", 100, lb_s=0.1, rss=20))
    targets = {c.target for c in checks_for("aws", result, quiet=20.0)}
    assert not targets & PEER_TARGETS


def test_the_summary_puts_each_upstream_peers_figures_beneath_polyccms() -> None:
    from bench.report import ProviderResult
    from bench.targets import summary

    ours = _run("polyccm", 100, node_s=1.5, lb_s=2.0, node_calls=3, lb_calls=40, rss=90,
                ready=0.8)  # fmt: skip
    theirs = _run("gce-go", 100, node_s=3.0, lb_s=4.0, node_calls=120, lb_calls=80, rss=60,
                  ready=0.4)  # fmt: skip
    theirs.label = "cloud-provider-gcp v36.3.8"
    result = ProviderResult("gce", "network load balancers", "python -m bench", ["20 s"],
                            scales=[_scale(100, ours, theirs, bound_nodes=1.0)])  # fmt: skip
    lines = summary([result], minutes=None).splitlines()
    first = "| gce | 100/10 | polyccm"
    ours_row = next(i for i, line in enumerate(lines) if line.startswith(first))
    assert lines[ours_row] == (
        "| gce | 100/10 | polyccm | 1.5 s (1.5x bound, 0.5x Go) | 3 | 2.0 s (0.5x Go) | 40 "
        "| 0 / 0 | 5.0 s (1x Go) | 5.0 s (1x Go) | 90 MiB | 0.80 s |"
    )
    assert lines[ours_row + 1] == (
        "| gce | 100/10 | cloud-provider-gcp v36.3.8 | 3.0 s | 120 | 4.0 s | 80 | 0 / 0 "
        "| 5.0 s | 5.0 s | 60 MiB | 0.40 s |"
    )
    assert "| gce | 100/10 | peak RSS at or below the Go peer's | 90 MiB vs Go 60 MiB | **no** |" \
        in lines  # fmt: skip


def test_a_providers_table_has_its_upstream_peer_beside_polyccm_with_ratios_to_it() -> None:
    from bench.report import ProviderResult, markdown

    ours = _run("polyccm", 100, node_s=1.0, lb_s=2.0, rss=90)
    theirs = _run("packet-go", 100, node_s=4.0, lb_s=8.0, lb_calls=300, rss=45)
    theirs.label = "cloud-provider-equinix-metal 38d15e2"
    result = ProviderResult("packet", "Elastic IPs (kube-vip)", "python -m bench", ["20 s"],
                            scales=[_scale(100, ours, theirs)])  # fmt: skip
    table = markdown(result)
    assert "| figure | polyccm | cloud-provider-equinix-metal 38d15e2 | bare client (bound) |" \
        in table  # fmt: skip
    services = next(line for line in table.splitlines() if "Elastic IPs (kube-vip), every" in line)
    assert "2.0 s (0.25x Go)" in services and "| 8.0 s |" in services
    rss = next(line for line in table.splitlines() if line.startswith("| peak RSS"))
    assert rss == "| peak RSS (VmHWM) | 90 MiB (2x Go) | 45 MiB | — |"


def test_the_summary_reads_the_providers_results_beside_the_image_tools(tmp_path: Path) -> None:
    import shutil

    from bench.targets import main

    # A full `make bench` ended in a traceback (KeyError 'scales') writing summary.md because
    # bench.image's image.json sits in the same directory.
    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    for name in ("aws.json", "image.json"):
        shutil.copy(results / name, tmp_path / name)
    assert main([str(tmp_path), "--minutes", "42.0"]) == 0
    text = (tmp_path / "summary.md").read_text()
    assert "| aws | 100/10 | polyccm" in text and "42.0 min" in text
    assert main([str(tmp_path), "--minutes", "soon"]) == 2
