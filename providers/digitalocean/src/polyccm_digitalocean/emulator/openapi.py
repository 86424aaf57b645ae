"""DigitalOcean's OpenAPI document and the openapi-core validators built on it (once).

``openapi.json`` beside this module is the part of DigitalOcean's published document that
covers the operations the emulator serves, copied unchanged (see ``_trim_document.py``).
Requests are checked against a strict reading of it (an unknown field is a 422, as DigitalOcean
answers one), responses as published: :mod:`polyccm_testing.emulation.openapi` does the work,
answering with DigitalOcean's errors.
"""

from __future__ import annotations

from pathlib import Path

from polyccm_testing.emulation import openapi as emulation
from polyccm_testing.emulation.openapi import Validators, describe

from polyccm_digitalocean.emulator.errors import BadRequest, NotFound, Unprocessable

DOCUMENT = Path(__file__).with_name("openapi.json")
#: Where DigitalOcean serves the API; the emulator serves the same paths at its own root.
SERVER_URL = "https://api.digitalocean.com"
ERRORS = emulation.CloudErrors(
    not_found=NotFound,
    bad_request=BadRequest,
    unprocessable=Unprocessable,
    body_required="Your request body was malformed: a JSON body is required.",
)

CLOUD = emulation.CloudDocument(DOCUMENT, SERVER_URL, ERRORS)
document = CLOUD.document
operations = CLOUD.operations
validators = CLOUD.validators

__all__ = ["DOCUMENT", "SERVER_URL", "Validators", "describe", "document", "operations"]
