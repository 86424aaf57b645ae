"""InstancesV2 for GCE: look instances up by providerID, then by name across the cluster's zones.

Calls go through ``compute_v1.InstancesClient``. A node with a providerID costs one
``instances.get`` (project, zone and name are in it); a node without one costs one
``instances.aggregatedList`` filtered on its name (every zone at once, kept to the cluster's
zones). The bulk methods answer a whole batch with one aggregatedList filtered on all the
batch's names (``name eq "(a|b|...)"``, one per ~500 names so the URL stays short), never one
request per node.

Metadata as cloud-provider-gcp gives it (gce_instances.go ``nodeAddressesFromInstance`` and
``orderAddresses``): providerID ``gce://<project>/<zone>/<name>``, the machine type's last
segment, zone, region (the zone without its letter); per interface its ``networkIP`` as
InternalIP, each access config's ``natIP`` as ExternalIP, then its IPv6 address as InternalIP
(``ipv6Address``, else with ``ipv6AccessType`` EXTERNAL the ``externalIpv6`` of its IPv6 access
config), the IPv4 addresses first unless gce.conf's ``stack-type`` is ``IPV6``; the instance name
as Hostname, last. Upstream sets no additional labels, nor does this. A node name that is a
hostname (``worker-1.c.my-project.internal``) is cut at its first dot for the lookup, as
upstream's ``canonicalizeInstanceName``. An instance that is gone is
:class:`~polyccm.errors.InstanceNotFound`.

Shutdown is upstream's: cloud-provider-gcp does not implement ``InstanceShutdown`` for GCE, so a
stopped (TERMINATED) instance's node is never tainted as shut down; here both shutdown methods
raise :class:`~polyccm.errors.CapabilityNotImplemented`, which the node-lifecycle controller
reads as "running", as upstream's reads ``NotImplemented``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection, Iterable, Mapping, Sequence

from polyccm.cloud import (
    EXTERNAL_IP,
    HOSTNAME,
    INTERNAL_IP,
    InstanceMetadata,
    InstancesV2,
    NodeAddress,
)
from polyccm.errors import CapabilityNotImplemented, InstanceNotFound
from polyccm.objects import Node

from polyccm_gce.api import GceApi, GceApiError
from polyccm_gce.naming import InstanceRef, InvalidProviderID, last, parse_provider_id, region_of
from polyccm_gce.sdk import compute_v1
from polyccm_gce.zones import ManagedZones

#: The fields of an instance :func:`metadata_of` reads (besides its name and zone).
METADATA_FIELDS = (
    "machineType,networkInterfaces(networkIP,accessConfigs/natIP,ipv6Address,ipv6AccessType,"
    "ipv6AccessConfigs/externalIpv6)"
)
#: gce.conf's ``stack-type`` of a single-stack IPv6 cluster (upstream's ``clusterStackIPV6``).
STACK_IPV6 = "IPV6"
#: The longest name alternation one aggregatedList filter carries (about 500 node names;
#: percent-encoded, about 8 KB of URL, where 5,000 names in one would be a 414).
FILTER_CHARACTERS = 6000


def instance_name(name: str) -> str:
    """The instance name a node name stands for: cut at its first dot, as upstream's
    ``canonicalizeInstanceName`` (``worker-1.c.my-project.internal`` is ``worker-1``)."""
    return name.split(".", 1)[0]


class InstanceLookup:
    """Finds the instances behind nodes, one request per node or per batch."""

    def __init__(self, api: GceApi, zones: Collection[str] = ()) -> None:
        self.api = api
        self.managed = zones if isinstance(zones, ManagedZones) else ManagedZones(zones)

    @property
    def zones(self) -> frozenset[str]:
        """The cluster's zones now; empty: every zone of the project."""
        return self.managed.current()

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
            raise InstanceNotFound(
                f"no instance named {instance_name(node.name)} in {self._where()}"
            )
        return found

    def many(
        self, nodes: Sequence[Node], fields: str | None = None
    ) -> Mapping[str, compute_v1.Instance]:
        """The instances of ``nodes`` keyed by node name (absent: not found), from one
        filtered aggregatedList (paged when the batch is large); ``fields``: the instances'
        fields to ask for besides their name and zone (``None``: all of them)."""
        wanted: dict[str, list[Node]] = {}
        for node in nodes:
            ref = _ref(node)
            wanted.setdefault(ref.name if ref else instance_name(node.name), []).append(node)
        if not wanted:
            return {}
        items: list[compute_v1.Instance] = []
        for names in _name_patterns(sorted(wanted)):
            items += self.api.aggregated_items(
                self.api.client(compute_v1.InstancesClient).aggregated_list,
                "instances",
                fields="" if fields is None else ",".join(filter(None, ("name,zone", fields))),
                filter=f'name eq "({names})"',
            )
        zones = self.zones
        found: dict[str, compute_v1.Instance] = {}
        for instance in items:
            zone = last(instance.zone)
            for owner in wanted.get(instance.name, ()):
                ref = _ref(owner)
                if ref is not None and ref.zone != zone:
                    continue
                if ref is None and zones and zone not in zones:
                    continue
                found[owner.name] = instance
        return found

    def _where(self) -> str:
        zones = self.zones
        return f"zones {', '.join(sorted(zones))}" if zones else "any zone"


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
    """The instance ``node``'s providerID names (its name cut at the first dot, as upstream's
    lookups by providerID cut it), or None."""
    if not node.provider_id:
        return None
    try:
        ref = parse_provider_id(node.provider_id)
    except InvalidProviderID:
        return None
    return InstanceRef(ref.project, ref.zone, instance_name(ref.name))


