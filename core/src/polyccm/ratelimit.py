"""The client-side rate limiter every API client of polyccm uses: a token bucket.

``rate`` tokens a second accrue, at most ``burst`` saved up (client-go's default limiter). The
Kubernetes client waits for each request (``--kube-api-qps`` / ``--kube-api-burst``); cloud
clients keep inside their API's budget with it, and may hand a reservation back when they decide
not to wait for it (answering ``RetryAfter`` instead).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up. Thread-safe. A rate of 0 or less,
    or an infinite one, means no limit."""

    def __init__(
        self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self._unlimited = not 0 < rate < math.inf
        self.burst = max(1, burst)
        self._clock = clock
        self._tokens = float(self.burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it (0 when one was there)."""
        if self._unlimited:
            return 0.0
        with self._lock:
            self._refill()
            self._tokens -= 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def available(self) -> float:
        """The tokens saved up now (negative while reservations are owed); takes none."""
        with self._lock:
            self._refill()
            return self._tokens

    def _refill(self) -> None:
        """Add the tokens accrued since the last look (call with the lock held)."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def give_back(self) -> None:
        """Return a token taken by a reservation that was not used."""
        if self._unlimited:
            return
        with self._lock:
            self._tokens = min(self.burst, self._tokens + 1)

    def acquire(self) -> None:
        """Take a token, waiting until it may be used."""
        wait = self.reserve()
        if wait > 0:
            time.sleep(wait)
