"""How the ``polyccm`` process ends on SIGTERM and SIGINT: the signals are recorded without a
lock, a thread acts on them, and the process ends within :data:`BOUND` seconds whatever it is
doing.

A Python signal handler runs on the main thread between two bytecodes of whatever that thread is
doing, even inside ``Event.set`` or while a logging handler's lock is held, so a handler that
takes a lock can wait for itself forever (issue 34: a second SIGTERM arrived inside the first
one's ``stop.set()``, and the process hung until SIGKILL). The handlers installed here therefore
do nothing at all. The interpreter's own C-level handler writes each signal's number to a pipe
(:func:`signal.set_wakeup_fd`) the moment it arrives, whatever the main thread is busy with, and
a watcher thread reads that pipe, logs and acts:

* before the controller manager runs (flag parsing, building the provider, the operator
  commands), nothing is held that must be handed back, so the process exits at once with status
  128 + the signal's number, as a shell reports a command that signal ended;
* once it runs (:meth:`SignalStop.manager_started`), the first signal sets
  :attr:`SignalStop.stop`, on which the manager ends its term and gives the Lease up, and a
  watchdog starts: the process ends at most :data:`BOUND` seconds after that signal (status
  :data:`EXIT_CUT_SHORT` if it has to end it), and at most :data:`TEARDOWN` seconds after the
  command has returned (the interpreter's own end waits for thread pools' workers, which a cloud
  call that never returns holds forever);
* a second and third signal are logged and change nothing.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

log = logging.getLogger("polyccm")

BOUND = 20.0
"""Seconds from the first SIGTERM or SIGINT to the process's end, at most, in every phase: well
inside Kubernetes' default grace period of 30 s before SIGKILL. The manager's own steps fit in
it: a Lease request in flight (at most half the renew deadline, 5 s by default), the
controllers finishing the item in hand (:data:`polyccm.app.manager.STOP_DRAIN`), the release of
the Lease (:data:`polyccm.app.manager.STOP_RELEASE`), the last Events, then :data:`TEARDOWN`."""
TEARDOWN = 2.0
"""Seconds the interpreter gets to end once the command has returned after a signal."""
EXIT_CUT_SHORT = 1
"""Exit status when the watchdog has to end a shutdown that did not finish within BOUND."""
LAST_WORDS = 1.0
"""Seconds a last log line may take before the process ends without it (a logging handler's
lock held by a stuck thread must not keep the process alive)."""
SIGNALS = (signal.SIGTERM, signal.SIGINT)

ExitFunction = Callable[[int], object]
Handler = Callable[[int, FrameType | None], Any] | int | None


def _recorded(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler of SIGTERM and SIGINT, which does nothing: by the time it runs,
    the interpreter has written the signal's number to the wakeup pipe the watcher reads, and
    anything done here could need a lock the interrupted code holds."""


