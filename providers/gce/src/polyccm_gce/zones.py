"""The cluster's zones (upstream's ``managedZones``): where a node without a providerID is
looked for by name.

As cloud-provider-gcp (gce.go ``GenerateCloudConfig``, ``CreateGCECloud``): the local zone
alone, or, with ``multizone`` or ``regional`` in gce.conf (both mean the same here), every zone
of the local zone's region, listed with ``zones.list`` at start. Such a list is dynamic: when a
node appears labelled with a zone it does not hold (``topology.kubernetes.io/zone``, else the
beta ``failure-domain`` label, as upstream's ``getZone``), the region's zones are listed again
(upstream's ``updateNodeZones`` and ``refreshManagedZones``), on a node's addition or a change
of its zone, not on its other updates; a failed refresh is logged and the old list kept.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING

from polyccm.objects import Node

if TYPE_CHECKING:
    from polyccm.kube.api import JsonObject
    from polyccm.kube.informer import Informer

log = logging.getLogger(__name__)

ZONE_LABEL = "topology.kubernetes.io/zone"
BETA_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"


def node_zone(node: Node) -> str:
    """The zone a node's labels name (upstream's ``getZone``), or ``""``."""
    labels = node.labels
    if ZONE_LABEL in labels:
        return labels[ZONE_LABEL]
    return labels.get(BETA_ZONE_LABEL, "")


class ManagedZones(Collection[str]):
    """The zones, fixed or listed again by ``lister`` when a node names an unknown one."""

    def __init__(
        self, zones: Collection[str], lister: Callable[[], Collection[str]] | None = None
    ) -> None:
        self._zones = frozenset(zones)
        self._lister = lister
        self._lock = threading.Lock()

    @property
    def dynamic(self) -> bool:
        """Whether the list is the region's, listed again when needed."""
        return self._lister is not None

    def current(self) -> frozenset[str]:
        return self._zones

    def __contains__(self, zone: object) -> bool:
        return zone in self._zones

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._zones))

    def __len__(self) -> int:
        return len(self._zones)

    def refresh(self) -> None:
        """List the region's zones again (nothing for a fixed list); errors are the caller's."""
        if self._lister is None:
            return
        with self._lock:
            listed = frozenset(self._lister())
            if listed and listed != self._zones:
                log.info(
                    "GCE zones updated: %s (were %s)",
                    ", ".join(sorted(listed)),
                    ", ".join(sorted(self._zones)),
                )
                self._zones = listed

    def saw(self, node: Node) -> None:
        """A node was added or changed: list the zones again if it names an unknown one."""
        zone = node_zone(node)
        if not zone or not self.dynamic or zone in self._zones:
            return
        log.info("node %s is in zone %s, not yet known: listing the zones again", node.name, zone)
        try:
            self.refresh()
        except Exception as error:  # noqa: BLE001 - logged; the old list stays
            log.error("cannot list the GCE zones again: %s", error)
            return
        if zone not in self._zones:
            log.warning("node %s is in zone %s, which the region does not list", node.name, zone)

    def follow(self, nodes: Informer) -> None:
        """Watch a term's node cache for nodes in unknown zones."""

        def added(raw: JsonObject) -> None:
            self.saw(Node(raw))

        def updated(old: JsonObject, new: JsonObject) -> None:
            # Only a change of zone, as upstream's UpdateFunc (not every status update).
            if node_zone(Node(old)) != node_zone(Node(new)):
                self.saw(Node(new))

        nodes.add_handler(on_add=added, on_update=updated)
