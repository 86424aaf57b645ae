"""The work queue: de-duplication, one worker per item, delays, backoff, batches, shutdown."""

from __future__ import annotations

import threading
import time

import pytest
from polyccm import metrics
from polyccm.workqueue import RateLimitingQueue


def _drain(queue: RateLimitingQueue) -> list[str]:
    items = []
    while (item := queue.get(timeout=0)) is not None:
        items.append(item)
    return items


def test_an_item_added_twice_is_handed_out_once() -> None:
    queue = RateLimitingQueue("dedup")
    queue.add("ns/a")
    queue.add("ns/b")
    queue.add("ns/a")
    assert len(queue) == 2
    assert _drain(queue) == ["ns/a", "ns/b"]


def test_an_item_re_added_while_processing_comes_back_after_done() -> None:
    queue = RateLimitingQueue("processing")
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    # Not handed to a second worker while the first one holds it.
    assert queue.get(timeout=0) is None
    queue.done("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None


def test_an_item_done_without_re_add_is_not_queued_again() -> None:
    queue = RateLimitingQueue("once")
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert len(queue) == 0
    assert queue.processing() == 0


def test_get_times_out_with_none() -> None:
    queue = RateLimitingQueue("timeout")
    started = time.monotonic()
    assert queue.get(timeout=0.1) is None
    assert 0.09 <= time.monotonic() - started < 1.0


def test_a_waiting_get_wakes_up_when_an_item_arrives() -> None:
    queue = RateLimitingQueue("wake")
    threading.Timer(0.05, queue.add, args=("late",)).start()
    started = time.monotonic()
    assert queue.get(timeout=5) == "late"
    assert time.monotonic() - started < 1.0


def test_add_after_holds_the_item_until_its_delay_passes() -> None:
    queue = RateLimitingQueue("after")
    started = time.monotonic()
    queue.add_after("a", 0.2)
    assert queue.get(timeout=0) is None
    assert queue.waiting() == 1
    assert queue.get(timeout=5) == "a"
    assert time.monotonic() - started >= 0.19


def test_add_after_keeps_the_earlier_due_time() -> None:
    queue = RateLimitingQueue("earlier")
    started = time.monotonic()
    queue.add_after("a", 10)
    queue.add_after("a", 0.05)
    assert queue.get(timeout=5) == "a"
    assert time.monotonic() - started < 1.0
    queue.done("a")
    # The superseded 10 s entry does not bring it back.
    assert queue.get(timeout=0.2) is None


def test_a_sleeping_get_notices_a_sooner_delayed_item() -> None:
    queue = RateLimitingQueue("sooner")
    queue.add_after("slow", 30)
    threading.Timer(0.05, queue.add_after, args=("fast", 0.05)).start()
    started = time.monotonic()
    assert queue.get(timeout=5) == "fast"
    assert time.monotonic() - started < 1.0


def test_add_after_with_no_delay_adds_at_once() -> None:
    queue = RateLimitingQueue("now")
    queue.add_after("a", 0)
    assert queue.get(timeout=0) == "a"


def test_rate_limited_backoff_doubles_per_failure_and_caps() -> None:
    queue = RateLimitingQueue("backoff", base_delay=5, max_delay=300)
    assert [queue._backoff(n) for n in range(8)] == [5, 10, 20, 40, 80, 160, 300, 300]
    assert queue._backoff(1000) == 300


def test_rate_limited_items_count_requeues_until_forgotten() -> None:
    queue = RateLimitingQueue("requeues", base_delay=0.01, max_delay=0.05)
    for expected in range(1, 4):
        queue.add_rate_limited("a")
        assert queue.num_requeues("a") == expected
        assert queue.get(timeout=2) == "a"
        queue.done("a")
    queue.forget("a")
    assert queue.num_requeues("a") == 0


def test_rate_limited_items_wait_for_their_backoff() -> None:
    queue = RateLimitingQueue("wait", base_delay=0.1, max_delay=1)
    queue.add_rate_limited("a")  # 0.1 s
    queue.add_rate_limited("b")  # 0.1 s (own counter)
    started = time.monotonic()
    assert sorted([queue.get(timeout=2) or "", queue.get(timeout=2) or ""]) == ["a", "b"]
    assert time.monotonic() - started >= 0.09
    queue.done("a")
    queue.done("b")
    queue.add_rate_limited("a")  # second failure: 0.2 s
    started = time.monotonic()
    assert queue.get(timeout=2) == "a"
    assert time.monotonic() - started >= 0.19


def test_failures_of_one_item_do_not_delay_another() -> None:
    queue = RateLimitingQueue("isolated", base_delay=10, max_delay=10)
    queue.add_rate_limited("bad")
    queue.add("good")
    assert queue.get(timeout=0.5) == "good"
    assert queue.get(timeout=0.1) is None


def test_get_batch_returns_everything_ready_up_to_the_limit() -> None:
    queue = RateLimitingQueue("batch")
    for i in range(5):
        queue.add(f"n{i}")
    queue.add_after("later", 30)
    assert queue.get_batch(3, timeout=0) == ["n0", "n1", "n2"]
    assert queue.get_batch(10, timeout=0) == ["n3", "n4"]
    assert queue.get_batch(10, timeout=0.05) == []


def test_get_batch_waits_for_the_first_item_only() -> None:
    queue = RateLimitingQueue("batch-wait")
    threading.Timer(0.05, queue.add, args=("x",)).start()
    assert queue.get_batch(100, timeout=5) == ["x"]


def test_shutdown_wakes_waiting_workers_and_refuses_new_items() -> None:
    queue = RateLimitingQueue("shutdown")
    results: list[str | None] = []
    workers = [threading.Thread(target=lambda: results.append(queue.get())) for _ in range(3)]
    for worker in workers:
        worker.start()
    time.sleep(0.05)
    queue.shutdown()
    for worker in workers:
        worker.join(timeout=2)
        assert not worker.is_alive()
    assert results == [None, None, None]
    assert queue.shutting_down
    queue.add("late")
    assert len(queue) == 0
    assert queue.get(timeout=0) is None


def test_shutdown_lets_the_item_in_hand_finish() -> None:
    queue = RateLimitingQueue("finish")
    queue.add("a")
    queue.add("b")
    assert queue.get() == "a"
    queue.shutdown()
    queue.add("a")
    queue.done("a")  # no error, not re-queued
    assert queue.processing() == 0
    assert queue.get(timeout=0) is None


def test_many_workers_never_process_one_item_concurrently() -> None:
    queue = RateLimitingQueue("concurrency")
    active: set[str] = set()
    overlaps: list[str] = []
    processed: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        while (key := queue.get()) is not None:
            with lock:
                if key in active:
                    overlaps.append(key)
                active.add(key)
            time.sleep(0.001)
            with lock:
                active.discard(key)
                processed.append(key)
            queue.done(key)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for i in range(2000):
        queue.add(f"k{i % 10}")
    deadline = time.monotonic() + 10
    while (len(queue) or queue.processing()) and time.monotonic() < deadline:
        time.sleep(0.01)
    queue.shutdown()
    for thread in threads:
        thread.join(timeout=5)
    assert overlaps == []
    # Every key's last add was processed after it happened.
    assert set(processed) == {f"k{i}" for i in range(10)}


def test_queue_metrics_count_adds_retries_and_depth() -> None:
    queue = RateLimitingQueue("metrics-probe", base_delay=0.001)
    queue.add("a")
    queue.add("a")
    queue.add("b")
    queue.add_rate_limited("c")

    def sample(name: str) -> float | None:
        return metrics.REGISTRY.get_sample_value(name, {"name": "metrics-probe"})

    assert sample("workqueue_adds_total") == 2
    assert sample("workqueue_depth") == 2
    assert sample("workqueue_retries_total") == 1
    key = queue.get(timeout=1)
    assert key is not None
    assert (sample("workqueue_longest_running_processor_seconds") or 0) >= 0
    queue.done(key)
    assert sample("workqueue_work_duration_seconds_count") == 1


def test_bad_delays_are_refused() -> None:
    with pytest.raises(ValueError):
        RateLimitingQueue("bad", base_delay=0)
    with pytest.raises(ValueError):
        RateLimitingQueue("bad", base_delay=2, max_delay=1)
