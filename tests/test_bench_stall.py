"""A CCM that stops making progress costs the benchmark the stall window, not the phase timeout
(issue 33: upstream Metal's CCM initialises the first page of devices, about 10 nodes, then sat
until the timeout at every scale): its phase ends "not done (k of N, no progress for S s)" in
the tables, as a timed-out phase does, and its later phases are not run; a CCM that keeps
progressing is not cut. The run's end says its time against the 30-minute budget."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(420)
def test_a_ccm_that_stops_progressing_is_cut_after_the_stall_window(tmp_path: Path) -> None:
    peer = tmp_path / "stalling-ccm"
    peer.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "tests" / "stalling_ccm.py"}" "$@"\n'
    )
    peer.chmod(0o755)
    out = tmp_path / "results"
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--providers", "digitalocean",
         "--scales", "30/3", "--quiet", "1", "--stall", "8", "--phase-timeout", "600",
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
        env={**os.environ, "POLYCCM_PEER_DIGITALOCEAN": str(peer), "STALLING_CCM_NODES": "4"},
    )  # fmt: skip
    shown = completed.stdout[-4000:] + completed.stderr[-4000:]
    assert completed.returncode == 0, shown

    # The peer initialised 4 of 30 nodes, then nothing: cut 8 s after its last progress, far
    # from the 600 s a phase may take.
    cut = re.search(r"digitalocean-cloud-controller-manager v0\.1\.68 30/3: 4/30 nodes "
                    r"initialised in ([0-9.]+) s", completed.stdout)  # fmt: skip
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
    assert set(stalled.phases) == {"start", "nodes"}, "its later phases are not run"

    table = (out / "digitalocean.md").read_text()
    assert "not done (4 of 30, no progress for 8 s)" in table
    summary = (out / "summary.md").read_text()
    assert "not done (4 of 30, no progress for 8 s)" in summary
    assert re.search(r"The last run took [0-9.]+ min on this machine \(2 cores\): [0-9.]+ min "
                     r"inside the 30-minute budget\.", summary), summary  # fmt: skip
    assert re.search(r"done in [0-9.]+ min: [0-9.]+ min inside the 30-minute budget",
                     completed.stdout), shown  # fmt: skip
