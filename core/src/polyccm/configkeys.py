"""Keys and sections of a provider's config file that it does not read: a warning each.

Upstream's providers read their INI configs with gcfg through ``gcfg.FatalOnly``: a syntax
error or a value of the wrong type stops the start, but a section or key the provider does not
know is "extra data", dropped without a word. polyccm drops it too, and so that a misspelt key
cannot pass unnoticed, it says so: one warning line per key or section, naming the file, the
line when known, the section and the key, and never the value (it may be a secret).

Every provider goes through :func:`warn_unknown_keys`, whatever its file's syntax.

gcfg also reads a section given twice as one section, and a single-valued key given twice by
setting it twice: the last value wins, without a word. polyccm reads them the same way and says
so (:func:`warn_repeated`), naming both lines, never the values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable

log = logging.getLogger(__name__)


def _same(name: str) -> str:
    return name


def warn_unknown_keys(
    path: str,
    section: str,
    found: Iterable[tuple[str, int | None]],
    known: Collection[str],
    *,
    fold: Callable[[str], str] = _same,
    unused: Collection[str] = (),
    what: str = "key",
) -> list[str]:
    """Warn about each name in ``found`` (``(name as written, line or None)``) that is not in
    ``known``; return those names, in order.

    ``section`` is where they were found, as the file spells it (``[Global]``); empty for a
    file without sections. ``fold`` maps a name to the spelling of ``known`` (``str.lower``
    for gcfg, whose names ignore case). A name in ``unused`` is one upstream reads and polyccm
    does not: it is warned about as ignored, not as unknown. ``what`` is ``"section"`` when
    ``found`` are section headers (their keys are then ignored with them)."""
    unknown: list[str] = []
    for name, line in found:
        folded = fold(name)
        if folded in known:
            continue
        unknown.append(name)
        where = f"{path}:{line}" if line is not None else path
        inside = f" in {section}" if section else ""
        if folded in unused:
            log.warning(
                "%s: %s %r%s is ignored: polyccm does not implement it", where, what, name, inside
            )
        elif what == "section":
            log.warning("%s: unknown section %s%s is ignored, with its keys", where, name, inside)
        else:
            log.warning("%s: unknown %s %r%s is ignored", where, what, name, inside)
    return unknown


def warn_repeated(
    path: str, section: str, repeated: Iterable[tuple[str, int, int]], *, what: str = "key"
) -> None:
    """Warn about each ``(name as written, first line, line)`` of ``repeated``: a key given
    again in ``section`` (its last value is the one used) or, with ``what="section"``, a
    section header given again (its keys are read as one section's)."""
    for name, first, line in repeated:
        if what == "section":
            log.warning(
                "%s:%d: section %s is given again (first on line %d): its keys are read as "
                "those of one section, as upstream's gcfg reads them",
                path, line, name, first,
            )  # fmt: skip
        else:
            inside = f" in {section}" if section else ""
            log.warning(
                "%s:%d: %s %r%s is given again (first on line %d): the last value is used, as "
                "upstream's gcfg uses it",
                path, line, what, name, inside, first,
            )  # fmt: skip
