"""Fixtures of the GCE emulator's tests: an in-process emulator, its API client, and the
compute discovery document turned into JSON Schema (the yardstick every exchange is held to)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import googleapiclient
import jsonschema
import pytest
from polyccm_gce_emulator.testing import (
    ComputeApi,
    RunningEmulator,
    emulator_thread,
)

DISCOVERY = (
    Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / "compute.v1.json"
)
#: Fields GCE always sends on a resource (where its schema has them), a list, an operation.
ALWAYS_ON_RESOURCES = ("kind", "id", "name", "selfLink", "creationTimestamp")
ALWAYS_ON_LISTS = ("kind", "id", "selfLink")
ALWAYS_ON_OPERATIONS = ("status", "operationType", "targetLink", "insertTime", "progress", "user")
#: Google's error body (the discovery document does not describe errors).
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "additionalProperties": False,
            "required": ["code", "message", "errors"],
            "properties": {
                "code": {"type": "integer"},
                "message": {"type": "string"},
                "errors": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["domain", "reason", "message"],
                        "properties": {
                            "domain": {"type": "string"},
                            "reason": {"type": "string"},
                            "message": {"type": "string"},
                        },
                    },
                },
            },
        }
    },
}


def _convert(schema: dict[str, Any]) -> dict[str, Any]:
    """One discovery schema as JSON Schema: no property the document does not define
    (``additionalProperties: false`` unless it describes a map), types and enums as written,
    int64/uint64 as the decimal strings JSON carries, ``kind`` fixed to its default."""
    if "$ref" in schema:
        return {"$ref": f"#/definitions/{schema['$ref']}"}
    kind = schema.get("type")
    out: dict[str, Any] = {}
    if kind == "object":
        out["type"] = "object"
        properties = schema.get("properties", {})
        if properties:
            out["properties"] = {}
            for name, prop in properties.items():
                converted = _convert(prop)
                if name == "kind" and "default" in prop:
                    converted = {"const": prop["default"]}
                out["properties"][name] = converted
        if "additionalProperties" in schema:
            out["additionalProperties"] = _convert(schema["additionalProperties"])
        else:
            out["additionalProperties"] = False
    elif kind == "array":
        out["type"] = "array"
        out["items"] = _convert(schema.get("items", {}))
    elif kind == "string":
        out["type"] = "string"
        if schema.get("format") in ("int64", "uint64"):
            out["pattern"] = r"^-?[0-9]+$"
        if "enum" in schema:
            out["enum"] = schema["enum"]
    elif kind in ("integer", "number", "boolean"):
        out["type"] = kind
        if "enum" in schema:
            out["enum"] = schema["enum"]
    # "any" and untyped schemas accept anything.
    return out


class Discovery:
    """The compute v1 discovery document, as validators of method requests and responses."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.methods: dict[str, dict[str, Any]] = {}
        for resource in document["resources"].values():
            for method in resource.get("methods", {}).values():
                self.methods[method["id"]] = method
        schemas = document["schemas"]
        self._request_definitions = {name: _convert(s) for name, s in schemas.items()}
        self._response_definitions = {}
        for name, schema in schemas.items():
            converted = _convert(schema)
            properties = schema.get("properties", {})
            if name == "Operation":
                wanted = ("kind", "id", "name", "selfLink", *ALWAYS_ON_OPERATIONS)
            elif "items" in properties and "nextPageToken" in properties:
                wanted = ALWAYS_ON_LISTS
            elif "selfLink" in properties and "kind" in properties:
                wanted = ALWAYS_ON_RESOURCES
            else:
                wanted = ()
            required = [field for field in wanted if field in properties]
            if required:
                converted["required"] = required
            self._response_definitions[name] = converted

    def response_errors(self, method_id: str, body: Any) -> list[str]:
        """What is wrong with ``body`` as the answer of ``method_id``."""
        ref = self.methods[method_id].get("response", {}).get("$ref")
        if ref is None:
            return [] if body in (None, {}) else [f"{method_id} answers no body"]
        return self._errors(self._response_definitions, ref, body, ())

    def request_errors(self, method_id: str, body: Any) -> list[str]:
        """What is wrong with ``body`` as the request of ``method_id`` (required fields are the
        ones the document marks required for this method)."""
        ref = self.methods[method_id].get("request", {}).get("$ref")
        if ref is None:
            return [] if body in (None, {}) else [f"{method_id} takes no body"]
        required = [
            name
            for name, prop in self.document["schemas"][ref].get("properties", {}).items()
            if method_id in prop.get("annotations", {}).get("required", [])
        ]
        return self._errors(self._request_definitions, ref, body, required)

    @staticmethod
    def _errors(definitions: dict[str, Any], ref: str, body: Any, required: Any) -> list[str]:
        schema = {"definitions": definitions, "allOf": [{"$ref": f"#/definitions/{ref}"}]}
        if required:
            schema["required"] = list(required)
        validator = jsonschema.Draft7Validator(schema)
        return [
            f"{'/'.join(str(p) for p in error.absolute_path) or '<body>'}: {error.message}"
            for error in validator.iter_errors(body)
        ]

    @staticmethod
    def error_body_errors(body: Any) -> list[str]:
        validator = jsonschema.Draft7Validator(ERROR_SCHEMA)
        return [error.message for error in validator.iter_errors(body)]


@pytest.fixture(scope="session")
def discovery() -> Discovery:
    return Discovery(json.loads(DISCOVERY.read_text()))


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    """A fresh in-process emulator with fast operations."""
    with emulator_thread() as running:
        yield running


@pytest.fixture
def api(emulator: RunningEmulator) -> ComputeApi:
    return emulator.api()
