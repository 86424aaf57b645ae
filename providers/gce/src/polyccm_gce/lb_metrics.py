"""cloud-provider-gcp's L4 load-balancer usage gauges (providers/gce/gce_loadbalancer_metrics.go
@v36.3.8), kept from each Service's last ensure as upstream keeps them:

* ``number_of_l4_netlbs{status, deny_firewall}``: external load balancers by the outcome of their
  last ensure (``Success``, ``Error``) and the deny firewall (``IPv4`` when made, ``DISABLED``
  when only the rollback cleanup is on, else empty);
* ``number_of_l4_ilbs{feature}``: internal ones, ``L4ILBService`` for every one,
  ``L4ILBInSuccess`` / ``L4ILBInError`` by the last ensure, and among the successful ones
  ``L4ILBGlobalAccess`` and ``L4ILBCustomSubnet`` (the subnet annotation).

A Service leaves them when its load balancer is deleted. Upstream recomputes the gauges every
ten minutes (the first time ten minutes after start); here they are recomputed at each change,
so a scrape sees the state at once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from polyccm import metrics

SUCCESS, ERROR = "Success", "Error"
DENY_NONE, DENY_DISABLED, DENY_IPV4 = "", "DISABLED", "IPv4"
ILB_FEATURES = (
    "L4ILBService",
    "L4ILBGlobalAccess",
    "L4ILBCustomSubnet",
    "L4ILBInSuccess",
    "L4ILBInError",
)


@dataclass(frozen=True)
class IlbState:
    """An internal load balancer's features, as upstream's L4ILBServiceState."""

    success: bool = False
    global_access: bool = False
    custom_subnet: bool = False


class L4Metrics:
    """The per-Service states behind the two gauges (by ``namespace/name``)."""

    def __init__(self, *, export: bool = True) -> None:
        """``export``: set the gauges (False: keep the states only, as ``polyccm plan``'s copy
        of the load balancer does)."""
        self._export = export
        self._lock = threading.Lock()
        self._netlbs: dict[str, tuple[str, str]] = {}
        self._ilbs: dict[str, IlbState] = {}

    def set_netlb(self, key: str, status: str, deny_firewall: str) -> None:
        with self._lock:
            self._netlbs[key] = (status, deny_firewall)
            self._export_netlbs()

    def forget_netlb(self, key: str) -> None:
        with self._lock:
            if self._netlbs.pop(key, None) is not None:
                self._export_netlbs()

    def set_ilb(self, key: str, state: IlbState) -> None:
        with self._lock:
            self._ilbs[key] = state
            self._export_ilbs()

    def forget_ilb(self, key: str) -> None:
        with self._lock:
            if self._ilbs.pop(key, None) is not None:
                self._export_ilbs()

    def _export_netlbs(self) -> None:
        if not self._export:
            return
        counts: dict[tuple[str, str], int] = {}
        for labels in self._netlbs.values():
            counts[labels] = counts.get(labels, 0) + 1
        metrics.number_of_l4_netlbs.clear()
        for (status, deny), count in counts.items():
            metrics.number_of_l4_netlbs.labels(status=status, deny_firewall=deny).set(count)

    def _export_ilbs(self) -> None:
        if not self._export:
            return
        counts = dict.fromkeys(ILB_FEATURES, 0)
        for state in self._ilbs.values():
            counts["L4ILBService"] += 1
            if not state.success:
                counts["L4ILBInError"] += 1
                continue
            counts["L4ILBInSuccess"] += 1
            counts["L4ILBGlobalAccess"] += state.global_access
            counts["L4ILBCustomSubnet"] += state.custom_subnet
        for feature, count in counts.items():
            metrics.number_of_l4_ilbs.labels(feature=feature).set(count)
