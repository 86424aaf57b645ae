"""A local GCE: the compute v1 REST API and the metadata server, for tests and demos.

No public GCE emulator exists, so this one is built as moto builds its services: resources and
their state in :mod:`.models` (one :class:`~.models.ComputeProject` per project), request
parsing and rendering in :mod:`.responses`, the method table in :mod:`.urls`, and the WSGI
application with the control API in :mod:`.server`. What moto lacks is added: operations that
take time, quotas and rate limits that run out, and (in this package's tests) every request and
response checked against Google's discovery document.

``python -m polyccm_gce.emulator --port PORT`` serves it; :class:`EmulatorControl` drives its
control API; :func:`dev_config` writes the gce.conf that points the provider at it.
"""

from __future__ import annotations

from polyccm_gce.emulator.control import EmulatorControl
from polyccm_gce.emulator.devconfig import CONFIG_FILE, api_endpoint, dev_config, launch_environment
from polyccm_gce.emulator.settings import EmulatorSettings


def __getattr__(name: str) -> object:
    # The WSGI application needs werkzeug (the ``emulator`` extra); the client and the config
    # helpers above do not, so they import without it.
    if name in ("ComputeEmulator", "Exchange"):
        from polyccm_gce.emulator import server

        return getattr(server, name)
    raise AttributeError(name)


__all__ = [
    "CONFIG_FILE",
    "ComputeEmulator",
    "EmulatorControl",
    "EmulatorSettings",
    "Exchange",
    "api_endpoint",
    "dev_config",
    "launch_environment",
]
