"""Faster rendering of moto's XML answers (EC2, ELB, ELBv2), byte for byte as moto renders them.

moto turns a result into an answer in two steps: its response serializer walks the operation's
output shape and reads each field from the result (asking its attribute picker which names to
try and whether a response transformer applies), building nested dicts; then
``xmltodict.unparse`` writes them out as XML through SAX's ``XMLGenerator``. Both are generic
and slow for big answers (5,000 targets, 100 instances of ~70 fields each): most of the
emulator's CPU under load. :func:`render_answers_faster` installs three patches, each named,
idempotent and keeping moto's answer, which ``tests/test_moto_rendering.py`` checks byte for
byte against moto's own code on the same results.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from xml.sax.saxutils import quoteattr

#: The marker each patched function carries, so a second install leaves it alone.
MARKER = "polyccm_rendering"


class _Unknown(Exception):
    """A shape of dict the emitter does not know: xmltodict renders it instead."""


def _text(value: Any) -> str:
    """A leaf value as xmltodict writes it (``_convert_value_to_string``), for the exact types
    moto's serializers produce; anything else is :class:`_Unknown`."""
    kind = type(value)
    if kind is str:
        return value  # type: ignore[no-any-return]
    if kind is bool:
        return "true" if value else "false"
    if kind is int or kind is float:
        return str(value)
    raise _Unknown


#: Element and attribute names found valid by xmltodict's rules; others go to xmltodict,
#: which raises its own error for a bad one.
_VALID_NAMES: set[str] = set()


def _valid_name(name: Any) -> bool:
    if type(name) is not str:
        return False
    if name in _VALID_NAMES:
        return True
    if (
        not name
        or name[0] in "?!"
        or any(c in name for c in "<>/\"'=")
        or any(c.isspace() for c in name)
    ):
        return False
    _VALID_NAMES.add(name)
    return True


def _escape(text: str) -> str:
    """``xml.sax.saxutils.escape`` without entities."""
    if "&" in text:
        text = text.replace("&", "&amp;")
    if ">" in text:
        text = text.replace(">", "&gt;")
    if "<" in text:
        text = text.replace("<", "&lt;")
    return text


def _emit(key: str, value: Any, out: list[str]) -> None:
    """One key of a dict as xmltodict's ``_emit`` writes it (no namespaces, preprocessor,
    expand_iter or comments; not pretty) through an ``XMLGenerator`` with
    ``short_empty_elements``: an element without children or text closes itself."""
    if key == "#comment" or not _valid_name(key):
        raise _Unknown
    kind = type(value)
    if kind is list:
        items = value
    elif kind is dict or kind is str or value is None or kind in (int, float, bool):
        items = (value,)
    else:
        raise _Unknown  # tuples, generators, bytes, datetimes...: xmltodict's business
    for item in items:
        kind = type(item)
        if kind is dict:
            pass
        elif item is None:
            item = {}
        elif kind is str or kind is bool or kind is int or kind is float:
            out.append(f"<{key}>{_escape(_text(item))}</{key}>" if item != "" else f"<{key}/>")
            continue
        else:
            raise _Unknown
        cdata: str | None = None
        attrs: dict[str, str] = {}
        children: list[tuple[str, Any]] = []
        for child_key, child in item.items():
            if type(child_key) is not str:
                raise _Unknown
            if child_key == "#text":
                cdata = None if child is None else _text(child)
            elif child_key.startswith("@"):
                if child_key == "@xmlns" and type(child) is dict:
                    raise _Unknown
                name = child_key[1:]
                if not _valid_name(name):
                    raise _Unknown
                attrs[name] = "" if child is None else _text(child)
            elif not (type(child) is list and not child):
                children.append((child_key, child))
        start = f"<{key}" + "".join(f" {n}={quoteattr(v)}" for n, v in attrs.items())
        if not children and not cdata:
            out.append(start + "/>")
            continue
        out.append(start + ">")
        for child_key, child in children:
            _emit(child_key, child, out)
        if cdata:
            out.append(_escape(cdata))
        out.append(f"</{key}>")


