"""An emulated cloud's OpenAPI document and the openapi-core validators built on it.

A cloud's emulator keeps ``openapi.json`` (the part of the cloud's published document that
covers the operations it serves, copied unchanged: see :mod:`.trim`) and builds one
:class:`Validators` over it, naming the cloud's server and its error constructors.

Requests are checked with openapi-core against a *strict* reading of that document: every
object in a request body also refuses properties the document does not name (JSON Schema's
``unevaluatedProperties: false``, which sees through ``allOf``/``oneOf``/``anyOf``), so a
misspelt field is a 422 naming it (as the clouds answer an unknown field) while their documents
leave objects open. Only constraints are added, so whatever passes the strict check passes the
published document. Responses are checked against the document as published.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterable
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
from jsonschema_path.caches import FullPathResolvedCache
from openapi_core import V30RequestValidator, V30ResponseValidator
from openapi_core.casting.schemas.factories import SchemaCastersFactory
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse
from openapi_core.deserializing.styles import style_deserializers
from openapi_core.deserializing.styles.deserializers import StyleDeserializer
from openapi_core.deserializing.styles.factories import StyleDeserializersFactory
from openapi_core.exceptions import OpenAPIError
from openapi_core.validation.request.exceptions import (
    InvalidRequestBody,
    MissingRequestBodyError,
    ParameterValidationError,
)
from openapi_core.validation.schemas.datatypes import FormatValidatorsDict
from openapi_core.validation.schemas.factories import SchemaValidatorsFactory
from openapi_core.validation.schemas.validators import SchemaValidator
from openapi_schema_validator import OAS30WriteValidator
from werkzeug.wrappers import Request, Response

from polyccm_testing.emulation.closed_bodies import passes_closed

_STRICT = "strict_"
#: How many places of a document its reader remembers, resolved (jsonschema-path's own cache,
#: off by default): openapi-core reads about 75 per request, most of them the same each time.
RESOLVED_CACHE = 8192
_SCHEMA_REF = "#/components/schemas/"


class _LockedResolvedCache(FullPathResolvedCache):
    """jsonschema-path's cache of resolved places, safe to share between request threads: its
    ``get`` reads an entry and then moves it, so a ``set`` evicting it or an ``invalidate`` in
    between raised KeyError. Each operation holds a lock for its few dict steps only (a lock
    around whole checks made every request wait behind a 500-device answer being checked)."""

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize)
        self._lock = threading.Lock()

    def get(self, parts: Any) -> Any:
        with self._lock:
            return super().get(parts)

    def set(self, parts: Any, resolved: Any) -> None:
        with self._lock:
            super().set(parts, resolved)

    def invalidate(self) -> None:
        with self._lock:
            super().invalidate()


def _document_path(document: dict[str, Any]) -> SchemaPath:
    """A reader of ``document`` that remembers the places it resolved, shareable by threads."""
    path = SchemaPath.from_dict(document, resolved_cache_maxsize=RESOLVED_CACHE)
    path.accessor._resolved_cache = _LockedResolvedCache(RESOLVED_CACHE)  # type: ignore[attr-defined]
    return path


def load_document(path: Path) -> dict[str, Any]:
    """The document at ``path`` as published."""
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """``(METHOD, path template)`` of every operation in ``doc``."""
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


def _document_key(spec: SchemaPath, schema: SchemaPath) -> tuple[Any, ...] | None:
    """Where ``schema`` sits in the document ``spec`` reads (its parts), or ``None`` for a
    schema of another document (openapi-core makes empty ones on the fly): never cached."""
    if schema.accessor is not spec.accessor:
        return None
    return schema.parts


class CachedSchemaValidatorsFactory(SchemaValidatorsFactory):
    """openapi-core's factory of schema validators, each made once per schema of the document.

    openapi-core makes a new jsonschema validator for every value it checks: a deep copy of
    the format checker and a resolution of the schema (about 0.35 ms each, several per
    request). The validator it makes depends only on the schema and the factory's settings,
    and checking a value leaves it unchanged, so the first one made for a schema (with the same
    settings) serves every later value: each is checked by the same rules as before."""

    def __init__(self, schema_validator_cls: Any) -> None:
        super().__init__(schema_validator_cls)
        self._made: dict[tuple[Any, ...], SchemaValidator] = {}

    def create(  # noqa: PLR0917 (openapi-core's signature)
        self,
        spec: SchemaPath,
        schema: SchemaPath,
        format_validators: FormatValidatorsDict | None = None,
        extra_format_validators: FormatValidatorsDict | None = None,
        forbid_unspecified_additional_properties: bool = False,
        enforce_properties_required: bool = False,
    ) -> SchemaValidator:
        where = _document_key(spec, schema)
        settings = (forbid_unspecified_additional_properties, enforce_properties_required)
        if where is None or format_validators is not None or extra_format_validators is not None:
            return super().create(spec, schema, format_validators, extra_format_validators,
                                  *settings)  # fmt: skip
        key = (where, *settings)
        made = self._made.get(key)
        if made is None:
            made = self._make(spec, schema, where, settings)
            self._made[key] = made
        return made

    def _make(
        self, spec: SchemaPath, schema: SchemaPath, where: tuple[Any, ...], settings: Any
    ) -> SchemaValidator:
        return super().create(spec, schema, None, None, *settings)


class ClosedBodyValidator(SchemaValidator):
    """The strict reading's validator of a request body, which first asks
    :func:`~polyccm_testing.emulation.closed_bodies.passes_closed` of the published schema at
    the same place: a body it vouches for passes the strict reading (0.7 -> 0.3 ms for a Metal
    ``createDevice`` body), any other is checked by the strict reading itself, with its own
    error. Either way the verdict is the strict reading's."""

    def __init__(self, strict: SchemaValidator, published: SchemaValidator, document: Any) -> None:
        super().__init__(strict.schema, strict.validator)
        self._published = published.validator
        self._contents = published.validator.schema
        self._schemas = document["components"]["schemas"]

    def validate(self, value: Any) -> None:
        if passes_closed(self._published, self._schemas, value, self._contents):
            return
        super().validate(value)


