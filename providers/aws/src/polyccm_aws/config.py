"""The AWS cloud config: upstream's INI (gcfg) file, parsed by a pure function.

An existing ``cloud.conf`` written for cloud-provider-aws works unchanged: the ``[Global]`` keys and
``[ServiceOverride "N"]`` sections have the same names and meaning, names are case-insensitive, a
bare boolean key means true, and ``NodeIPFamilies`` may be repeated. As upstream (gcfg read
through ``gcfg.FatalOnly``), an unknown section or key does not stop the start: it is ignored,
with one warning naming it (:func:`polyccm.configkeys.warn_unknown_keys`). Every error (the
syntax, a value) is a :class:`~polyccm.errors.ConfigError` carrying the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyccm.configkeys import warn_unknown_keys
from polyccm.errors import ConfigError

HEALTH_PROBE_MODES = ("", "Shared", "ServiceNodePort")
NODE_IP_FAMILIES = ("ipv4", "ipv6")


@dataclass(frozen=True)
class ServiceOverride:
    """A ``[ServiceOverride "N"]`` section: a custom endpoint for one AWS service in one region."""

    key: str
    """The section's subsection name (``"1"``)."""
    service: str
    """The service as upstream spells it (``EC2``, ``ec2``, ``Elastic Load Balancing``...)."""
    region: str
    url: str
    signing_region: str
    signing_method: str = ""
    signing_name: str = ""

    @property
    def client_names(self) -> frozenset[str]:
        """The boto3 client names this override applies to."""
        return SERVICE_ALIASES.get(_fold(self.service), frozenset())


def _fold(name: str) -> str:
    return re.sub(r"[\s_-]+", "", name).lower()


SERVICE_ALIASES: dict[str, frozenset[str]] = {
    "ec2": frozenset({"ec2"}),
    # SDK v1 used one endpoint id for both load-balancing APIs; SDK v2 names them apart.
    "elasticloadbalancing": frozenset({"elb", "elbv2"}),
    "elb": frozenset({"elb"}),
    "elasticloadbalancingv2": frozenset({"elbv2"}),
    "elbv2": frozenset({"elbv2"}),
    "sts": frozenset({"sts"}),
}


@dataclass(frozen=True)
class CloudConfig:
    """The parsed cloud config; field docs name the upstream key."""

    zone: str = ""
    """``Zone``: informational; used to derive the region when ``Region`` is empty."""
    region: str = ""
    """``Region``: the AWS region (else from ``Zone``, else the boto3 default region)."""
    vpc: str = ""
    """``VPC``: the cluster VPC (else the VPC of the backend instances or tagged subnets)."""
    subnet_id: str = ""
    """``SubnetID``: fallback subnet for load balancers when no subnet is tagged."""
    route_table_id: str = ""
    """``RouteTableID``: the route table for pod routes (else the one with the cluster tag)."""
    role_arn: str = ""
    """``RoleARN``: an IAM role to assume for every call."""
    source_arn: str = ""
    """``SourceARN``: passed as ``aws:SourceArn`` context when assuming ``RoleARN``."""
    kubernetes_cluster_tag: str = ""
    """``KubernetesClusterTag``: legacy cluster id (tag ``KubernetesCluster=<id>``)."""
    kubernetes_cluster_id: str = ""
    """``KubernetesClusterID``: cluster id (tag ``kubernetes.io/cluster/<id>``). With neither
    cluster-id key, the id comes from the tags of the instance polyccm runs on."""
    disable_security_group_ingress: bool = False
    """``DisableSecurityGroupIngress``: never add LB rules to node security groups."""
    elb_security_group: str = ""
    """``ElbSecurityGroup``: one shared security group for every classic ELB."""
    node_ip_families: tuple[str, ...] = ("ipv4",)
    """``NodeIPFamilies`` (repeatable): which addresses nodes get, in order."""
    cluster_service_load_balancer_health_probe_mode: str = ""
    """``ClusterServiceLoadBalancerHealthProbeMode``: ``Shared`` probes kube-proxy instead."""
    cluster_service_shared_load_balancer_health_probe_port: int = 0
    """``ClusterServiceSharedLoadBalancerHealthProbePort`` (default 10256)."""
    cluster_service_shared_load_balancer_health_probe_path: str = ""
    """``ClusterServiceSharedLoadBalancerHealthProbePath`` (default ``/healthz``)."""
    supported_topology_instance_type_pattern: str = ""
    """``SupportedTopologyInstanceTypePattern``: accepted for compatibility; unused here."""
    nlb_security_group_mode: str = ""
    """``NLBSecurityGroupMode``: ``Managed`` gives every NLB its own security group."""
    service_overrides: tuple[ServiceOverride, ...] = field(default_factory=tuple)
    """The ``[ServiceOverride "N"]`` sections."""

    @property
    def cluster_id(self) -> str:
        """The configured cluster id (legacy tag wins, as upstream), or an empty string."""
        return self.kubernetes_cluster_tag or self.kubernetes_cluster_id

    @property
    def uses_legacy_tags(self) -> bool:
        return bool(self.kubernetes_cluster_tag)

    @property
    def nlb_security_groups_managed(self) -> bool:
        return self.nlb_security_group_mode == "Managed"

    def endpoint_for(self, client_name: str, region: str) -> ServiceOverride | None:
        """The override for boto3 client ``client_name`` in ``region``, if any."""
        for override in self.service_overrides:
            if client_name in override.client_names and override.region == region:
                return override
        return None


