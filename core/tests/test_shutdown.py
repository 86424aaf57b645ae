"""SIGTERM and SIGINT handled without a lock (issue 34): the handler polyccm installs can
interrupt itself, ``Event.set`` and a logging handler's lock without ever waiting; a watcher
thread stops the manager once, logs each signal, and the process always ends in time.

Upstream's sample command (k8s.io/cloud-provider v0.35.4 sample/basic_main.go:49) runs with
``wait.NeverStop`` and installs no handler: Go's default disposition ends the process at the
first SIGTERM, holding nothing back and giving nothing up. polyccm gives the Lease up on the way
out (polyccm.leaderelection), so its handling must itself be unable to hang; the process-level
stress test is tests/test_shutdown_stress.py."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
from polyccm.app.shutdown import EXIT_CUT_SHORT, SignalStop
from polyccm_testing.kubeobjects import wait_for

NESTED_SIGNALS = 3
"""As the issue's wrapper did: up to three signals, each arriving inside the one before."""


class Exits:
    """Stands in for ``os._exit``: records the status instead of ending pytest."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.called = threading.Event()

    def __call__(self, status: int) -> None:
        self.statuses.append(status)
        self.called.set()


@pytest.fixture
def exits() -> Exits:
    return Exits()


@pytest.fixture
def installed(exits: Exits) -> Iterator[Callable[..., SignalStop]]:
    made: list[SignalStop] = []

    def install(**settings: Any) -> SignalStop:
        signals = SignalStop(exit_process=exits, **settings)
        assert signals.install(), "pytest runs tests on the main thread"
        made.append(signals)
        return signals

    yield install
    for signals in made:
        signals.close()


def interrupting(handler: Callable[[int, FrameType | None], Any]) -> Any:
    """A trace function that delivers SIGTERM to ``handler`` as the interpreter does, between
    two bytecodes, at every bytecode of the code a signal interrupted in the issue's stack: the
    handler itself, ``Event.set`` and the Condition under it (threading), a logging handler
    holding its lock (logging); each delivery may itself be interrupted, up to three deep."""
    files = {threading.__file__, logging.__file__}
    code = getattr(handler, "__code__", None)
    nesting = 0

    def local(frame: FrameType, event: str, _arg: Any) -> Any:
        nonlocal nesting
        if event == "opcode" and nesting < NESTED_SIGNALS:
            nesting += 1
            try:
                handler(signal.SIGTERM, frame)
            finally:
                nesting -= 1
        return local

    def tracer(frame: FrameType, _event: str, _arg: Any) -> Any:
        if frame.f_code.co_filename in files or frame.f_code is code:
            frame.f_trace_opcodes = True
            return local
        return None

    return tracer


def test_the_handler_interrupting_itself_event_set_and_a_logging_lock_never_blocks(
    installed: Callable[..., SignalStop],
) -> None:
    installed().manager_started()
    handler = signal.getsignal(signal.SIGTERM)
    assert callable(handler)
    logger = logging.getLogger("polyccm.test-shutdown")
    logger.propagate = False
    logger.addHandler(logging.StreamHandler(sys.stderr))
    logger.setLevel(logging.INFO)
    stop = threading.Event()

    def interrupted_work() -> None:
        # The main thread's work as the stack had it: a first signal's handler, an
        # Event being set, a line being logged; each interrupted at every bytecode.
        sys.settrace(interrupting(handler))
        try:
            handler(signal.SIGTERM, None)
            stop.set()
            logger.info("a line logged while signals arrive")
        finally:
            sys.settrace(None)

    worker = threading.Thread(target=interrupted_work, daemon=True)
    worker.start()
    worker.join(timeout=30)
    # Before issue 34 the handler logged and set the stop event itself: a SIGTERM arriving
    # inside the first one's stop.set() waited for the Condition lock its own thread held.
    assert not worker.is_alive(), "the SIGTERM handler blocked when it interrupted itself"


def test_three_signals_stop_the_manager_once_while_the_main_thread_holds_a_logging_lock(
    installed: Callable[..., SignalStop], exits: Exits, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="polyccm")
    signals = installed()
    signals.manager_started()
    caplog.handler.acquire()  # the main thread is inside a log call when the signals arrive
    try:
        for _ in range(3):
            signal.raise_signal(signal.SIGTERM)
        assert signals.stop.wait(10), "the stop is set although the logging lock is held"
    finally:
        caplog.handler.release()
    expected = ["received SIGTERM: stopping", *["received SIGTERM again: already stopping"] * 2]

    def logged() -> list[str]:
        return [r.getMessage().split(" (")[0] for r in caplog.records if "received" in r.msg]

    wait_for(lambda: len(logged()) == 3, 10, "the watcher's three lines")
    assert logged() == expected
    assert "polyccm ends within 20s" in caplog.text
    assert not exits.called.is_set(), "an orderly stop is not cut short"


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_before_the_manager_runs_a_signal_ends_the_process_at_once(
    installed: Callable[..., SignalStop],
    exits: Exits,
    caplog: pytest.LogCaptureFixture,
    signum: signal.Signals,
    status: int,
) -> None:
    signals = installed()
    signal.raise_signal(signum)  # no KeyboardInterrupt for SIGINT: no traceback
    assert exits.called.wait(10)
    assert exits.statuses == [status], "128 + the signal, as a shell reports it"
    assert not signals.stop.is_set()
    assert f"received {signum.name} before the controller manager started: exiting" in caplog.text


def test_a_stop_that_does_not_finish_is_ended_at_the_bound(
    installed: Callable[..., SignalStop], exits: Exits, caplog: pytest.LogCaptureFixture
) -> None:
    signals = installed(bound=0.2)
    signals.manager_started()
    signal.raise_signal(signal.SIGTERM)
    assert exits.called.wait(10)
    assert exits.statuses == [EXIT_CUT_SHORT]
    assert "still running 0s after SIGTERM: ending the process now" in caplog.text


def test_after_the_command_returns_the_process_ends_with_its_status_and_ignores_signals(
    installed: Callable[..., SignalStop], exits: Exits, caplog: pytest.LogCaptureFixture
) -> None:
    signals = installed(teardown=0.2)
    signals.manager_started()
    signal.raise_signal(signal.SIGTERM)
    assert signals.stop.wait(10)
    signals.finish(0)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    signal.raise_signal(signal.SIGTERM)  # ignored: no handler runs any more
    assert exits.called.wait(10)
    assert exits.statuses == [0], "the stop was orderly: the teardown keeps its status"
    assert "stopped, but the end of the process is held up" in caplog.text


def test_without_a_signal_the_previous_handlers_are_put_back(
    installed: Callable[..., SignalStop],
) -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signals = installed()
    assert signal.getsignal(signal.SIGTERM) is not before[1]
    signals.finish(0)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    previous = signal.set_wakeup_fd(-1)
    assert previous == -1, "the wakeup fd is given back"
