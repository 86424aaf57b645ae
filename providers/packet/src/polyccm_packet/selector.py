"""Kubernetes label selectors in their text form (``bgpNodeSelector``), parsed and matched as
apimachinery's ``labels.Parse`` does.

Upstream reads ``METAL_BGP_NODE_SELECTOR`` (``bgpNodeSelector``) with ``labels.Parse`` and
refuses to start when it does not parse; the nodes it matches are the only ones given BGP
sessions and peer annotations. The grammar is the one ``kubectl get -l`` takes: requirements
joined by commas, each ``key``, ``!key``, ``key=value`` (or ``==``), ``key!=value``,
``key in (a,b)``, ``key notin (a,b)``, ``key>N`` or ``key<N``; the empty text matches every
node. Keys are label keys (an optional DNS-subdomain prefix and ``/``, then a name of at most 63
characters), values label values (at most 63, possibly empty).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from polyccm.errors import ConfigError

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_TOKEN = re.compile(r"\s*(==|!=|=|>|<|!|,|\(|\)|[^\s=!,()<>]+)")
_INTEGER = re.compile(r"[+-]?\d{1,19}")


@dataclass(frozen=True)
class Requirement:
    """One requirement: ``operator`` is ``exists``, ``!``, ``in``, ``notin``, ``>`` or ``<``
    (``=``, ``==`` are ``in`` and ``!=`` is ``notin``, with one value)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator == "in":
            return present and labels[self.key] in self.values
        if self.operator == "notin":
            return not present or labels[self.key] not in self.values
        # > and <: the label's value and the bound compared as integers (a value that is no
        # integer does not match)
        if not present or not _INTEGER.fullmatch(labels[self.key]):
            return False
        value, bound = int(labels[self.key]), int(self.values[0])
        return value > bound if self.operator == ">" else value < bound


@dataclass(frozen=True)
class Selector:
    """A parsed selector: every requirement must hold. Its ``text`` is what was given."""

    text: str
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


EVERYTHING = Selector("")


def parse_selector(text: str, *, setting: str = "METAL_BGP_NODE_SELECTOR") -> Selector:
    """``text`` parsed; :class:`ConfigError` naming ``setting`` when it is no selector."""
    parser = _Parser(_tokens(text, setting), setting)
    requirements: list[Requirement] = []
    while not parser.done():
        requirements.append(parser.requirement())
        if parser.done():
            break
        if parser.take() != ",":
            raise parser.fail(f"',' expected before {parser.last()!r}")
        if parser.done():
            raise parser.fail("it ends with ','")
    return Selector(text, tuple(requirements))


class _Parser:
    """The tokens of one selector, taken one requirement at a time."""

    def __init__(self, tokens: list[str], setting: str) -> None:
        self.tokens = tokens
        self.setting = setting
        self.position = 0

    def fail(self, why: str) -> ConfigError:
        return ConfigError(f"{self.setting} must be a Kubernetes label selector: {why}")

    def done(self) -> bool:
        return self.position >= len(self.tokens)

    def peek(self) -> str:
        return "," if self.done() else self.tokens[self.position]

    def last(self) -> str:
        return self.tokens[self.position - 1]

    def take(self) -> str:
        if self.done():
            raise self.fail("it ends too early")
        self.position += 1
        return self.last()

    def requirement(self) -> Requirement:
        token = self.take()
        if token == "!":
            return Requirement(_key(self.take(), self.fail), "!")
        key = _key(token, self.fail)
        following = self.peek()
        if following == ",":
            return Requirement(key, "exists")
        self.take()
        if following in ("=", "==", "!="):
            # key= (nothing before the next comma) selects the empty value
            value = "" if self.peek() == "," else self.take()
            operator = "notin" if following == "!=" else "in"
            return Requirement(key, operator, (_value(value, self.fail),))
        if following in (">", "<"):
            bound = self.take()
            if not _INTEGER.fullmatch(bound):
                raise self.fail(f"{bound!r} after {following} is no integer")
            return Requirement(key, following, (bound,))
        if following in ("in", "notin"):
            return Requirement(key, following, self.value_set(following))
        raise self.fail(f"{following!r} after {key!r} is no operator")

    def value_set(self, operator: str) -> tuple[str, ...]:
        """The values of ``in (a, b)``: at least one, possibly empty ones."""
        if self.take() != "(":
            raise self.fail(f"'(' expected after {operator}")
        values: list[str] = []
        while True:
            item = self.take()
            if item == ")" and not values:
                raise self.fail(f"{operator} () needs a value")
            if item in (",", ")"):
                values.append("")  # an empty value between commas
            else:
                values.append(_value(item, self.fail))
                item = self.take()
            if item == ")":
                return tuple(values)
            if item != ",":
                raise self.fail(f"',' or ')' expected, not {item!r}")


def _tokens(text: str, setting: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    while text[position:].strip():
        found = _TOKEN.match(text, position)
        if found is None:  # pragma: no cover - the pattern takes any non-space character
            raise ConfigError(f"{setting} must be a Kubernetes label selector")
        tokens.append(found.group(1))
        position = found.end()
    return tokens


def _key(token: str, fail: Callable[[str], ConfigError]) -> str:
    prefix, slash, name = token.rpartition("/")
    good = _NAME.fullmatch(name) is not None and len(name) <= 63
    if slash:
        good = good and len(prefix) <= 253 and _SUBDOMAIN.fullmatch(prefix) is not None
    if not good:
        raise fail(f"{token[:80]!r} is no label key")
    return token


def _value(token: str, fail: Callable[[str], ConfigError]) -> str:
    if token and (len(token) > 63 or not _NAME.fullmatch(token)):
        raise fail(f"{token[:80]!r} is no label value")
    return token
