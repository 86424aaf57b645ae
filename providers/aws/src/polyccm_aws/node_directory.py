"""Which node runs on which instance: the link between Kubernetes node names and EC2 ids.

Routes name their target by node name, EC2 by instance id. The directory follows the shared node
cache the core hands to ``initialize`` at the start of each leadership term: every cached node
with a providerID, then each add, update and delete as the cache sees it, so it never lists nodes
itself (upstream keeps a node informer for the same purpose). It also learns the pairs the
capabilities find on their own: a node looked up by name before it has a providerID.
"""

from __future__ import annotations

import threading

from polyccm.kube.api import JsonObject
from polyccm.kube.informer import Informer
from polyccm.objects import Node

from polyccm_aws.provider_id import InvalidProviderID, instance_id_from_provider_id


class NodeDirectory:
    """Node name <-> instance id, kept from the node cache and from lookups. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, str] = {}
        self._by_instance: dict[str, str] = {}

    def follow(self, nodes: Informer) -> None:
        """Follow a term's node cache instead of the last term's (whose informer has stopped):
        what the directory knew is dropped and learned again from ``nodes``, which replays its
        cached nodes at once and then reports each change."""
        with self._lock:
            self._by_name.clear()
            self._by_instance.clear()
        nodes.add_handler(
            on_add=self._on_node,
            on_update=lambda _old, new: self._on_node(new),
            on_delete=self._on_node_deleted,
        )

    def _on_node(self, raw: JsonObject) -> None:
        self.remember_node(Node(raw))

    def _on_node_deleted(self, raw: JsonObject) -> None:
        name = Node(raw).name
        with self._lock:
            instance_id = self._by_name.pop(name, None)
            if instance_id is not None and self._by_instance.get(instance_id) == name:
                del self._by_instance[instance_id]

    def remember(self, node_name: str, instance_id: str) -> None:
        with self._lock:
            old = self._by_name.get(node_name)
            if old and old != instance_id:
                self._by_instance.pop(old, None)
            self._by_name[node_name] = instance_id
            self._by_instance[instance_id] = node_name

    def remember_node(self, node: Node) -> str | None:
        """Learn from ``node``'s providerID; its instance id, or None."""
        if not node.provider_id:
            return None
        try:
            instance_id = instance_id_from_provider_id(node.provider_id)
        except InvalidProviderID:
            return None
        self.remember(node.name, instance_id)
        return instance_id

    def instance_of(self, node_name: str) -> str | None:
        with self._lock:
            return self._by_name.get(node_name)

    def node_of(self, instance_id: str) -> str | None:
        with self._lock:
            return self._by_instance.get(instance_id)
