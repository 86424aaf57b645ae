"""The one place polyccm reads files a user gives it (cloud configs, token files, manifests).

Whatever is wrong with such a file becomes one :class:`~polyccm.errors.ConfigError` line that
names the file and the cause, which the commands print before exiting with status 2:

* :func:`read_text` (and :func:`read_stream` for standard input): missing or unreadable, larger
  than a bound (:data:`MAX_FILE_BYTES` unless the caller names another), or not UTF-8 (the first
  bad byte and its offset are named). A leading byte-order mark is dropped.
* :func:`load_yaml_documents`, :func:`load_json` and :func:`load_documents`: YAML or JSON read
  into the values JSON carries (mappings with string keys, lists, strings, numbers, booleans,
  null; a YAML date stays a string, as Kubernetes' YAML reader keeps it), with a key given twice,
  nesting deeper than :data:`MAX_DEPTH` levels (a 100,000-deep document included: no
  ``RecursionError`` escapes) and alias bombs refused.
* :func:`cut` and :func:`quoted`: a value as a message may echo it, on one line and at most
  :data:`ECHO_CHARS` characters of it (a 5 MB value is shown by its start and its size).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from polyccm import logredact
from polyccm.errors import ConfigError

MAX_FILE_BYTES = 1 << 20
"""Default bound of a file's size: 1 MiB, far above any cloud config or token."""

MAX_DEPTH = 100
"""Deepest nesting of mappings and lists a loaded document may have. A Kubernetes object is a
few levels deep; the bound keeps every recursive walk of the values (copying, comparing) far
from Python's recursion limit."""

ECHO_CHARS = 60
"""Characters of a value a message echoes before cutting it."""

_VISITS_PER_CHARACTER = 10
"""A document whose aliases make its values more than this many times as many as its characters
(a "billion laughs") is refused: walking or copying it would never end."""


def size_text(count: int) -> str:
    """``count`` bytes for a message: ``1 MiB``, ``512 KiB``, ``300 bytes``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count} bytes"


def cut(text: str, keep: int = ECHO_CHARS) -> str:
    """``text`` made safe to echo in a one-line message: secrets masked first (a secret cut in
    two would no longer be found by the redaction every message passes), control characters
    (newlines included) escaped, and when longer than ``keep`` characters its first ``keep``
    followed by ``… (N bytes)``, N being the whole value's size in UTF-8."""
    shown = logredact.redact(text)
    head = escape(shown[:keep])
    if len(shown) <= keep:
        return head
    return f"{head}… ({len(text.encode('utf-8', 'surrogatepass'))} bytes)"


def quoted(text: str, keep: int = ECHO_CHARS) -> str:
    """``text`` quoted as ``{text!r}`` quotes it, masked and cut as :func:`cut` cuts it (the size
    after the closing quote): ``'aaaa'… (5000000 bytes)``."""
    shown = logredact.redact(text)
    head = repr(shown[:keep])
    if len(shown) <= keep:
        return head
    return f"{head}… ({len(text.encode('utf-8', 'surrogatepass'))} bytes)"


