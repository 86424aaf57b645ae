"""Workers and periodic loops never die of an error (upstream's wait.Until plus HandleCrash), and
lost leadership stops them without retries or warnings. Pure: no control plane needed."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pytest
import urllib3
from polyccm.controllers.base import process_one, run_periodically, run_workers
from polyccm.errors import LeadershipLost
from polyccm.workqueue import RateLimitingQueue
from polyccm_testing.kubeobjects import wait_for


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def start_workers(
    queue: RateLimitingQueue,
    process: Callable[[RateLimitingQueue], bool],
    stop: threading.Event,
    workers: int = 1,
) -> threading.Thread:
    thread = threading.Thread(
        target=run_workers,
        kwargs={
            "name": "test",
            "queue": queue,
            "workers": workers,
            "process": process,
            "stop": stop,
            "crash_pause": 0.05,
        },
        daemon=True,
    )
    thread.start()
    return thread


def test_a_worker_that_crashes_is_restarted_and_logs_the_traceback(
    stop: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    queue = RateLimitingQueue("crashy")
    done: list[str] = []
    crashes = [urllib3.exceptions.ProtocolError("Connection aborted.")]

    def process(q: RateLimitingQueue) -> bool:
        if crashes:
            raise crashes.pop()  # escapes before any item is taken: the loop itself dies
        return process_one(q, done.append, name="crashy")

    for key in ("a", "b", "c"):
        queue.add(key)
    thread = start_workers(queue, process, stop)
    wait_for(lambda: sorted(done) == ["a", "b", "c"], 5, "the restarted worker to go on")
    crash = next(r for r in caplog.records if "worker crashed" in r.getMessage())
    assert crash.levelno == logging.ERROR and crash.exc_info, "logged with its traceback"
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


def test_a_failing_item_is_requeued_with_backoff_and_others_go_on(stop: threading.Event) -> None:
    queue = RateLimitingQueue("flaky", base_delay=0.01)
    attempts: dict[str, int] = {}

    def sync(key: str) -> None:
        attempts[key] = attempts.get(key, 0) + 1
        if key == "bad" and attempts[key] < 3:
            raise urllib3.exceptions.ProtocolError("Connection aborted.")

    queue.add("bad")
    queue.add("good")
    start_workers(queue, lambda q: process_one(q, sync, name="flaky"), stop)
    wait_for(lambda: attempts.get("bad") == 3 and attempts.get("good") == 1, 5)
    assert queue.num_requeues("bad") == 0, "forgotten once it succeeded"


def test_lost_leadership_stops_the_worker_without_retry_or_warning(
    stop: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    queue = RateLimitingQueue("fenced")
    synced: list[str] = []

    def sync(key: str) -> None:
        synced.append(key)
        raise LeadershipLost("not the leader: cloud call refused")

    caplog.set_level(logging.INFO)
    queue.add("svc")
    thread = start_workers(queue, lambda q: process_one(q, sync, name="fenced"), stop)
    wait_for(lambda: synced, 5)
    worker_gone = wait_for(
        lambda: not any(t.name == "test-worker-0" for t in threading.enumerate()), 5
    )
    assert worker_gone, "the worker stops taking work"
    queue.add("other")
    assert queue.get(timeout=0.3) == "other", "nobody took new work after the loss"
    assert queue.num_requeues("svc") == 0 and queue.waiting() == 0, "not retried with backoff"
    assert synced == ["svc"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("leadership lost" in r.getMessage() for r in caplog.records)
    stop.set()
    thread.join(5)


def test_a_periodic_loop_survives_a_failing_pass(
    stop: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    passes: list[int] = []

    def action() -> None:
        passes.append(1)
        if len(passes) == 1:
            raise urllib3.exceptions.ProtocolError("Connection aborted.")

    thread = threading.Thread(
        target=run_periodically, args=("test", "pass", action, 0.02, stop), daemon=True
    )
    thread.start()
    wait_for(lambda: len(passes) >= 3, 5, "passes after the failing one")
    assert any(r.exc_info for r in caplog.records if "pass failed" in r.getMessage())
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


def test_a_periodic_loop_runs_no_pass_after_leadership_is_lost(stop: threading.Event) -> None:
    passes: list[int] = []

    def action() -> None:
        passes.append(1)
        raise LeadershipLost("not the leader")

    thread = threading.Thread(
        target=run_periodically, args=("test", "pass", action, 0.02, stop), daemon=True
    )
    thread.start()
    wait_for(lambda: passes, 5)
    thread.join(0.3)
    assert passes == [1], "no pass after the loss"
    assert thread.is_alive(), "the loop waits for the end of the term, not dead before it"
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
