"""A tiny client of the emulator's control endpoints (``/_polyccm/...``): the shared
:class:`polyccm_testing.emulation.control.EmulatorControl`, with DigitalOcean's faults and TLS.

``configure`` changes settings (``lb_active_delay=0.5``, ``rate_limit_per_minute=10``, ...);
``reset`` forgets every resource, call count, fault, rate budget and recorded mismatch.
"""

from __future__ import annotations

import ssl

from polyccm_testing.emulation import control

from polyccm_digitalocean_emulator.faults import Fault

CONTROL = control.CONTROL


class EmulatorControl(control.EmulatorControl):
    """Talks to ``endpoint`` (``https://127.0.0.1:PORT`` with ``ca_file``, or ``http://``:
    the control endpoints answer on both)."""

    fault_type = Fault

    def __init__(self, endpoint: str, *, ca_file: str | None = None) -> None:
        context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        super().__init__(endpoint, context=context)
