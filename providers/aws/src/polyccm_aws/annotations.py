"""The ``service.beta.kubernetes.io/aws-load-balancer-*`` annotations, parsed by pure functions.

Each annotation has the upstream name and is read the way cloud-provider-aws reads it. Where
upstream refuses a value (or AWS would), :class:`~polyccm.errors.InvalidServiceSpec` names the
annotation and the reason, before any cloud call. Where upstream silently falls back to a
default, so does polyccm, with a warning naming the annotation and value (it becomes a Warning
event on the service): a load balancer adopted from cloud-provider-aws must keep working, and
keep getting new nodes, whatever its annotations say.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass

from polyccm.errors import ImplementedElsewhere, InvalidServiceSpec

PREFIX = "service.beta.kubernetes.io/aws-load-balancer-"
TYPE = PREFIX + "type"
INTERNAL = PREFIX + "internal"
SUBNETS = PREFIX + "subnets"
SECURITY_GROUPS = PREFIX + "security-groups"
EXTRA_SECURITY_GROUPS = PREFIX + "extra-security-groups"
SSL_CERT = PREFIX + "ssl-cert"
SSL_PORTS = PREFIX + "ssl-ports"
SSL_NEGOTIATION_POLICY = PREFIX + "ssl-negotiation-policy"
BACKEND_PROTOCOL = PREFIX + "backend-protocol"
PROXY_PROTOCOL = PREFIX + "proxy-protocol"
CONNECTION_DRAINING_ENABLED = PREFIX + "connection-draining-enabled"
CONNECTION_DRAINING_TIMEOUT = PREFIX + "connection-draining-timeout"
CONNECTION_IDLE_TIMEOUT = PREFIX + "connection-idle-timeout"
CROSS_ZONE = PREFIX + "cross-zone-load-balancing-enabled"
ACCESS_LOG_ENABLED = PREFIX + "access-log-enabled"
ACCESS_LOG_EMIT_INTERVAL = PREFIX + "access-log-emit-interval"
ACCESS_LOG_BUCKET = PREFIX + "access-log-s3-bucket-name"
ACCESS_LOG_PREFIX = PREFIX + "access-log-s3-bucket-prefix"
ADDITIONAL_TAGS = PREFIX + "additional-resource-tags"
HC_PROTOCOL = PREFIX + "healthcheck-protocol"
HC_PORT = PREFIX + "healthcheck-port"
HC_PATH = PREFIX + "healthcheck-path"
HC_INTERVAL = PREFIX + "healthcheck-interval"
HC_TIMEOUT = PREFIX + "healthcheck-timeout"
HC_HEALTHY = PREFIX + "healthcheck-healthy-threshold"
HC_UNHEALTHY = PREFIX + "healthcheck-unhealthy-threshold"
TARGET_GROUP_ATTRIBUTES = PREFIX + "target-group-attributes"
EIP_ALLOCATIONS = PREFIX + "eip-allocations"
PRIVATE_IPV4_ADDRESSES = PREFIX + "private-ipv4-addresses"
TARGET_NODE_LABELS = PREFIX + "target-node-labels"
SOURCE_RANGES = "service.beta.kubernetes.io/load-balancer-source-ranges"

KNOWN = frozenset(
    {
        TYPE,
        INTERNAL,
        SUBNETS,
        SECURITY_GROUPS,
        EXTRA_SECURITY_GROUPS,
        SSL_CERT,
        SSL_PORTS,
        SSL_NEGOTIATION_POLICY,
        BACKEND_PROTOCOL,
        PROXY_PROTOCOL,
        CONNECTION_DRAINING_ENABLED,
        CONNECTION_DRAINING_TIMEOUT,
        CONNECTION_IDLE_TIMEOUT,
        CROSS_ZONE,
        ACCESS_LOG_ENABLED,
        ACCESS_LOG_EMIT_INTERVAL,
        ACCESS_LOG_BUCKET,
        ACCESS_LOG_PREFIX,
        ADDITIONAL_TAGS,
        HC_PROTOCOL,
        HC_PORT,
        HC_PATH,
        HC_INTERVAL,
        HC_TIMEOUT,
        HC_HEALTHY,
        HC_UNHEALTHY,
        TARGET_GROUP_ATTRIBUTES,
        EIP_ALLOCATIONS,
        PRIVATE_IPV4_ADDRESSES,
        TARGET_NODE_LABELS,
    }
)
"""Every ``aws-load-balancer-*`` annotation this provider reads (others are reported as unknown)."""

CLASSIC = "classic"
NLB = "nlb"
TRAFFIC_PORT = "traffic-port"
BACKEND_PROTOCOLS = ("http", "https", "ssl", "tcp")
TARGET_GROUP_ATTRIBUTE_KEYS = ("preserve_client_ip.enabled", "proxy_protocol_v2.enabled")

_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def invalid(annotation: str, value: str, reason: str) -> InvalidServiceSpec:
    """The error for a bad annotation value; the message becomes the Warning event text."""
    return InvalidServiceSpec(f"annotation {annotation}={value!r}: {reason}")


def warning(annotation: str, value: str, meaning: str) -> str:
    """The warning for a value read leniently, as upstream reads it."""
    return f"annotation {annotation}={value!r}: {meaning}"


def load_balancer_type(annotations: Mapping[str, str], warnings: list[str]) -> str:
    """``classic`` or ``nlb``; ``nlb-ip`` and ``external`` belong to another controller. Like
    upstream, only exactly ``nlb`` means an NLB: any other value is a classic ELB (warned)."""
    value = annotations.get(TYPE, "")
    if value in ("nlb-ip", "external"):
        raise ImplementedElsewhere(
            f"annotation {TYPE}={value!r}: "
            "this service is managed by the AWS Load Balancer Controller"
        )
    if value == NLB:
        return NLB
    if value:
        warnings.append(
            warning(TYPE, value, "not nlb, nlb-ip or external; a classic ELB, as upstream reads it")
        )
    return CLASSIC


_FALSE_LOOKING = frozenset(_FALSE) | {"no", "No", "NO", "off", "Off", "OFF"}


def is_internal(annotations: Mapping[str, str], warnings: list[str]) -> bool:
    """Upstream's rule: any value but ``false`` (or none) means internal. A value that reads as
    false anywhere else ("False", "0", "no") still means internal, so it is warned."""
    value = annotations.get(INTERNAL, "")
    if value in _FALSE_LOOKING - {"false"}:
        warnings.append(
            warning(
                INTERNAL, value, "an internal load balancer: only 'false' means internet-facing"
            )
        )
    return value not in ("", "false")


def is_external(annotations: Mapping[str, str]) -> bool:
    """True when another controller owns the service's load balancer."""
    return annotations.get(TYPE, "") in ("nlb-ip", "external")


