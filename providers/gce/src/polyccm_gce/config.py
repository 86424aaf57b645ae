"""The cloud config (``--cloud-config``): upstream's gce.conf, ``[global]`` section.

:func:`parse_cloud_config` is a pure function of the file's text: every mistake is a
:class:`~polyccm.errors.ConfigError` naming the file and the line. The keys are the ones
cloud-provider-gcp reads (gcfg syntax: ``key = value``, ``;`` or ``#`` comments, a key given
twice is a list for ``node-tags`` and ``alpha-features`` (of which polyccm honours
``ILBSubsets``, warning about any other), booleans ``true``/``false``/``yes``/``no``/``1``/``0``, a
bare key meaning true). As upstream (gcfg read through ``gcfg.FatalOnly``), a section or key it
does not know is no error: it is ignored, with one warning naming it
(:func:`polyccm.configkeys.warn_unknown_keys`), and so are the keys upstream reads that polyccm
does not implement (:data:`UNUSED`). As gcfg too, another key given twice keeps its last value
and ``[global]`` given twice is one section, each with a warning naming both lines
(:func:`polyccm.configkeys.warn_repeated`). ``project-id``, ``network-project-id`` and
``local-zone`` must have the shape the Compute API gives project and zone names. The file is
read by :func:`polyccm.inputs.read_text`; an echoed value is cut (:func:`polyccm.inputs.quoted`)::

    [global]
    project-id = my-project
    network-name = default
    subnetwork-name = nodes
    node-tags = my-cluster-node
    node-instance-prefix = gke-my-cluster
    regional = false
    multizone = true
    local-zone = us-central1-a
    token-url = nil
    api-endpoint = http://127.0.0.1:8085/compute/v1/
    stack-type = IPV4_IPV6

``network-name`` and ``subnetwork-name`` may be a name or, as upstream takes them, a URL
(anything with a ``/``); the provider reads them (:mod:`polyccm_gce.network`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from polyccm import inputs
from polyccm.configkeys import warn_repeated, warn_unknown_keys
from polyccm.errors import ConfigError
from polyccm.inputs import quoted
from polyccm.urls import plain_url

log = logging.getLogger(__name__)

#: Upstream's compute base URL; ``api-endpoint`` replaces it.
DEFAULT_API_ENDPOINT = "https://compute.googleapis.com/compute/v1/"

_STRINGS = {
    "project-id": "project_id",
    "network-project-id": "network_project_id",
    "network-name": "network_name",
    "subnetwork-name": "subnetwork_name",
    "node-instance-prefix": "node_instance_prefix",
    "local-zone": "local_zone",
    "token-url": "token_url",
    "token-body": "token_body",
    "api-endpoint": "api_endpoint",
    "stack-type": "stack_type",
}
_BOOLEANS = {"regional": "regional", "multizone": "multizone"}
_LISTS = {"node-tags": "node_tags", "alpha-features": "alpha_features"}
#: upstream's alpha features (gce_alpha.go@v36.3.8) polyccm honours: with ILBSubsets, GKE's
#: ingress-gce builds new internal load balancers (gce_loadbalancer_internal.go:70-75).
ILB_SUBSETS = "ILBSubsets"
KNOWN_ALPHA_FEATURES = frozenset({ILB_SUBSETS})
#: Keys of upstream's ConfigGlobal that polyccm reads and does nothing with (warned about).
UNUSED = frozenset({"secondary-range-name", "container-api-endpoint"})
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_SECTION = re.compile(r"\[\s*([A-Za-z0-9_-]+)\s*\]")
#: The Compute API's patterns for a project and a zone in a request's path (compute.v1.json,
#: the discovery document, parameters ``project`` and ``zone``): a name of any other shape is
#: refused by every call.
_PROJECT = re.compile(
    r"(?:(?:[-a-z0-9]{1,63}\.)*(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?):)?"
    r"(?:[0-9]{1,19}|(?:[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?))"
)
_ZONE = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
_PAIR = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)\s*(?:=\s*(.*))?")


@dataclass(frozen=True)
class CloudConfig:
    """What gce.conf says; empty strings mean "not given" (found from the metadata server or
    defaulted by the provider)."""

    project_id: str = ""
    network_project_id: str = ""
    network_name: str = ""
    subnetwork_name: str = ""
    node_tags: tuple[str, ...] = ()
    alpha_features: tuple[str, ...] = ()
    """``alpha-features`` (one a line, as gcfg reads a list): only ILBSubsets does anything."""
    node_instance_prefix: str = ""
    regional: bool = False
    multizone: bool = False
    local_zone: str = ""
    token_url: str = ""
    token_body: str = ""
    api_endpoint: str = ""
    stack_type: str = ""
    """``IPV4``, ``IPV6`` or ``IPV4_IPV6``: with ``IPV6`` a node's IPv6 addresses come first."""

    @property
    def endpoint(self) -> str:
        """The compute v1 base URL, ending with ``/`` (``api-endpoint`` or Google's)."""
        base = self.api_endpoint or DEFAULT_API_ENDPOINT
        return base if base.endswith("/") else base + "/"


def _unquote(value: str, path: str, line: int) -> str:
    value = value.strip()
    if value.startswith('"'):
        if len(value) < 2 or not value.endswith('"'):
            raise ConfigError(f"unterminated quoted value {quoted(value)}", path=path, line=line)
        return value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    # An unquoted value ends at a comment.
    return re.split(r"\s[;#]", value, maxsplit=1)[0].strip()


