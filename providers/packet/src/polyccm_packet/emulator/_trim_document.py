"""Regenerate ``openapi.json``: the operations the emulator serves, cut from the Metal API's
bundled OpenAPI document with every component they reference.

``python -m polyccm_packet.emulator._trim_document PATH/equinix-metal-openapi3.yaml``
rewrites ``openapi.json`` beside this file, as :mod:`polyccm_testing.emulation.trim` cuts it
(each operation and component copied as published).
Run it again after adding an operation to :data:`polyccm_packet.emulator.routes.ROUTES`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from polyccm_testing.emulation import trim as _trim

from polyccm_packet.emulator.routes import ROUTES

TARGET = Path(__file__).with_name("openapi.json")


def trim(document: dict[str, Any]) -> dict[str, Any]:
    """The served operations of ``document`` and the components they reach."""
    return _trim.trim(document, ((route.method, route.template) for route in ROUTES))


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    wanted = [(route.method, route.template) for route in ROUTES]
    _trim.main(args, wanted=wanted, target=TARGET, usage=__doc__ or "")


if __name__ == "__main__":
    main()
