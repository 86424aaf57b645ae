"""One kubeconfig file checked as client-go reads it, or a one-line reason naming what is wrong.

Validation only (:mod:`polyccm.kube.validation` uses it before the ``kubernetes`` package's
``kubernetes.config`` loads the settings): the package reads a field of the wrong type without
complaint and fails later with a Python error naming no field, and quotes a YAML error's line.
client-go decodes a kubeconfig into typed Go structs (``clientcmd/api/v1``), so a field of the
wrong type (``users: 42``, ``token: 5``) makes the whole file unusable; so it does here, with the
field's path in the reason (``users[0].user.token: must be a string, got int``). Fields client-go
does not know are ignored, as there. ``null`` counts as an absent field.

Before the YAML is composed into objects its nesting is bounded (a kubeconfig nests about six
deep; the composer recurses once per level), and reasons never quote the file's text: a YAML
error's usual excerpt of the offending line could hold a token.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from polyccm import inputs

MAX_DEPTH = 100
"""Nesting (mappings and lists) allowed in a kubeconfig; real ones stay under ten."""

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML has it: the same YAML, read many times faster."""


SHOWN_CHARS = 100
"""Characters of a value (a name, a path) a message shows before cutting it."""


class KubeconfigFileError(ValueError):
    """The file cannot be read as a kubeconfig; the message says why, without the file's name."""


escaped = inputs.escape
"""``text`` on one line: the escaping every echoed value gets (:func:`polyccm.inputs.escape`)."""


def shown(text: str) -> str:
    """A value as a message may show it: masked, escaped and cut after :data:`SHOWN_CHARS`
    characters as every echoed value is (:func:`polyccm.inputs.cut`)."""
    return inputs.cut(text, SHOWN_CHARS)


# -- the shape client-go gives a kubeconfig (k8s.io/client-go/tools/clientcmd/api/v1/types.go) --


@dataclass(frozen=True)
class _ListOf:
    item: Any


@dataclass(frozen=True)
class _MapOf:
    value: Any


_ANY = object()
"""Any value (an extension's body, ``preferences``' unknown parts)."""

_EXTENSIONS = _ListOf({"name": str, "extension": _ANY})
_CLUSTER = {
    "server": str,
    "tls-server-name": str,
    "insecure-skip-tls-verify": bool,
    "certificate-authority": str,
    "certificate-authority-data": str,
    "proxy-url": str,
    "disable-compression": bool,
    "extensions": _EXTENSIONS,
}
_EXEC = {
    "command": str,
    "args": _ListOf(str),
    "env": _ListOf({"name": str, "value": str}),
    "apiVersion": str,
    "installHint": str,
    "provideClusterInfo": bool,
    "interactiveMode": str,
}
_USER = {
    "client-certificate": str,
    "client-certificate-data": str,
    "client-key": str,
    "client-key-data": str,
    "token": str,
    "tokenFile": str,
    "as": str,
    "as-uid": str,
    "as-groups": _ListOf(str),
    "as-user-extra": _MapOf(_ListOf(str)),
    "username": str,
    "password": str,
    "auth-provider": {"name": str, "config": _MapOf(str)},
    "exec": _EXEC,
    "extensions": _EXTENSIONS,
}
_CONTEXT = {"cluster": str, "user": str, "namespace": str, "extensions": _EXTENSIONS}
_CONFIG = {
    "apiVersion": str,
    "kind": str,
    "preferences": {"colors": bool, "extensions": _EXTENSIONS},
    "clusters": _ListOf({"name": str, "cluster": _CLUSTER}),
    "users": _ListOf({"name": str, "user": _USER}),
    "contexts": _ListOf({"name": str, "context": _CONTEXT}),
    "current-context": str,
    "extensions": _EXTENSIONS,
}


# -- reading ----------------------------------------------------------------------------------


def read(path: Path) -> Mapping[str, Any]:
    """The kubeconfig in ``path``, every known field of its type (an empty file is ``{}``).

    Raises :class:`OSError` when the file cannot be read, :class:`KubeconfigFileError` when
    what it holds is no kubeconfig."""
    text = _decode(path.read_bytes())
    _check_depth(text)
    try:
        loaded = yaml.load(text, Loader=_Loader)  # a safe loader, C or Python
    except yaml.YAMLError as error:
        raise KubeconfigFileError(_yaml_reason(error)) from None
    if loaded is None:
        return {}
    _check(loaded, _CONFIG, "", set())
    document: Mapping[str, Any] = loaded
    return document


def _decode(data: bytes) -> str:
    # YAML allows UTF-16 with a byte-order mark, and so does client-go's YAML reader.
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        raise KubeconfigFileError(f"not UTF-8 text (byte {error.start} is not)") from None


def _check_depth(text: str) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` from the parser's events, which come from
    a loop, not a recursion (PyYAML's composer would exhaust the stack at a few hundred)."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise KubeconfigFileError(
                        f"nested more than {MAX_DEPTH} levels deep (line {_line(event.start_mark)})"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as error:
        raise KubeconfigFileError(_yaml_reason(error)) from None


def _line(mark: Any) -> int:
    return int(mark.line) + 1 if mark is not None else 0


def _yaml_reason(error: yaml.YAMLError) -> str:
    """The YAML problem and where, without the excerpt of the file PyYAML's message quotes."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"not valid YAML: {error.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return "not valid YAML"


# -- types ------------------------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "mapping"
    return type(value).__name__


_EXPECTED: dict[Any, str] = {str: "a string", bool: "a boolean (true or false)"}


def _check(value: Any, shape: Any, where: str, seen: set[tuple[int, int]]) -> None:
    """Raise :class:`KubeconfigFileError` unless ``value`` has ``shape``; ``where`` is its
    path. ``seen`` keeps YAML aliases (one object reached many ways) from being walked again."""
    if shape is _ANY:
        return
    if shape is str or shape is bool:
        # bool is an int in Python, but neither is the other in a kubeconfig.
        if type(value) is not shape:
            raise KubeconfigFileError(f"{where}: must be {_EXPECTED[shape]}, got {_kind(value)}")
        return
    key = (id(value), id(shape))
    if key in seen:
        return
    seen.add(key)
    what = where or "the document"
    if isinstance(shape, _ListOf):
        if not isinstance(value, list):
            raise KubeconfigFileError(f"{what}: must be a list, got {_kind(value)}")
        for index, item in enumerate(value):
            _check(item, shape.item, f"{where}[{index}]", seen)
        return
    if not isinstance(value, Mapping):
        raise KubeconfigFileError(f"{what}: must be a mapping, got {_kind(value)}")
    if isinstance(shape, _MapOf):
        for name, item in value.items():
            if not isinstance(name, str):
                raise KubeconfigFileError(f"{where}: keys must be strings, got {_kind(name)}")
            if item is not None:
                _check(item, shape.value, f"{where}.{shown(name)}", seen)
        return
    for name, field in shape.items():
        item = value.get(name)
        if item is not None:
            _check(item, field, f"{where}.{name}" if where else name, seen)
