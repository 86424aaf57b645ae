"""The AWS cloud config: upstream's INI (gcfg) file, parsed by a pure function.

An existing ``cloud.conf`` written for cloud-provider-aws works unchanged: the ``[Global]`` keys and
``[ServiceOverride "N"]`` sections have the same names and meaning, names are case-insensitive, a
bare boolean key means true, and ``NodeIPFamilies`` may be repeated. As upstream (gcfg read
through ``gcfg.FatalOnly``), an unknown section or key does not stop the start: it is ignored,
with one warning naming it (:func:`polyccm.configkeys.warn_unknown_keys`); a section or a
single-valued key given twice is read as gcfg reads it (one section; the last value wins), with
a warning naming both lines (:func:`polyccm.configkeys.warn_repeated`). Every error (the syntax,
a value) is a :class:`~polyccm.errors.ConfigError` carrying the file and line; values that
cannot name anything in AWS (a region that is no host label, a ``RoleARN`` that is no IAM role
ARN, a cluster id too long for the tag key it goes into) are errors too. The file is read by
:func:`polyccm.inputs.read_text`; an echoed value is cut (:func:`polyccm.inputs.quoted`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyccm import inputs
from polyccm.configkeys import warn_repeated, warn_unknown_keys
from polyccm.errors import ConfigError
from polyccm.inputs import quoted
from polyccm.urls import plain_url

from polyccm_aws.provider_id import region_from_zone

HEALTH_PROBE_MODES = ("", "Shared", "ServiceNodePort")
NODE_IP_FAMILIES = ("ipv4", "ipv6")
#: The longest cluster id: it goes into the tag key ``kubernetes.io/cluster/<id>`` (upstream
#: tags.go buildTags, for the legacy tag too), and an EC2 tag key is at most 128 characters.
MAX_CLUSTER_ID = 128 - len("kubernetes.io/cluster/")
#: A region as botocore takes one (``utils.validate_region_name``: a host label, not only
#: digits); any other is refused when the first client is made.
_REGION = re.compile(r"^(?![0-9]+$)(?!-)[a-zA-Z0-9-]{1,63}(?<!-)$")
#: An IAM role's ARN (``arn:aws:iam::123456789012:role/path/name``, in any partition); STS
#: takes at most 2048 characters.
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\x21-\x7e]+$")
#: Any ARN: ``arn:partition:service:region:account:resource`` (region and account may be empty).
_ARN = re.compile(r"^arn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:[0-9]*:[\x21-\x7e]+$")
_MAX_ARN = 2048
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


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
    """``SigningMethod``: read and unused, as upstream (cloud-provider-aws v1.37.1 only
    declares it, config/config.go:131)."""
    signing_name: str = ""
    """``SigningName``: the service name requests are signed for (SigV4), when not empty."""

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
    """``Zone``: its region overrides ``Region``, as upstream."""
    region: str = ""
    """``Region``: the AWS region (else the boto3 default region, else the instance metadata
    service's)."""
    vpc: str = ""
    """``VPC``: the cluster VPC (else this instance's, from the instance metadata service, else
    the VPC of the backend instances or tagged subnets)."""
    subnet_id: str = ""
    """``SubnetID``: fallback subnet for load balancers when no subnet is tagged (else this
    instance's)."""
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
    """``SupportedTopologyInstanceTypePattern``: instance types whose topology must answer
    (:mod:`polyccm_aws.topology`; upstream's default pattern when empty)."""
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
        """The override for boto3 client ``client_name`` in ``region``, if any. One naming
        that client alone beats SDK v1's name shared by ELB and ELBv2: upstream (SDK v2)
        gives ``Elastic Load Balancing v2`` to ELBv2 whatever the ELB override says."""
        matches = [
            override
            for override in self.service_overrides
            if client_name in override.client_names and override.region == region
        ]
        return min(matches, key=lambda override: len(override.client_names), default=None)


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
    raise ValueError(f"{quoted(value)} is not a boolean (true/false, yes/no, on/off, 1/0)")


def _integer(value: str | None) -> int:
    try:
        return int(value or "", 0)
    except ValueError:
        raise ValueError(f"{quoted(value or '')} is not an integer") from None


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


@dataclass
class _Lexed:
    """A file cut into entries."""

    entries: list[_Entry] = field(default_factory=list)
    """The ``Key = value`` lines of the known sections."""
    overrides: dict[str, int] = field(default_factory=dict)
    """The first line of each ``[ServiceOverride "N"]`` header."""
    unknown_sections: list[tuple[str, int]] = field(default_factory=list)
    """The headers (with their lines) of the sections upstream's struct lacks; their keys are
    skipped."""
    repeated_sections: list[tuple[str, int, int]] = field(default_factory=list)
    """Each known header given again: as written, its first line, this line."""


def _lex(text: str, path: str) -> _Lexed:
    """The entries and sections of ``text``; :class:`ConfigError` for a malformed line."""
    lexed = _Lexed()
    first_lines: dict[tuple[str, str | None], int] = {}
    section: tuple[str, str | None] | None = None
    for number, line in _logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped[0] in ";#":
            continue
        if stripped.startswith("["):
            section = _section(stripped, path, number)
            if not section[0]:
                lexed.unknown_sections.append((stripped, number))
                continue
            if section in first_lines:
                lexed.repeated_sections.append((stripped, first_lines[section], number))
            first_lines.setdefault(section, number)
            if section[1] is not None:
                lexed.overrides.setdefault(section[1], number)
            continue
        match = _KEY.match(stripped)
        if match is None:
            raise ConfigError(
                f"expected 'Key = value', got {quoted(stripped)}", path=path, line=number
            )
        if section is None:
            raise ConfigError("key outside of a section", path=path, line=number)
        if not section[0]:
            continue
        raw = match.group(2)
        value = None if raw is None else _unquote(raw, (path, number))
        lexed.entries.append(_Entry(section[0], section[1], match.group(1), value, number))
    return lexed


def _section(header: str, path: str, number: int) -> tuple[str, str | None]:
    """``("global", None)``, ``("serviceoverride", "N")``, or ``("", None)`` for a section
    upstream's struct lacks. ``[ServiceOverride]`` without a name is the override named ""
    (gcfg's reading)."""
    match = _SECTION.match(header)
    if match is None:
        raise ConfigError(f"malformed section header {quoted(header)}", path=path, line=number)
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
            f"NodeIPFamilies: {quoted(family)} is not one of {', '.join(NODE_IP_FAMILIES)}",
            path=path,
            line=entry.line,
        )
    return [*(families or []), family]


