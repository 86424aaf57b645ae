"""A quick sufficient test that a request body passes the strict reading of a document.

The strict reading (:func:`polyccm_testing.emulation.openapi.strict_request_bodies`) closes
every object of a request body with JSON Schema's ``unevaluatedProperties: false``; jsonschema
checks that by validating each ``oneOf``/``anyOf``/``allOf`` branch again for every closed
object (about 0.7 ms for a Metal ``createDevice`` body, against 0.14 ms for the published
schema alone).

:func:`passes_closed` answers the same question from the published schema: the body is valid
under it, and every object in the body has only keys the schema evaluates at that place (the
keys of ``properties``, of ``additionalProperties`` when it allows them, through ``$ref``,
``allOf`` and the valid branches of ``oneOf``/``anyOf``), each property value, array item and
additional value closed in turn. Both together imply the strict reading accepts the body: a
branch valid under the strict reading is valid under the published one, so the published
schema's only valid ``oneOf`` branch is the strict reading's only candidate, and it passes
there when its own objects are closed. The test never says yes wrongly; it says no whenever it
is unsure (an applicator it does not follow, such as ``patternProperties``, ``not`` or ``if``),
and then the strict reading itself decides, with its own error.
"""

from __future__ import annotations

from typing import Any

_SCHEMA_REF = "#/components/schemas/"
#: Applicators whose evaluated keys this test does not follow: meeting one, it is unsure.
_UNFOLLOWED = frozenset({
    "patternProperties", "not", "if", "then", "else", "dependentSchemas", "prefixItems",
    "contains", "unevaluatedProperties", "unevaluatedItems", "propertyNames", "$dynamicRef",
    "additionalItems",
})  # fmt: skip


class _Unsure(Exception):
    """The schema uses something this test does not follow."""


def passes_closed(validator: Any, schemas: dict[str, Any], instance: Any, schema: Any) -> bool:
    """Whether ``instance`` certainly passes the strict reading of ``schema`` (a published
    schema of the document whose ``components/schemas`` are ``schemas``); ``validator`` is the
    published schema's jsonschema validator (branches are checked with it)."""
    try:
        return bool(validator.is_valid(instance)) and _closed(validator, schemas, instance, schema)
    except _Unsure:
        return False


def _resolve(schemas: dict[str, Any], schema: Any) -> Any:
    if not isinstance(schema, dict):
        raise _Unsure
    if _UNFOLLOWED & schema.keys():
        raise _Unsure
    return schema


def _referenced(schemas: dict[str, Any], ref: Any) -> Any:
    if not isinstance(ref, str) or not ref.startswith(_SCHEMA_REF):
        raise _Unsure
    found = schemas.get(ref.removeprefix(_SCHEMA_REF))
    if found is None:
        raise _Unsure
    return found


def _closed(validator: Any, schemas: dict[str, Any], instance: Any, schema: Any) -> bool:
    """A place the strict reading closes: nested places closed, and an object's keys all
    evaluated here. A string, number, boolean or null holds no object to close (the strict
    reading's ``unevaluatedProperties`` applies to objects alone), so it passes as the published
    schema already found it: a list of 2,000 droplet ids is not walked id by id."""
    if not isinstance(instance, dict | list):
        return True
    if not _nested(validator, schemas, instance, schema):
        return False
    if isinstance(instance, dict):
        evaluated = _evaluated(validator, schemas, instance, schema)
        return evaluated is None or all(key in evaluated for key in instance)
    return True


def _branches(
    validator: Any, schemas: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> list[Any]:
    """The subschemas ``instance`` is held to here: every ``allOf`` branch and ``$ref``, and
    the ``oneOf``/``anyOf`` branches it is valid under (the published schema being valid)."""
    found: list[Any] = list(schema.get("allOf", []))
    if "$ref" in schema:
        found.append(_referenced(schemas, schema["$ref"]))
    for keyword in ("oneOf", "anyOf"):
        found += [
            b for b in schema.get(keyword, []) if validator.evolve(schema=b).is_valid(instance)
        ]
    return found


def _nested(validator: Any, schemas: dict[str, Any], instance: Any, schema: Any) -> bool:
    """The places inside ``instance`` the strict reading closes (property values, items,
    additional values) pass, through every subschema ``instance`` is held to."""
    if isinstance(schema, bool):
        return True
    schema = _resolve(schemas, schema)
    if isinstance(instance, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for key, sub in properties.items():
                if key in instance and not _closed(validator, schemas, instance[key], sub):
                    return False
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            named = properties if isinstance(properties, dict) else {}
            for key, value in instance.items():
                if key not in named and not _closed(validator, schemas, value, extra):
                    return False
    items = schema.get("items")
    listed = isinstance(instance, list) and isinstance(items, dict)
    if listed and not all(_closed(validator, schemas, item, items) for item in instance):
        return False
    return all(
        _nested(validator, schemas, instance, branch)
        for branch in _branches(validator, schemas, instance, schema)
    )


def _evaluated(
    validator: Any, schemas: dict[str, Any], instance: dict[str, Any], schema: Any
) -> set[str] | None:
    """The keys of ``instance`` the schema evaluates here (``None``: all of them)."""
    if isinstance(schema, bool):
        return set()
    schema = _resolve(schemas, schema)
    extra = schema.get("additionalProperties")
    if extra is True or isinstance(extra, dict):
        return None  # every value was found valid under it (the published schema holds)
    keys: set[str] = set()
    properties = schema.get("properties")
    if isinstance(properties, dict):
        keys.update(key for key in instance if key in properties)
    for branch in _branches(validator, schemas, instance, schema):
        more = _evaluated(validator, schemas, instance, branch)
        if more is None:
            return None
        keys |= more
    return keys
