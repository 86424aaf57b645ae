"""A CCM that stops making progress costs the benchmark the stall window, not the phase timeout
(issue 33: upstream Metal's CCM initialises the first page of devices, about 10 nodes, then sat
until the timeout at every scale): its phase ends "not done (k of N, no progress for S s)" in
the tables, as a timed-out phase does, and its later phases are not run; a CCM that keeps
progressing is not cut by it, only by its time box (a slow upstream CCM at scale), and the
tables say which; asked, the Go CCMs stop after the node phase. The run's end says its time
against the 30-minute budget."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _peer(path: Path, nodes: int, every: float) -> Path:
    """An upstream peer that initialises ``nodes`` nodes, one every ``every`` seconds, then
    stops progressing (tests/stalling_ccm.py)."""
    script = ROOT / "tests" / "stalling_ccm.py"
    path.write_text(f"#!/bin/sh\nSTALLING_CCM_NODES={nodes} STALLING_CCM_EVERY={every} "
                    f'exec "{sys.executable}" "{script}" "$@"\n')  # fmt: skip
    path.chmod(0o755)
    return path


@pytest.mark.timeout(420)
def test_a_ccm_that_stops_progressing_is_cut_after_the_stall_window(tmp_path: Path) -> None:
    stalling = _peer(tmp_path / "stalling", nodes=4, every=0)  # DigitalOcean's
    slow = _peer(tmp_path / "slow", nodes=1000, every=2)  # Metal's: progresses, slowly
    fast = _peer(tmp_path / "fast", nodes=1000, every=0)  # GCE's: every node at once
    out = tmp_path / "results"
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--providers", "digitalocean,packet,gce",
         "--scales", "30/3", "--quiet", "1", "--stall", "8", "--phase-timeout", "600",
         "--go-time-box", "20:20", "--go-nodes-only-from", "30", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
        env={**os.environ, "POLYCCM_PEER_DIGITALOCEAN": str(stalling),
             "POLYCCM_PEER_PACKET": str(slow), "POLYCCM_PEER_GCE": str(fast)},
    )  # fmt: skip
    shown = completed.stdout[-4000:] + completed.stderr[-4000:]
    assert completed.returncode == 0, shown

    # The peer initialised 4 of 30 nodes, then nothing: cut 8 s after its last progress, far
    # from the 600 s a phase may take.
    cut = re.search(r"digitalocean-cloud-controller-manager v0\.1\.68 30/3: 4/30 nodes "
                    r"initialised \(not done: no progress for 8 s\) in ([0-9.]+) s",
                    completed.stdout)  # fmt: skip
    assert cut, shown
    assert 8.0 <= float(cut.group(1)) < 60.0, shown

    sys.path.insert(0, str(ROOT))
    try:
        from bench.report import load
    finally:
        sys.path.remove(str(ROOT))
    (scale,) = load(out / "digitalocean.json").scales
    polyccm, stalled = scale.runs
    assert polyccm.key == "polyccm" and polyccm.complete, "a CCM that progresses is not cut"
    nodes = stalled.phases["nodes"]
    assert nodes.seconds is None and nodes.note == "4 of 30, no progress for 8 s"
    assert nodes.limit is not None and 8.0 <= nodes.limit < 60.0, "its chart bar: where it was cut"
    assert set(stalled.phases) == {"start", "nodes"}, "its later phases are not run"

    table = (out / "digitalocean.md").read_text()
    assert "not done (4 of 30, no progress for 8 s)" in table

    # Metal's peer kept initialising a node every 2 s: the stall window never cut it, its
    # time box did (20 s from 20 nodes), and the tables say so.
    (scale,) = load(out / "packet.json").scales
    polyccm, slow_run = scale.runs
    assert polyccm.complete, "polyccm is never time-boxed"
    nodes = slow_run.phases["nodes"]
    assert nodes.seconds is None and nodes.note.endswith(" of 30 in 20 s, time-boxed")
    assert nodes.limit == 20.0
    assert 5 <= int(nodes.note.split()[0]) <= 11, nodes.note
    assert set(slow_run.phases) == {"start", "nodes"}
    assert "in 20 s, time-boxed)" in (out / "packet.md").read_text()

    # GCE's peer initialised every node; from 30 nodes the Go CCMs were asked for the node
    # phase only: it stops there, done, and the tables say its later phases were not run.
    (scale,) = load(out / "gce.json").scales
    polyccm, short = scale.runs
    assert polyccm.complete, "polyccm runs every phase"
    assert short.phases["nodes"].seconds is not None and set(short.phases) == {"start", "nodes"}
    assert any("--go-nodes-only-from" in note for note in short.notes)
    summary = (out / "summary.md").read_text()
    (row,) = [line for line in summary.splitlines() if line.startswith("| gce | 30/3 | cloud-")]
    assert row.count("not run") == 3, row  # services, churn, delete
    assert "not done (4 of 30, no progress for 8 s)" in summary
    part = "the 30-minute budget (the full run's: this run was part of it)"
    assert re.search(r"The last run took [0-9.]+ min on this machine \(2 cores\): [0-9.]+ min "
                     rf"inside {re.escape(part)}\.", summary), summary  # fmt: skip
    assert re.search(rf"done in [0-9.]+ min: [0-9.]+ min inside {re.escape(part)}",
                     completed.stdout), shown  # fmt: skip
    said = ("NOT DONE: digitalocean 30/3 digitalocean-cloud-controller-manager v0.1.68: nodes "
            "(4 of 30, no progress for 8 s)")  # fmt: skip
    assert said in completed.stdout, shown


def test_the_go_time_box_grows_tighter_with_the_scale_and_a_bad_one_is_one_line() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from bench.cli import GO_TIME_BOX, parse_time_box, time_box
    finally:
        sys.path.remove(str(ROOT))
    steps = parse_time_box(GO_TIME_BOX)
    # At 100 nodes a peer's phase may take the phase timeout; at 1,000 90 s (cloud-provider-aws
    # initialises 1,000 nodes in 40-50 s); at 5,000 60 s.
    assert [time_box(steps, n) for n in (100, 1000, 4999, 5000)] == [None, 90.0, 90.0, 60.0]
    assert parse_time_box("60") == ((5000, 60.0),), "a bare number keeps the flag's meaning"
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--go-time-box", "1000:soon"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 2
    assert (
        completed.stderr.strip()
        .splitlines()[-1]
        .endswith("'1000:soon' is not NODES:SECONDS (e.g. 5000:60)")
    )


def test_the_summary_says_the_full_runs_margin_to_30_minutes() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from bench.targets import summary
    finally:
        sys.path.remove(str(ROOT))
    assert (
        "The last run took 28.9 min on this machine (2 cores): 1.1 min inside the "
        "30-minute budget.\n" in summary([], 28.9)
    )
    assert ": 10.1 min OVER the 30-minute budget." in summary([], 40.1)