def parse_cloud_config(text: str, path: str = "<cloud-config>") -> CloudConfig:
    """Parse the INI text of an AWS cloud config; raise ConfigError naming ``path`` and line.
    Once it parsed, each unknown section and key, and each one given twice, is warned about
    (so a broken file gives one line, its error)."""
    lexed = _lex(text, path)
    override_lines = lexed.overrides
    values: dict[str, Any] = {}
    lines: dict[str, int] = {}
    families: list[str] | None = None
    overrides: dict[str, dict[str, str]] = {key: {} for key in override_lines}
    first_lines: dict[tuple[str | None, str], int] = {}
    repeated_keys: list[tuple[_Entry, int]] = []
    for entry in lexed.entries:
        folded = entry.name.lower()
        known = _OVERRIDE_KEYS if entry.subsection is not None else _GLOBAL_KEYS
        if folded in known:  # single-valued: gcfg sets it again, the last value wins
            place = (entry.subsection, folded)
            if place in first_lines:
                repeated_keys.append((entry, first_lines[place]))
            first_lines.setdefault(place, entry.line)
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
    _warn_unknown(path, lexed.entries, lexed.unknown_sections, override_lines)
    warn_repeated(path, "", lexed.repeated_sections, what="section")
    for entry, first in repeated_keys:
        section = (
            "[Global]" if entry.subsection is None else f'[ServiceOverride "{entry.subsection}"]'
        )
        warn_repeated(path, section, [(entry.name, first, entry.line)])
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
    problem = _global_problem(attribute, value)
    if problem:
        raise ConfigError(f"{name}: {problem}", path=where[0], line=where[1])


