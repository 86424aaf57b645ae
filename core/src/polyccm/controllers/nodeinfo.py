"""Pure functions that turn cloud instance metadata into node labels, addresses, taints and
conditions.

Nothing here talks to an API: the cloud-node controller feeds these functions a node and the
cloud's answer and writes back what they return, which keeps the rules easy to test and read.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from polyccm.cloud import HOSTNAME, InstanceMetadata, NodeAddress
from polyccm.objects import PROVIDED_NODE_IP_ANNOTATION, Node

LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_INSTANCE_TYPE_BETA = "beta.kubernetes.io/instance-type"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_ZONE_BETA = "failure-domain.beta.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_REGION_BETA = "failure-domain.beta.kubernetes.io/region"

#: GA label -> the beta label it replaces; initialised nodes get GA labels copied from beta ones.
BETA_TO_GA = {
    LABEL_INSTANCE_TYPE_BETA: LABEL_INSTANCE_TYPE,
    LABEL_ZONE_BETA: LABEL_ZONE,
    LABEL_REGION_BETA: LABEL_REGION,
}

NETWORK_UNAVAILABLE = "NetworkUnavailable"

_RESERVED_SUFFIXES = ("kubernetes.io", "k8s.io")


class NodeIPMismatch(ValueError):
    """The node's provided IP is not one of the instance's cloud addresses."""


def is_reserved_label(key: str) -> bool:
    """Whether ``key`` is in the ``kubernetes.io/`` or ``k8s.io/`` namespaces (or a
    subdomain of them), which providers may not set through additional labels."""
    if "/" not in key:
        return False
    prefix = key.split("/", 1)[0]
    return any(prefix == s or prefix.endswith("." + s) for s in _RESERVED_SUFFIXES)


def labels_for(metadata: InstanceMetadata, existing: Mapping[str, str]) -> dict[str, str]:
    """Labels to add to a node being initialised.

    Instance type, zone and region go in both the GA and the beta labels, as upstream does.
    Provider additional labels are added unless reserved or already present on the node.
    Returns only labels whose value would change.
    """
    wanted: dict[str, str] = {}
    if metadata.instance_type:
        wanted[LABEL_INSTANCE_TYPE] = metadata.instance_type
        wanted[LABEL_INSTANCE_TYPE_BETA] = metadata.instance_type
    if metadata.zone:
        wanted[LABEL_ZONE] = metadata.zone
        wanted[LABEL_ZONE_BETA] = metadata.zone
    if metadata.region:
        wanted[LABEL_REGION] = metadata.region
        wanted[LABEL_REGION_BETA] = metadata.region
    for key, value in metadata.additional_labels.items():
        if is_reserved_label(key) or key in existing or key in wanted:
            continue
        wanted[key] = value
    return {key: value for key, value in wanted.items() if existing.get(key) != value}


def missing_ga_labels(existing: Mapping[str, str]) -> dict[str, str]:
    """GA labels to copy from beta labels on an initialised node that lacks them."""
    return {
        ga: existing[beta]
        for beta, ga in BETA_TO_GA.items()
        if beta in existing and ga not in existing
    }


def provided_node_ips(node: Node) -> tuple[str, ...]:
    """The IPs in the ``alpha.kubernetes.io/provided-node-ip`` annotation (comma-separated
    for dual stack), normalised. Raises :class:`ValueError` for an unparsable annotation."""
    raw = node.annotations.get(PROVIDED_NODE_IP_ANNOTATION, "")
    ips = []
    for part in raw.split(","):
        part = part.strip()
        if part:
            try:
                ips.append(str(ipaddress.ip_address(part)))
            except ValueError:
                raise ValueError(
                    f"annotation {PROVIDED_NODE_IP_ANNOTATION} has an invalid IP {part!r}"
                ) from None
    return tuple(ips)


def _same_ip(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return False


def node_addresses(node: Node, cloud_addresses: Sequence[NodeAddress]) -> tuple[NodeAddress, ...]:
    """The addresses to write to ``node.status.addresses``.

    With a provided node IP, every IP in it must be a cloud address of the instance
    (:class:`NodeIPMismatch` otherwise) and the matching addresses come first. When the cloud
    reports no Hostname, the kubelet's Hostname address is kept.
    """
    addresses = list(cloud_addresses)
    wanted_ips = provided_node_ips(node)
    if wanted_ips:
        first: list[NodeAddress] = []
        for ip in wanted_ips:
            matches = [a for a in addresses if _same_ip(a.address, ip)]
            if not matches:
                raise NodeIPMismatch(
                    f"failed to get node address from cloud provider that matches ip: {ip}"
                )
            first.extend(m for m in matches if m not in first)
        addresses = first + [a for a in addresses if a not in first]
    if not any(a.type == HOSTNAME for a in addresses):
        hostname = node.address_of(HOSTNAME)
        if hostname:
            addresses.append(NodeAddress(HOSTNAME, hostname))
    return tuple(_unique(addresses))


def _unique(addresses: Iterable[NodeAddress]) -> list[NodeAddress]:
    seen: set[NodeAddress] = set()
    unique = []
    for address in addresses:
        if address not in seen:
            seen.add(address)
            unique.append(address)
    return unique


def addresses_to_api(addresses: Sequence[NodeAddress]) -> list[dict[str, str]]:
    """The API form of ``addresses``."""
    return [a.to_api() for a in addresses]


def initial_fields(
    node: Node, metadata: InstanceMetadata
) -> tuple[str, tuple[NodeAddress, ...] | None]:
    """The providerID and addresses the cloud-node controller gives ``node`` when it
    initialises it from ``metadata`` (addresses ``None``: the cloud reports none, the node's
    stay). Raises :class:`ValueError` without a providerID (the node stays tainted) and
    :class:`NodeIPMismatch` when the node's provided IP is not the instance's."""
    provider_id = node.provider_id or metadata.provider_id
    if not provider_id:
        raise ValueError("the cloud provider gave no providerID; the node stays tainted")
    addresses = node_addresses(node, metadata.node_addresses) if metadata.node_addresses else None
    return provider_id, addresses


def refreshed_addresses(node: Node, metadata: InstanceMetadata) -> tuple[NodeAddress, ...] | None:
    """The addresses the periodic refresh writes to an initialised ``node``, or ``None`` when
    they would not change (or the cloud reports none)."""
    if not metadata.node_addresses:
        return None
    addresses = node_addresses(node, metadata.node_addresses)
    before = [{"type": t, "address": a} for t, a in node.addresses]
    return addresses if addresses_to_api(addresses) != before else None


def without_taint(taints: Sequence[Mapping[str, Any]], key: str) -> list[dict[str, Any]]:
    """``taints`` minus every taint with ``key``."""
    return [dict(t) for t in taints if t.get("key") != key]


def has_condition(node: Node, condition_type: str) -> bool:
    """Whether the node's status has a condition of ``condition_type`` (any status)."""
    conditions = node.raw.get("status", {}).get("conditions") or ()
    return any(c.get("type") == condition_type for c in conditions)


def no_route_yet(now: str) -> dict[str, str]:
    """``NetworkUnavailable=True/NoRouteCreated``: what upstream gives a node it initialises
    while routes are managed, until the route controller has created the node's routes."""
    return {
        "type": NETWORK_UNAVAILABLE,
        "status": "True",
        "reason": "NoRouteCreated",
        "message": "Node created without a route",
        "lastTransitionTime": now,
        "lastHeartbeatTime": now,
    }
