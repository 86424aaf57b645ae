"""The tagging controller's flags, named and read as cloud-provider-aws names and reads them.

``--tags`` (pflag ``stringToString``: ``k=v,k2=v2``; repeated flags merge), ``--resources``
(pflag ``stringArray``: one resource per flag), ``--tagging-controller-rate-limit``,
``--tagging-controller-burst-limit``, ``--tagging-controller-concurrent-node-syncs`` (default 1)
and ``--tagging-controller-enable-batching``. As upstream, they are accepted whether or not the
``tagging`` controller runs, and checked only when it does (:func:`tagging_options`).

Imported by the plugin for every command: nothing heavy here.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polyccm import flagtypes
from polyccm.errors import ConfigError

CONTROLLER = "tagging"
INSTANCE = "instance"
SUPPORTED_RESOURCES = (INSTANCE,)


@dataclass(frozen=True)
class TaggingOptions:
    """What the tagging controller does: the tags and the kinds of resource it puts them on."""

    tags: Mapping[str, str] = field(default_factory=dict)
    resources: tuple[str, ...] = (INSTANCE,)
    rate_limit: float = 0.0
    burst_limit: int = 0
    workers: int = 1
    batching: bool = False


def _string_to_string(text: str) -> dict[str, str]:
    """One ``--tags`` value as pflag's ``stringToString.Set`` reads it: with a single ``=`` the
    whole value (quotes trimmed) is one pair, commas and all; with more, a CSV record of pairs."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"{text} must be formatted as key=value")
    if text.count("=") == 1:
        pairs = [text.strip('"')]
    else:
        try:
            (pairs,) = list(csv.reader([text], strict=True))
        except (csv.Error, ValueError):
            raise argparse.ArgumentTypeError(f"invalid key=value list {text!r}") from None
    parsed: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise argparse.ArgumentTypeError(f"{pair} must be formatted as key=value")
        key, value = pair.split("=", 1)
        parsed[key] = value
    return parsed


class _MergeTags(argparse.Action):
    """Repeated ``--tags`` flags merge into one map, a later key winning (pflag)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        merged = dict(getattr(namespace, self.dest, None) or {})
        merged.update(values if isinstance(values, dict) else {})
        setattr(namespace, self.dest, merged)


def _float64(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None


def add_tagging_flags(group: argparse._ArgumentGroup) -> None:
    """Add upstream's tagging-controller flags to ``group``."""
    group.add_argument(
        "--tags",
        dest="tagging_tags",
        type=_string_to_string,
        action=_MergeTags,
        default={},
        metavar="KEY=VALUE,...",
        help="tags the tagging controller puts on AWS resources, as key=value",
    )
    group.add_argument(
        "--resources",
        dest="tagging_resources",
        action="append",
        default=None,
        metavar="RESOURCE",
        help="AWS resources the tagging controller tags and untags (one per flag; 'instance')",
    )
    group.add_argument(
        "--tagging-controller-rate-limit",
        dest="tagging_rate_limit",
        type=_float64,
        default=0.0,
        metavar="PER_SECOND",
        help="steady rate at which the tagging controller takes nodes from its queue; 0 "
        "(default) does not limit",
    )
    group.add_argument(
        "--tagging-controller-burst-limit",
        dest="tagging_burst_limit",
        type=flagtypes.go_int,
        default=0,
        metavar="N",
        help="burst of that rate limit; 0 (default) does not limit",
    )
    group.add_argument(
        "--tagging-controller-concurrent-node-syncs",
        dest="tagging_workers",
        type=flagtypes.go_int,
        default=1,
        metavar="N",
        help="nodes the tagging controller tags at once (default 1)",
    )
    group.add_argument(
        "--tagging-controller-enable-batching",
        dest="tagging_batching",
        type=flagtypes.parse_bool,
        nargs="?",
        const=True,
        default=False,
        metavar="BOOL",
        help="tag (and untag) up to 50 queued nodes' instances with one call (default false)",
    )


def tagging_options(namespace: argparse.Namespace) -> TaggingOptions:
    """The tagging controller's options from the parsed flags, checked as upstream's
    ``Validate`` checks them when the controller starts; :class:`ConfigError` otherwise."""
    tags = dict(getattr(namespace, "tagging_tags", None) or {})
    resources = tuple(getattr(namespace, "tagging_resources", None) or ())
    rate = float(getattr(namespace, "tagging_rate_limit", 0.0))
    burst = int(getattr(namespace, "tagging_burst_limit", 0))
    workers = int(getattr(namespace, "tagging_workers", 1))
    if not tags:
        raise ConfigError("--tags must not be empty and must be a form of key=value")
    if not resources:
        raise ConfigError("--resources must not be empty")
    if rate < 0 or math.isnan(rate):
        raise ConfigError("--tagging-controller-rate-limit should not be less than zero")
    if burst < 0:
        raise ConfigError("--tagging-controller-burst-limit should not be less than zero")
    if workers <= 0:
        raise ConfigError("--tagging-controller-concurrent-node-syncs must be a positive number")
    for resource in resources:
        if resource not in SUPPORTED_RESOURCES:
            raise ConfigError(
                f"--resources: {resource!r} is not a supported resource; supported: "
                f"{', '.join(SUPPORTED_RESOURCES)}"
            )
    return TaggingOptions(
        tags=tags,
        resources=resources,
        rate_limit=rate,
        burst_limit=burst,
        workers=workers,
        batching=bool(getattr(namespace, "tagging_batching", False)),
    )
