"""A local Equinix Metal (formerly Packet) API v1 for tests, demos and
``polyccm-dev up --cloud packet``.

Built as the DigitalOcean emulator is: a model layer (:mod:`.backend`: one project, no HTTP)
apart from an HTTP layer (:mod:`.routes` handlers and routing table, :mod:`.render` the
document's shapes, :mod:`.app` tokens, faults, the metadata service and the OpenAPI checks),
with the API's errors as typed exceptions (:mod:`.errors`). Every request is checked at run
time against Equinix Metal's OpenAPI document with openapi-core (:mod:`.openapi`); responses
too, when asked. :mod:`.server` serves it over http on loopback, :mod:`.control` is the client
of its ``/_polyccm/`` control endpoints.

Needs the ``emulator`` extra (openapi-core, werkzeug).
"""

from polyccm_packet.emulator.app import EmulatorApp
from polyccm_packet.emulator.control import EmulatorControl
from polyccm_packet.emulator.settings import EmulatorSettings
from polyccm_packet.emulator.timers import ManualClock

__all__ = ["EmulatorApp", "EmulatorControl", "EmulatorSettings", "ManualClock"]
