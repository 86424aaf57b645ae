"""A local DigitalOcean API v2 for tests, demos and ``polyccm-dev up --cloud digitalocean``.

Built as moto builds its services: a model layer (:mod:`.backend` and the resource modules:
one emulated account, no HTTP) apart from an HTTP layer (:mod:`.urls` routes,
:mod:`.responses` parses and renders, :mod:`.app` adds tokens, rate limits, faults and the
OpenAPI checks), with DigitalOcean's errors as typed exceptions (:mod:`.errors`). Every
request is checked at run time against DigitalOcean's OpenAPI document with openapi-core
(:mod:`.openapi`); responses too, when asked. :mod:`.server` serves it over TLS on loopback,
:mod:`.control` is the client of its ``/_polyccm/`` control endpoints.

Needs the ``emulator`` extra (openapi-core, werkzeug).
"""

from polyccm_digitalocean.emulator.app import EmulatorApp
from polyccm_digitalocean.emulator.control import EmulatorControl
from polyccm_digitalocean.emulator.settings import EmulatorSettings
from polyccm_digitalocean.emulator.timers import ManualClock

__all__ = ["EmulatorApp", "EmulatorControl", "EmulatorSettings", "ManualClock"]
