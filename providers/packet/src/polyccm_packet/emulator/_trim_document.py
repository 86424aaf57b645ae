"""Regenerate ``openapi.json``: the operations the emulator serves, cut from the Metal API's
bundled OpenAPI document with every component they reference.

``python -m polyccm_packet.emulator._trim_document PATH/equinix-metal-openapi3.yaml``
rewrites ``openapi.json`` beside this file. Nothing is edited: each kept operation and
component is copied as published, so the emulator and its tests check against the Metal API's
own text (the full document takes seconds to parse; this cut loads in milliseconds).
Run it again after adding an operation to :data:`polyccm_packet.emulator.routes.ROUTES`.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from polyccm_packet.emulator.routes import ROUTES

TARGET = Path(__file__).with_name("openapi.json")
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


def trim(document: dict[str, Any]) -> dict[str, Any]:
    """The served operations of ``document`` and the components they reach."""
    wanted = {(route.method.lower(), route.template) for route in ROUTES}
    paths: dict[str, Any] = {}
    for template, item in document["paths"].items():
        kept = {
            key: value
            for key, value in item.items()
            if key not in HTTP_METHODS or (key, template) in wanted
        }
        if any(key in HTTP_METHODS for key in kept):
            paths[template] = kept
    missing = wanted - {(m, t) for t, item in paths.items() for m in item if m in HTTP_METHODS}
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


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit(__doc__)
    import yaml

    source = Path(args[0])
    raw = source.read_bytes()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    trimmed = trim(yaml.load(raw, Loader=loader))
    trimmed["info"] = {
        **trimmed["info"],
        "x-polyccm-cut-from": f"{source.name} sha256:{hashlib.sha256(raw).hexdigest()}",
    }
    # YAML reads unquoted timestamps in examples as datetimes; JSON keeps them as the text.
    text = json.dumps(trimmed, indent=1, sort_keys=False, default=_timestamp)
    TARGET.write_text(text + "\n")
    print(f"wrote {TARGET} ({TARGET.stat().st_size} bytes, {len(trimmed['paths'])} paths)")


if __name__ == "__main__":
    main()
