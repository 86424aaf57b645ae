"""Call counting and fault injection, per API operation.

Operations are named by their OpenAPI ``operationId`` (``findProjectDevices``,
``requestIPReservation``, ...): the names the Metal client's methods are generated from. A
fault makes the next ``count`` calls of an operation (``*``: of any operation) wait ``latency``
seconds and, when ``status`` is set, fail with the Metal API's error body for it (a 429 carries
the rate-limit headers, as a real throttle does). The model is
:mod:`polyccm_testing.emulation.faults`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from polyccm_testing.emulation import faults

from polyccm_packet_emulator.errors import error_for_status

ANY_OPERATION = faults.ANY_OPERATION


@dataclass
class Fault(faults.Fault):
    def check_status(self, status: int) -> None:
        error_for_status(status)  # refuses statuses the API never answers


class CallLog(faults.CallLog):
    """Counts calls per operation and hands out pending faults; safe across threads."""

    def __init__(self) -> None:
        super().__init__(Fault)
