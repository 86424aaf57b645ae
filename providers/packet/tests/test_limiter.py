"""The client-side limiter's two priorities: BGP's background calls go only while node and
load-balancer calls leave half the burst, and never take their tokens, so foreground calls
arriving behind a BGP backlog never wait for it."""

from __future__ import annotations

from polyccm_packet.api import PriorityBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_background_calls_hold_back_while_foreground_calls_use_the_burst() -> None:
    clock = Clock()
    bucket = PriorityBucket(10.0, 20, clock=clock)

    # an idle bucket lets background calls go, and they take none of its tokens
    assert all(bucket.spare_wait(10) == 0.0 for _ in range(100))
    assert [bucket.reserve() for _ in range(10)] == [0.0] * 10
    # a foreground burst of ten left ten: the background waits until it holds more again
    wait = bucket.spare_wait(10)
    assert 0.0 < wait <= 0.01
    assert [bucket.reserve() for _ in range(5)] == [0.0] * 5  # the foreground still goes at once
    wait = bucket.spare_wait(10)
    assert 0.49 < wait < 0.51
    clock.now += 0.3
    assert bucket.spare_wait(10) > 0
    clock.now += 0.3
    assert bucket.spare_wait(10) == 0.0