class SignalStop:
    """SIGTERM and SIGINT, from :meth:`install` until :meth:`finish`: recorded through the
    wakeup pipe and acted on by a watcher thread (see the module's docstring).

    ``exit_process`` ends the process with a status (tests give their own); ``bound`` and
    ``teardown`` are :data:`BOUND` and :data:`TEARDOWN` unless given."""

    def __init__(
        self,
        *,
        bound: float = BOUND,
        teardown: float = TEARDOWN,
        exit_process: ExitFunction = os._exit,
        signals: Sequence[signal.Signals] = SIGNALS,
    ) -> None:
        self.stop = threading.Event()
        """Set by the first signal once the manager runs: the manager stops on it."""
        self.bound = bound
        self.teardown = teardown
        self._exit_process = exit_process
        self._signals = tuple(signals)
        self._installed = False
        self._manager_running = False
        # Written by the watcher thread only; read anywhere (one attribute store each).
        self._first: signal.Signals | None = None
        self._deadline: float | None = None
        self._status = EXIT_CUT_SHORT
        self._returned = False
        self._closed = threading.Event()
        self._previous: dict[signal.Signals, Handler] = {}
        self._previous_fd = -1
        self._read = self._write = -1
        self._watcher: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None

    @property
    def received(self) -> signal.Signals | None:
        """The first signal received, if any."""
        return self._first

    # -- the main thread's side -------------------------------------------------------------

    def install(self) -> bool:
        """Handle SIGTERM and SIGINT from now on; whether that was possible (only the main
        thread can: elsewhere, as for a command run in-process on another thread, nothing is
        installed and the signals keep their handlers)."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return False
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # the C-level handler must never wait
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for signum in self._signals:
            self._previous[signum] = signal.signal(signum, _recorded)
        self._installed = True
        self._watcher = threading.Thread(target=self._watch, name="signals", daemon=True)
        self._watcher.start()
        return True

    def manager_started(self) -> None:
        """The manager is about to run: from now on a signal stops it in order (:attr:`stop`)
        instead of ending the process at once."""
        self._manager_running = True

    def finish(self, status: int) -> None:
        """The command returned ``status``. Without a signal so far, SIGTERM and SIGINT get
        their previous handlers back. After one, the process is ending: later signals are
        ignored and the interpreter has :attr:`teardown` seconds to end, after which the
        watchdog ends the process with ``status``."""
        if not self._installed:
            return
        if self._first is None:
            self.close()
            return
        for signum in self._signals:
            signal.signal(signum, signal.SIG_IGN)  # nothing runs for them any more
        signal.set_wakeup_fd(self._previous_fd)
        self._status = status
        self._returned = True
        end = time.monotonic() + self.teardown
        deadline = self._deadline
        self._deadline = end if deadline is None else min(deadline, end)
        if self._watchdog is None:
            self._start_watchdog()

    def close(self) -> None:
        """Undo :meth:`install` and stop the watcher and the watchdog (tests; and
        :meth:`finish` when no signal came)."""
        if not self._installed:
            return
        self._installed = False
        for signum, previous in self._previous.items():
            # None: a handler installed from outside Python, which cannot be put back.
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        signal.set_wakeup_fd(self._previous_fd)
        self._closed.set()
        os.close(self._write)  # the watcher reads the end of the pipe and returns
        for thread in (self._watcher, self._watchdog):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=LAST_WORDS + 1)
        os.close(self._read)

    # -- the watcher's side -----------------------------------------------------------------

    def _watch(self) -> None:
        while True:
            try:
                received = os.read(self._read, 64)
            except OSError:
                return
            if not received or self._closed.is_set():
                return
            for number in received:
                self._on_signal(signal.Signals(number))

    def _on_signal(self, signum: signal.Signals) -> None:
        if self._first is not None:
            log.info("received %s again: already stopping", signum.name)
            return
        self._first = signum
        if not self._manager_running:
            self._end(
                128 + signum,
                logging.WARNING,
                "received %s before the controller manager started: exiting",
                signum.name,
            )
            return
        self._deadline = time.monotonic() + self.bound
        self._start_watchdog()
        self.stop.set()
        log.info("received %s: stopping (polyccm ends within %.0fs)", signum.name, self.bound)

    def _start_watchdog(self) -> None:
        self._watchdog = threading.Thread(target=self._guard, name="shutdown-watchdog", daemon=True)
        self._watchdog.start()

    def _guard(self) -> None:
        """End the process at the deadline, if it has not ended by then."""
        while not self._closed.wait(0.1):
            deadline = self._deadline
            if deadline is None or time.monotonic() < deadline:
                continue
            ours = (threading.current_thread(), self._watcher)
            others = [t for t in threading.enumerate() if t.is_alive() and t not in ours]
            signum = self._first.name if self._first is not None else "the signal"
            if self._returned:
                # Thread pools' workers hold the interpreter's end whether daemons or not
                # (concurrent.futures joins them at exit): name every thread still running.
                main = threading.main_thread()  # the one waiting for them
                self._end(
                    self._status,
                    logging.WARNING,
                    "stopped, but the end of the process is held up (threads still running: "
                    "%s): ending it",
                    ", ".join(sorted(t.name for t in others if t is not main)) or "none",
                )
            else:
                self._end(
                    EXIT_CUT_SHORT,
                    logging.ERROR,
                    "still running %.0fs after %s: ending the process now (threads still "
                    "running: %s)",
                    self.bound,
                    signum,
                    ", ".join(sorted(t.name for t in others)) or "none",
                )
            return

    def _end(self, status: int, level: int, message: str, *args: object) -> None:
        """Log ``message`` (waiting :data:`LAST_WORDS` at most), then end the process."""
        writer = threading.Thread(
            target=log.log, args=(level, message, *args), name="last-words", daemon=True
        )
        writer.start()
        writer.join(LAST_WORDS)
        self._exit_process(status)
