"""Cutting an emulator's ``openapi.json`` from a cloud's published OpenAPI document: the
operations the emulator serves, with every component they reference.

Nothing is edited: each kept operation and component is copied as published, so the emulator
and its tests check against the cloud's own text (a full document takes seconds to parse; the
cut loads in milliseconds). Each emulator's ``_trim_document`` module calls :func:`main` with
its routes and target file.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "options", "head", "trace")


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def trim(document: dict[str, Any], wanted: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The operations ``wanted`` (``(method, path template)``, any case of method) of
    ``document`` and the components they reach."""
    served = {(method.lower(), template) for method, template in wanted}
    paths: dict[str, Any] = {}
    for template, item in document["paths"].items():
        kept = {
            key: value
            for key, value in item.items()
            if key not in HTTP_METHODS or (key, template) in served
        }
        if any(key in HTTP_METHODS for key in kept):
            paths[template] = kept
    missing = served - {(m, t) for t, item in paths.items() for m in item if m in HTTP_METHODS}
    if missing:
        raise SystemExit(f"operations absent from the document: {sorted(missing)}")
    components: dict[str, dict[str, Any]] = {}
    pending = list(_refs(paths)) + list(_refs(document.get("security", [])))
    for scheme in document["components"].get("securitySchemes", {}):
        pending.append(f"#/components/securitySchemes/{scheme}")
    while pending:
        ref = pending.pop()
        _, _, section, name = ref.split("/", 3)
        if name in components.get(section, {}):
            continue
        value = document["components"][section][name]
        components.setdefault(section, {})[name] = value
        pending.extend(_refs(value))
    return {
        "openapi": document["openapi"],
        "info": document["info"],
        "servers": document["servers"],
        "security": document.get("security", []),
        "paths": paths,
        "components": {section: dict(sorted(v.items())) for section, v in components.items()},
    }


def _timestamp(value: object) -> str:
    if isinstance(value, datetime.date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def main(args: list[str], *, wanted: Iterable[tuple[str, str]], target: Path, usage: str) -> None:
    """``args`` is the path of the published YAML document; ``target`` is rewritten with the
    cut (``usage`` is the message for a wrong command line)."""
    if len(args) != 1:
        raise SystemExit(usage)
    import yaml

    source = Path(args[0])
    raw = source.read_bytes()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    trimmed = trim(yaml.load(raw, Loader=loader), wanted)
    trimmed["info"] = {
        **trimmed["info"],
        "x-polyccm-cut-from": f"{source.name} sha256:{hashlib.sha256(raw).hexdigest()}",
    }
    # YAML reads unquoted timestamps in examples as datetimes; JSON keeps them as the text.
    text = json.dumps(trimmed, indent=1, sort_keys=False, default=_timestamp)
    target.write_text(text + "\n")
    print(f"wrote {target} ({target.stat().st_size} bytes, {len(trimmed['paths'])} paths)")


class TrimScript:
    """An emulator's ``_trim_document`` script: the operations of ``routes`` (objects with
    ``method`` and ``template``) cut into ``target``; ``usage`` is the script's docstring."""

    def __init__(self, routes: Iterable[Any], target: Path, usage: str | None) -> None:
        self.wanted = [(route.method, route.template) for route in routes]
        self.target = target
        self.usage = usage or ""

    def trim(self, document: dict[str, Any]) -> dict[str, Any]:
        """The served operations of ``document`` and the components they reach."""
        return trim(document, self.wanted)

    def main(self, argv: list[str] | None = None) -> None:
        args = sys.argv[1:] if argv is None else argv
        main(args, wanted=self.wanted, target=self.target, usage=self.usage)