def escape(text: str) -> str:
    """``text`` on one line: every character that is not printable (control characters, line
    and paragraph separators, format characters such as a zero-width space) as its escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# -- reading ------------------------------------------------------------------------------------


def read_text(path: str | Path, *, what: str = "file", limit: int = MAX_FILE_BYTES) -> str:
    """The text of the file at ``path`` (``what`` it is, for messages: ``cloud config``...).

    Raises :class:`ConfigError` (``PATH: ...``) when it cannot be read, is larger than
    ``limit`` bytes, or is not UTF-8. Reads at most ``limit + 1`` bytes, so a device or a huge
    file costs no more than the bound."""
    source = cut(str(path), 200)
    try:
        with open(path, "rb") as stream:
            data = stream.read(limit + 1)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(f"cannot read {what}: {reason}", path=source) from None
    return decode(data, source, what=what, limit=limit)


def read_stream(stream: IO[Any], source: str, *, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """As :func:`read_text`, from an open stream (standard input): its bytes when it has them
    (``stream.buffer``), else its text."""
    binary = getattr(stream, "buffer", None)
    try:
        if binary is not None:
            return decode(binary.read(limit + 1), source, what=what, limit=limit)
        text = str(stream.read(limit + 1))
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(f"cannot read {what}: {reason}", path=source) from None
    except UnicodeDecodeError as error:
        raise ConfigError(_not_utf8(what, error), path=source) from None
    if len(text) > limit or len(text.encode("utf-8", "surrogatepass")) > limit:
        raise ConfigError(_too_large(what, limit), path=source)
    return text.removeprefix("\ufeff")


def decode(data: bytes, source: str, *, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """``data`` (read from ``source``) as text; the checks of :func:`read_text`."""
    if len(data) > limit:
        raise ConfigError(_too_large(what, limit), path=source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(_not_utf8(what, error), path=source) from None
    return text.removeprefix("\ufeff")


def _too_large(what: str, limit: int) -> str:
    return f"{what} is larger than {size_text(limit)}, the most polyccm reads"


def _not_utf8(what: str, error: UnicodeDecodeError) -> str:
    bad = error.object[error.start] if error.start < len(error.object) else 0
    return f"{what} is not UTF-8 text (byte 0x{bad:02x} at offset {error.start})"


# -- loading ------------------------------------------------------------------------------------


def load_documents(text: str, source: str) -> list[Any]:
    """The documents of a manifest, as kubectl reads one: JSON objects when its first
    non-blank character is ``{``, else YAML documents (``---`` between them). Empty documents
    are left out."""
    if text.lstrip()[:1] == "{":
        return list(_json_stream(text, source))
    return [d for d in load_yaml_documents(text, source) if d is not None]


def load_yaml_documents(text: str, source: str) -> list[Any]:
    """Every YAML document of ``text`` (``None`` for an empty one); :class:`ConfigError`
    (``SOURCE:LINE: ...``) for anything that is not well-formed, as the module says."""
    try:
        documents = list(yaml.load_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = " ".join(str(error.problem or error.context or "not YAML").split())
        if problem == "exceeded maximum nesting depth":  # libyaml's own bound (1,000 levels)
            problem = _too_deep()
        # libyaml puts the end of the stream on a line after the last one: say the last.
        line = min(mark.line + 1, text.count("\n") + 1) if mark else None
        raise ConfigError(problem, path=source, line=line) from None
    except yaml.YAMLError as error:
        raise ConfigError(f"not YAML: {cut(str(error), 200)}", path=source) from None
    except RecursionError:
        raise ConfigError(_too_deep(), path=source) from None
    except ValueError:  # int() of more digits than Python converts
        raise ConfigError(_too_many_digits(), path=source) from None
    for document in documents:
        _check_shape(document, source, len(text))
    return documents


def load_json(text: str, source: str) -> Any:
    """The one JSON value of ``text``; :class:`ConfigError` for anything that is not
    well-formed, as the module says (``NaN`` and ``Infinity`` are not JSON)."""
    values = list(_json_stream(text, source))
    if len(values) != 1:
        what = "nothing" if not values else "more than one value"
        raise ConfigError(f"not JSON: {what}", path=source)
    return values[0]


def _json_stream(text: str, source: str) -> Iterator[Any]:
    decoder = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    position = _skip_blanks(text, 0)
    while position < len(text):
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise ConfigError(f"not JSON: {error.msg}", path=source, line=error.lineno) from None
        except RecursionError:
            raise ConfigError(_too_deep(), path=source) from None
        except _Refused as error:
            raise ConfigError(str(error), path=source) from None
        except ValueError:  # int() of more digits than Python converts
            raise ConfigError(_too_many_digits(), path=source) from None
        _check_shape(value, source, len(text))
        yield value
        position = _skip_blanks(text, position)


def _skip_blanks(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


class _Refused(ValueError):
    """A JSON document is well-formed but refused (a key twice, ``NaN``)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused(f"duplicate key {quoted(key)}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise _Refused(f"not JSON: {name}")


def _too_deep() -> str:
    return f"nested deeper than {MAX_DEPTH} levels"


def _too_many_digits() -> str:
    return f"a number has more than {sys.get_int_max_str_digits()} digits"


def _check_shape(value: Any, source: str, characters: int) -> None:
    """Refuse ``value`` when it nests deeper than :data:`MAX_DEPTH` or its aliases expand it
    far beyond its text; without recursion, so that no depth can overflow the stack."""
    budget = max(100_000, _VISITS_PER_CHARACTER * characters)
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        current, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError("aliases expand the document beyond any real one", path=source)
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        if depth >= MAX_DEPTH:
            raise ConfigError(_too_deep(), path=source)
        stack.extend((child, depth + 1) for child in children)


# libyaml's loader when PyYAML has it (fast, and its parser refuses nesting past 1,000 levels
# before Python recurses), else the pure-Python one.
_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[valid-type,misc]
    """YAML as JSON-shaped values: string keys, dates left as strings, no key given twice."""


def _json_key(key: Any) -> Any:
    # Kubernetes' YAML reader turns scalar keys into JSON's string keys the way JSON writes them.
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    return key


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[str, Any]:
    merge = "tag:yaml.org,2002:merge"
    written = sum(1 for key_node, _ in node.value if key_node.tag != merge)
    loader.flatten_mapping(node)
    merged = len(node.value) - written  # ``<<`` entries come first; written keys override them
    mapping: dict[str, Any] = {}
    seen: set[str] = set()
    for index, (key_node, value_node) in enumerate(node.value):
        key = _json_key(loader.construct_object(key_node, deep=True))
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                "found a key that is not a string",
                key_node.start_mark,
            )
        if index >= merged:
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {quoted(key)}", key_node.start_mark
                )
            seen.add(key)
        mapping[key] = loader.construct_object(value_node)
    return mapping


def _construct_yaml_map(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Iterator[Any]:
    data: dict[str, Any] = {}
    yield data
    data.update(_construct_mapping(loader, node))


def _as_string(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


_constructors: dict[str, Callable[..., Any]] = {
    "tag:yaml.org,2002:map": _construct_yaml_map,
    "tag:yaml.org,2002:timestamp": _as_string,
}
for _tag, _constructor in _constructors.items():
    _Loader.add_constructor(_tag, _constructor)
