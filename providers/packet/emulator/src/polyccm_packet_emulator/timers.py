"""The emulator's sense of time.

Things that take time on Metal (a device provisioning, a power action) are computed from the
clock when a request reads them, so a :class:`ManualClock` lets tests move time instantly (the
clocks are :mod:`polyccm_testing.emulation.timers`').
"""

from __future__ import annotations

from polyccm_testing.emulation.timers import Clock, ManualClock

__all__ = ["Clock", "ManualClock"]
