"""The ``filter`` expressions of the compute list methods, parsed and evaluated on rendered items.

Both forms the API accepts::

    name = "k8s-node-*"                      (=, !=, <, >, <=, >=, and : for "contains"/"has";
    (network = "https://...") (description = "k8s-node-route")   * is a wildcard in = and :)
    name eq "prefix-.*"                      (eq / ne: an RE2 regular expression, whole value)

Comparisons combine with AND (or side by side, which means AND), OR, NOT and parentheses.
A dotted field reaches into nested values (``labels.env``, ``scheduling.preemptible``); when a
step holds a list (``tags.items``, ``networkInterfaces.network``) any element may match. URLs
compare by their path below ``compute/v1/``, so a client may name a resource with the
googleapis.com host or with the emulator's own address. A malformed filter is 400 ``invalid``.

:func:`fields` names the top-level fields an expression reads, so a list whose filter reads only
``name`` can test each resource's name before it renders the resource (what matches is the
same: the predicate sees the same value either way).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from polyccm_gce_emulator.errors import Invalid

Predicate = Callable[[dict[str, Any]], bool]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<open>\()|(?P<close>\))
        |(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
        |(?P<op>!=|>=|<=|=|<|>|:)
        |(?P<word>[^\s()=!<>:"']+(?:\([^\s()]*\)[^\s()=!<>:"']*)*)
    )""",
    re.VERBOSE,
)
#: The value after ``eq``/``ne``: an RE2 expression, unquoted as the Go client library writes
#: it (k8s-cloud-provider filter.Regexp), so it may hold ``:`` and ``/`` (a URL).
_REGEX_VALUE = re.compile(
    r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
        |(?P<word>[^\s()"']+(?:\([^\s()]*\)[^\s()"']*)*))""",
    re.VERBOSE,
)
_API_URL = re.compile(r"^https?://[^/]+/compute/v1/")
_WORD_OPERATORS = {"eq", "ne"}


class _Tokens:
    def __init__(self, text: str) -> None:
        self.text = text
        self.items: list[tuple[str, str]] = list(self._scan(text))
        self.position = 0
        self.fields: set[str] = set()

    def _scan(self, text: str) -> Iterator[tuple[str, str]]:
        index = 0
        while index < len(text):
            if text[index:].strip() == "":
                return
            match = _TOKEN.match(text, index)
            if match is None or match.end() == index:
                raise self.error()
            kind = match.lastgroup or ""
            yield kind, match.group(kind)
            index = match.end()
            if kind == "word" and match.group(kind) in _WORD_OPERATORS:
                value = _REGEX_VALUE.match(text, index)
                if value is None or value.end() == index:
                    raise self.error()
                kind = value.lastgroup or ""
                yield kind, value.group(kind)
                index = value.end()

    def error(self) -> Invalid:
        return Invalid(
            f"Invalid value for field 'filter': '{self.text}'. Invalid list filter expression."
        )

    def peek(self) -> tuple[str, str] | None:
        return self.items[self.position] if self.position < len(self.items) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise self.error()
        self.position += 1
        return token


def parse(text: str) -> Predicate:
    """The predicate a filter expression means (an empty filter matches everything)."""
    return parse_reading(text)[0]


def parse_reading(text: str) -> tuple[Predicate, frozenset[str]]:
    """The predicate a filter expression means, and the top-level fields it reads (none for
    an empty filter, which matches everything)."""
    if not text.strip():
        return (lambda _item: True), frozenset()
    tokens = _Tokens(text)
    predicate = _or(tokens)
    if tokens.peek() is not None:
        raise tokens.error()
    return predicate, frozenset(tokens.fields)


def _or(tokens: _Tokens) -> Predicate:
    parts = [_and(tokens)]
    while tokens.peek() == ("word", "OR"):
        tokens.take()
        parts.append(_and(tokens))
    if len(parts) == 1:
        return parts[0]
    return lambda item: any(part(item) for part in parts)


def _and(tokens: _Tokens) -> Predicate:
    parts = [_unary(tokens)]
    while True:
        token = tokens.peek()
        if token is None or token[0] == "close" or token == ("word", "OR"):
            break
        if token == ("word", "AND"):
            tokens.take()
        parts.append(_unary(tokens))
    if len(parts) == 1:
        return parts[0]
    return lambda item: all(part(item) for part in parts)


def _unary(tokens: _Tokens) -> Predicate:
    token = tokens.peek()
    if token == ("word", "NOT"):
        tokens.take()
        inner = _unary(tokens)
        return lambda item: not inner(item)
    if token is not None and token[0] == "open":
        tokens.take()
        inner = _or(tokens)
        if tokens.take()[0] != "close":
            raise tokens.error()
        return inner
    return _comparison(tokens)


def _comparison(tokens: _Tokens) -> Predicate:
    kind, field = tokens.take()
    if kind != "word":
        raise tokens.error()
    negated = field.startswith("-")
    field = field.removeprefix("-")
    kind, operator = tokens.take()
    if kind == "word" and operator in _WORD_OPERATORS:
        pass
    elif kind != "op":
        raise tokens.error()
    kind, raw = tokens.take()
    if kind == "string":
        value = re.sub(r"\\(.)", r"\1", raw[1:-1])
    elif kind == "word":
        value = raw
    else:
        raise tokens.error()
    test = _test(operator, value, tokens)
    path = field.split(".")
    tokens.fields.add(path[0])

    def predicate(item: dict[str, Any]) -> bool:
        values = list(_values(item, path))
        if operator in ("!=", "ne"):
            result = all(test(candidate) for candidate in values)
        else:
            result = any(test(candidate) for candidate in values)
        return result != negated

    return predicate


def _test(operator: str, value: str, tokens: _Tokens) -> Callable[[Any], bool]:
    if operator in ("eq", "ne"):
        # A URL compares by its path below compute/v1/ here too: upstream's GCE CCM lists its
        # routes with ``network eq <its api-endpoint>/projects/P/global/networks/N``
        # (cloud-provider-gcp v36.3.8, providers/gce/gce_routes.go:49), whatever API host
        # it was given.
        try:
            pattern = re.compile(_normal(value))
        except re.error:
            raise tokens.error() from None
        if operator == "eq":
            return lambda candidate: (
                candidate is not None and bool(pattern.fullmatch(_normal(_text(candidate))))
            )
        return lambda candidate: (
            candidate is None or not pattern.fullmatch(_normal(_text(candidate)))
        )
    wanted = _normal(value)
    if operator in ("=", "!="):
        equal = _matcher(wanted)
        if operator == "=":
            return lambda candidate: candidate is not None and equal(_normal(_text(candidate)))
        return lambda candidate: candidate is None or not equal(_normal(_text(candidate)))
    if operator == ":":
        if value == "*":
            return lambda candidate: candidate is not None
        has = _matcher(f"*{wanted}*" if "*" not in wanted else wanted)
        return lambda candidate: candidate is not None and has(_normal(_text(candidate)))
    return lambda candidate: candidate is not None and _order(operator, candidate, value)


def _matcher(wanted: str) -> Callable[[str], bool]:
    if "*" not in wanted:
        return lambda text: text == wanted
    pattern = re.compile(".*".join(re.escape(part) for part in wanted.split("*")), re.DOTALL)
    return lambda text: bool(pattern.fullmatch(text))


def _order(operator: str, candidate: Any, value: str) -> bool:
    left: Any
    right: Any
    try:
        left, right = float(candidate), float(value)
    except (TypeError, ValueError):
        left, right = _text(candidate), value
    if operator == "<":
        return bool(left < right)
    if operator == ">":
        return bool(left > right)
    if operator == "<=":
        return bool(left <= right)
    return bool(left >= right)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _normal(text: str) -> str:
    return _API_URL.sub("compute/v1/", text)


def _values(item: Any, path: list[str]) -> Iterator[Any]:
    """Every value at ``path`` (lists fan out); a single ``None`` when there is none."""
    found = False
    for value in _walk(item, path):
        found = True
        yield value
    if not found:
        yield None


def _walk(item: Any, path: list[str]) -> Iterator[Any]:
    if isinstance(item, list):
        for element in item:
            yield from _walk(element, path)
        return
    if not path:
        if item is not None:
            yield item
        return
    if isinstance(item, dict) and path[0] in item:
        yield from _walk(item[path[0]], path[1:])
