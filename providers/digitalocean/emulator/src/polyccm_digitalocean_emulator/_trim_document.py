"""Regenerate ``openapi.json``: the operations the emulator serves, cut from DigitalOcean's
bundled OpenAPI document with every component they reference.

``python -m polyccm_digitalocean_emulator._trim_document PATH/digitalocean-openapi.yaml``
rewrites ``openapi.json`` beside this file, as :mod:`polyccm_testing.emulation.trim` cuts it
(each operation and component copied as published).
Run it again after adding an operation to :data:`polyccm_digitalocean_emulator.urls.ROUTES`.
"""

from __future__ import annotations

from pathlib import Path

from polyccm_testing.emulation.trim import TrimScript

from polyccm_digitalocean_emulator.urls import ROUTES

TARGET = Path(__file__).with_name("openapi.json")
SCRIPT = TrimScript(ROUTES, TARGET, __doc__)
trim = SCRIPT.trim
main = SCRIPT.main

if __name__ == "__main__":
    main()
