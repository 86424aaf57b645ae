"""DigitalOcean's OpenAPI document and the openapi-core validators built on it (once).

``openapi.json`` beside this module is the part of DigitalOcean's published document that
covers the operations the emulator serves, copied unchanged (see ``_trim_document.py``).
Requests are checked against a strict reading of it (an unknown field is a 422, as DigitalOcean
answers one), responses as published: :mod:`polyccm_testing.emulation.openapi` does the work,
answering with DigitalOcean's errors. :data:`OVERLAY` adds the fields godo sends that the
document lacks, each entry citing godo's field.

A body's ``droplet_ids`` (5,000 ids for a load balancer in front of 5,000 droplets) is checked
with its first id only when every id is a plain integer: wherever the document names
``droplet_ids`` it is an array of integers with no other rule, so that check accepts exactly
the bodies the whole one accepts, at the cost of one id instead of 5,000 (a load balancer
create: 0.2 s of CPU before). A body it refuses is checked again whole, for the same error.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from polyccm_testing.emulation import http
from polyccm_testing.emulation import openapi as emulation
from polyccm_testing.emulation.openapi import Validators, describe
from werkzeug.wrappers import Request, Response

from polyccm_digitalocean_emulator.errors import ApiError, BadRequest, NotFound, Unprocessable

DOCUMENT = Path(__file__).with_name("openapi.json")
#: Where DigitalOcean serves the API; the emulator serves the same paths at its own root.
SERVER_URL = "https://api.digitalocean.com"
ERRORS = emulation.CloudErrors(
    not_found=NotFound,
    bad_request=BadRequest,
    unprocessable=Unprocessable,
    body_required="Your request body was malformed: a JSON body is required.",
)

#: Fields DigitalOcean takes that its published document lacks, each sent by godo (the Go SDK
#: upstream's CCM uses); the document is otherwise read as published.
OVERLAY = (
    emulation.OverlayField(
        schema="health_check",
        name="proxy_protocol",
        definition={"type": "boolean"},
        cites=(
            "godo v1.243.0 load_balancers.go:190: HealthCheck.ProxyProtocol *bool "
            '`json:"proxy_protocol,omitempty"`'
        ),
    ),
    emulation.OverlayField(
        schema="load_balancer_base",
        name="tags",
        definition={"type": "array", "items": {"type": "string"}},
        cites=(
            "godo (vendored by the CCM v0.1.68) load_balancers.go:250: LoadBalancerRequest.Tags "
            '[]string `json:"tags,omitempty"` ("Tags can only be provided upon the creation of '
            'a Load Balancer", load_balancers.go:53), which the CCM fills with k8s:<cluster id> '
            "(cloud-controller-manager/do/loadbalancers.go:985-989)"
        ),
    ),
    emulation.OverlayField(
        schema="tags_resource",
        name="resources",
        definition={
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "resource_id": {"type": "string"},
                    "resource_type": {"type": "string", "enum": ["load_balancer"]},
                },
            },
        },
        cites=(
            "godo (vendored by the CCM v0.1.68) tags.go:104-106: TagResourcesRequest.Resources "
            '`json:"resources"`, whose Resource.Type (tags.go:51-53) may be '
            'LoadBalancerResourceType "load_balancer" (tags.go:43), which the CCM\'s tags syncer '
            "sends (cloud-controller-manager/do/resources.go:179-187)"
        ),
        widens=True,
    ),
)

CLOUD = emulation.CloudDocument(DOCUMENT, SERVER_URL, ERRORS, OVERLAY)
document = CLOUD.document
operations = CLOUD.operations
validators = CLOUD.validators

#: Lists of droplet ids longer than this are checked by their first id (see above).
CHECKED_DROPLET_IDS = 16


def check_request(checker: Validators, request: Request) -> None:
    """Raise the error DigitalOcean would answer for ``request``, as
    :meth:`Validators.check_request`, with a long ``droplet_ids`` checked by its first id and
    an empty ``name`` query parameter read as its documented default."""
    request = _without_empty_name(request)
    lean = _lean(request)
    if lean is not None:
        try:
            checker.check_request(lean)
            return
        except ApiError:
            pass  # the same request whole, for the error it gets
    checker.check_request(request)


def _without_empty_name(request: Request) -> Request:
    """``request`` without an empty ``name`` query parameter. The document gives the
    certificates listing's ``name`` the default ``""`` (components.parameters.certificate_name),
    and pydo, DigitalOcean's own SDK, sends ``name=`` on every unfiltered listing
    (build_certificates_list_request: ``name: str = ""``, sent unless None): DigitalOcean takes
    it as no filter, where a strict reading refuses an empty query value."""
    if request.args.get("name", None) != "":
        return request
    query = urlencode([(k, v) for k, v in request.args.items(multi=True) if k != "name"])
    return Request({**request.environ, "QUERY_STRING": query})


def _lean(request: Request) -> Request | None:
    """``request`` with its ``droplet_ids`` cut to the first one, when the body is a JSON
    object whose ``droplet_ids`` lists more than :data:`CHECKED_DROPLET_IDS` plain integers."""
    body = _json_naming_droplet_ids(request.get_data())
    cut = _first_id_only(body)
    if cut is None:
        return None
    lean = json.dumps(cut).encode()
    environ = {**request.environ, "wsgi.input": io.BytesIO(lean),
               "CONTENT_LENGTH": str(len(lean))}  # fmt: skip
    return Request(environ)


def response_mismatch(checker: Validators, request: Request, response: Response) -> Any:
    """How ``response`` does not match the document, as :func:`http.mismatch`, with each load
    balancer's long ``droplet_ids`` checked by its first id (the same rule as for requests: the
    document gives those ids no rule but "integer"); a lean answer that does not match is
    checked whole, for its own problem."""
    lean = _lean_answer(response)
    if lean is not None and http.mismatch(checker, request, lean) is None:
        return None
    return http.mismatch(checker, request, response)


def _lean_answer(response: Response) -> Response | None:
    """``response`` with every load balancer's ``droplet_ids`` cut to its first id, when one
    lists more than :data:`CHECKED_DROPLET_IDS` plain integers; else None."""
    if response.mimetype != "application/json":
        return None
    body = _json_naming_droplet_ids(response.get_data())
    if not isinstance(body, dict):
        return None
    cut = False

    def lean(balancer: Any) -> Any:
        nonlocal cut
        leaned = _first_id_only(balancer)
        cut = cut or leaned is not None
        return balancer if leaned is None else leaned

    leaned = {
        key: [lean(item) for item in value] if isinstance(value, list) else lean(value)
        for key, value in body.items()
    }
    if not cut:
        return None
    answer = Response(json.dumps(leaned), status=response.status_code, headers=response.headers)
    answer.headers["Content-Length"] = str(len(answer.get_data()))
    return answer


def _json_naming_droplet_ids(data: bytes) -> Any:
    """The JSON ``data`` when it names ``droplet_ids`` somewhere, else None."""
    if b'"droplet_ids"' not in data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def _first_id_only(holder: Any) -> dict[str, Any] | None:
    """``holder`` with its ``droplet_ids`` cut to the first id, when it is an object whose
    ``droplet_ids`` lists more than :data:`CHECKED_DROPLET_IDS` plain integers; else None."""
    ids = holder.get("droplet_ids") if isinstance(holder, dict) else None
    if not isinstance(ids, list) or len(ids) <= CHECKED_DROPLET_IDS:
        return None
    if any(type(i) is not int for i in ids):
        return None
    return {**holder, "droplet_ids": ids[:1]}


__all__ = ["DOCUMENT", "OVERLAY", "SERVER_URL", "Validators", "check_request", "describe",
           "document", "operations", "response_mismatch"]  # fmt: skip
