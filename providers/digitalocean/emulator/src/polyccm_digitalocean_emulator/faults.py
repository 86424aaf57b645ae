"""Call counting and fault injection, per API operation.

Operations are named by their OpenAPI ``operationId`` (``droplets_list``,
``loadBalancers_create``, ...), as DigitalOcean's SDKs name their methods. A fault makes the
next ``count`` calls of an operation (``*``: of any operation) wait ``latency`` seconds and,
when ``status`` is set, fail with DigitalOcean's error body for that status (429 answers carry
the rate-limit headers as a real throttle does). The model is
:mod:`polyccm_testing.emulation.faults`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from polyccm_testing.emulation import faults

from polyccm_digitalocean_emulator.errors import error_for_status

ANY_OPERATION = faults.ANY_OPERATION


@dataclass
class Fault(faults.Fault):
    """Make the next ``count`` calls of ``operation`` slow (``latency`` s) and/or fail
    (``status``: 429, 500, 502, 503, 504, or any other status DigitalOcean answers)."""

    def check_status(self, status: int) -> None:
        error_for_status(status)  # refuses statuses DigitalOcean never answers


class CallLog(faults.CallLog):
    """Counts calls per operation and hands out pending faults; safe across threads."""

    def __init__(self) -> None:
        super().__init__(Fault)
