"""Heap profile of a benchmarked polyccm: ``POLYCCM_BENCH_HEAP=DIR python -m bench ...``.

With that variable set, the harness starts polyccm through this module (``python -m bench.heap
DIR -- <polyccm's argv>``): tracemalloc traces every allocation (``FRAMES`` frames each), and a
thread writes, once a second, a line of ``DIR/timeline.tsv`` (seconds since start, Python's
traced memory now and at its peak, VmRSS, VmHWM, threads) and a snapshot
``DIR/peak-<n>.snap`` each time the traced memory reaches a new high by more than
``STEP_MIB`` (the last one is the heap at the peak). ``python -m bench.heap --show DIR`` prints
the timeline's turning points and the peak snapshot's largest allocation sites and their
growth since the first snapshot. Tracing slows polyccm (about 2x CPU): compare memory and call
counts from such a run, never times.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
import tracemalloc
from pathlib import Path

FRAMES = 8
STEP_MIB = 16.0
VARIABLE = "POLYCCM_BENCH_HEAP"


def _status() -> dict[str, int]:
    found: dict[str, int] = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                found[key] = int(value.split()[0])
    return found


def _sample(directory: Path, began: float) -> None:
    timeline = (directory / "timeline.tsv").open("w", buffering=1)
    timeline.write("seconds\ttraced_mib\ttraced_peak_mib\trss_mib\thwm_mib\tthreads\n")
    dumped = 0.0
    count = 0
    while True:
        current, peak = tracemalloc.get_traced_memory()
        status = _status()
        timeline.write(
            f"{time.monotonic() - began:.1f}\t{current / 2**20:.1f}\t{peak / 2**20:.1f}\t"
            f"{status.get('VmRSS', 0) / 1024:.1f}\t{status.get('VmHWM', 0) / 1024:.1f}\t"
            f"{status.get('Threads', 0)}\n"
        )
        if current / 2**20 > dumped + STEP_MIB:
            dumped = current / 2**20
            count += 1
            tracemalloc.take_snapshot().dump(str(directory / f"peak-{count:03d}.snap"))
        time.sleep(1.0)


def launch(directory: Path, argv: list[str]) -> None:
    """Trace, sample, then run ``polyccm.cli`` with ``argv`` as its arguments."""
    directory.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(FRAMES)
    began = time.monotonic()
    threading.Thread(target=_sample, args=(directory, began), name="heap", daemon=True).start()
    sys.argv = ["polyccm", *argv]
    runpy.run_module("polyccm.cli", run_name="__main__", alter_sys=True)


def show(directory: Path, limit: int = 25) -> None:
    rows = [line.split("\t") for line in (directory / "timeline.tsv").read_text().splitlines()]
    print("\t".join(rows[0]))
    step = max(1, (len(rows) - 1) // 40)
    for row in rows[1::step]:
        print("\t".join(row))
    snaps = sorted(directory.glob("peak-*.snap"))
    if not snaps:
        return
    first, last = (tracemalloc.Snapshot.load(str(p)) for p in (snaps[0], snaps[-1]))
    total = sum(s.size for s in last.statistics("filename"))
    print(f"\n{snaps[-1].name}: {total / 2**20:.1f} MiB traced; largest sites (lineno):")
    for stat in last.statistics("lineno")[:limit]:
        print(f"{stat.size / 2**20:8.1f} MiB {stat.count:9d}  {stat.traceback}")
    print(f"\ngrowth {snaps[0].name} -> {snaps[-1].name} (traceback):")
    for diff in last.compare_to(first, "traceback")[: limit // 2]:
        print(f"{diff.size_diff / 2**20:+8.1f} MiB {diff.count_diff:+9d}")
        for line in diff.traceback.format()[-2 * FRAMES :]:
            print("      " + line)


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--show"]:
        show(Path(args[1]))
        return
    directory, separator, *rest = args
    assert separator == "--", "usage: python -m bench.heap DIR -- POLYCCM-ARGS"
    launch(Path(directory), rest)


if __name__ == "__main__":
    os.environ.pop(VARIABLE, None)
    main()
