"""InstancesV2 for GCE: look instances up by providerID, then by name across the cluster's zones.

Calls go through ``compute_v1.InstancesClient``. A node with a providerID costs one
``instances.get`` (project, zone and name are in it); a node without one costs one
``instances.aggregatedList`` filtered on its name (every zone at once, kept to the cluster's
zones). The bulk methods answer a whole batch with one aggregatedList filtered on all the
batch's names (``name eq "(a|b|...)"``, one per ~500 names so the URL stays short), never one
request per node.

Metadata as cloud-provider-gcp gives it: providerID ``gce://<project>/<zone>/<name>``, the
machine type's last segment, zone, region (the zone without its letter), each interface's
``networkIP`` as InternalIP and access-config ``natIP`` as ExternalIP, and the instance name as
Hostname. Upstream sets no additional labels, nor does this. An instance that is gone is
:class:`~polyccm.errors.InstanceNotFound`; TERMINATED (GCE's stopped), STOPPED and SUSPENDED are
shut down.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from polyccm.cloud import (
    EXTERNAL_IP,
    HOSTNAME,
    INTERNAL_IP,
    InstanceMetadata,
    InstancesV2,
    NodeAddress,
)
from polyccm.errors import InstanceNotFound
from polyccm.objects import Node

from polyccm_gce.api import GceApi, GceApiError
from polyccm_gce.naming import InstanceRef, InvalidProviderID, last, parse_provider_id, region_of
from polyccm_gce.sdk import compute_v1

SHUT_DOWN = frozenset({"TERMINATED", "STOPPED", "SUSPENDED"})
#: The longest name alternation one aggregatedList filter carries (about 500 node names;
#: percent-encoded, about 8 KB of URL, where 5,000 names in one would be a 414).
FILTER_CHARACTERS = 6000


class InstanceLookup:
    """Finds the instances behind nodes, one request per node or per batch."""

    def __init__(self, api: GceApi, zones: Collection[str] = ()) -> None:
        self.api = api
        self.zones = frozenset(zones)
        """The cluster's zones; empty: every zone of the project."""

    def one(self, node: Node) -> compute_v1.Instance:
        """The instance of ``node``; :class:`InstanceNotFound` when there is none."""
        ref = _ref(node)
        if ref is not None:
            try:
                instances = self.api.client(compute_v1.InstancesClient)
                return self.api.invoke(
                    instances.get, project=self.api.project, zone=ref.zone, instance=ref.name
                )
            except GceApiError as error:
                if error.not_found:
                    raise InstanceNotFound(f"instance {ref.provider_id} not found") from None
                raise
        found = self.many([node]).get(node.name)
        if found is None:
            raise InstanceNotFound(f"no instance named {node.name} in {self._where()}")
        return found

    def many(self, nodes: Sequence[Node]) -> Mapping[str, compute_v1.Instance]:
        """The instances of ``nodes`` keyed by node name (absent: not found), from one
        filtered aggregatedList (paged when the batch is large)."""
        wanted: dict[str, Node] = {}
        for node in nodes:
            ref = _ref(node)
            wanted[ref.name if ref else node.name] = node
        if not wanted:
            return {}
        items: list[compute_v1.Instance] = []
        for names in _name_patterns(sorted(wanted)):
            items += self.api.aggregated_items(
                self.api.client(compute_v1.InstancesClient).aggregated_list,
                "instances",
                filter=f'name eq "({names})"',
            )
        found: dict[str, compute_v1.Instance] = {}
        for instance in items:
            zone = last(instance.zone)
            owner = wanted.get(instance.name)
            if owner is None:
                continue
            ref = _ref(owner)
            if ref is not None and ref.zone != zone:
                continue
            if ref is None and self.zones and zone not in self.zones:
                continue
            found[owner.name] = instance
        return found

    def _where(self) -> str:
        return f"zones {', '.join(sorted(self.zones))}" if self.zones else "any zone"


def _name_patterns(names: Sequence[str]) -> list[str]:
    """``a|b|...`` alternations of the escaped ``names``, each at most
    :data:`FILTER_CHARACTERS` long, so no request's URL outgrows what the API takes."""
    patterns: list[str] = []
    current: list[str] = []
    length = 0
    for name in names:
        escaped = re.escape(name)
        if current and length + len(escaped) + 1 > FILTER_CHARACTERS:
            patterns.append("|".join(current))
            current, length = [], 0
        current.append(escaped)
        length += len(escaped) + 1
    if current:
        patterns.append("|".join(current))
    return patterns


def _ref(node: Node) -> InstanceRef | None:
    if not node.provider_id:
        return None
    try:
        return parse_provider_id(node.provider_id)
    except InvalidProviderID:
        return None


def metadata_of(project: str, instance: compute_v1.Instance) -> InstanceMetadata:
    """The node metadata of an instance as the API shows it."""
    zone = last(instance.zone)
    name = instance.name
    addresses: list[NodeAddress] = []
    for nic in instance.network_interfaces:
        if nic.network_i_p:
            addresses.append(NodeAddress(INTERNAL_IP, nic.network_i_p))
    for nic in instance.network_interfaces:
        for access in nic.access_configs:
            if access.nat_i_p:
                addresses.append(NodeAddress(EXTERNAL_IP, access.nat_i_p))
    addresses.append(NodeAddress(HOSTNAME, name))
    return InstanceMetadata(
        provider_id=InstanceRef(project, zone, name).provider_id,
        instance_type=last(instance.machine_type),
        node_addresses=tuple(addresses),
        zone=zone,
        region=region_of(zone),
    )


class GceInstances(InstancesV2):
    """The InstancesV2 capability on one :class:`InstanceLookup`."""

    def __init__(self, lookup: InstanceLookup) -> None:
        self.lookup = lookup

    def instance_exists(self, node: Node) -> bool:
        try:
            self.lookup.one(node)
        except InstanceNotFound:
            return False
        return True

    def instance_shutdown(self, node: Node) -> bool:
        return self.lookup.one(node).status in SHUT_DOWN

    def instance_metadata(self, node: Node) -> InstanceMetadata:
        return metadata_of(self.lookup.api.project, self.lookup.one(node))

    def instances_metadata(
        self, nodes: Sequence[Node]
    ) -> Mapping[str, InstanceMetadata | Exception]:
        found = self.lookup.many(nodes)
        project = self.lookup.api.project
        return {
            node.name: metadata_of(project, found[node.name])
            if node.name in found
            else InstanceNotFound(f"no instance for node {node.name}")
            for node in nodes
        }

    def instances_exist(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        found = self.lookup.many(nodes)
        return {node.name: node.name in found for node in nodes}

    def instances_shutdown(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        found = self.lookup.many(nodes)
        return {
            node.name: found[node.name].status in SHUT_DOWN
            if node.name in found
            else InstanceNotFound(f"no instance for node {node.name}")
            for node in nodes
        }