def parse_cloud_config(text: str, path: str = "<gce.conf>") -> CloudConfig:
    """The :class:`CloudConfig` ``text`` describes; :class:`ConfigError` with ``path`` and the
    line for anything malformed (a broken line, a bad boolean, a name of the wrong shape). Once
    it parsed, each unknown section and key, and each one given twice, is warned about."""
    values: dict[str, object] = {}
    seen: dict[str, int] = {}
    section: str | None = None
    unknown_sections: list[tuple[str, int]] = []
    ignored_keys: list[tuple[str, int]] = []
    repeated_keys: list[tuple[str, int, int]] = []
    global_lines: list[tuple[str, int]] = []
    ignored_alpha: list[int] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("["):
            match = _SECTION.fullmatch(line)
            if match is None:
                raise ConfigError(
                    f"malformed section header {quoted(line)}", path=path, line=number
                )
            section = match.group(1).lower()
            if section != "global":
                unknown_sections.append((line, number))
            else:
                global_lines.append((line, number))
            continue
        match = _PAIR.fullmatch(line)
        if match is None:
            raise ConfigError(f"expected 'key = value', got {quoted(line)}", path=path, line=number)
        if section is None:
            raise ConfigError(
                f"{quoted(match.group(1))} outside a section (put it under [global])",
                path=path,
                line=number,
            )
        key = match.group(1).lower()
        value = None if match.group(2) is None else _unquote(match.group(2), path, number)
        if section != "global":
            continue
        if key in _LISTS:
            if value and _append(values, key, value):
                ignored_alpha.append(number)
            continue
        if key not in _STRINGS and key not in _BOOLEANS:
            ignored_keys.append((match.group(1), number))
            continue
        if key in seen:  # gcfg sets a single-valued variable again: the last value wins
            repeated_keys.append((match.group(1), seen[key], number))
        seen.setdefault(key, number)
        _store(values, key, value, (path, number))
    warn_unknown_keys(path, "", unknown_sections, (), what="section")
    warn_unknown_keys(
        path,
        "[global]",
        ignored_keys,
        frozenset([*_STRINGS, *_BOOLEANS, *_LISTS]),
        fold=str.lower,
        unused=UNUSED,
    )
    first_global = global_lines[0][1] if global_lines else 0
    warn_repeated(
        path, "", [(line, first_global, number) for line, number in global_lines[1:]],
        what="section",
    )  # fmt: skip
    warn_repeated(path, "[global]", repeated_keys)
    return _config(values, path, ignored_alpha)


def _config(values: dict[str, object], path: str, ignored_alpha: list[int]) -> CloudConfig:
    """The config of the values read, with a warning for each alpha feature left aside."""
    for number in ignored_alpha:
        log.warning(
            "%s:%d: alpha feature in [global] is ignored: polyccm implements only %s",
            path, number, ", ".join(sorted(KNOWN_ALPHA_FEATURES)),
        )  # fmt: skip
    tags = values.pop("node_tags", [])
    alpha = values.pop("alpha_features", [])
    assert isinstance(tags, list) and isinstance(alpha, list)
    return CloudConfig(node_tags=tuple(tags), alpha_features=tuple(alpha), **values)  # type: ignore[arg-type]


def _append(values: dict[str, object], key: str, value: str) -> bool:
    """Add ``value`` to list key ``key``'s; True for an alpha feature polyccm ignores."""
    current = values.setdefault(_LISTS[key], [])
    assert isinstance(current, list)
    current.append(value)
    return key == "alpha-features" and value not in KNOWN_ALPHA_FEATURES


def _store(values: dict[str, object], key: str, value: str | None, where: tuple[str, int]) -> None:
    """Put a string or boolean key's value in ``values``; :class:`ConfigError` for a bad one."""
    if key in _STRINGS:
        values[_STRINGS[key]] = value or ""
    elif value is None or value.lower() in _TRUE:
        values[_BOOLEANS[key]] = True
    elif value.lower() in _FALSE:
        values[_BOOLEANS[key]] = False
    else:
        raise ConfigError(
            f"{key} must be true or false, not {quoted(value)}", path=where[0], line=where[1]
        )
    problem = _problem(key, value or "")
    if problem:
        raise ConfigError(f"{key} {quoted(value or '')} {problem}", path=where[0], line=where[1])
    if key == "api-endpoint" and value:
        try:  # as upstream, plain http to any host: the endpoint is the operator's choice
            plain_url(value, key)
        except ConfigError as error:
            raise ConfigError(str(error), path=where[0], line=where[1]) from None


def _problem(key: str, value: str) -> str:
    """Why ``value`` cannot be string key ``key``'s, or ``""``."""
    if not value:
        return ""
    if key in ("project-id", "network-project-id") and not _PROJECT.fullmatch(value):
        return (
            "is no project id (lower-case letters, digits and hyphens, as the Compute API "
            "takes them)"
        )
    if key == "local-zone" and not (_ZONE.fullmatch(value) and "-" in value):
        return "is no zone (a name like us-central1-b, the region before its last hyphen)"
    return ""


def load_cloud_config(path: str | Path | None) -> CloudConfig:
    """The config at ``path`` (an empty one without a path)."""
    if path is None:
        return CloudConfig()
    text = inputs.read_text(path, what="cloud config")
    return parse_cloud_config(text, inputs.cut(str(path), 200))
