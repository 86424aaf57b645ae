"""Regenerate ``openapi.json``: the operations the emulator serves, cut from the Metal API's
bundled OpenAPI document with every component they reference.

``python -m polyccm_packet_emulator._trim_document PATH/equinix-metal-openapi3.yaml``
rewrites ``openapi.json`` beside this file, as :mod:`polyccm_testing.emulation.trim` cuts it
(each operation and component copied as published).
Run it again after adding an operation to :data:`polyccm_packet_emulator.urls.ROUTES`.
"""

from __future__ import annotations

from pathlib import Path

from polyccm_testing.emulation.trim import TrimScript

from polyccm_packet_emulator.urls import ROUTES

TARGET = Path(__file__).with_name("openapi.json")
SCRIPT = TrimScript(ROUTES, TARGET, __doc__)
trim = SCRIPT.trim
main = SCRIPT.main

if __name__ == "__main__":
    main()
