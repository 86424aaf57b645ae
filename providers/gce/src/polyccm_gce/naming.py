"""GCE names: providerIDs, zones and regions, and the node <-> instance directory.

A providerID is ``gce://<project>/<zone>/<instance>``. Node and instance names are the same on
GCE as upstream assumes (the kubelet registers the VM's hostname), except where a providerID says
otherwise: the :class:`NodeDirectory` follows the term's shared node cache so a route's next-hop
instance maps back to its node without listing nodes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from polyccm.kube.api import JsonObject
from polyccm.kube.informer import Informer
from polyccm.objects import Node

PREFIX = "gce://"


class InvalidProviderID(ValueError):
    """A providerID that is not ``gce://<project>/<zone>/<instance>``."""


@dataclass(frozen=True, slots=True)
class InstanceRef:
    """Where an instance is: project, zone and name."""

    project: str
    zone: str
    name: str

    @property
    def provider_id(self) -> str:
        return f"{PREFIX}{self.project}/{self.zone}/{self.name}"

    @property
    def path(self) -> str:
        """``zones/<zone>/instances/<name>``: a route's nextHopInstance, a target pool member."""
        return f"zones/{self.zone}/instances/{self.name}"


def parse_provider_id(provider_id: str) -> InstanceRef:
    """The instance a providerID names; :class:`InvalidProviderID` if it is not GCE's form."""
    if not provider_id.startswith(PREFIX):
        raise InvalidProviderID(f"not a GCE providerID: {provider_id!r}")
    parts = provider_id[len(PREFIX) :].split("/")
    if len(parts) != 3 or not all(parts):
        raise InvalidProviderID(f"not gce://<project>/<zone>/<instance>: {provider_id!r}")
    return InstanceRef(*parts)


def region_of(zone: str) -> str:
    """``us-central1`` for ``us-central1-a``."""
    return zone.rsplit("-", 1)[0]


def last(url: str) -> str:
    """The last segment of a URL or partial path (a zone, a machine type, a name)."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def instance_ref(url: str) -> InstanceRef | None:
    """The instance an instance URL or ``[projects/P/]zones/Z/instances/N`` path names."""
    parts = url.rstrip("/").split("/")
    try:
        at = len(parts) - 1 - parts[::-1].index("instances")
    except ValueError:
        return None
    if at < 2 or parts[at - 2] != "zones" or at + 1 >= len(parts):
        return None
    project = parts[parts.index("projects") + 1] if "projects" in parts else ""
    return InstanceRef(project, parts[at - 1], parts[at + 1])


class NodeDirectory:
    """Instance (zone, name) -> node name, from the node cache's providerIDs. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_instance: dict[tuple[str, str], str] = {}
        self._by_node: dict[str, tuple[str, str]] = {}

    def follow(self, nodes: Informer) -> None:
        """Follow a term's node cache (what the last term's taught is forgotten)."""
        with self._lock:
            self._by_instance.clear()
            self._by_node.clear()
        nodes.add_handler(
            on_add=self._on_node,
            on_update=lambda _old, new: self._on_node(new),
            on_delete=self._on_node_deleted,
        )

    def learn(self, nodes: Iterable[Node]) -> NodeDirectory:
        """Know ``nodes`` (a listing, outside any term: the operator commands); itself."""
        for node in nodes:
            self._know(node)
        return self

    def _on_node(self, raw: JsonObject) -> None:
        self._know(Node(raw))

    def _know(self, node: Node) -> None:
        try:
            ref = parse_provider_id(node.provider_id)
        except InvalidProviderID:
            return
        with self._lock:
            old = self._by_node.pop(node.name, None)
            if old is not None:
                self._by_instance.pop(old, None)
            self._by_node[node.name] = (ref.zone, ref.name)
            self._by_instance[(ref.zone, ref.name)] = node.name

    def _on_node_deleted(self, raw: JsonObject) -> None:
        name = Node(raw).name
        with self._lock:
            key = self._by_node.pop(name, None)
            if key is not None and self._by_instance.get(key) == name:
                del self._by_instance[key]

    def node_of(self, zone: str, instance: str) -> str:
        """The node on ``instance`` in ``zone``; the instance name when no node says."""
        return self.node_at(zone, instance) or instance

    def node_at(self, zone: str, instance: str) -> str | None:
        """The node whose providerID names ``instance`` in ``zone``, or None."""
        with self._lock:
            return self._by_instance.get((zone, instance))
