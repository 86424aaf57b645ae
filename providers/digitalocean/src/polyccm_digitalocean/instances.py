"""InstancesV2 on droplets: lookups by providerID, then by name, singly or a page at a time.

A node's droplet is ``digitalocean://<droplet id>``; before the node has a providerID it is the
droplet of the node's name (a droplet's name is its hostname). Exists is false only when the
API answers 404; a droplet whose status is ``off`` is shut down. Bulk lookups list the
account's droplets 200 to a page once and answer every node from that listing, so N nodes cost
about N/200 requests instead of N. The metadata of the next batches (nodes registering one
batch after another) comes from the same listing while it is under a minute old and holds
every droplet asked about, none of them still ``new``; else a new listing is made. Existence
and shutdown are always read afresh, so a deleted droplet's node goes as soon as upstream's
would.
"""

from __future__ import annotations

import threading
import time
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
from polyccm.errors import InstanceNotFound
from polyccm.objects import Node

from polyccm_digitalocean.api import DigitalOceanApi, NotFound

PREFIX = "digitalocean://"
#: Below this many nodes a bulk lookup asks droplet by droplet (cheaper than listing an
#: account's every droplet).
BULK_THRESHOLD = 3
#: Seconds a listing of every droplet answers metadata lookups for the droplets it holds.
LISTING_AGE = 60.0

Droplet = Mapping[str, Any]


def droplet_id_from_provider_id(provider_id: str) -> int | None:
    """The droplet id of ``digitalocean://123`` (also ``digitalocean:///123``); ``None`` for
    anything else."""
    if not provider_id.startswith(PREFIX):
        return None
    text = provider_id[len(PREFIX) :].lstrip("/")
    return int(text) if text.isdigit() else None


def provider_id_of(droplet: Droplet) -> str:
    return f"{PREFIX}{droplet['id']}"


def metadata_of(droplet: Droplet) -> InstanceMetadata:
    """What the node controller writes for ``droplet``."""
    addresses = [NodeAddress(HOSTNAME, str(droplet["name"]))]
    networks = droplet.get("networks") or {}
    for kind, address_type in (("private", INTERNAL_IP), ("public", EXTERNAL_IP)):
        for network in networks.get("v4") or ():
            if network.get("type") == kind and network.get("ip_address"):
                addresses.append(NodeAddress(address_type, str(network["ip_address"])))
    for network in networks.get("v6") or ():
        if network.get("type") == "public" and network.get("ip_address"):
            addresses.append(NodeAddress(EXTERNAL_IP, str(network["ip_address"])))
    region = droplet.get("region") or {}
    return InstanceMetadata(
        provider_id=provider_id_of(droplet),
        instance_type=str(droplet.get("size_slug") or (droplet.get("size") or {}).get("slug", "")),
        region=str(region.get("slug", "")),
        node_addresses=tuple(addresses),
    )


class DigitalOceanInstances(InstancesV2):
    """Droplets as the node controllers see them."""

    def __init__(self, api: DigitalOceanApi) -> None:
        self.api = api
        self._lock = threading.Lock()
        self._listing: _Listing | None = None

    # -- single lookups ---------------------------------------------------------------------

    def droplet(self, node: Node) -> Droplet:
        """The node's droplet: by providerID, else by name; :class:`InstanceNotFound`."""
        droplet_id = droplet_id_from_provider_id(node.provider_id)
        if droplet_id is not None:
            try:
                body = self.api.call("droplets.get", droplet_id=droplet_id)
            except NotFound:
                raise InstanceNotFound(f"droplet {droplet_id} of node {node.name}") from None
            droplet: Droplet = body["droplet"]
            return droplet
        if node.provider_id:
            raise InstanceNotFound(f"node {node.name}: {node.provider_id} is not a droplet")
        for found in self.api.pages("droplets.list", "droplets", name=node.name):
            if found.get("name") == node.name:
                return dict(found)
        raise InstanceNotFound(f"no droplet named {node.name}")

    def instance_exists(self, node: Node) -> bool:
        try:
            self.droplet(node)
        except InstanceNotFound:
            return False
        return True

    def instance_shutdown(self, node: Node) -> bool:
        return self.droplet(node).get("status") == "off"

    def instance_metadata(self, node: Node) -> InstanceMetadata:
        return metadata_of(self.droplet(node))

    # -- bulk lookups: one listing for many nodes -------------------------------------------

    def _bulk(
        self, nodes: Sequence[Node], *, reuse: bool = False
    ) -> dict[str, Droplet | Exception]:
        """Each node's droplet (or InstanceNotFound) from one listing of every droplet;
        ``reuse``: the last listing, when young enough and holding every node's droplet."""
        with self._lock:
            listing = self._listing if reuse else None
            if listing is not None and (
                time.monotonic() - listing.at > LISTING_AGE
                or any(_unsettled(d) for d in listing.find(nodes).values())
            ):
                listing = None
            if listing is None:
                listing = _Listing(self.api.pages("droplets.list", "droplets"))
                self._listing = listing
        return listing.find(nodes)

    def instances_metadata(
        self, nodes: Sequence[Node]
    ) -> Mapping[str, InstanceMetadata | Exception]:
        if len(nodes) < BULK_THRESHOLD:
            return super().instances_metadata(nodes)
        return {
            name: droplet if isinstance(droplet, Exception) else metadata_of(droplet)
            for name, droplet in self._bulk(nodes, reuse=True).items()
        }

    def instances_exist(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        if len(nodes) < BULK_THRESHOLD:
            return super().instances_exist(nodes)
        # _bulk maps a node to its droplet or to InstanceNotFound, nothing else.
        return {
            name: not isinstance(droplet, Exception) for name, droplet in self._bulk(nodes).items()
        }

    def instances_shutdown(self, nodes: Sequence[Node]) -> Mapping[str, bool | Exception]:
        if len(nodes) < BULK_THRESHOLD:
            return super().instances_shutdown(nodes)
        return {
            name: droplet if isinstance(droplet, Exception) else droplet.get("status") == "off"
            for name, droplet in self._bulk(nodes).items()
        }


def _unsettled(droplet: Droplet | Exception) -> bool:
    """Not in a listing, or still ``new`` there (its addresses may not be given yet)."""
    return isinstance(droplet, Exception) or droplet.get("status") == "new"


class _Listing:
    """Every droplet of one listing, by id and by name, and when it was made."""

    def __init__(self, droplets: Any) -> None:
        self.by_id: dict[int, Droplet] = {}
        self.by_name: dict[str, Droplet] = {}
        for droplet in droplets:
            self.by_id[int(droplet["id"])] = droplet
            self.by_name.setdefault(str(droplet["name"]), droplet)
        self.at = time.monotonic()

    def find(self, nodes: Sequence[Node]) -> dict[str, Droplet | Exception]:
        found: dict[str, Droplet | Exception] = {}
        for node in nodes:
            droplet_id = droplet_id_from_provider_id(node.provider_id)
            droplet = self.by_id.get(droplet_id) if droplet_id is not None else None
            if droplet is None and not node.provider_id:
                droplet = self.by_name.get(node.name)
            found[node.name] = (
                droplet
                if droplet is not None
                else InstanceNotFound(f"no droplet for node {node.name}")
            )
        return found