def ipv6_of(nic: compute_v1.NetworkInterface) -> str:
    """The interface's IPv6 address as upstream reads it (``getIPV6AddressFromInterface``):
    its internal ``ipv6Address``, else, when its ``ipv6AccessType`` is EXTERNAL, the
    ``externalIpv6`` of its (last) IPv6 access config; ``""`` for none."""
    address = nic.ipv6_address
    if not address and nic.ipv6_access_type == "EXTERNAL":
        for config in nic.ipv6_access_configs:
            address = config.external_ipv6
    return address


def _is_ipv6(address: str) -> bool:
    if ":" not in address:
        return False  # no IPv6 address is written without one
    try:
        return ipaddress.ip_address(address).version == 6
    except ValueError:
        return False


def ordered(addresses: Iterable[NodeAddress], stack_type: str) -> list[NodeAddress]:
    """``addresses`` with the preferred family's first, each family in its order: IPv6 first
    only when ``stack_type`` is ``IPV6`` (upstream's ``orderAddresses``)."""
    listed = list(addresses)
    prefer_ipv6 = stack_type == STACK_IPV6
    first = [a for a in listed if _is_ipv6(a.address) == prefer_ipv6]
    return first + [a for a in listed if _is_ipv6(a.address) != prefer_ipv6]


def metadata_of(
    project: str, instance: compute_v1.Instance, stack_type: str = ""
) -> InstanceMetadata:
    """The node metadata of an instance as the API shows it, addresses ordered for
    ``stack_type`` (gce.conf's ``stack-type``)."""
    # The protobuf message under the SDK's wrapper: the same fields and defaults, read without
    # the wrapper's conversions (most of what a batch of a hundred instances cost).
    message = compute_v1.Instance.pb(instance)
    zone = last(message.zone)
    name = message.name
    addresses: list[NodeAddress] = []
    for nic in message.network_interfaces:
        if nic.network_i_p:
            addresses.append(NodeAddress(INTERNAL_IP, nic.network_i_p))
        for access in nic.access_configs:
            if access.nat_i_p:
                addresses.append(NodeAddress(EXTERNAL_IP, access.nat_i_p))
        ipv6 = ipv6_of(nic)
        if ipv6:  # upstream gives an interface's IPv6 address, external or not, as InternalIP
            addresses.append(NodeAddress(INTERNAL_IP, ipv6))
    return InstanceMetadata(
        provider_id=InstanceRef(project, zone, name).provider_id,
        instance_type=last(message.machine_type),
        node_addresses=(*ordered(addresses, stack_type), NodeAddress(HOSTNAME, name)),
        zone=zone,
        region=region_of(zone),
    )


class GceInstances(InstancesV2):
    """The InstancesV2 capability on one :class:`InstanceLookup`; ``stack_type`` is gce.conf's
    ``stack-type`` (the order of the addresses)."""

    def __init__(self, lookup: InstanceLookup, stack_type: str = "") -> None:
        self.lookup = lookup
        self.stack_type = stack_type

    def instance_exists(self, node: Node) -> bool:
        try:
            self.lookup.one(node)
        except InstanceNotFound:
            return False
        return True

    def instance_shutdown(self, node: Node) -> bool:
        # cloud-provider-gcp gce_instances.go InstanceShutdown: cloudprovider.NotImplemented.
        raise CapabilityNotImplemented("GCE does not tell shut-down instances (as upstream)")

    def instance_metadata(self, node: Node) -> InstanceMetadata:
        return metadata_of(self.lookup.api.project, self.lookup.one(node), self.stack_type)

    def instances_metadata(
        self, nodes: Sequence[Node]
    ) -> Mapping[str, InstanceMetadata | Exception]:
        found = self.lookup.many(nodes, METADATA_FIELDS)
        project = self.lookup.api.project
        return {
            node.name: metadata_of(project, found[node.name], self.stack_type)
            if node.name in found
            else InstanceNotFound(f"no instance for node {node.name}")
            for node in nodes
        }

    def instances_exist(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        found = self.lookup.many(nodes, "")
        return {node.name: node.name in found for node in nodes}

    def instances_shutdown(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        raise CapabilityNotImplemented("GCE does not tell shut-down instances (as upstream)")