def render_xml(body: Any, *, full_document: bool) -> str | None:
    """``xmltodict.unparse(body, full_document=..., short_empty_elements=True, pretty=False)``
    for the dicts moto's query and EC2 serializers build, or ``None`` for a dict it does not
    know (the caller then asks xmltodict)."""
    if type(body) is not dict or (full_document and len(body) != 1):
        return None
    out: list[str] = ['<?xml version="1.0" encoding="utf-8"?>\n'] if full_document else []
    try:
        for key, value in body.items():
            if full_document and type(value) is list and len(value) != 1:
                return None
            _emit(key, value, out)
    except _Unknown:
        return None
    return "".join(out)


def write_xml_directly() -> None:
    """Write a query/EC2 answer's XML by joining strings instead of through xmltodict.

    ``xmltodict.unparse`` validates every element name and feeds each element to a SAX
    ``XMLGenerator`` call by call: a third of moto's time for a big answer (~0.45 s of a 5,000-
    target DescribeTargetHealth profiled, ~0.25 s of a 100-instance DescribeInstances).
    :func:`render_xml` writes the same characters (names checked once each by xmltodict's rules,
    text escaped as ``saxutils.escape`` does, attributes quoted by ``saxutils.quoteattr`` itself,
    empty elements closed short) for the dicts the query and EC2 serializers build; pretty
    answers and any value it does not know are left to xmltodict."""
    from moto.core.serialize import BaseXMLSerializer, EC2Serializer

    for owner, full_document in ((BaseXMLSerializer, False), (EC2Serializer, True)):
        original = owner.__dict__["_serialize_body"]
        if getattr(original, MARKER, False):
            continue

        def serialize_body(
            self: Any,
            body: Any,
            original: Callable[[Any, Any], str] = original,
            full_document: bool = full_document,
        ) -> str:
            if not self.pretty_print:
                rendered = render_xml(body, full_document=full_document)
                if rendered is not None:
                    return rendered
            return original(self, body)

        functools.update_wrapper(serialize_body, original)
        setattr(serialize_body, MARKER, True)
        owner._serialize_body = serialize_body  # type: ignore[method-assign]


#: Names tried for a field, by (service, parent structure, key, object class, class ``Meta``).
_NAMES: dict[tuple[Any, ...], tuple[str, ...]] = {}
#: Per response class's transformers (kept, so that their id stays theirs): per field key, the
#: transformers whose path could end a path ending in that key.
_TRANSFORMS: dict[int, tuple[object, dict[str, list[tuple[str, Any]]]]] = {}
_ABSENT = object()


def _names_of(serializer: Any, obj: Any, key: str, shape: Any, *, meta: Any) -> tuple[str, ...]:
    """The attribute names moto's picker tries for ``key`` of ``obj``. A member's shape (its
    name, type and serialized name) is the one its parent structure, unique by name in a
    service, gives the key: the alias providers look at nothing else but the object's class
    and its ``Meta``."""
    parent = getattr(shape, "parent", None)
    service = serializer.operation_model.service_model
    service_name = service.service_name if service is not None else None
    if parent is not None:
        remembered: tuple[Any, ...] = (service_name, parent.name, key, type(obj), meta)
    else:
        remembered = (service_name, None, key, type(obj), meta, shape.name, shape.type_name)
        remembered += (shape.serialization.get("name"),)
    names = _NAMES.get(remembered)
    if names is None:
        from moto.core.serialize import AttributePickerContext

        context = AttributePickerContext(
            obj=obj,
            key=key,
            shape=shape,
            operation_model=serializer.operation_model,
            service_model=service,
            key_path=".".join(serializer.path),
        )
        names = _NAMES[remembered] = tuple(serializer._value_picker.get_possible_keys(context))
    return names


def _transform_of(serializer: Any, transformers: dict[str, Any], key: str) -> Any:
    """The first of ``transformers`` whose path ends the field's dotted path, as moto tests
    them; the path is joined only when one could (its path ends with the key)."""
    entry = _TRANSFORMS.get(id(transformers))
    if entry is None or entry[0] is not transformers:
        entry = _TRANSFORMS[id(transformers)] = (transformers, {})
    candidates = entry[1].get(key)
    if candidates is None:
        candidates = entry[1][key] = [
            (suffix, transform)
            for suffix, transform in transformers.items()
            if key.endswith(suffix) or suffix.endswith("." + key)
        ]
    if not candidates:
        return None
    key_path = ".".join(serializer.path) + "." + key
    return next((t for suffix, t in candidates if key_path.endswith(suffix)), None)