def parse_bool(annotations: Mapping[str, str], name: str) -> bool | None:
    """Go's ``strconv.ParseBool``, as upstream uses; None when absent or empty."""
    value = annotations.get(name, "")
    if value == "":
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise invalid(name, value, "expected true or false")


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
"""What upstream's ``strconv.ParseInt(value, 10, 32)`` accepts."""


def parse_int(
    annotations: Mapping[str, str],
    name: str,
    *,
    low: int,
    high: int,
    unit: str = "",
    blank_is_default: bool = False,
) -> int | None:
    """An integer within ``[low, high]``; None when absent (or empty, with
    ``blank_is_default``: upstream skips empty attribute values but refuses empty health-check
    values)."""
    if name not in annotations or (blank_is_default and annotations[name] == ""):
        return None
    value = annotations[name]
    try:
        number = int(value.strip(), 10)
    except ValueError:
        raise invalid(name, value, "expected an integer") from None
    if not low <= number <= high:
        raise invalid(name, value, f"must be between {low} and {high}{unit}")
    return number


def parse_list(annotations: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    """A comma-separated list (blanks dropped); None when the annotation is absent."""
    if name not in annotations:
        return None
    return tuple(item.strip() for item in annotations[name].split(",") if item.strip())


def parse_key_values(annotations: Mapping[str, str], name: str) -> dict[str, str]:
    """``k1=v1,k2=,k3`` as upstream reads it (a bare key has an empty value)."""
    result: dict[str, str] = {}
    for item in annotations.get(name, "").strip().split(","):
        key, _, value = item.strip().partition("=")
        if key:
            result[key.strip()] = value.strip()
    return result


def parse_security_groups(annotations: Mapping[str, str], name: str) -> tuple[str, ...]:
    groups = parse_list(annotations, name) or ()
    for group in groups:
        if not group.startswith("sg-"):
            raise invalid(name, annotations[name], f"{group!r} is not a security group id (sg-...)")
    return groups


def parse_additional_tags(annotations: Mapping[str, str]) -> dict[str, str]:
    tags = parse_key_values(annotations, ADDITIONAL_TAGS)
    for key, value in tags.items():
        if key.lower().startswith("aws:"):
            raise invalid(
                ADDITIONAL_TAGS,
                annotations[ADDITIONAL_TAGS],
                f"tag key {key!r} uses the reserved aws: prefix",
            )
        if len(key) > 128 or len(value) > 256:
            raise invalid(
                ADDITIONAL_TAGS,
                annotations[ADDITIONAL_TAGS],
                f"tag {key!r} is too long (keys up to 128, values up to 256 characters)",
            )
    return tags


def parse_target_group_attributes(
    annotations: Mapping[str, str], protocols: tuple[str, ...], warnings: list[str]
) -> dict[str, str]:
    """The supported target-group attributes, validated as upstream does. A key given twice
    counts once, with its last value (upstream reads the list into a map)."""
    raw = annotations.get(TARGET_GROUP_ATTRIBUTES, "")
    pairs: dict[str, str] = {}
    for item in raw.strip().split(","):
        key, _, value = item.strip().partition("=")
        key, value = key.strip(), value.strip()
        if not key:
            continue
        if key in pairs:
            warnings.append(
                warning(TARGET_GROUP_ATTRIBUTES, raw, f"{key} is set twice; the last value counts")
            )
        pairs[key] = value
    attributes: dict[str, str] = {}
    for key, value in pairs.items():
        if key not in TARGET_GROUP_ATTRIBUTE_KEYS:
            raise invalid(
                TARGET_GROUP_ATTRIBUTES,
                raw,
                f"attribute {key!r} is not supported (supported: "
                f"{', '.join(TARGET_GROUP_ATTRIBUTE_KEYS)})",
            )
        if value not in ("true", "false"):
            raise invalid(TARGET_GROUP_ATTRIBUTES, raw, f"{key} must be true or false")
        if key == "preserve_client_ip.enabled" and value == "false" and "UDP" in protocols:
            raise invalid(
                TARGET_GROUP_ATTRIBUTES,
                raw,
                "client IP preservation cannot be disabled for UDP ports",
            )
        attributes[key] = value
    return attributes


def parse_source_ranges(
    spec_ranges: tuple[str, ...], annotations: Mapping[str, str]
) -> tuple[str, ...]:
    """``spec.loadBalancerSourceRanges``, else the legacy annotation, else everyone."""
    where = "spec.loadBalancerSourceRanges"
    ranges: tuple[str, ...] = spec_ranges
    if not ranges and annotations.get(SOURCE_RANGES, "").strip():
        where = SOURCE_RANGES
        ranges = tuple(r.strip() for r in annotations[SOURCE_RANGES].split(",") if r.strip())
    if not ranges:
        return ("0.0.0.0/0",)
    normalised: list[str] = []
    for cidr in ranges:
        try:
            normalised.append(str(ipaddress.ip_network(cidr.strip(), strict=False)))
        except ValueError:
            raise InvalidServiceSpec(f"{where}: {cidr!r} is not a CIDR") from None
    return tuple(dict.fromkeys(normalised))


@dataclass(frozen=True)
class SslPorts:
    """The ``ssl-ports`` annotation: which ports get TLS (``None`` sets mean all)."""

    numbers: frozenset[int] = frozenset()
    names: frozenset[str] = frozenset()
    everything: bool = True

    def covers(self, port: int, name: str) -> bool:
        return self.everything or port in self.numbers or name in self.names


# What Go's strconv.Atoi takes: an optional sign and ASCII digits, nothing around them.
_ATOI = re.compile(r"[+-]?[0-9]+")


def parse_ssl_ports(annotations: Mapping[str, str]) -> SslPorts:
    """Upstream's reading, item for item: an item Atoi takes is a port number, anything else
    (blanks and case included) a port name compared exactly."""
    value = annotations.get(SSL_PORTS, "")
    if value in ("", "*"):
        return SslPorts()
    numbers: set[int] = set()
    names: set[str] = set()
    for item in value.split(","):
        if _ATOI.fullmatch(item):
            numbers.add(int(item))
        else:
            names.add(item)
    return SslPorts(frozenset(numbers), frozenset(names), everything=False)


@dataclass(frozen=True)
class ElbAttributes:
    """Classic ELB attributes with upstream's defaults (set on every sync)."""

    access_log_enabled: bool = False
    access_log_emit_interval: int | None = None
    access_log_bucket: str | None = None
    access_log_prefix: str | None = None
    connection_draining_enabled: bool = False
    connection_draining_timeout: int | None = None
    idle_timeout: int = 60
    cross_zone: bool = False

    def to_api(self) -> dict[str, object]:
        access_log: dict[str, object] = {"Enabled": self.access_log_enabled}
        if self.access_log_emit_interval is not None:
            access_log["EmitInterval"] = self.access_log_emit_interval
        if self.access_log_bucket:
            access_log["S3BucketName"] = self.access_log_bucket
        if self.access_log_prefix:
            access_log["S3BucketPrefix"] = self.access_log_prefix
        draining: dict[str, object] = {"Enabled": self.connection_draining_enabled}
        if self.connection_draining_timeout is not None:
            draining["Timeout"] = self.connection_draining_timeout
        return {
            "CrossZoneLoadBalancing": {"Enabled": self.cross_zone},
            "AccessLog": access_log,
            "ConnectionDraining": draining,
            "ConnectionSettings": {"IdleTimeout": self.idle_timeout},
        }


def parse_elb_attributes(annotations: Mapping[str, str]) -> ElbAttributes:
    enabled = parse_bool(annotations, ACCESS_LOG_ENABLED) or False
    bucket = annotations.get(ACCESS_LOG_BUCKET, "") or None
    if enabled and not bucket:
        raise invalid(
            ACCESS_LOG_ENABLED,
            annotations[ACCESS_LOG_ENABLED],
            f"access logs need {ACCESS_LOG_BUCKET}",
        )
    # Any 32-bit integer goes to AWS as upstream sends it; AWS itself takes only 5 or 60.
    interval = parse_int(
        annotations, ACCESS_LOG_EMIT_INTERVAL, low=INT32_MIN, high=INT32_MAX, blank_is_default=True
    )
    return ElbAttributes(
        access_log_enabled=enabled,
        access_log_emit_interval=interval,
        access_log_bucket=bucket,
        access_log_prefix=annotations.get(ACCESS_LOG_PREFIX, "") or None,
        connection_draining_enabled=parse_bool(annotations, CONNECTION_DRAINING_ENABLED) or False,
        connection_draining_timeout=parse_int(
            annotations,
            CONNECTION_DRAINING_TIMEOUT,
            low=1,
            high=3600,
            unit=" seconds",
            blank_is_default=True,
        ),
        idle_timeout=parse_int(
            annotations,
            CONNECTION_IDLE_TIMEOUT,
            low=1,
            high=4000,
            unit=" seconds",
            blank_is_default=True,
        )
        or 60,
        cross_zone=parse_bool(annotations, CROSS_ZONE) or False,
    )


@dataclass(frozen=True)
class NlbAttributes:
    """NLB attributes upstream reconciles (``load_balancing.cross_zone`` and access logs)."""

    cross_zone: bool = False
    access_log_enabled: bool = False
    access_log_bucket: str = ""
    access_log_prefix: str = ""

    def desired(self) -> dict[str, str]:
        wanted = {
            "load_balancing.cross_zone.enabled": str(self.cross_zone).lower(),
            "access_logs.s3.enabled": str(self.access_log_enabled).lower(),
        }
        if self.access_log_enabled:  # the API refuses an empty bucket, so only set it when on
            wanted["access_logs.s3.bucket"] = self.access_log_bucket
            wanted["access_logs.s3.prefix"] = self.access_log_prefix
        return wanted


def parse_nlb_attributes(annotations: Mapping[str, str]) -> NlbAttributes:
    enabled = parse_bool(annotations, ACCESS_LOG_ENABLED) or False
    bucket = annotations.get(ACCESS_LOG_BUCKET, "")
    if enabled and not bucket:
        raise invalid(
            ACCESS_LOG_ENABLED,
            annotations[ACCESS_LOG_ENABLED],
            f"access logs need {ACCESS_LOG_BUCKET}",
        )
    return NlbAttributes(
        cross_zone=parse_bool(annotations, CROSS_ZONE) or False,
        access_log_enabled=enabled,
        access_log_bucket=bucket,
        access_log_prefix=annotations.get(ACCESS_LOG_PREFIX, ""),
    )


def parse_addresses(annotations: Mapping[str, str], name: str) -> tuple[str, ...]:
    values = parse_list(annotations, name) or ()
    for value in values:
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            raise invalid(name, annotations[name], f"{value!r} is not an IPv4 address") from None
    return values


def parse_eip_allocations(annotations: Mapping[str, str]) -> tuple[str, ...]:
    values = parse_list(annotations, EIP_ALLOCATIONS) or ()
    for value in values:
        if not value.startswith("eipalloc-"):
            raise invalid(
                EIP_ALLOCATIONS,
                annotations[EIP_ALLOCATIONS],
                f"{value!r} is not an Elastic IP allocation id (eipalloc-...)",
            )
    return values


ELB_ONLY = (
    PROXY_PROTOCOL,
    CONNECTION_DRAINING_ENABLED,
    CONNECTION_DRAINING_TIMEOUT,
    CONNECTION_IDLE_TIMEOUT,
    ACCESS_LOG_EMIT_INTERVAL,
)
"""Classic-ELB annotations an NLB ignores (upstream ignores them too; we warn)."""
NLB_ONLY = (EIP_ALLOCATIONS, PRIVATE_IPV4_ADDRESSES)
"""NLB annotations a classic ELB ignores (upstream ignores them too; we warn)."""
