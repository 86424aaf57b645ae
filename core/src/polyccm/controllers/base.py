"""What every controller shares: its context, and the worker loop over a work queue.

The loop has the upstream shape: informer handlers only enqueue keys; a worker takes a key,
``sync(key)`` reads the cache, copies before changing and writes once. The error type decides
the retry: :class:`~polyccm.errors.RetryAfter` re-queues after its delay, any other error
re-queues with the queue's per-item backoff, and success forgets the item's failures.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from polyccm.app.options import ManagerOptions
from polyccm.cloud import CloudProvider
from polyccm.errors import RetryAfter
from polyccm.events import EventRecorder
from polyccm.kube.api import KubeApi
from polyccm.kube.informer import Informer
from polyccm.workqueue import RateLimitingQueue

log = logging.getLogger(__name__)


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


def run_workers(
    *,
    name: str,
    queue: RateLimitingQueue,
    workers: int,
    process: Callable[[RateLimitingQueue], bool],
    stop: threading.Event,
) -> None:
    """Run ``workers`` threads calling ``process(queue)`` until ``stop`` is set, then shut the
    queue down and wait for the item each worker holds to finish."""

    def loop() -> None:
        while not stop.is_set() and process(queue):
            pass

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
    """Take one key from ``queue`` and sync it; ``False`` once the queue is shut down."""
    key = queue.get(timeout=1.0)
    if key is None:
        return not queue.shutting_down
    try:
        sync(key)
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
