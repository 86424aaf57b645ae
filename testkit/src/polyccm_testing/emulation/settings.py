"""An emulator's tunables, and the guard on changing them at run time.

An emulator's settings are a frozen dataclass deriving from :class:`EmulatorSettings`: given on
its command line, changed through ``PUT /_polyccm/settings`` (:meth:`EmulatorSettings.updated`)
and kept across resets. What a field may become follows from its declared type, the same way
for every emulator: a ``bool`` takes ``true``/``false``; a ``str | None`` a string or ``null``;
an ``int`` (a count, a budget) a positive integer; a ``float`` a number of seconds, 0 or more.
Unknown names, and values of another kind, are refused with a message naming the field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Self


def _refusal(name: str, kind: str, value: Any) -> str | None:
    """Why ``value`` cannot be field ``name`` of type ``kind``, or None when it can."""
    if kind == "bool":
        return None if isinstance(value, bool) else f"{name} must be true or false"
    if kind == "str | None":
        ok = value is None or isinstance(value, str)
        return None if ok else f"{name} must be a string or null"
    if kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        return None if ok else f"{name} must be a positive integer"
    if kind == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        return None if ok else f"{name} must be a number of seconds >= 0"
    return f"{name} cannot be changed at run time"


@dataclass(frozen=True)
class EmulatorSettings:
    """The base of an emulator's settings (it declares no field of its own)."""

    def updated(self, changes: dict[str, Any]) -> Self:
        """A copy with ``changes`` applied; unknown names and values of the wrong kind are
        refused with :class:`ValueError`, and nothing is changed."""
        kinds = {item.name: str(item.type) for item in fields(self)}
        for name, value in changes.items():
            if name not in kinds:
                raise ValueError(f"unknown setting {name!r}; known: {sorted(kinds)}")
            refusal = _refusal(name, kinds[name], value)
            if refusal is not None:
                raise ValueError(refusal)
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
