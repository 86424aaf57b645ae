"""``--feature-gates`` as upstream's cloud-controller-manager v1.35 reads it.

The gates known are those of k8s.io/cloud-provider v0.35.4's command (``feature_gates.json``
beside this module, each as it stands at the emulated version 1.35; a test compares the file
with what upstream's own registry prints). The value is ``Name=bool`` pairs separated by commas,
booleans as Go's ``strconv.ParseBool``; the flag may be repeated, later pairs overriding earlier
ones. As component-base's ``featureGate.SetFromMap``, the merged pairs are refused when a gate is
unknown, when a gate locked to its default (most GA and some deprecated gates) is set to the
other value, when a gate is not yet available at 1.35 (``PRE-ALPHA``), or when an enabled gate
depends on a disabled one. ``AllAlpha`` and ``AllBeta`` set every alpha or beta gate not named
explicitly. Setting a GA or deprecated gate is allowed, with a warning.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from polyccm import flagtypes

ALL_ALPHA = "AllAlpha"
ALL_BETA = "AllBeta"
ALPHA, BETA, GA, DEPRECATED, PRE_ALPHA = "ALPHA", "BETA", "GA", "DEPRECATED", "PRE-ALPHA"


@dataclass(frozen=True)
class GateSpec:
    """One known gate at the emulated version."""

    name: str
    default: bool
    lock_to_default: bool
    pre_release: str
    depends_on: tuple[str, ...] = ()


@functools.cache
def _data() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("feature_gates.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def emulation_version() -> str:
    """The Kubernetes minor the gates are read at (``1.35``)."""
    return str(_data()["emulationVersion"])


@functools.cache
def known_gates() -> Mapping[str, GateSpec]:
    """Every gate upstream's ``--feature-gates`` knows, by name."""
    return {
        item["name"]: GateSpec(
            name=item["name"],
            default=bool(item["default"]),
            lock_to_default=bool(item["lockToDefault"]),
            pre_release=item["preRelease"],
            depends_on=tuple(item.get("dependsOn") or ()),
        )
        for item in _data()["featureGates"]
    }


def parse_pairs(text: str) -> dict[str, bool]:
    """``Name=bool,...`` as upstream's ``featureGate.Set`` splits it (names not checked yet)."""
    pairs: dict[str, bool] = {}
    for item in text.split(","):
        if not item:
            continue
        name, equals, value = item.partition("=")
        name = name.strip()
        if not equals:
            raise argparse.ArgumentTypeError(f"missing bool value for {name}")
        try:
            pairs[name] = flagtypes.parse_bool(value.strip())
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"invalid value of {name}={value.strip()} (use true or false)"
            ) from None
    return pairs


@dataclass(frozen=True)
class FeatureGates:
    """The gates set on the command line, resolved against the known ones."""

    explicit: tuple[tuple[str, bool], ...] = ()
    """What the command line set, sorted by name (AllAlpha and AllBeta included)."""

    @classmethod
    def from_pairs(cls, pairs: Mapping[str, bool]) -> FeatureGates:
        """Gates from ``pairs``; :class:`argparse.ArgumentTypeError` naming the first problem
        as upstream words it (several: in brackets, comma separated, as its aggregate error)."""
        problems = _problems(pairs)
        if problems:
            message = problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]"
            raise argparse.ArgumentTypeError(message)
        return cls(tuple(sorted(pairs.items())))

    def enabled(self, name: str) -> bool:
        """Whether gate ``name`` is on: as set, else as AllAlpha/AllBeta set it, else its
        default. ``KeyError`` for a gate upstream does not know (a programming error)."""
        return _enabled(name, dict(self.explicit))

    def warnings(self) -> list[str]:
        """What upstream warns about the gates set: GA and deprecated ones will go away."""
        known = known_gates()
        found = []
        for name, value in self.explicit:
            kind = known[name].pre_release
            if kind in (GA, DEPRECATED):
                label = "GA" if kind == GA else "deprecated"
                found.append(
                    f"setting {label} feature gate {name}={str(value).lower()}; it will be "
                    "removed in a future release"
                )
        return found


def _enabled(name: str, explicit: Mapping[str, bool]) -> bool:
    spec = known_gates()[name]
    if name in explicit:
        return explicit[name]
    if name not in (ALL_ALPHA, ALL_BETA):
        special = {ALPHA: ALL_ALPHA, BETA: ALL_BETA}.get(spec.pre_release)
        if special is not None and special in explicit:
            return explicit[special]
    return spec.default


def _problems(pairs: Mapping[str, bool]) -> list[str]:
    known = known_gates()
    for name in pairs:
        if name not in known:
            # Upstream stops at the first unknown gate.
            return [f"unrecognized feature gate: {name}"]
    problems = []
    for name, value in pairs.items():
        spec = known[name]
        if spec.lock_to_default and spec.default != value:
            problems.append(
                f"cannot set feature gate {name} to {str(value).lower()}, feature is locked to "
                f"{str(spec.default).lower()}"
            )
        elif spec.pre_release == PRE_ALPHA:
            problems.append(
                f"cannot set feature gate {name} to {str(value).lower()}, feature is PreAlpha at "
                f"emulated version {emulation_version()}, min compatibility version "
                f"{_previous_minor(emulation_version())}"
            )
    if problems:
        return problems
    for name, spec in sorted(known.items()):
        if spec.depends_on and _enabled(name, pairs):
            disabled = [dep for dep in spec.depends_on if not _enabled(dep, pairs)]
            if disabled:
                problems.append(
                    f"{name} is enabled, but depends on features that are disabled: "
                    f"[{' '.join(disabled)}]"
                )
    return problems


def _previous_minor(version: str) -> str:
    major, minor = version.split(".")
    return f"{major}.{int(minor) - 1}"


class FeatureGatesAction(argparse.Action):
    """``--feature-gates``: each occurrence adds its pairs to those before, and the whole is
    checked each time, as upstream's flag value does."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current: FeatureGates = getattr(namespace, self.dest, None) or FeatureGates()
        try:
            merged = {**dict(current.explicit), **parse_pairs(str(values))}
            setattr(namespace, self.dest, FeatureGates.from_pairs(merged))
        except argparse.ArgumentTypeError as error:
            raise argparse.ArgumentError(self, str(error)) from None