class StrictValidatorsFactory(CachedSchemaValidatorsFactory):
    """The strict reading's schema validators (made once each); a request body's is a
    :class:`ClosedBodyValidator` over the published ``document``'s schema at that place."""

    def __init__(self, document: dict[str, Any]) -> None:
        super().__init__(StrictWriteValidator)
        self._document = document
        self._published = _document_path(document)
        self._published_validators = CachedSchemaValidatorsFactory(OAS30WriteValidator)

    def _make(
        self, spec: SchemaPath, schema: SchemaPath, where: tuple[Any, ...], settings: Any
    ) -> SchemaValidator:
        strict = super()._make(spec, schema, where, settings)
        if "requestBody" not in where or any(settings):
            return strict
        published_schema = self._published
        for part in where:
            published_schema /= part
        published = self._published_validators.create(self._published, published_schema)
        return ClosedBodyValidator(strict, published, self._document)


class CachedStyleDeserializersFactory(StyleDeserializersFactory):
    """openapi-core's factory of parameter deserializers, each made once per parameter of the
    document: a deserializer holds only the parameter's style, name, type and caster (all read
    from the document), so the first one made for a parameter serves every request."""

    def __init__(self, schema_casters_factory: SchemaCastersFactory) -> None:
        super().__init__(schema_casters_factory, style_deserializers=style_deserializers)
        self._made: dict[tuple[Any, ...], StyleDeserializer] = {}

    def create(
        self, spec: SchemaPath, schema: SchemaPath, style: str, explode: bool, name: str
    ) -> StyleDeserializer:
        where = _document_key(spec, schema)
        if where is None:
            return super().create(spec, schema, style, explode, name)
        key = (where, style, explode, name)
        made = self._made.get(key)
        if made is None:
            made = super().create(spec, schema, style, explode, name)
            self._made[key] = made
        return made


