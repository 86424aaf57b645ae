"""A tiny client of the emulator's control endpoints (``/_polyccm/...``): the shared
:class:`polyccm_testing.emulation.control.EmulatorControl`, with the Metal API's faults.

``inject`` with status 429 fails with the rate-limit headers; ``calls`` counts per
``operationId`` (and ``metadata`` for the metadata service); ``configure`` changes settings
(``device_active_delay=0.5``, ``metadata_device="node-1"``, ...); ``reset`` forgets every
device, reservation, BGP setting, call count, fault and mismatch (the project and the settings
stay).
"""

from __future__ import annotations

from polyccm_testing.emulation import control

from polyccm_packet_emulator.faults import Fault

CONTROL = control.CONTROL


class EmulatorControl(control.EmulatorControl):
    """Talks to the emulator at ``endpoint`` (``http://127.0.0.1:PORT``; a ``METAL_API_URL``
    with its ``/metal/v1`` path works too)."""

    fault_type = Fault

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint.rstrip("/").removesuffix("/metal/v1"))
