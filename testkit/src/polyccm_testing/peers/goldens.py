"""Goldens: what an upstream CCM did, step by step, kept for machines that cannot run it.

A golden directory holds one JSON file per scenario step (``NN-<step>.json``), each naming the
peer that made it (:class:`Peer`: name, version, where its source came from) and holding the
:class:`Step`: the exchanges upstream had with the cloud (:class:`~.recording.Exchange`), the
cloud state after (through the cloud's own API) and the Kubernetes results it wrote (Service
status and annotations, node fields), in whatever shape the provider's scenario chose.

:class:`Replayer` sends recorded exchanges to an emulator again: each must get the status it
got when recorded (:class:`ReplayRefused` otherwise, naming the exchange and both answers). The
emulator assigns ids of its own, so the replayer learns them as it goes: the recorded and the
actual answers are walked side by side, and a value that differs (ids, addresses, operation
names: at least six characters and a digit, so ports, counts and states never count) is
substituted in later paths
and bodies, as a whole token (``a1b2`` in ``/targetPools/a1b2`` or ``k8s-fw-a1b2``, never inside
``a1b2c3``). ``bindings`` seeds what the test knows up front (Service UIDs, instance ids made
by its setup). :func:`comparable` makes two cloud states comparable field by field.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyccm_testing.peers.recording import Exchange, parse_body

#: A learned value must be at least this long: ids, addresses and names are; ports, counts and
#: flags are not, and substituting those would rewrite unrelated fields.
SHORTEST_LEARNED = 6
_STEP_FILE = re.compile(r"^(\d{2})-([a-z0-9-]+)\.json$")


@dataclass(frozen=True)
class Peer:
    """The upstream CCM a golden was recorded with."""

    name: str
    version: str
    source: str

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "source": self.source}


@dataclass(frozen=True)
class Step:
    """One scenario step as recorded: its exchanges, the cloud state and Kubernetes results
    after it, and a line saying what the step did."""

    name: str
    exchanges: tuple[Exchange, ...]
    cloud: Any = None
    kube: Any = None
    note: str = ""

    @property
    def writes(self) -> list[Exchange]:
        return [exchange for exchange in self.exchanges if exchange.is_write]


@dataclass(frozen=True)
class Golden:
    """A directory of recorded steps, all made by one :attr:`peer`."""

    peer: Peer
    steps: tuple[Step, ...]

    def step(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f"no step {name!r} in the golden (it has {[s.name for s in self.steps]})")


def save_step(directory: Path, index: int, step: Step, peer: Peer) -> Path:
    """Write ``step`` as ``directory/NN-<name>.json`` (stable key order, one value per line
    where it helps a diff); returns the file."""
    if not re.fullmatch(r"[a-z0-9-]+", step.name):
        raise ValueError(f"a step name is lowercase words and dashes, not {step.name!r}")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{index:02d}-{step.name}.json"
    document = {
        "peer": peer.as_json(),
        "step": step.name,
        "note": step.note,
        "exchanges": [exchange.as_json() for exchange in step.exchanges],
        "cloud": step.cloud,
        "kube": step.kube,
    }
    path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    return path


def load_steps(directory: Path) -> Golden:
    """The golden in ``directory``, steps in file order; every file must name the same peer."""
    files = sorted(path for path in directory.glob("*.json") if _STEP_FILE.match(path.name))
    if not files:
        raise FileNotFoundError(f"{directory}: no golden steps (NN-<step>.json)")
    peers: set[Peer] = set()
    steps: list[Step] = []
    for path in files:
        document = json.loads(path.read_text())
        peers.add(Peer(**document["peer"]))
        steps.append(
            Step(
                name=document["step"],
                exchanges=tuple(Exchange.from_json(e) for e in document["exchanges"]),
                cloud=document.get("cloud"),
                kube=document.get("kube"),
                note=document.get("note", ""),
            )
        )
    if len(peers) != 1:
        names = sorted(f"{peer.name} {peer.version}" for peer in peers)
        raise ValueError(f"{directory}: steps recorded with different peers: {names}")
    return Golden(peer=peers.pop(), steps=tuple(steps))


class ReplayRefused(AssertionError):
    """The emulator did not answer a recorded exchange as the cloud did when it was recorded."""


@dataclass
class Replayer:
    """Replays recorded exchanges against ``base_url`` (the emulator's; ``ca_file`` verifies
    https), substituting what it learns. ``headers`` go with every request (a token).

    Lists are walked item by item in order, unless ``pair_lists_by`` names a key every item
    has: then a recorded item is paired with the actual one whose key is its (substituted)
    value. A cloud that sorts lists by name, where names hold UIDs, answers a replay in
    another order, and pairing by position would bind one item's values to another's."""

    base_url: str
    ca_file: Path | None = None
    bindings: dict[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    pair_lists_by: str | None = None

    def __post_init__(self) -> None:
        self._context = (
            ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None
        )

    def replay(self, exchanges: Iterable[Exchange]) -> list[Exchange]:
        """Send each exchange (after substitution); the actual exchanges, in order."""
        return [self.send(exchange) for exchange in exchanges]

    def send(self, recorded: Exchange) -> Exchange:
        path = self.substitute(recorded.path)
        body = self.substitute(recorded.request)
        data = (
            None
            if body is None
            else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
        )
        request = urllib.request.Request(
            self.base_url.rstrip("/") + path, data=data, method=recorded.method
        )
        for name, value in self.headers.items():
            request.add_header(name, value)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, context=self._context, timeout=30) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        actual = Exchange(recorded.method, path, body, status, parse_body(raw))
        if status != recorded.status:
            raise ReplayRefused(
                f"{recorded.method} {path}: recorded {recorded.status}, now {status}: "
                f"{_short(actual.response)}"
            )
        self.learn(recorded.response, actual.response)
        return actual

    def learn(self, recorded: Any, actual: Any) -> None:
        """Walk two answers side by side; bind each differing value worth binding."""
        if isinstance(recorded, dict) and isinstance(actual, dict):
            for key in recorded.keys() & actual.keys():
                self.learn(recorded[key], actual[key])
        elif isinstance(recorded, list) and isinstance(actual, list):
            for old, new in self._pairs(recorded, actual):
                self.learn(old, new)
        elif (
            isinstance(recorded, (str, int))
            and not isinstance(recorded, bool)
            and isinstance(actual, (str, int))
            and str(recorded) != str(actual)
            and _worth_binding(str(recorded), str(actual))
        ):
            self.bindings.setdefault(str(recorded), str(actual))

    def _pairs(self, recorded: list[Any], actual: list[Any]) -> Iterable[tuple[Any, Any]]:
        key = self.pair_lists_by
        if key is None or not all(
            isinstance(item, dict) and key in item for item in (*recorded, *actual)
        ):
            return zip(recorded, actual, strict=False)
        mine = {str(item[key]): item for item in actual}
        return [
            (item, mine[name])
            for item in recorded
            if (name := str(self.substitute(str(item[key])))) in mine
        ]

    def substitute(self, value: Any) -> Any:
        """``value`` with every bound token replaced (strings, ints, and inside containers)."""
        return substitute(value, self.bindings)


def _worth_binding(recorded: str, actual: str) -> bool:
    """Ids, addresses and names holding them are long and carry a digit; a word (``active``
    recorded, ``new`` replayed: a state the replay saw earlier) is not an id, and binding it
    would rewrite every later state that says it."""
    return (
        len(recorded) >= SHORTEST_LEARNED
        and bool(actual)
        and any(character.isdigit() for character in recorded)
    )


def substitute(value: Any, bindings: Mapping[str, str]) -> Any:
    """``value`` with each whole token of ``bindings`` replaced by its binding."""
    if not bindings:
        return value
    if isinstance(value, dict):
        return {key: substitute(item, bindings) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, bindings) for item in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        bound = bindings.get(str(value))
        return int(bound) if bound is not None and bound.isdigit() else value
    if isinstance(value, str):
        return _token_pattern(bindings).sub(lambda match: bindings[match.group(0)], value)
    return value


def comparable(
    value: Any,
    volatile: Collection[str] = (),
    *,
    bindings: Mapping[str, str] | None = None,
) -> Any:
    """``value`` without the ``volatile`` keys (at any depth), with ``bindings`` substituted
    and lists in a stable order, so two cloud states compare field by field."""
    if bindings:
        value = substitute(value, bindings)
    if isinstance(value, dict):
        return {
            key: comparable(item, volatile)
            for key, item in sorted(value.items())
            if key not in volatile
        }
    if isinstance(value, list):
        items = [comparable(item, volatile) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    return value


_patterns: dict[tuple[str, ...], re.Pattern[str]] = {}


def _token_pattern(bindings: Mapping[str, str]) -> re.Pattern[str]:
    keys = tuple(sorted(bindings, key=len, reverse=True))
    pattern = _patterns.get(keys)
    if pattern is None:
        if len(_patterns) > 64:  # a replay binds a few values at a time: keep the newest
            _patterns.clear()
        alternatives = "|".join(re.escape(key) for key in keys)
        pattern = re.compile(rf"(?<![A-Za-z0-9])(?:{alternatives})(?![A-Za-z0-9])")
        _patterns[keys] = pattern
    return pattern


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "…"