def _cached_casters(validator_cls: Any) -> SchemaCastersFactory:
    """``validator_cls``'s default casters factory, its schema validators made once each."""
    default: SchemaCastersFactory = validator_cls.schema_casters_factory
    validators = default.schema_validators_factory
    return SchemaCastersFactory(
        CachedSchemaValidatorsFactory(validators.schema_validator_cls), default.types_caster
    )


@dataclass(frozen=True)
class CloudErrors:
    """How a cloud answers a request its document rejects: the constructors of its errors (the
    exceptions the emulator renders as the cloud's error bodies)."""

    not_found: Callable[[], Exception]
    bad_request: Callable[[str | None], Exception]
    unprocessable: Callable[[str], Exception]
    #: The message of the 400 for a request without the JSON body its operation requires.
    body_required: str

    def for_error(self, error: OpenAPIError) -> Exception:
        """The cloud's answer to ``error``: 404 for a malformed path id, 400 for a body that
        is missing or not JSON, 422 for the rest (naming the field and the rule)."""
        if isinstance(error, ParameterValidationError):
            if error.location == "path":
                return self.not_found()
            return self.unprocessable(
                f"invalid {error.location} parameter {error.name}: {describe(error)}"
            )
        if isinstance(error, MissingRequestBodyError):
            return self.bad_request(self.body_required)
        if isinstance(error, InvalidRequestBody):
            if not _schema_errors(error):  # not JSON at all
                return self.bad_request(None)
            return self.unprocessable(describe(error))
        return self.unprocessable(describe(error))


class DocumentRequest(WerkzeugOpenAPIRequest):
    """A werkzeug request seen as if sent to the cloud's server (the document's only server),
    whatever host and port the emulator listens on."""

    def __init__(self, request: Request, server_url: str) -> None:
        super().__init__(request)
        self.server_url = server_url

    @property
    def host_url(self) -> str:
        return self.server_url + "/"


@dataclass(frozen=True)
class Validators:
    """openapi-core validators over a cloud's document (build them once per process).

    Checks run side by side: what the validators remember is kept in plain dicts (one step
    each under the GIL) and in jsonschema-path's cache of resolved places, whose steps are
    locked (:class:`_LockedResolvedCache`)."""

    request: V30RequestValidator
    response: V30ResponseValidator
    server_url: str
    errors: CloudErrors

    @classmethod
    def build(cls, document: dict[str, Any], server_url: str, errors: CloudErrors) -> Validators:
        """Validators of requests (strict) and responses (as published) against ``document``,
        served by the cloud at ``server_url``."""
        published = _document_path(document)
        strict = _document_path(strict_request_bodies(document))
        request_casters = _cached_casters(V30RequestValidator)
        response_casters = _cached_casters(V30ResponseValidator)
        return cls(
            request=V30RequestValidator(
                strict,
                schema_validators_factory=StrictValidatorsFactory(document),
                schema_casters_factory=request_casters,
                style_deserializers_factory=CachedStyleDeserializersFactory(request_casters),
            ),
            response=V30ResponseValidator(
                published,
                schema_validators_factory=CachedSchemaValidatorsFactory(
                    V30ResponseValidator.schema_validators_factory.schema_validator_cls
                ),
                schema_casters_factory=response_casters,
                style_deserializers_factory=CachedStyleDeserializersFactory(response_casters),
            ),
            server_url=server_url,
            errors=errors,
        )

    def check_request(self, request: Request) -> None:
        """Raise the error the cloud would answer for a request the document rejects (see
        :meth:`CloudErrors.for_error`)."""
        try:
            self.request.validate(DocumentRequest(request, self.server_url))
        except OpenAPIError as error:
            raise self.errors.for_error(error) from None

    def response_problem(self, request: Request, response: Response) -> str | None:
        """Why ``response`` does not match the document, or ``None`` when it does."""
        try:
            self.response.validate(
                DocumentRequest(request, self.server_url), WerkzeugOpenAPIResponse(response)
            )
        except OpenAPIError as error:
            return describe(error)
        return None


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
    ``items[0]`` also fails every ``oneOf`` branch above it, and makes the top-level
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


