"""Routes for GCE: one route per node pod CIDR, as cloud-provider-gcp makes them.

A route is named ``<cluster[:26]>-<node UID>``, described ``k8s-node-route``, sends its
``destRange`` to ``nextHopInstance: zones/<zone>/instances/<name>`` with priority 1000, on the
configured network. The instance comes from the target Node the route controller passes (its
providerID), so creating a route costs no lookup; a node without a providerID is looked up by
name (one filtered aggregatedList).

Cost, which is what GCE quotas punish (kubernetes #21563, #60646): :meth:`GceRoutes.list_routes`
is one ``routes.list`` (``compute_v1.RoutesClient``, as every call here) filtered on the name
prefix, the network and the description (one page per 500 routes), so a steady-state pass writes
nothing and reads one list. A create is one ``routes.insert`` plus the polls of its operation;
an insert that finds the route there (409, or an operation ending ``RESOURCE_ALREADY_EXISTS``)
is success. The route controller calls :meth:`create_route` from up to 10 threads, so operations
are awaited concurrently; inserts also pass a per-project token bucket (``inserts_per_second``,
``insert_burst``) so that a scale-up stays inside the project's write rate instead of meeting
403 ``rateLimitExceeded`` (which is retried with backoff if it comes anyway). A route whose
instance is gone (GCE's warning ``NEXT_HOP_INSTANCE_NOT_FOUND``) is listed as a blackhole for
the controller to delete.
"""

from __future__ import annotations

import re

from polyccm.cloud import Route, Routes
from polyccm.objects import Node
from polyccm.ratelimit import TokenBucket

from polyccm_gce.api import GceApi, GceApiError
from polyccm_gce.instances import InstanceLookup
from polyccm_gce.naming import (
    InvalidProviderID,
    NodeDirectory,
    instance_ref,
    last,
    parse_provider_id,
)
from polyccm_gce.sdk import compute_v1

DESCRIPTION = "k8s-node-route"
PRIORITY = 1000
GONE_WARNINGS = frozenset({"NEXT_HOP_INSTANCE_NOT_FOUND"})


def route_prefix(cluster_name: str) -> str:
    """``<cluster[:26]>-``: what every route of the cluster's name starts with."""
    return f"{cluster_name[:26]}-"


def route_name(cluster_name: str, name_hint: str) -> str:
    """``<cluster[:26]>-<node UID>`` (at most 63 characters, as GCE requires)."""
    return f"{route_prefix(cluster_name)}{name_hint}"


class GceRoutes(Routes):
    """The Routes capability on one project's network."""

    def __init__(
        self,
        api: GceApi,
        lookup: InstanceLookup,
        directory: NodeDirectory,
        *,
        network_url: str,
        network_project: str = "",
        inserts_per_second: float = 10.0,
        insert_burst: int = 20,
    ) -> None:
        self.api = api
        self.network_project = network_project or api.project
        """Where the routes live: a Shared VPC's host project (gce.conf ``network-project-id``),
        else the cluster's."""
        self.lookup = lookup
        self.directory = directory
        self.network_url = network_url
        self.inserts = TokenBucket(inserts_per_second, insert_burst)

    def _filter(self, cluster_name: str) -> str:
        network = re.escape("/".join(self.network_url.split("/")[-4:]))
        return (
            f'(name eq "{re.escape(route_prefix(cluster_name))}.*") '
            f'(network eq ".*/{network}") '
            f'(description eq "{DESCRIPTION}")'
        )

    def list_routes(self, cluster_name: str) -> list[Route]:
        found = []
        routes = self.api.client(compute_v1.RoutesClient)
        listed: list[compute_v1.Route] = self.api.items(
            routes.list, project=self.network_project, filter=self._filter(cluster_name)
        )
        for item in listed:
            hop = instance_ref(item.next_hop_instance)
            if hop is None:
                continue
            warnings = {warning.code for warning in item.warnings}
            found.append(
                Route(
                    name=item.name,
                    target_node=self.directory.node_of(hop.zone, hop.name),
                    destination_cidr=item.dest_range,
                    blackhole=bool(warnings & GONE_WARNINGS),
                )
            )
        return found

    def _target_path(self, target: Node) -> str:
        try:
            path = parse_provider_id(target.provider_id).path
        except InvalidProviderID:
            instance = self.lookup.one(target)
            path = f"zones/{last(instance.zone)}/instances/{instance.name}"
        if self.network_project != self.api.project:
            # A route in the host project names the cluster project's instance in full.
            return f"projects/{self.api.project}/{path}"
        return path

    def create_route(
        self, cluster_name: str, name_hint: str, route: Route, *, target: Node
    ) -> None:
        body = compute_v1.Route(
            name=route_name(cluster_name, name_hint),
            network=self.network_url,
            next_hop_instance=self._target_path(target),
            dest_range=route.destination_cidr,
            priority=PRIORITY,
            description=DESCRIPTION,
        )
        self.inserts.acquire()
        try:
            self.api.run(
                self.api.client(compute_v1.RoutesClient).insert_unary,
                project=self.network_project,
                route_resource=body,
            )
        except GceApiError as error:
            if not error.already_exists:
                raise

    def delete_route(self, cluster_name: str, route: Route) -> None:
        try:
            self.api.run(
                self.api.client(compute_v1.RoutesClient).delete_unary,
                project=self.network_project,
                route=route.name,
            )
        except GceApiError as error:
            if not error.not_found:
                raise
