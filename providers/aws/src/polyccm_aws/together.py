"""Steps of one load balancer's ensure that wait for nothing but what is known already, run side
by side.

An ensure is a dozen cloud calls, each a round trip; a new load balancer's attributes, health
check, node rules and instances need only the load balancer, not one another, so they go out
at once rather than one after the other (the service is answered when the slowest is done).
:func:`together` runs the first step on the caller's thread and each other one on a thread of
its own, waits for every one to end, and then raises the first error in the order the steps
were given: a failed step never leaves another running behind the caller's back, and the retry
of the ensure finds whatever the others did already done.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


def together(*steps: Callable[[], object]) -> None:
    """Run ``steps`` side by side and wait for all; the first one's error (in order) raised."""
    if len(steps) <= 1:
        for step in steps:
            step()
        return
    errors: list[BaseException | None] = [None] * len(steps)

    def run(index: int) -> None:
        try:
            steps[index]()
        except BaseException as error:  # noqa: BLE001 - raised by the caller once all ended
            errors[index] = error

    caller = threading.current_thread().name
    threads = [
        threading.Thread(target=run, args=(index,), name=f"{caller}-step{index}", daemon=True)
        for index in range(1, len(steps))
    ]
    for thread in threads:
        thread.start()
    run(0)
    for thread in threads:
        thread.join()
    failed = [error for error in errors if error is not None]
    for error in failed[1:]:
        log.debug("a step run beside another also failed: %s", error)
    if failed:
        raise failed[0]