# gcfg key (folded to lower case) -> CloudConfig field and value parser.
_Parser = Callable[[str | None], Any]


def _string(value: str | None) -> str:
    return value or ""


def _boolean(value: str | None) -> bool:
    if value is None:  # a bare "Key" line means true in gcfg
        return True
    folded = value.strip().lower()
    if folded in ("true", "yes", "on", "1"):
        return True
    if folded in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"{value!r} is not a boolean (true/false, yes/no, on/off, 1/0)")


def _integer(value: str | None) -> int:
    try:
        return int(value or "", 0)
    except ValueError:
        raise ValueError(f"{value!r} is not an integer") from None


_GLOBAL_KEYS: dict[str, tuple[str, _Parser]] = {
    "zone": ("zone", _string),
    "region": ("region", _string),
    "vpc": ("vpc", _string),
    "subnetid": ("subnet_id", _string),
    "routetableid": ("route_table_id", _string),
    "rolearn": ("role_arn", _string),
    "sourcearn": ("source_arn", _string),
    "kubernetesclustertag": ("kubernetes_cluster_tag", _string),
    "kubernetesclusterid": ("kubernetes_cluster_id", _string),
    "disablesecuritygroupingress": ("disable_security_group_ingress", _boolean),
    "elbsecuritygroup": ("elb_security_group", _string),
    "clusterserviceloadbalancerhealthprobemode": (
        "cluster_service_load_balancer_health_probe_mode",
        _string,
    ),
    "clusterservicesharedloadbalancerhealthprobeport": (
        "cluster_service_shared_load_balancer_health_probe_port",
        _integer,
    ),
    "clusterservicesharedloadbalancerhealthprobepath": (
        "cluster_service_shared_load_balancer_health_probe_path",
        _string,
    ),
    "supportedtopologyinstancetypepattern": ("supported_topology_instance_type_pattern", _string),
    "nlbsecuritygroupmode": ("nlb_security_group_mode", _string),
}
_OVERRIDE_KEYS = {
    "service": "service",
    "region": "region",
    "url": "url",
    "signingregion": "signing_region",
    "signingmethod": "signing_method",
    "signingname": "signing_name",
}

_SECTION = re.compile(r'^\[\s*([A-Za-z][\w.-]*)\s*(?:"((?:[^"\\]|\\.)*)")?\s*\]$')
_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?$")


