"""The emulator's sense of time: a clock and the transitions waiting on it.

Things that take time on DigitalOcean (a load balancer going from ``new`` to ``active``, a
droplet booting, a power action completing) are scheduled here and applied when a later
request finds them due, so there is no background thread and a :class:`ManualClock` lets tests
move time forward instantly (the clocks are :mod:`polyccm_testing.emulation.timers`').
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from polyccm_testing.emulation.timers import Clock, ManualClock

__all__ = ["Clock", "ManualClock", "Timers"]


class Timers:
    """Callbacks due at a clock time, run in due order by :meth:`run_due`."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def after(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (self.clock.now() + max(0.0, delay), next(self._order), action))

    def run_due(self) -> None:
        now = self.clock.now()
        while self._heap and self._heap[0][0] <= now:
            _, _, action = heapq.heappop(self._heap)
            action()

    def clear(self) -> None:
        self._heap.clear()
