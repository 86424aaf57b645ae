"""The emulators' sense of time: wall-clock seconds, or a clock tests move by hand."""

from __future__ import annotations

import time


class Clock:
    """Wall-clock seconds since the epoch (what ``created_at`` shows)."""

    def now(self) -> float:
        return time.time()


class ManualClock(Clock):
    """A clock that moves only when told to (for tests)."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds
