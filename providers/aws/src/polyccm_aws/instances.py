"""InstancesV2 for EC2: existence, shutdown state and metadata of the instance behind a node.

A node is looked up by ``spec.providerID`` first, then by a resource-based name (``i-0abc...``),
then by private DNS name (the node name), all through the shared
:class:`~polyccm_aws.instance_store.InstanceStore`. The bulk methods resolve every node with one
batched pass, so initialising 500 nodes costs one DescribeInstances call (three when the nodes
have no providerID yet and are found by name), not 500. A terminated instance does not exist; a
stopped one exists and is shut down. Fargate nodes (``aws:///<zone>/fargate-<ip>``) run on no
instance: they always exist, are never shut down, and their metadata comes from their network
interface.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from polyccm.cloud import (
    EXTERNAL_DNS,
    EXTERNAL_IP,
    HOSTNAME,
    INTERNAL_DNS,
    INTERNAL_IP,
    InstanceMetadata,
    InstancesV2,
    NodeAddress,
)
from polyccm.errors import CloudError, InstanceNotFound
from polyccm.objects import Node

from polyccm_aws.api import AwsApi
from polyccm_aws.instance_store import Instance, InstanceStore, state_of
from polyccm_aws.node_directory import NodeDirectory
from polyccm_aws.provider_id import (
    FARGATE_PREFIX,
    fargate_node_id,
    format_provider_id,
    instance_id_from_node_name,
    instance_id_from_provider_id,
    zone_from_provider_id,
)
from polyccm_aws.topology import LAYER_LABEL_PREFIX, InstanceTopology, layer_labels
from polyccm_aws.zones import Zones

ZONE_ID_LABEL = "topology.k8s.aws/zone-id"


class UnknownZone(CloudError):
    """The instance's zone is not among the zones EC2 lists: its zone id is unknown."""


def ipv4_addresses(instance: Instance) -> list[NodeAddress]:
    """Private IPs of in-use interfaces (primary interface first), the public IP, then the
    private and public DNS names: upstream's order."""
    addresses: list[NodeAddress] = []
    interfaces = sorted(
        instance.get("NetworkInterfaces") or (),
        key=lambda i: (
            i.get("Attachment") is None,
            (i.get("Attachment") or {}).get("DeviceIndex", 0),
        ),
    )
    for interface in interfaces:
        if interface.get("Status") != "in-use":
            continue
        for private in interface.get("PrivateIpAddresses") or ():
            if private.get("PrivateIpAddress"):
                addresses.append(NodeAddress(INTERNAL_IP, str(private["PrivateIpAddress"])))
    if not interfaces and instance.get("PrivateIpAddress"):
        addresses.append(NodeAddress(INTERNAL_IP, str(instance["PrivateIpAddress"])))
    if instance.get("PublicIpAddress"):
        addresses.append(NodeAddress(EXTERNAL_IP, str(instance["PublicIpAddress"])))
    if instance.get("PrivateDnsName"):
        addresses.append(NodeAddress(INTERNAL_DNS, str(instance["PrivateDnsName"])))
        addresses.append(NodeAddress(HOSTNAME, str(instance["PrivateDnsName"])))
    if instance.get("PublicDnsName"):
        addresses.append(NodeAddress(EXTERNAL_DNS, str(instance["PublicDnsName"])))
    return addresses


def ipv6_addresses(instance: Instance) -> list[NodeAddress]:
    """The first IPv6 address of each in-use interface, as InternalIP (upstream)."""
    return [
        NodeAddress(INTERNAL_IP, str(interface["Ipv6Addresses"][0]["Ipv6Address"]))
        for interface in instance.get("NetworkInterfaces") or ()
        if interface.get("Status") == "in-use" and interface.get("Ipv6Addresses")
    ]


def node_addresses(instance: Instance, families: Sequence[str]) -> tuple[NodeAddress, ...]:
    """The instance's addresses for ``NodeIPFamilies``, in family order."""
    addresses: list[NodeAddress] = []
    for family in families:
        addresses.extend(ipv4_addresses(instance) if family == "ipv4" else ipv6_addresses(instance))
    return tuple(addresses)


