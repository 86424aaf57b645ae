"""Partial responses: the ``fields`` system parameter (or its header, ``X-Goog-FieldMask``).

Every Google API, compute v1 included, answers with only the fields a client names, in the
partial-response syntax: ``a,b`` selects fields side by side, ``a/b`` reaches into one,
``a(b,c)`` selects several inside one, and ``*`` stands for every key of a map (an
aggregatedList's ``items`` is keyed by scope: ``items/*/instances(name,zone),nextPageToken``).
A selection applies to each element of a list. Fields the answer lacks are left out, as they
are when the answer is whole. Errors are never cut. A mask that does not parse is 400
``invalid``, as Google answers it.

:func:`parse` turns a mask into a tree (``{"items": {"*": {"instances": {"name": None}}}}``,
``None``: the whole value), :func:`select` applies it to a rendered answer.
"""

from __future__ import annotations

import re
from typing import Any

from polyccm_gce_emulator.errors import Invalid

Mask = dict[str, "Mask | None"]

_NAME = re.compile(r"[A-Za-z0-9_$*.-]+")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def fail(self) -> Invalid:
        return Invalid(f"Invalid field selection {self.text!r} at position {self.at}.")

    def selections(self, closing: str) -> Mask:
        """Comma-separated selections up to ``closing`` (``""``: the end of the text)."""
        mask: Mask = {}
        while True:
            name, sub = self.selection()
            _merge(mask, name, sub)
            if self.at == len(self.text):
                if closing:
                    raise self.fail()
                return mask
            if self.text[self.at] == ",":
                self.at += 1
                continue
            if closing and self.text[self.at] == closing:
                self.at += 1
                return mask
            raise self.fail()

    def selection(self) -> tuple[str, Mask | None]:
        """One path (``a/b/c``), then perhaps a parenthesised sub-selection."""
        match = _NAME.match(self.text, self.at)
        if match is None:
            raise self.fail()
        self.at = match.end()
        name = match.group()
        if self.at < len(self.text) and self.text[self.at] == "/":
            self.at += 1
            inner, sub = self.selection()
            return name, {inner: sub}
        if self.at < len(self.text) and self.text[self.at] == "(":
            self.at += 1
            return name, self.selections(")")
        return name, None


def _merge(mask: Mask, name: str, sub: Mask | None) -> None:
    """Add ``name`` (selecting ``sub``) to ``mask``; a whole field stays whole."""
    if name not in mask:
        mask[name] = sub
        return
    current = mask[name]
    if current is None or sub is None:
        mask[name] = None
        return
    for key, value in sub.items():
        _merge(current, key, value)


def parse(text: str) -> Mask | None:
    """The tree of a field mask; ``None`` for an empty one (the whole answer)."""
    text = "".join(text.split())
    if not text:
        return None
    return _Parser(text).selections("")


def select(value: Any, mask: Mask | None) -> Any:
    """``value`` cut to what ``mask`` names (each element of a list alike)."""
    if mask is None:
        return value
    if isinstance(value, list):
        return [select(item, mask) for item in value]
    if not isinstance(value, dict):
        return value
    picked: dict[str, Any] = {}
    if "*" in mask:
        for key, item in value.items():
            picked[key] = select(item, mask["*"])
    for key, sub in mask.items():
        if key != "*" and key in value:
            picked[key] = select(value[key], sub)
    return picked