def pick_fields_without_a_context() -> None:
    """Read each field of an answer without building moto's picker context and testing every
    response transformer's path against it.

    For every field of every object rendered moto's ``get_value`` builds an
    ``AttributePickerContext`` (joining the serializer's path), asks the picker for the names to
    try, and then tests each of the response's transformers (dozens for EC2) with ``endswith``
    against the field's dotted path: 1.3 million ``endswith`` calls and ~1.4 s of a profiled
    5,000-target DescribeTargetHealth (~0.6 s after). The names tried are remembered
    (:func:`_names_of`), so is which transformers could apply to a key (:func:`_transform_of`);
    values are read as moto's ``get_value`` reads them (inlined for a plain dict and an object
    without item access) and transformed as moto does. Another picker than moto's default, or
    an object with ``Meta`` aliases of its own, gets moto's code. moto's transformers are
    constants of each response class."""
    from moto.core.serialize import (
        DEFAULT_ALIAS_PROVIDERS,
        ResponseSerializer,
        XFormedAttributePicker,
    )
    from moto.core.utils import get_value as read

    original = ResponseSerializer.get_value
    if getattr(original, MARKER, False):
        return

    @functools.wraps(original)
    def get_value(self: Any, value: Any, key: str, shape: Any) -> Any:
        picker = self._value_picker
        kind = type(value)
        meta = None if kind is dict else getattr(value, "Meta", None)
        if (
            type(picker) is not XFormedAttributePicker
            or picker.alias_providers is not DEFAULT_ALIAS_PROVIDERS
            or shape is None
            or (meta is not None and meta is not getattr(kind, "Meta", None))
        ):
            return original(self, value, key, shape)
        for name in _names_of(self, value, key, shape, meta=meta):
            if "." in name:
                found = read(value, name, _ABSENT)
            elif kind is dict:
                found = value.get(name, _ABSENT)
            elif not hasattr(value, "__getitem__"):
                found = getattr(value, name, _ABSENT)
            else:
                found = read(value, name, _ABSENT)
            if found is not _ABSENT:
                break
        else:
            found = None
        transformers = picker.response_transformers
        if not transformers:
            return found
        transform = _transform_of(self, transformers, key)
        return found if transform is None else transform(found)

    setattr(get_value, MARKER, True)
    ResponseSerializer.get_value = get_value  # type: ignore[method-assign]


def dispatch_shapes_by_class() -> None:
    """Find the serializer's method for a shape's type once per serializer class and type,
    instead of formatting its name and looking it up on every field rendered (~0.1 s of a
    5,000-target answer). Methods are looked up on the class as moto's ``getattr`` on the
    instance finds them (serializers set none on their instances), so the same one runs."""
    from moto.core.serialize import ResponseSerializer

    original = ResponseSerializer._serialize
    if getattr(original, MARKER, False):
        return
    methods: dict[tuple[type, str], Callable[..., None]] = {}

    @functools.wraps(original)
    def _serialize(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        kind = type(self)
        method = methods.get((kind, shape.type_name))
        if method is None:
            method = getattr(kind, f"_serialize_type_{shape.type_name}", None)
            if method is None:
                method = kind._default_serialize
            methods[(kind, shape.type_name)] = method
        path = self.path
        path.append(key or shape.name)
        method(self, serialized, value, shape, key)
        path.pop()

    setattr(_serialize, MARKER, True)
    ResponseSerializer._serialize = _serialize  # type: ignore[method-assign]


#: Every patch here, as (owner's import path, attribute), for tests that put moto's code back.
PATCHED = (
    ("moto.core.serialize.ResponseSerializer", "get_value"),
    ("moto.core.serialize.ResponseSerializer", "_serialize"),
    ("moto.core.serialize.BaseXMLSerializer", "_serialize_body"),
    ("moto.core.serialize.EC2Serializer", "_serialize_body"),
)


def render_answers_faster() -> None:
    """Install every rendering patch of this module (idempotent)."""
    pick_fields_without_a_context()
    dispatch_shapes_by_class()
    write_xml_directly()