class AwsInstances(InstancesV2):
    """The InstancesV2 capability backed by EC2."""

    def __init__(
        self,
        store: InstanceStore,
        zones: Zones,
        directory: NodeDirectory,
        *,
        region: str,
        families: Sequence[str] = ("ipv4",),
        api: AwsApi | None = None,
        vpc_id: str = "",
        topology: InstanceTopology | None = None,
    ) -> None:
        self._api = api
        self._topology = topology
        self._vpc_id = vpc_id
        self._store = store
        self._zones = zones
        self._directory = directory
        self._region = region
        self._families = tuple(families)

    # -- lookups ------------------------------------------------------------------------------

    def find(self, nodes: Sequence[Node]) -> dict[str, Instance | Exception | None]:
        """The live instance of each node (None when gone), keyed by node name."""
        ids: dict[str, str] = {}
        names: list[str] = []
        results: dict[str, Instance | Exception | None] = {}
        for node in nodes:
            try:
                instance_id = (
                    instance_id_from_provider_id(node.provider_id)
                    if node.provider_id
                    else instance_id_from_node_name(node.name)
                )
            except ValueError as error:
                results[node.name] = error
                continue
            if instance_id:
                ids[node.name] = instance_id
            else:
                names.append(node.name)
        try:
            by_id = self._store.by_ids(ids.values()) if ids else {}
            by_name = self._store.by_names(names) if names else {}
        except Exception as error:  # noqa: BLE001 - every node of the batch shares the failure
            return {node.name: error for node in nodes if node.name not in results}
        for node_name, instance_id in ids.items():
            instance = by_id.get(instance_id)
            results[node_name] = (
                instance if instance and state_of(instance) != "terminated" else None
            )
        results.update(by_name)
        for node_name, found in results.items():
            if isinstance(found, Mapping):
                self._directory.remember(node_name, str(found["InstanceId"]))
        return results

    def _one(self, node: Node) -> Instance:
        found = self.find([node])[node.name]
        if isinstance(found, Exception):
            raise found
        if found is None:
            raise InstanceNotFound(f"no live EC2 instance for node {node.name!r}")
        return found

    @staticmethod
    def _fargate(nodes: Sequence[Node]) -> dict[str, str]:
        """The Fargate nodes among ``nodes``: node name -> ``fargate-...`` id. They run on no
        EC2 instance: never looked up as one, never called gone for not being one."""
        found: dict[str, str] = {}
        for node in nodes:
            fargate_id = fargate_node_id(node.provider_id) if node.provider_id else None
            if fargate_id is not None:
                found[node.name] = fargate_id
        return found

    # -- InstancesV2 --------------------------------------------------------------------------

    def instance_exists(self, node: Node) -> bool:
        result = self.instances_exist([node])[node.name]
        if isinstance(result, Exception):
            raise result
        return result

    def instance_shutdown(self, node: Node) -> bool:
        """Whether the node's instance is stopped. A gone instance is not shut down, as upstream
        answers: the lifecycle controller decides about gone instances through existence."""
        result = self.instances_shutdown([node])[node.name]
        if isinstance(result, Exception):
            raise result
        return result

    def instance_metadata(self, node: Node) -> InstanceMetadata:
        result = self.instances_metadata([node])[node.name]
        if isinstance(result, Exception):
            raise result
        return result

    def instances_metadata(
        self, nodes: Sequence[Node]
    ) -> Mapping[str, InstanceMetadata | Exception]:
        results: dict[str, InstanceMetadata | Exception] = {}
        fargate = self._fargate(nodes)
        found_all = self.find([n for n in nodes if n.name not in fargate])
        layers = self._layers(nodes, found_all)
        for node in nodes:
            found = found_all.get(node.name)
            if node.name in fargate:
                try:
                    results[node.name] = self.fargate_metadata(node, fargate[node.name])
                except Exception as error:  # noqa: BLE001 - reported per node
                    results[node.name] = error
            elif isinstance(found, Exception):
                results[node.name] = found
            elif found is None:
                results[node.name] = InstanceNotFound(
                    f"no live EC2 instance for node {node.name!r}"
                )
            else:
                try:
                    results[node.name] = self.metadata_of(
                        node, found, layers.get(str(found["InstanceId"]), ())
                    )
                except Exception as error:  # noqa: BLE001 - reported per node
                    results[node.name] = error
        return results

    def _layers(
        self, nodes: Sequence[Node], found: Mapping[str, Instance | Exception | None]
    ) -> Mapping[str, tuple[str, ...] | Exception]:
        """The network-node layers of the found instances whose node has no layer label yet
        (upstream asks only then), asked together."""
        if self._topology is None:
            return {}
        wanted: dict[str, str] = {}
        for node in nodes:
            instance = found.get(node.name)
            if isinstance(instance, Mapping) and LAYER_LABEL_PREFIX + "1" not in node.labels:
                wanted[str(instance["InstanceId"])] = str(instance.get("InstanceType", ""))
        return self._topology.layers(wanted) if wanted else {}

    def instances_exist(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        fargate = self._fargate(nodes)
        found_all = self.find([n for n in nodes if n.name not in fargate])
        results: dict[str, bool | Exception] = {}
        for node in nodes:
            found = found_all.get(node.name)
            if node.name in fargate:
                results[node.name] = True
            else:
                results[node.name] = found if isinstance(found, Exception) else found is not None
        return results

    def instances_shutdown(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        fargate = self._fargate(nodes)
        found_all = self.find([n for n in nodes if n.name not in fargate])
        results: dict[str, bool | Exception] = {}
        for node in nodes:
            found = found_all.get(node.name)
            if isinstance(found, Exception):
                results[node.name] = found
            else:
                results[node.name] = found is not None and state_of(found) == "stopped"
        return results

    # -- metadata -----------------------------------------------------------------------------

    def metadata_of(
        self, node: Node, instance: Instance, layers: tuple[str, ...] | Exception = ()
    ) -> InstanceMetadata:
        """The metadata of ``instance``; ``layers`` are its network nodes (or the error that
        left a type with topology without them: the node's metadata fails, to be retried)."""
        zone = str((instance.get("Placement") or {}).get("AvailabilityZone", ""))
        if isinstance(layers, Exception):
            raise layers
        labels = self._zone_id_label(node, zone, str(instance["InstanceId"]))
        labels.update(layer_labels(layers))
        return InstanceMetadata(
            provider_id=node.provider_id or format_provider_id(zone, str(instance["InstanceId"])),
            instance_type=str(instance.get("InstanceType", "")),
            node_addresses=node_addresses(instance, self._families),
            zone=zone,
            region=self._region,
            additional_labels=labels,
        )

    def fargate_metadata(self, node: Node, fargate_id: str) -> InstanceMetadata:
        """A Fargate node's metadata as upstream's "fargate" variant reads it: from the network
        interface attached with the node's private IP (its zone, its IP and private DNS name),
        no instance type. Without such an interface, from the provider ID's zone and the IP
        the id carries: the node is never taken for a missing EC2 instance."""
        address = fargate_id.removeprefix(FARGATE_PREFIX)
        if address.startswith("ip-"):  # upstream's nodeNameToIPAddress
            address = address.removeprefix("ip-").split(".")[0].replace("-", ".")
        interface = self._fargate_interface(address)
        zone = zone_from_provider_id(node.provider_id)
        addresses = [NodeAddress(INTERNAL_IP, address)]
        if interface is not None:
            zone = str(interface.get("AvailabilityZone") or zone)
            if interface.get("PrivateDnsName"):
                addresses.append(NodeAddress(INTERNAL_DNS, str(interface["PrivateDnsName"])))
        return InstanceMetadata(
            provider_id=node.provider_id,
            instance_type="",
            node_addresses=tuple(addresses),
            zone=zone,
            region=self._region,
            additional_labels=self._zone_id_label(node, zone, fargate_id),
        )

    def _fargate_interface(self, address: str) -> Mapping[str, Any] | None:
        if self._api is None:
            return None
        filters = [
            {"Name": "attachment.status", "Values": ["attached"]},
            {"Name": "private-ip-address", "Values": [address]},
        ]
        if self._vpc_id:
            filters.append({"Name": "vpc-id", "Values": [self._vpc_id]})
        answer = self._api.call("ec2", "describe_network_interfaces", Filters=filters)
        interfaces = answer.get("NetworkInterfaces") or []
        if len(interfaces) > 1:
            raise CloudError(f"{len(interfaces)} network interfaces have address {address}")
        found: Mapping[str, Any] | None = interfaces[0] if interfaces else None
        return found

    def _zone_id_label(self, node: Node, zone: str, what: str) -> dict[str, str]:
        if ZONE_ID_LABEL in node.labels:
            return {}
        details = self._zones.get(zone)
        if details is None:
            # An error, not a node without the label: the node is retried until EC2 lists the
            # zone, as upstream does.
            raise UnknownZone(
                f"could not get the zone id of zone {zone!r} ({what}): EC2 does not list it"
            )
        return {ZONE_ID_LABEL: details.zone_id}
