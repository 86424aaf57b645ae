"""The client-side limiter's two priorities: BGP's background calls take only spare tokens, so
node and load-balancer calls arriving behind a BGP backlog never wait for it."""

from __future__ import annotations

from polyccm_packet.api import PriorityBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_background_calls_leave_half_the_burst_to_foreground_calls() -> None:
    clock = Clock()
    bucket = PriorityBucket(10.0, 20, clock=clock)

    background = 0
    while bucket.reserve_spare(10) == 0.0:
        background += 1
        assert background <= 20, "background calls took the whole burst"

    assert background == 10
    # a burst of ten foreground calls goes out at once, behind the background backlog
    assert [bucket.reserve() for _ in range(10)] == [0.0] * 10
    # the background waits until the bucket holds more than its reserve again: 1.1 s at 10/s
    wait = bucket.reserve_spare(10)
    assert 1.0 < wait < 1.2
    clock.now += 0.5
    assert bucket.reserve_spare(10) > 0
    assert bucket.reserve() == 0.0  # meanwhile a foreground call still goes out at once
    clock.now += 0.7
    assert bucket.reserve_spare(10) == 0.0
