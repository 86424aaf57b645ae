"""What every controller shares: its context, the worker loop over a work queue, and the
crash handling that keeps workers and periodic loops alive.

The loop has the upstream shape: informer handlers only enqueue keys; a worker takes a key,
``sync(key)`` reads the cache, copies before changing and writes once. The error type decides
the retry: :class:`~polyccm.errors.RetryAfter` re-queues after its delay, any other error
re-queues with the queue's per-item backoff, and success forgets the item's failures.

Nothing ends a worker or a periodic loop but the end of the term (upstream's ``wait.Until``
plus ``HandleCrash``): an exception that escapes a worker's loop is logged with its traceback,
the worker pauses for :data:`CRASH_PAUSE` and runs its loop again. The one exception is
:class:`~polyccm.errors.LeadershipLost`: it is no failure (nothing is retried or reported as a
Warning), it means this process may no longer act, so the worker stops taking work and the item
is left to the next leader (the term is ending and its queue is being shut down).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from polyccm.app.options import ManagerOptions
from polyccm.cloud import CloudProvider
from polyccm.errors import LeadershipLost, RetryAfter
from polyccm.events import EventRecorder
from polyccm.kube.api import KubeApi
from polyccm.kube.informer import Informer
from polyccm.workqueue import RateLimitingQueue

log = logging.getLogger(__name__)

CRASH_PAUSE = 1.0
"""Seconds a crashed worker or loop waits before running again (upstream pauses 1 s too), so
that a fault that repeats cannot spin a CPU or flood the log."""


@dataclass
class ControllerContext:
    """Shared by the controllers of one leadership term."""

    api: KubeApi
    provider: CloudProvider
    options: ManagerOptions
    nodes: Informer
    services: Informer
    recorder: EventRecorder


class Controller:
    """A controller: started with :meth:`run`, which blocks until ``stop`` is set."""

    name = ""

    def run(self, stop: threading.Event) -> None:
        raise NotImplementedError


def guarded(name: str, what: str, action: Callable[[], object]) -> bool:
    """Run ``action`` once; an exception is logged (with its traceback) and swallowed, as
    upstream's ``HandleCrash`` does. Returns ``False`` when leadership was lost (logged at
    info, not as a failure): the caller should then stop its work."""
    try:
        action()
    except LeadershipLost as error:
        log.info("%s: %s stopped: %s", name, what, error)
        return False
    except Exception:
        log.exception("%s: %s failed", name, what)
    return True


def run_periodically(
    name: str, what: str, action: Callable[[], object], period: float, stop: threading.Event
) -> None:
    """Run ``action`` every ``period`` seconds (the first time after one period) until ``stop``
    is set. A failing pass is logged and the next one runs on time; after lost leadership no
    pass runs again, and the loop returns when the term ends (a controller thread that ended
    early would read as dead)."""
    while not stop.wait(period):
        if not guarded(name, what, action):
            stop.wait()
            return


def run_workers(
    *,
    name: str,
    queue: RateLimitingQueue,
    workers: int,
    process: Callable[[RateLimitingQueue], bool],
    stop: threading.Event,
    crash_pause: float = CRASH_PAUSE,
) -> None:
    """Run ``workers`` threads calling ``process(queue)`` until ``stop`` is set, then shut the
    queue down and wait for the item each worker holds to finish.

    ``process`` returns ``False`` once the queue is shut down. A worker whose ``process``
    raises is restarted after ``crash_pause`` seconds; one that meets
    :class:`~polyccm.errors.LeadershipLost` stops taking work."""

    def loop() -> None:
        while not stop.is_set():
            try:
                while not stop.is_set() and process(queue):
                    pass
                return
            except LeadershipLost as error:
                log.info("%s: leadership lost, this worker stops taking work: %s", name, error)
                return
            except Exception:
                log.exception("%s: worker crashed; restarting it in %.1fs", name, crash_pause)
                stop.wait(crash_pause)

    threads = [
        threading.Thread(target=loop, name=f"{name}-worker-{i}", daemon=True)
        for i in range(workers)
    ]
    for thread in threads:
        thread.start()
    stop.wait()
    queue.shutdown()
    for thread in threads:
        thread.join(timeout=60)


def process_one(queue: RateLimitingQueue, sync: Callable[[str], None], *, name: str) -> bool:
    """Take one key from ``queue`` and sync it; ``False`` once the queue is shut down.

    :class:`~polyccm.errors.LeadershipLost` is raised on after the key is marked done (neither
    retried nor forgotten), so that the worker stops."""
    key = queue.get(timeout=1.0)
    if key is None:
        return not queue.shutting_down
    try:
        sync(key)
    except LeadershipLost:
        log.info("%s: %s: left to the next leader", name, key)
        raise
    except RetryAfter as error:
        log.info("%s: %s: retrying in %.0fs: %s", name, key, error.delay, error)
        queue.add_after(key, error.delay)
    except Exception as error:
        log.warning(
            "%s: %s: sync failed (retry %d): %s", name, key, queue.num_requeues(key) + 1, error
        )
        log.debug("%s: %s: failure detail", name, key, exc_info=True)
        queue.add_rate_limited(key)
    else:
        queue.forget(key)
    finally:
        queue.done(key)
    return True
