"""InstancesV2 on Metal devices: lookups by providerID, then by hostname, singly or by pages.

A node's device is ``equinixmetal://<device id>``; ``packet://<id>`` (the Packet CCM's) and a
bare device id are read the same way, whatever the id looks like (upstream asks Metal about
any non-empty one: a 404 is a device gone). A providerID of another scheme is an error, never
"no such instance": the node-lifecycle controller keeps its node, as upstream's error keeps it.
Before the node has a providerID its device is the project's device whose hostname is the node's
name. Type is the plan's slug, region the metro's code, and no zone (upstream's since v3.8.0); a
device without a private or a public IPv4 address is an error, as upstream's. Exists is false
only when the API answers 404 (or the project has no such device); a device in state
``inactive`` (powered off) is shut down. Bulk lookups answer every node of a batch from one
listing of the project's devices (:class:`~polyccm_packet.listing.ProjectDevices`), which the
batches of a burst share: N nodes cost about N/200 requests, however many batches the node
controller makes of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from polyccm.cloud import (
    EXTERNAL_IP,
    HOSTNAME,
    INTERNAL_IP,
    InstanceMetadata,
    InstancesV2,
    NodeAddress,
)
from polyccm.errors import CloudError, InstanceNotFound
from polyccm.objects import PROVIDED_NODE_IP_ANNOTATION, Node

from polyccm_packet.api import MetalClient, NotFound
from polyccm_packet.listing import CURRENT, Listing, ProjectDevices

PREFIX = "equinixmetal://"
LEGACY_PREFIX = "packet://"
#: Below this many nodes a bulk lookup asks device by device (unless a listing is kept).
BULK_THRESHOLD = 3
SCHEMES = ("equinixmetal", "packet")

Device = Mapping[str, Any]


class ForeignProviderId(CloudError):
    """A node's providerID names no Metal device (another cloud's scheme)."""


def device_id_of(provider_id: str) -> str | None:
    """The device id of ``equinixmetal://ID``, ``packet://ID`` (also with three slashes) or a
    bare ``ID``, as upstream's deviceIDFromProviderID reads them; ``None`` for an empty one.
    Raises :class:`ForeignProviderId` for another scheme or an empty id."""
    if not provider_id:
        return None
    parts = provider_id.split("://")
    if len(parts) == 1:
        return provider_id
    device_id = parts[1].lstrip("/") if len(parts) == 2 and parts[0] in SCHEMES else ""
    if not device_id:
        raise ForeignProviderId(
            f"providerID {provider_id!r} names no Equinix Metal device "
            f"(equinixmetal://<device id>); the node is kept"
        )
    return device_id


def device_id_from_provider_id(provider_id: str) -> str | None:
    """:func:`device_id_of`, with ``None`` for a providerID of another scheme too (BGP skips
    such a node)."""
    try:
        return device_id_of(provider_id)
    except ForeignProviderId:
        return None


def provider_id_of(device: Device) -> str:
    return f"{PREFIX}{device['id']}"


def _code(value: Any) -> str:
    return str(value.get("code", "")) if isinstance(value, Mapping) else ""


def check_addresses(device: Device, provided_ip: str = "") -> None:
    """:class:`CloudError` unless ``device`` has a private and a public IPv4 address (the
    node's provided IP, ``alpha.kubernetes.io/provided-node-ip``, counts as private), as
    upstream's ``nodeAddresses`` requires: the node then stays uninitialised, with the reason."""
    families = [ip for ip in device.get("ip_addresses") or () if ip.get("address_family") == 4]
    name = f"device {device.get('id', '')} ({device.get('hostname', '')})"
    if not provided_ip and not any(not ip.get("public") for ip in families):
        raise CloudError(f"{name}: could not get at least one private IPv4 address")
    if not any(ip.get("public") for ip in families):
        raise CloudError(f"{name}: could not get at least one public IPv4 address")


def metadata_of(device: Device) -> InstanceMetadata:
    """What the node controller writes for ``device``: its addresses in upstream's order, the
    hostname first, then each IPv4 address as the device lists it, once. No zone: upstream
    v3.8.0 stopped giving the facility as one."""
    addresses = [NodeAddress(HOSTNAME, str(device.get("hostname", "")))]
    seen = {addresses[0].address}
    for ip in device.get("ip_addresses") or ():
        address = str(ip.get("address") or "")
        if ip.get("address_family") != 4 or not address or address in seen:
            continue
        seen.add(address)
        addresses.append(NodeAddress(EXTERNAL_IP if ip.get("public") else INTERNAL_IP, address))
    plan = device.get("plan")
    return InstanceMetadata(
        provider_id=provider_id_of(device),
        instance_type=str(plan.get("slug", "")) if isinstance(plan, Mapping) else "",
        region=_code(device.get("metro")),
        zone="",
        node_addresses=tuple(addresses),
    )


def is_shut_down(device: Device) -> bool:
    return device.get("state") == "inactive"


class MetalInstances(InstancesV2):
    """The project's devices as the node controllers see them."""

    def __init__(self, api: MetalClient, *, devices: ProjectDevices | None = None) -> None:
        self.api = api
        self.devices = devices or ProjectDevices(api)

    def device(self, node: Node) -> Device:
        """The node's device: by providerID, else by hostname; :class:`InstanceNotFound`, or
        :class:`ForeignProviderId` for another cloud's providerID."""
        device_id = device_id_of(node.provider_id)
        if device_id is not None:
            try:
                found: Device = self.api.call("devices.find_device_by_id", device_id)
            except NotFound:
                raise InstanceNotFound(f"device {device_id} of node {node.name}") from None
            return found
        for device in self.project_devices(hostname=node.name):
            if device.get("hostname") == node.name:
                return dict(device)
        raise InstanceNotFound(f"no device named {node.name}")

    def project_devices(self, **filters: Any) -> list[Device]:
        return list(
            self.api.pages(
                "devices.find_project_devices", "devices", self.api.config.project_id, **filters
            )
        )

    def instance_exists(self, node: Node) -> bool:
        try:
            self.device(node)
        except InstanceNotFound:
            return False
        return True

    def instance_shutdown(self, node: Node) -> bool:
        return is_shut_down(self.device(node))

    def instance_metadata(self, node: Node) -> InstanceMetadata:
        device = self.device(node)
        check_addresses(device, node.annotations.get(PROVIDED_NODE_IP_ANNOTATION, ""))
        return metadata_of(device)

    # -- bulk lookups: one paged listing for many nodes -------------------------------------

    def _bulk(
        self, nodes: Sequence[Node], *, current: bool = False
    ) -> dict[str, Device | Exception]:
        """Each node's device (or InstanceNotFound) from a shared listing: a current one when
        ``current`` is set, else one up to its TTL old; a node an older listing lacks is looked
        for again in a current one, so "not found" is never stale."""
        foreign: dict[str, Device | Exception] = {}
        for node in nodes:
            try:
                device_id_of(node.provider_id)
            except ForeignProviderId as error:
                foreign[node.name] = error
        nodes = [node for node in nodes if node.name not in foreign]
        asked = self.devices.clock() - CURRENT
        listing = self.devices.listing(started_after=asked if current else None)
        found = {node.name: _match(listing, node) for node in nodes}
        missing = [node for node in nodes if found[node.name] is None]
        if missing and listing.started < asked:
            listing = self.devices.listing(started_after=asked)
            found.update((node.name, _match(listing, node)) for node in missing)
        return {
            **{
                name: device if device is not None else InstanceNotFound(f"no device for {name}")
                for name, device in found.items()
            },
            **foreign,
        }

    def instances_metadata(
        self, nodes: Sequence[Node]
    ) -> Mapping[str, InstanceMetadata | Exception]:
        if len(nodes) < BULK_THRESHOLD and self.devices.kept() is None:
            return super().instances_metadata(nodes)
        provided = {n.name: n.annotations.get(PROVIDED_NODE_IP_ANNOTATION, "") for n in nodes}
        return {
            name: device if isinstance(device, Exception) else _checked(device, provided[name])
            for name, device in self._bulk(nodes).items()
        }

    def instances_exist(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        if len(nodes) < BULK_THRESHOLD:
            return super().instances_exist(nodes)
        return {  # not found is False; another cloud's providerID stays an error
            name: d if isinstance(d, ForeignProviderId) else not isinstance(d, Exception)
            for name, d in self._bulk(nodes, current=True).items()
        }

    def instances_shutdown(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        if len(nodes) < BULK_THRESHOLD:
            return super().instances_shutdown(nodes)
        return {
            name: device if isinstance(device, Exception) else is_shut_down(device)
            for name, device in self._bulk(nodes, current=True).items()
        }


def _checked(device: Device, provided_ip: str) -> InstanceMetadata | Exception:
    """The device's metadata, or the :class:`CloudError` of :func:`check_addresses`."""
    try:
        check_addresses(device, provided_ip)
    except CloudError as error:
        return error
    return metadata_of(device)


def _match(listing: Listing, node: Node) -> Device | None:
    """``node``'s device in ``listing``: by providerID, else (none set) by hostname."""
    device_id = device_id_of(node.provider_id)
    if device_id is not None:
        return listing.by_id.get(device_id)
    return listing.by_hostname.get(node.name)
