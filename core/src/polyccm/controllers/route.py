"""The route controller: one cloud route per node pod CIDR, and the nodes' NetworkUnavailable.

It reconciles when nodes change (a pod CIDR appears, a node goes away; changes within a second
are coalesced) and every ``--route-reconciliation-period``. Each pass lists the cloud's routes
once, creates the missing ones (name hint = node UID; the provider also gets the target Node,
whose providerID and addresses locate its instance), and deletes routes that are blackholed
or whose node no longer owns the CIDR, but only routes whose first or last address lies in a
``--cluster-cidr``: routes the cluster did not make are never touched. Then each node's
``NetworkUnavailable`` condition says whether all its routes exist (``False/RouteCreated``) or
not (``True/NoRouteCreated``), written unless it already has that status and reason. Only
nodes with a pod CIDR get the condition: a node whose CNI does its own IPAM is never marked
(this controller is the only writer of it; the cloud-node controller writes none). A
failing pass (the cloud or the API server unavailable) is logged and the next one runs on time;
an error on one node or route never skips the others.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from polyccm import metrics
from polyccm.cloud import Route, Routes
from polyccm.controllers.base import Controller, ControllerContext, guarded
from polyccm.errors import LeadershipLost
from polyccm.kube.api import NODES, STRATEGIC_MERGE_PATCH, ApiError, JsonObject
from polyccm.objects import Node

log = logging.getLogger(__name__)

MAX_CONCURRENT_ROUTE_CALLS = 10
COALESCE_SECONDS = 1.0


def _networks(cidrs: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(c, strict=False) for c in cidrs]


def responsible_for(cidr: str, cluster_cidrs: Sequence[str]) -> bool:
    """Whether a cloud route to ``cidr`` is the cluster's to delete: its first or its last
    address lies within one of ``cluster_cidrs`` (so a route wider than a cluster CIDR that
    begins or ends with it is the cluster's too), as upstream's isResponsibleForRoute. An
    unparsable CIDR is nobody's."""
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False
    first, last = network.network_address, network.broadcast_address
    return any(first in cluster or last in cluster for cluster in _networks(cluster_cidrs))


def plan_routes(
    nodes: Sequence[Node], routes: Sequence[Route], cluster_cidrs: Sequence[str]
) -> tuple[list[tuple[Node, str]], list[Route]]:
    """What to create (node, CIDR) and what to delete, from the nodes and the cloud's routes."""
    existing = {(r.target_node, _norm(r.destination_cidr)) for r in routes if not r.blackhole}
    wanted = {(n.name, _norm(c)) for n in nodes for c in n.pod_cidrs}
    to_create = [
        (node, cidr)
        for node in nodes
        for cidr in node.pod_cidrs
        if (node.name, _norm(cidr)) not in existing
    ]
    to_delete = [
        route
        for route in routes
        if responsible_for(route.destination_cidr, cluster_cidrs)
        and (route.blackhole or (route.target_node, _norm(route.destination_cidr)) not in wanted)
    ]
    return to_create, to_delete


def _norm(cidr: str) -> str:
    try:
        return str(ipaddress.ip_network(cidr, strict=False))
    except ValueError:
        return cidr


class RouteController(Controller):
    """Keeps cloud routes in step with node pod CIDRs."""

    name = "route"

    def __init__(self, context: ControllerContext, routes: Routes) -> None:
        self.context = context
        self.routes = routes
        self.cluster_name = context.options.cluster_name
        self.cluster_cidrs = context.options.cluster_cidrs
        self._trigger = threading.Event()
        self._pool = ThreadPoolExecutor(MAX_CONCURRENT_ROUTE_CALLS, "route-call")

    def run(self, stop: threading.Event) -> None:
        self.context.nodes.add_handler(
            on_add=self._on_change,
            on_update=self._on_update,
            on_delete=self._on_change,
        )
        period = self.context.options.route_reconciliation_period
        next_due = time.monotonic() + period
        try:
            while not stop.is_set():
                # Wake at least every second so that a stop is noticed promptly.
                wait = min(1.0, max(0.0, next_due - time.monotonic()))
                triggered = self._trigger.wait(wait)
                if stop.is_set():
                    break
                if not triggered and time.monotonic() < next_due:
                    continue
                stop.wait(COALESCE_SECONDS)  # let a burst of node changes settle
                self._trigger.clear()
                if not guarded(self.name, "reconciliation", self.reconcile):
                    stop.wait()  # leadership lost: no more passes; the term is ending
                    break
                next_due = time.monotonic() + period
        finally:
            self._pool.shutdown(wait=True)

    def _on_change(self, _obj: JsonObject) -> None:
        self._trigger.set()

    def _on_update(self, old: JsonObject, new: JsonObject) -> None:
        if Node(old).pod_cidrs != Node(new).pod_cidrs:
            self._trigger.set()

    def reconcile(self) -> None:
        """One pass: list routes once, create and delete what differs, update conditions."""
        nodes = [Node(raw) for raw in self.context.nodes.list()]
        routes = self.routes.list_routes(self.cluster_name)
        to_create, to_delete = plan_routes(nodes, routes, self.cluster_cidrs)
        failed: set[str] = set()
        futures = [
            (node, cidr, self._pool.submit(self._create, node, cidr)) for node, cidr in to_create
        ]
        deletions = [(route, self._pool.submit(self._delete, route)) for route in to_delete]
        lost: BaseException | None = None
        for node, cidr, future in futures:
            error = future.exception()
            if isinstance(error, LeadershipLost):
                lost = error  # not a failure of this route: the next leader makes it
            elif error is not None:
                failed.add(node.name)
                log.warning("route: creating route for %s %s failed: %s", node.name, cidr, error)
                self.context.recorder.event(
                    node.raw,
                    "Warning",
                    "FailedToCreateRoute",
                    f"Could not create route {node.uid} {cidr} for node {node.name}: {error}",
                )
        for route, future in deletions:
            error = future.exception()
            if isinstance(error, LeadershipLost):
                lost = error
            elif error is not None:
                log.warning(
                    "route: deleting route %s %s failed: %s",
                    route.name,
                    route.destination_cidr,
                    error,
                )
        if lost is not None:
            raise lost
        metrics.route_sync_total.inc()
        for node in nodes:
            if node.pod_cidrs:
                self._set_network_condition(node, available=node.name not in failed)

    def _create(self, node: Node, cidr: str) -> None:
        route = Route(name="", target_node=node.name, destination_cidr=cidr)
        self.routes.create_route(self.cluster_name, node.uid, route, target=node)
        log.info("route: created route for %s %s", node.name, cidr)

    def _delete(self, route: Route) -> None:
        self.routes.delete_route(self.cluster_name, route)
        log.info("route: deleted route %s %s", route.name, route.destination_cidr)

    def _set_network_condition(self, node: Node, *, available: bool) -> None:
        status, reason, message = (
            ("False", "RouteCreated", "RouteController created a route")
            if available
            else ("True", "NoRouteCreated", "RouteController failed to create a route")
        )
        # Left alone only when it already says this, reason included: a condition another
        # component (a CNI) wrote with the same status is taken over, as upstream does.
        for condition in node.raw.get("status", {}).get("conditions") or ():
            if condition.get("type") == "NetworkUnavailable":
                if condition.get("status") == status and condition.get("reason") == reason:
                    return
                break
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": "NetworkUnavailable",
                        "status": status,
                        "reason": reason,
                        "message": message,
                        "lastTransitionTime": now,
                        "lastHeartbeatTime": now,
                    }
                ]
            }
        }
        try:
            self.context.api.patch(
                NODES, node.name, patch, subresource="status", patch_type=STRATEGIC_MERGE_PATCH
            )
        except ApiError as error:
            if not error.not_found:
                log.warning("route: condition of %s: %s", node.name, error)
        except Exception as error:  # noqa: BLE001 - written again on the next pass
            log.warning("route: condition of %s: %s", node.name, error)
