"""Deliberately broken fake clouds: each has one fault a fault test must catch.

They exist to prove the fault conformance kit (:class:`~polyccm_testing.conformance.
FaultConformance`) sees what it claims to see: the kit's own tests run it against each of
them and check that exactly the matching test fails.

* :class:`LeakyFakeCloud` remembers which load balancer it made for a Service in the process's
  memory only (a random name, not one derived from the Service): a restarted process makes a
  second one and never deletes the first. Only a crash shows it.
* :class:`ChattyFakeCloud` runs a background loop that calls the cloud without asking the
  leadership fence and without stopping with its term: a leader cut off from the API server
  keeps calling after the new leader started.
* :class:`ImpatientFakeCloud` calls again at once when the cloud throttles it, up to
  :attr:`ImpatientFakeCloud.tries` times, instead of waiting as the cloud asks: a throttled
  stretch shows it.

``python -m polyccm_testing.fake_main`` builds them when :data:`VARIANT_VARIABLE` names one.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

from polyccm.cloud import ProviderContext
from polyccm.objects import Service

from polyccm_testing.durable_fake import DurableFakeCloud, FakeThrottled

VARIANT_VARIABLE = "POLYCCM_FAKE_VARIANT"
"""``leaky``, ``chatty`` or ``impatient``: which broken fake ``fake_main`` builds (with a state
file)."""


class LeakyFakeCloud(DurableFakeCloud):
    """Names each load balancer at random and remembers the name in memory only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._names: dict[str, str] = {}

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return self._names.setdefault(service.key, f"leaky-{secrets.token_hex(4)}")


class ChattyFakeCloud(DurableFakeCloud):
    """Polls the cloud every :attr:`interval` seconds from its first term on, forever, past
    the fence."""

    interval = 1.0
    """A background resync's pace: slow enough to stay inside the throttling test's call bound
    (this fake's fault is the fence, not the pace), fast enough to call within the lease
    duration the leader test watches (4 s)."""

    def initialize(self, context: ProviderContext) -> None:
        super().initialize(context)
        threading.Thread(target=self._poll, name="chatty-fake", daemon=True).start()

    def _poll(self) -> None:
        while True:
            self._note("resync")  # the bug: no cloudcalls.record, no look at context.stop
            time.sleep(self.interval)


class ImpatientFakeCloud(DurableFakeCloud):
    """Retries a throttled call in a tight loop (the bug: no wait, whatever the cloud asked)."""

    tries = 50

    def _enter(self, operation: str, *subjects: str) -> None:
        for attempt in range(self.tries):
            try:
                super()._enter(operation, *subjects)
                return
            except FakeThrottled:
                if attempt == self.tries - 1:
                    raise


VARIANTS: dict[str, type[DurableFakeCloud]] = {
    "": DurableFakeCloud,
    "leaky": LeakyFakeCloud,
    "chatty": ChattyFakeCloud,
    "impatient": ImpatientFakeCloud,
}
