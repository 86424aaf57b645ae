"""DigitalOcean's request budget: per token, a sliding hour and a sliding minute.

Every answer carries ``ratelimit-limit`` (the hourly budget), ``ratelimit-remaining`` (what is
left of it) and ``ratelimit-reset`` (when the oldest counted request leaves the hour, in epoch
seconds). A request beyond either budget is answered 429 ``too_many_requests`` and not
counted.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from polyccm_digitalocean_emulator.errors import TooManyRequests
from polyccm_digitalocean_emulator.timers import Clock

HOUR = 3600.0
MINUTE = 60.0


@dataclass(frozen=True)
class Budget:
    limit: int
    remaining: int
    reset: int

    def headers(self) -> dict[str, str]:
        return {
            "ratelimit-limit": str(self.limit),
            "ratelimit-remaining": str(self.remaining),
            "ratelimit-reset": str(self.reset),
        }


class RateLimitExceeded(TooManyRequests):
    """A 429 that still carries the token's budget headers."""

    def __init__(self, budget: Budget) -> None:
        super().__init__()
        self.budget = budget


class RateLimiter:
    """Sliding-window counters per token."""

    def __init__(self, clock: Clock, *, per_hour: int, per_minute: int) -> None:
        self.clock = clock
        self.per_hour = per_hour
        self.per_minute = per_minute
        self._seen: dict[str, deque[float]] = {}

    def reset(self) -> None:
        self._seen.clear()

    def _window(self, token: str, now: float) -> deque[float]:
        window = self._seen.setdefault(token, deque())
        while window and window[0] <= now - HOUR:
            window.popleft()
        return window

    def _budget(self, window: deque[float], now: float) -> Budget:
        reset = window[0] + HOUR if window else now
        remaining = max(0, self.per_hour - len(window))
        return Budget(limit=self.per_hour, remaining=remaining, reset=int(reset))

    def peek(self, token: str | None) -> Budget:
        """The budget without spending any of it (for answers to unauthenticated calls)."""
        now = self.clock.now()
        window = self._window(token, now) if token else deque()
        return self._budget(window, now)

    def spend(self, token: str) -> Budget:
        """Count one request of ``token``; :class:`RateLimitExceeded` when over budget."""
        now = self.clock.now()
        window = self._window(token, now)
        last_minute = 0
        for moment in reversed(window):
            if moment <= now - MINUTE:
                break
            last_minute += 1
        if len(window) >= self.per_hour or last_minute >= self.per_minute:
            raise RateLimitExceeded(self._budget(window, now))
        window.append(now)
        return self._budget(window, now)
