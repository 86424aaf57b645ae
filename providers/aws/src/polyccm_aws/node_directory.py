"""Which node runs on which instance: the link between Kubernetes node names and EC2 ids.

Routes name their target by node name, EC2 by instance id. The directory learns the pairing from
every node any capability sees (each has a providerID or was looked up by name), and, when an id
is still unknown, lists the nodes once through the Kubernetes client given to ``initialize``
(at most every 30 s). Upstream uses a node informer for the same purpose.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from polyccm.objects import Node

from polyccm_aws.provider_id import InvalidProviderID, instance_id_from_provider_id

log = logging.getLogger(__name__)
NodeLister = Callable[[], Iterable[Mapping[str, Any]]]
RELIST_INTERVAL = 30.0


class NodeDirectory:
    """Node name <-> instance id, learned and occasionally re-listed."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._by_name: dict[str, str] = {}
        self._by_instance: dict[str, str] = {}
        self._lister: NodeLister | None = None
        self._listed_at: float | None = None

    def set_lister(self, lister: NodeLister | None) -> None:
        self._lister = lister

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
            found = self._by_name.get(node_name)
        if found is None and self._relist():
            with self._lock:
                found = self._by_name.get(node_name)
        return found

    def node_of(self, instance_id: str) -> str | None:
        with self._lock:
            found = self._by_instance.get(instance_id)
        if found is None and self._relist():
            with self._lock:
                found = self._by_instance.get(instance_id)
        return found

    def _relist(self) -> bool:
        if self._lister is None:
            return False
        now = self._clock()
        with self._lock:
            if self._listed_at is not None and now - self._listed_at < RELIST_INTERVAL:
                return False
            self._listed_at = now
        try:
            nodes = [Node(raw) for raw in self._lister()]
        except Exception as error:  # noqa: BLE001 - the directory degrades to what it knows
            log.warning("listing nodes to map instances to node names failed: %s", error)
            return False
        for node in nodes:
            self.remember_node(node)
        return True