def _unquote(raw: str, where: tuple[str, int]) -> str:
    """A gcfg value: quotes group, ``\\`` escapes, ``;``/``#`` start a comment outside quotes."""
    out: list[str] = []
    quoted = False
    index = 0
    while index < len(raw):
        char = raw[index]
        if char == "\\":
            index += 1
            if index >= len(raw):
                raise ConfigError("dangling backslash", path=where[0], line=where[1])
            escaped = raw[index]
            if escaped not in '"\\nt':
                raise ConfigError(f"invalid escape \\{escaped}", path=where[0], line=where[1])
            out.append({"n": "\n", "t": "\t"}.get(escaped, escaped))
        elif char == '"':
            quoted = not quoted
        elif char in ";#" and not quoted:
            break
        else:
            out.append(char)
        index += 1
    if quoted:
        raise ConfigError("unterminated quoted value", path=where[0], line=where[1])
    return "".join(out).strip()


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with their 1-based numbers; a trailing backslash joins the next line."""
    lines: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        start, line = (pending[0], pending[1] + raw) if pending else (number, raw)
        pending = None
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = (start, line[:-1])
            continue
        lines.append((start, line))
    if pending is not None:
        lines.append(pending)
    return lines


@dataclass(frozen=True)
class _Entry:
    """One ``Key = value`` line and the section it sits in (``subsection`` names the
    ``[ServiceOverride "N"]``; ``None`` in ``[Global]``)."""

    section: str
    subsection: str | None
    name: str
    value: str | None
    line: int


def _lex(text: str, path: str) -> tuple[list[_Entry], dict[str, int], list[tuple[str, int]]]:
    """The entries of the known sections, the line of each ``[ServiceOverride "N"]`` header,
    and the headers (with their lines) of the sections upstream's struct lacks, whose keys
    are skipped."""
    entries: list[_Entry] = []
    overrides: dict[str, int] = {}
    unknown_sections: list[tuple[str, int]] = []
    section: tuple[str, str | None] | None = None
    for number, line in _logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped[0] in ";#":
            continue
        if stripped.startswith("["):
            section = _section(stripped, path, number)
            if not section[0]:
                unknown_sections.append((stripped, number))
            elif section[1] is not None:
                overrides.setdefault(section[1], number)
            continue
        match = _KEY.match(stripped)
        if match is None:
            raise ConfigError(f"expected 'Key = value', got {stripped!r}", path=path, line=number)
        if section is None:
            raise ConfigError("key outside of a section", path=path, line=number)
        if not section[0]:
            continue
        raw = match.group(2)
        value = None if raw is None else _unquote(raw, (path, number))
        entries.append(_Entry(section[0], section[1], match.group(1), value, number))
    return entries, overrides, unknown_sections


def _section(header: str, path: str, number: int) -> tuple[str, str | None]:
    """``("global", None)``, ``("serviceoverride", "N")``, or ``("", None)`` for a section
    upstream's struct lacks. ``[ServiceOverride]`` without a name is the override named ""
    (gcfg's reading)."""
    match = _SECTION.match(header)
    if match is None:
        raise ConfigError(f"malformed section header {header!r}", path=path, line=number)
    name, subsection = match.group(1).lower(), match.group(2)
    if name == "global" and subsection is None:
        return name, None
    if name == "serviceoverride":
        return name, subsection or ""
    return "", None


def _family(entry: _Entry, families: list[str] | None, path: str) -> list[str]:
    family = (entry.value or "").strip()
    if not family:
        return []  # a blank value resets a multi-valued variable in gcfg
    if family not in NODE_IP_FAMILIES:
        raise ConfigError(
            f"NodeIPFamilies: {family!r} is not one of {', '.join(NODE_IP_FAMILIES)}",
            path=path,
            line=entry.line,
        )
    return [*(families or []), family]


def parse_cloud_config(text: str, path: str = "<cloud-config>") -> CloudConfig:
    """Parse the INI text of an AWS cloud config; raise ConfigError naming ``path`` and line.
    Once it parsed, each unknown section and key is warned about (so a broken file gives one
    line, its error)."""
    entries, override_lines, unknown_sections = _lex(text, path)
    values: dict[str, Any] = {}
    lines: dict[str, int] = {}
    families: list[str] | None = None
    overrides: dict[str, dict[str, str]] = {key: {} for key in override_lines}
    for entry in entries:
        folded = entry.name.lower()
        if entry.subsection is not None:
            if folded in _OVERRIDE_KEYS:
                overrides[entry.subsection][_OVERRIDE_KEYS[folded]] = (entry.value or "").strip()
        elif folded == "nodeipfamilies":
            families = _family(entry, families, path)
        elif folded in _GLOBAL_KEYS:
            attribute, parser = _GLOBAL_KEYS[folded]
            try:
                values[attribute] = parser(entry.value)
            except ValueError as error:
                raise ConfigError(f"{entry.name}: {error}", path=path, line=entry.line) from None
            lines[attribute] = entry.line
            _check_global(attribute, values[attribute], entry.name, (path, entry.line))
    _check_cluster_ids(values, lines, path)
    if families:
        values["node_ip_families"] = tuple(families)
    values["service_overrides"] = tuple(
        _build_override(key, fields, (path, override_lines[key]))
        for key, fields in overrides.items()
    )
    _check_unique_overrides(values["service_overrides"], path, override_lines)
    _warn_unknown(path, entries, unknown_sections, override_lines)
    return CloudConfig(**values)


def _warn_unknown(
    path: str,
    entries: list[_Entry],
    unknown_sections: list[tuple[str, int]],
    override_lines: dict[str, int],
) -> None:
    """One warning per section and key the parse skipped, as gcfg's non-fatal extra data."""
    warn_unknown_keys(path, "", unknown_sections, (), what="section")
    warn_unknown_keys(
        path,
        "[Global]",
        [(entry.name, entry.line) for entry in entries if entry.subsection is None],
        {*_GLOBAL_KEYS, "nodeipfamilies"},
        fold=str.lower,
    )
    for key in override_lines:
        warn_unknown_keys(
            path,
            f'[ServiceOverride "{key}"]',
            [(entry.name, entry.line) for entry in entries if entry.subsection == key],
            _OVERRIDE_KEYS,
            fold=str.lower,
        )


def _check_global(attribute: str, value: Any, name: str, where: tuple[str, int]) -> None:
    if (
        attribute == "cluster_service_load_balancer_health_probe_mode"
        and value not in HEALTH_PROBE_MODES
    ):
        raise ConfigError(
            f"{name}: {value!r} is not Shared or ServiceNodePort", path=where[0], line=where[1]
        )
    if attribute == "nlb_security_group_mode" and value not in ("", "Managed"):
        raise ConfigError(f"{name}: {value!r} is not Managed", path=where[0], line=where[1])
    if (
        attribute == "cluster_service_shared_load_balancer_health_probe_port"
        and not 0 <= value <= 65535
    ):
        raise ConfigError(f"{name}: {value} is not a port", path=where[0], line=where[1])


def _check_cluster_ids(values: dict[str, Any], lines: dict[str, int], path: str) -> None:
    """Both cluster-id keys must name the same cluster (upstream refuses to start otherwise)."""
    legacy = values.get("kubernetes_cluster_tag", "")
    current = values.get("kubernetes_cluster_id", "")
    if legacy and current and legacy != current:
        raise ConfigError(
            f"KubernetesClusterTag {legacy!r} and KubernetesClusterID {current!r} name different "
            "clusters; set one of them",
            path=path,
            line=max(lines["kubernetes_cluster_tag"], lines["kubernetes_cluster_id"]),
        )


def _build_override(key: str, entries: dict[str, str], where: tuple[str, int]) -> ServiceOverride:
    for attribute, upstream in (
        ("service", "Service"),
        ("region", "Region"),
        ("url", "URL"),
        ("signing_region", "SigningRegion"),
    ):
        if not entries.get(attribute):
            raise ConfigError(
                f"[ServiceOverride {key!r}] is missing {upstream}", path=where[0], line=where[1]
            )
    if not re.match(r"^https?://", entries["url"]):
        raise ConfigError(
            f"[ServiceOverride {key!r}] URL {entries['url']!r} is not an http(s) URL",
            path=where[0],
            line=where[1],
        )
    return ServiceOverride(key=key, **entries)


def _check_unique_overrides(
    overrides: tuple[ServiceOverride, ...], path: str, lines: dict[str, int]
) -> None:
    seen: dict[tuple[str, str], str] = {}
    for override in overrides:
        signature = (_fold(override.service), override.region)
        if signature in seen:
            raise ConfigError(
                f"duplicate ServiceOverride for {override.service} in {override.region} "
                f"(sections {seen[signature]!r} and {override.key!r})",
                path=path,
                line=lines[override.key],
            )
        seen[signature] = override.key


def load_cloud_config(path: Path | None) -> CloudConfig:
    """Read and parse the file at ``path``; no path gives the defaults."""
    if path is None:
        return CloudConfig()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read cloud config: {error.strerror}", path=str(path)) from None
    return parse_cloud_config(text, str(path))