def _global_problem(attribute: str, value: Any) -> str:
    """Why ``value`` cannot be the ``[Global]`` key ``attribute``'s, or ``""``."""
    if attribute == "cluster_service_load_balancer_health_probe_mode":
        return (
            ""
            if value in HEALTH_PROBE_MODES
            else f"{quoted(value)} is not Shared or ServiceNodePort"
        )
    if attribute == "nlb_security_group_mode":
        return "" if value in ("", "Managed") else f"{quoted(value)} is not Managed"
    if attribute == "cluster_service_shared_load_balancer_health_probe_port":
        return "" if 0 <= value <= 65535 else f"{value} is not a port"
    if not value:
        return ""
    if attribute == "region" and not _REGION.match(value):
        return (
            f"{quoted(value)} is no AWS region (a name like us-east-1: letters, digits and "
            "hyphens, at most 63)"
        )
    if attribute == "zone" and not region_from_zone(value):
        return f"{quoted(value)} is no availability zone (a name like us-east-1a)"
    if attribute == "role_arn" and (len(value) > _MAX_ARN or not _ROLE_ARN.match(value)):
        return f"{quoted(value)} is no IAM role ARN (arn:aws:iam::<12-digit account>:role/<name>)"
    if attribute == "source_arn" and (len(value) > _MAX_ARN or not _ARN.match(value)):
        return f"{quoted(value)} is no ARN (arn:<partition>:<service>:<region>:<account>:<id>)"
    if attribute in ("kubernetes_cluster_id", "kubernetes_cluster_tag"):
        if len(value) > MAX_CLUSTER_ID:
            return (
                f"{quoted(value)} is longer than {MAX_CLUSTER_ID} characters: the cluster id goes "
                "into the tag key kubernetes.io/cluster/<id>, and AWS tag keys are at most 128"
            )
        if _CONTROL.search(value):
            return f"{quoted(value)} holds control characters, which no AWS tag may"
    return ""


def _check_cluster_ids(values: dict[str, Any], lines: dict[str, int], path: str) -> None:
    """Both cluster-id keys must name the same cluster (upstream refuses to start otherwise)."""
    legacy = values.get("kubernetes_cluster_tag", "")
    current = values.get("kubernetes_cluster_id", "")
    if legacy and current and legacy != current:
        raise ConfigError(
            f"KubernetesClusterTag {quoted(legacy)} and KubernetesClusterID {quoted(current)} "
            "name different "
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
                f"[ServiceOverride {quoted(key)}] is missing {upstream}",
                path=where[0],
                line=where[1],
            )
    try:  # requests are signed (SigV4), no secret is sent: plain http goes anywhere
        plain_url(entries["url"], f"[ServiceOverride {quoted(key)}] URL")
    except ConfigError as error:
        raise ConfigError(str(error), path=where[0], line=where[1]) from None
    return ServiceOverride(key=key, **entries)


def _check_unique_overrides(
    overrides: tuple[ServiceOverride, ...], path: str, lines: dict[str, int]
) -> None:
    seen: dict[tuple[str, str], str] = {}
    for override in overrides:
        signature = (_fold(override.service), override.region)
        if signature in seen:
            raise ConfigError(
                f"duplicate ServiceOverride for {quoted(override.service)} in "
                f"{quoted(override.region)} (sections {quoted(seen[signature])} and "
                f"{quoted(override.key)})",
                path=path,
                line=lines[override.key],
            )
        seen[signature] = override.key


def load_cloud_config(path: Path | None) -> CloudConfig:
    """Read and parse the file at ``path``; no path gives the defaults."""
    if path is None:
        return CloudConfig()
    text = inputs.read_text(path, what="cloud config")
    return parse_cloud_config(text, inputs.cut(str(path), 200))