@dataclass(frozen=True)
class OverlayField:
    """A value the cloud takes (and an upstream SDK sends) that its published document refuses.

    A new field (``widens=False``) is added as ``schema``'s property ``name``, so the strict
    reading stops refusing it; a widened one (``widens=True``) takes, besides what the
    document allows at that field, whatever ``definition`` allows (``anyOf`` of the two), so
    the overlay only ever accepts more. ``cites`` names the SDK field that sends it (file,
    struct field and JSON tag), so every entry says why the emulator is looser than the
    document."""

    schema: str
    name: str
    definition: dict[str, Any]
    cites: str
    widens: bool = False


def with_overlay(document: dict[str, Any], overlay: Iterable[OverlayField]) -> dict[str, Any]:
    """A copy of ``document`` with every ``overlay`` field applied to its schema's properties.
    A new field the document already has, or a widened one it lacks, is an error (the overlay
    is stale and must be cut)."""
    out = copy.deepcopy(document)
    schemas: dict[str, Any] = out["components"]["schemas"]
    for field in overlay:
        properties = schemas[field.schema].setdefault("properties", {})
        if (field.name in properties) != field.widens:
            state = "lacks" if field.widens else "has"
            raise ValueError(f"overlay field {field.schema}.{field.name}: the document {state} it")
        added = copy.deepcopy(field.definition)
        if field.widens:
            published = properties[field.name]
            # The description stays beside the alternatives, where readers of the field look.
            described = {k: published[k] for k in ("description",) if k in published}
            added = {**described, "anyOf": [published, added]}
        properties[field.name] = added
    return out


class CloudDocument:
    """One cloud's trimmed document (``path``), served at ``server_url``, answering rejected
    requests with ``errors``: parsed, and its validators built, once, on first use. The
    ``overlay`` fields (each citing the SDK field that sends it) are added to the document as
    read, for requests and responses alike."""

    def __init__(
        self,
        path: Path,
        server_url: str,
        errors: CloudErrors,
        overlay: Iterable[OverlayField] = (),
    ) -> None:
        self.path = path
        self.server_url = server_url
        self.errors = errors
        self.overlay = tuple(overlay)
        self._lock = threading.Lock()
        self._document: dict[str, Any] | None = None
        self._validators: Validators | None = None

    def document(self) -> dict[str, Any]:
        """The document as published, with the overlay's fields (parsed once per process)."""
        with self._lock:
            if self._document is None:
                self._document = with_overlay(load_document(self.path), self.overlay)
            return self._document

    def operations(self, doc: dict[str, Any] | None = None) -> set[tuple[str, str]]:
        """``(METHOD, path template)`` of every operation in the document (or in ``doc``)."""
        return operations(self.document() if doc is None else doc)

    def validators(self) -> Validators:
        """The validators over the document (built once per process)."""
        document = self.document()
        with self._lock:
            if self._validators is None:
                self._validators = Validators.build(document, self.server_url, self.errors)
            return self._validators


def uncached_validators(cloud: CloudDocument) -> Validators:
    """Validators over ``cloud``'s document as openapi-core makes them by default (every schema
    validator and reader made again on each call, no quick test of bodies): the reference the
    emulators' validators are tested against."""
    document = cloud.document()
    return Validators(
        request=V30RequestValidator(
            SchemaPath.from_dict(strict_request_bodies(document)),
            schema_validators_factory=SchemaValidatorsFactory(StrictWriteValidator),
        ),
        response=V30ResponseValidator(SchemaPath.from_dict(document)),
        server_url=cloud.server_url,
        errors=cloud.errors,
    )
