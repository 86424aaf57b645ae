"""The Metal API's OpenAPI document and the openapi-core validators built on it (once).

``openapi.json`` beside this module is the part of Equinix Metal's published OpenAPI 3
document that covers the operations the emulator serves, copied unchanged (see
``_trim_document.py``). Requests are checked against a strict reading of it (a misspelt field
is a 422 naming it rather than silently ignored), responses as published:
:mod:`polyccm_testing.emulation.openapi` does the work, answering with the Metal API's errors.
:data:`OVERLAY` loosens it where upstream's CCM sends what the document refuses, each entry
citing the SDK field that sends it.
"""

from __future__ import annotations

from pathlib import Path

from polyccm_testing.emulation import openapi as emulation
from polyccm_testing.emulation.openapi import Validators, describe

from polyccm_packet_emulator.errors import BadRequest, NotFound, Unprocessable

DOCUMENT = Path(__file__).with_name("openapi.json")
#: Where Equinix Metal served the API (under ``/metal/v1``); the emulator serves the same paths.
SERVER_URL = "https://api.equinix.com"
ERRORS = emulation.CloudErrors(
    not_found=NotFound,
    bad_request=BadRequest,
    unprocessable=Unprocessable,
    body_required="A JSON request body is required.",
)

#: Values upstream's CCM sends that the published document refuses, each sent through
#: equinix-sdk-go (the Go SDK it uses); the document is otherwise read as published.
OVERLAY = (
    # Upstream (cloud-provider-equinix-metal 38d15e2, metal/bgp.go:62) always sends
    # ``Md5: &b.bgpPass``, a pointer that ``omitempty`` keeps, so a cluster without a BGP
    # password asks for ``"md5": ""``; the emulator takes it as "no password".
    emulation.OverlayField(
        schema="BgpConfigRequestInput",
        name="md5",
        definition={"type": "string", "maxLength": 0},
        cites=(
            "equinix-sdk-go v0.61.0 services/metalv1/model_bgp_config_request_input.go:25: "
            'BgpConfigRequestInput.Md5 *string `json:"md5,omitempty"`'
        ),
        widens=True,
    ),
)

CLOUD = emulation.CloudDocument(DOCUMENT, SERVER_URL, ERRORS, OVERLAY)
document = CLOUD.document
operations = CLOUD.operations
validators = CLOUD.validators

__all__ = ["DOCUMENT", "OVERLAY", "SERVER_URL", "Validators", "describe", "document", "operations"]
