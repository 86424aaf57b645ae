"""The kubelet's provided node IP and the node addresses it selects, by upstream's rules.

A kubelet started with ``--node-ip`` and ``--cloud-provider=external`` writes the IPs to the
``alpha.kubernetes.io/provided-node-ip`` annotation: one IP, or a dual-stack pair of one IPv4
and one IPv6 address. Upstream (``ParseNodeIPAnnotation`` in k8s.io/component-helpers
node/util/ips.go, ``GetNodeAddressesFromNodeIP`` in k8s.io/cloud-provider
node/helpers/address.go) then makes each provided IP the only address of the types it matches
(kubernetes #61921: clouds report secondary IPs, the provided one is the node's): the cloud
addresses equal to a provided IP come first, in the order of the provided IPs, then every
address of a type no provided IP matched, in the cloud's order. A provided IP that is not among
the cloud's addresses is an error, as is an annotation that does not parse.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from polyccm.cloud import NodeAddress

IP = ipaddress.IPv4Address | ipaddress.IPv6Address


class NodeIPMismatch(ValueError):
    """A provided node IP is not one of the instance's cloud addresses."""


def parse_ip(text: str) -> IP | None:
    """``text`` as an IP the way upstream's ``ParseIPSloppy`` reads it, or ``None``.

    Unlike :func:`ipaddress.ip_address`, IPv4 parts with leading zeros are read as decimal
    (``010.1.1.1`` is 10.1.1.1), an IPv6 zone (``%eth0``) is refused, and an IPv4-mapped IPv6
    address is the IPv4 address (Go's ``net.IP`` does not tell them apart)."""
    if "%" in text:
        return None
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        parts = text.split(".")
        if len(parts) != 4 or not all(p.isascii() and p.isdigit() for p in parts):
            return None
        values = [int(p) for p in parts]
        if any(v > 255 for v in values):
            return None
        return ipaddress.IPv4Address(bytes(values))
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def parse_annotation(value: str) -> tuple[IP, ...]:
    """The IPs of a provided-node-ip annotation. Raises :class:`ValueError` unless it is one
    IP or a pair of an IPv4 and an IPv6 address (neither unspecified), comma-separated without
    spaces, as upstream's ``ParseNodeIPAnnotation`` requires."""
    ips: list[IP] = []
    for part in value.split(","):
        ip = parse_ip(part)
        if ip is None:
            raise ValueError(f"failed to parse node IP {value!r}: could not parse {part!r}")
        ips.append(ip)
    if len(ips) > 2 or (len(ips) == 2 and ips[0].version == ips[1].version):
        raise ValueError(
            f"failed to parse node IP {value!r}: "
            "must contain either a single IP or a dual-stack pair of IPs"
        )
    if len(ips) == 2 and any(ip.is_unspecified for ip in ips):
        raise ValueError(
            f"failed to parse node IP {value!r}: "
            "dual-stack node IP cannot include '0.0.0.0' or '::'"
        )
    return tuple(ips)


def select_addresses(value: str, addresses: Sequence[NodeAddress]) -> list[NodeAddress]:
    """``addresses`` as the provided-node-ip annotation ``value`` selects them: those equal to
    a provided IP first (as the cloud spells them), then the addresses of every type no
    provided IP matched. Raises :class:`ValueError` for an unparsable annotation and
    :class:`NodeIPMismatch` for a provided IP that is none of ``addresses``."""
    selected: list[NodeAddress] = []
    matched_types: set[str] = set()
    for wanted in parse_annotation(value):
        matches = [a for a in addresses if parse_ip(a.address) == wanted]
        if not matches:
            raise NodeIPMismatch(
                f"failed to get node address from cloud provider that matches ip: {wanted}"
            )
        selected += matches
        matched_types.update(a.type for a in matches)
    return selected + [a for a in addresses if a.type not in matched_types]
