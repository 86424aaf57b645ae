"""Pure functions that turn cloud instance metadata into node labels, addresses and taints.

Nothing here talks to an API: the cloud-node controller feeds these functions a node and the
cloud's answer and writes back what they return, which keeps the rules easy to test and read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from polyccm.cloud import HOSTNAME, InstanceMetadata, NodeAddress
from polyccm.controllers import nodeip
from polyccm.objects import PROVIDED_NODE_IP_ANNOTATION, Node

LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_INSTANCE_TYPE_BETA = "beta.kubernetes.io/instance-type"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_ZONE_BETA = "failure-domain.beta.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_REGION_BETA = "failure-domain.beta.kubernetes.io/region"

#: beta label -> the GA label it became; an initialised node's GA labels follow its beta ones.
BETA_TO_GA = {
    LABEL_INSTANCE_TYPE_BETA: LABEL_INSTANCE_TYPE,
    LABEL_ZONE_BETA: LABEL_ZONE,
    LABEL_REGION_BETA: LABEL_REGION,
}

_RESERVED_SUFFIXES = ("kubernetes.io", "k8s.io")


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


def ga_label_fixes(existing: Mapping[str, str]) -> dict[str, str]:
    """GA labels to write on an initialised node so that each matches its beta label, the
    source of truth as upstream's ``labelReconcileInfo`` has it: a missing GA label is added
    and one whose value differs is corrected. A node without the beta label is left alone."""
    return {
        ga: existing[beta]
        for beta, ga in BETA_TO_GA.items()
        if beta in existing and existing.get(ga) != existing[beta]
    }


def node_addresses(node: Node, cloud_addresses: Sequence[NodeAddress]) -> tuple[NodeAddress, ...]:
    """The addresses to write to ``node.status.addresses``, in upstream's steps: the cloud's
    addresses, plus the kubelet's Hostname addresses when the cloud reports no Hostname, then
    narrowed by the node's provided IP (:func:`polyccm.controllers.nodeip.select_addresses`,
    whose :class:`ValueError` it raises)."""
    addresses = list(cloud_addresses)
    if not any(a.type == HOSTNAME for a in addresses):
        addresses += [NodeAddress(t, a) for t, a in node.addresses if t == HOSTNAME]
    provided = node.annotations.get(PROVIDED_NODE_IP_ANNOTATION)
    if provided is not None:
        addresses = nodeip.select_addresses(provided, addresses)
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
    stay). Raises :class:`ValueError` (the node then stays tainted) without a providerID, with
    an unparsable provided IP, or with a provided IP that is none of the cloud's addresses
    (:class:`~polyccm.controllers.nodeip.NodeIPMismatch`; even when the cloud reports no
    addresses at all, as upstream checks it)."""
    provider_id = node.provider_id or metadata.provider_id
    if not provider_id:
        raise ValueError("the cloud provider gave no providerID; the node stays tainted")
    provided = node.annotations.get(PROVIDED_NODE_IP_ANNOTATION)
    if provided is not None:
        nodeip.select_addresses(provided, metadata.node_addresses)
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
