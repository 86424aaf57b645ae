"""Start-to-ready beside the CPU seconds it took: on a machine whose cores other work shares, a
CCM's wall time to ready grows several-fold while its CPU seconds do not (issue 33: polyccm GCE
0.9 s on a quiet machine, 8.5 s on a busy one, with the same ~1.5 s of CPU at 100 and 1,000
instances), so the tables show both and a reader can tell a slow start from a busy machine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: A child that starts a grandchild, which burns ``0.5`` s of CPU, says so and sleeps.
BURNER = """
import subprocess, sys
grandchild = (
    "import sys, time\\n"
    "start = time.process_time()\\n"
    "while time.process_time() - start < 0.5: pass\\n"
    "print('burnt', flush=True)\\n"
    "time.sleep(60)\\n"
)
subprocess.run([sys.executable, "-c", grandchild])
"""


@pytest.fixture(scope="module", autouse=True)
def _bench_importable() -> Iterator[None]:
    sys.path.insert(0, str(ROOT))
    yield
    sys.path.remove(str(ROOT))


def test_the_cpu_seconds_of_a_ccm_count_its_descendants() -> None:
    from bench.processes import tree_cpu_seconds

    child = subprocess.Popen(
        [sys.executable, "-c", BURNER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "burnt"
        # The child itself only waits: the CPU is its grandchild's.
        assert tree_cpu_seconds(child.pid) >= 0.45
        assert tree_cpu_seconds(child.pid) < 5.0
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the child's session: it and its grandchild
        child.wait()


def test_a_process_that_sleeps_uses_no_cpu_seconds_however_long_it_runs() -> None:
    from bench.processes import tree_cpu_seconds

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(1.0)
        assert tree_cpu_seconds(sleeper.pid) < 0.5
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_table_shows_start_to_ready_with_its_cpu_seconds(tmp_path: Path) -> None:
    from bench.report import ProviderResult, ScaleResult, load, markdown, write
    from bench.scenario import Phase, Run, Scale

    busy = Run("polyccm", "polyccm", 100, 10, ready_seconds=8.49, ready_cpu_seconds=1.52)
    busy.phases = {"start": Phase(seconds=8.49)}
    never = Run("gce-go", "cloud-provider-gcp v36.3.8", 100, 10)
    never.phases = {"start": Phase(seconds=None, limit=120.0)}
    result = ProviderResult("gce", "network load balancers", "python -m bench", ["20 s"],
                            scales=[ScaleResult(Scale(100, 10), None, [busy, never])])  # fmt: skip

    row = next(line for line in markdown(result).splitlines() if "start to ready" in line)
    assert row == (
        "| start to ready (polyccm /readyz, Go /healthz) (its CPU seconds) "
        "| 8.49 s (1.52 s CPU) | never | — |"
    )
    write(result, tmp_path)
    again = load(tmp_path / "gce.json").scales[0].runs[0]
    assert again.ready_cpu_seconds == 1.52
