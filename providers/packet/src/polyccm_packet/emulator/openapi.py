"""The Metal API's OpenAPI document and the openapi-core validators built on it (once).

``openapi.json`` beside this module is the part of Equinix Metal's published OpenAPI 3
document that covers the operations the emulator serves, copied unchanged (see
``_trim_document.py``).

Requests are checked with openapi-core against a *strict* reading of that document: every
object in a request body also refuses properties the document does not name (JSON Schema's
``unevaluatedProperties: false``, which sees through ``allOf``/``oneOf``/``anyOf``), so a
misspelt field is a 422 naming it rather than silently ignored, while the document leaves most
objects open. Only constraints are added, so whatever passes the strict check passes the
published document. Responses are checked against the document as published.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema.exceptions import (  # type: ignore[import-untyped]
    ValidationError as SchemaError,
)
from jsonschema.exceptions import best_match
from jsonschema.validators import (  # type: ignore[import-untyped]
    Draft202012Validator,
    extend,
)
from jsonschema_path import SchemaPath
from openapi_core import V30RequestValidator, V30ResponseValidator
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse
from openapi_core.exceptions import OpenAPIError
from openapi_core.validation.request.exceptions import (
    InvalidRequestBody,
    MissingRequestBodyError,
    ParameterValidationError,
)
from openapi_core.validation.schemas.factories import SchemaValidatorsFactory
from openapi_schema_validator import OAS30WriteValidator
from werkzeug.wrappers import Request, Response

from polyccm_packet.emulator.errors import ApiError, BadRequest, NotFound, Unprocessable

DOCUMENT = Path(__file__).with_name("openapi.json")
#: Where Equinix Metal served the API (under ``/metal/v1``); the emulator serves the same paths.
SERVER_URL = "https://api.equinix.com"
_STRICT = "strict_"
_SCHEMA_REF = "#/components/schemas/"


@functools.cache
def document() -> dict[str, Any]:
    """The document as published (parsed once per process)."""
    loaded: dict[str, Any] = json.loads(DOCUMENT.read_text())
    return loaded


def operations(doc: dict[str, Any] | None = None) -> set[tuple[str, str]]:
    """``(METHOD, path template)`` of every operation in the document."""
    doc = document() if doc is None else doc
    return {
        (method.upper(), template)
        for template, item in doc["paths"].items()
        for method in item
        if method in ("get", "put", "post", "delete", "patch")
    }


def strict_request_bodies(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` whose request-body objects refuse properties the document does not
    name. Schemas reached from request bodies are copied under ``strict_<name>``, so response
    schemas stay as published."""
    strict = copy.deepcopy(doc)
    schemas: dict[str, Any] = strict["components"]["schemas"]
    published: dict[str, Any] = doc["components"]["schemas"]

    def strict_ref(ref: str) -> str:
        name = ref.removeprefix(_SCHEMA_REF)
        if _STRICT + name not in schemas:
            schemas[_STRICT + name] = {}  # claimed first: a schema may reach itself
            schemas[_STRICT + name] = tighten(copy.deepcopy(published[name]))
        return _SCHEMA_REF + _STRICT + name

    def closed(node: Any) -> dict[str, Any]:
        return {"allOf": [tighten(node)], "unevaluatedProperties": False}

    def tighten(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        out = dict(node)
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith(_SCHEMA_REF):
            out["$ref"] = strict_ref(ref)
        for keyword in ("allOf", "oneOf", "anyOf"):
            if keyword in out:
                out[keyword] = [tighten(branch) for branch in out[keyword]]
        if isinstance(out.get("properties"), dict):
            out["properties"] = {name: closed(value) for name, value in out["properties"].items()}
        for keyword in ("items", "additionalProperties"):
            if isinstance(out.get(keyword), dict):
                out[keyword] = closed(out[keyword])
        return out

    for item in strict["paths"].values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for media in operation.get("requestBody", {}).get("content", {}).values():
                if "schema" in media:
                    media["schema"] = closed(media["schema"])
    return strict


#: OpenAPI 3.0's request-side schema validator, taught JSON Schema 2020-12's
#: ``unevaluatedProperties`` (which 3.0's draft-4 base lacks) for the strict reading.
StrictWriteValidator = extend(
    OAS30WriteValidator,
    {"unevaluatedProperties": Draft202012Validator.VALIDATORS["unevaluatedProperties"]},
)


class DocumentRequest(WerkzeugOpenAPIRequest):
    """A werkzeug request seen as if sent to Equinix Metal's server (the document's only
    server), whatever host and port the emulator listens on."""

    @property
    def host_url(self) -> str:
        return SERVER_URL + "/"


@dataclass(frozen=True)
class Validators:
    """openapi-core validators over the document, built once per process."""

    request: V30RequestValidator
    response: V30ResponseValidator

    def check_request(self, request: Request) -> None:
        """Raise the :class:`ApiError` the Metal API would answer for a request the document
        rejects: 404 for a malformed path id, 400 for a body that is not JSON, 422 for the
        rest (naming the field and the rule)."""
        try:
            self.request.validate(DocumentRequest(request))
        except OpenAPIError as error:
            raise api_error(error) from None

    def response_problem(self, request: Request, response: Response) -> str | None:
        """Why ``response`` does not match the document, or ``None`` when it does."""
        try:
            self.response.validate(DocumentRequest(request), WerkzeugOpenAPIResponse(response))
        except OpenAPIError as error:
            return describe(error)
        return None


@functools.cache
def validators() -> Validators:
    published = SchemaPath.from_dict(document())
    strict = SchemaPath.from_dict(strict_request_bodies(document()))
    return Validators(
        request=V30RequestValidator(
            strict, schema_validators_factory=SchemaValidatorsFactory(StrictWriteValidator)
        ),
        response=V30ResponseValidator(published),
    )


def _schema_errors(error: BaseException) -> list[SchemaError]:
    found: list[SchemaError] = []
    cause: BaseException | None = error
    while cause is not None:
        errors: Iterable[Any] = getattr(cause, "schema_errors", ()) or ()
        found.extend(e for e in errors if isinstance(e, SchemaError))
        cause = cause.__cause__
    return found


def _flattened(errors: Iterable[SchemaError]) -> Iterable[SchemaError]:
    for error in errors:
        yield error
        yield from _flattened(error.context or ())


def describe(error: BaseException) -> str:
    """The most telling rule an instance broke, as ``field.path: message``.

    The deepest specific failure wins: a wrong type or unknown field inside
    ``ip_addresses[0]`` also fails every ``oneOf`` branch above it, and makes the top-level
    object look all unknown; naming the rule that started it helps the reader.
    """
    schema_errors = _schema_errors(error)
    if not schema_errors:
        cause = error.__cause__
        return f"{error}: {cause}" if cause is not None else str(error)
    flattened = list(_flattened(schema_errors))
    for candidate in flattened:
        if candidate.validator == "oneOf" and "valid under each of" in candidate.message:
            where = ".".join(str(part) for part in candidate.absolute_path) or "the body"
            return f"{where} matches more than one of the alternatives the document allows"
    specific = [e for e in flattened if e.validator not in ("allOf", "oneOf", "anyOf")]
    if specific:
        depth = max(len(e.absolute_path) for e in specific)
        deepest = [e for e in specific if len(e.absolute_path) == depth]
        plain = [e for e in deepest if e.validator != "unevaluatedProperties"]
        chosen = (plain or deepest)[0] if depth == 0 else deepest[0]
    else:
        found = best_match(schema_errors)
        assert found is not None
        chosen = found
    where = ".".join(str(part) for part in chosen.absolute_path)
    return f"{where}: {chosen.message}" if where else chosen.message


def api_error(error: OpenAPIError) -> ApiError:
    if isinstance(error, ParameterValidationError):
        if error.location == "path":
            return NotFound()
        return Unprocessable(f"invalid {error.location} parameter {error.name}: {describe(error)}")
    if isinstance(error, MissingRequestBodyError):
        return BadRequest("A JSON request body is required.")
    if isinstance(error, InvalidRequestBody):
        if not _schema_errors(error):  # not JSON at all
            return BadRequest()
        return Unprocessable(describe(error))
    return Unprocessable(describe(error))
