"""Routes for pod networks: one entry per node pod CIDR in the cluster's VPC route table.

The table is ``RouteTableID`` from the cloud config, else the one table tagged for the cluster.
Each route targets the node's instance (named by the target node's providerID; by its name only
when it has none yet), whose source/destination check is turned off so it may forward pod
traffic. A route whose instance is gone is reported as a blackhole; listed routes name their
node from the node directory, which follows the shared node cache.

A route is only ever written over when it is a blackhole, as upstream does: a CIDR already routed
to the node's instance is success, and one routed anywhere else (a NAT or transit gateway, a
peering connection, another instance) is an error naming that target, never replaced.

Cost: :meth:`AwsRoutes.list_routes` describes the table once (one DescribeRouteTables plus one,
usually cached, DescribeInstances) and remembers what it saw, so the creations and deletions of
the same route-controller pass describe nothing more. A remembered table is trusted for
:data:`VIEW_TTL` seconds; CreateRoute answering ``RouteAlreadyExists`` (someone else wrote the
CIDR meanwhile) is the one case that describes the table again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from polyccm.cloud import Route, Routes
from polyccm.errors import CloudError, InstanceNotFound
from polyccm.objects import Node

from polyccm_aws.api import AwsApi, AwsApiError, error_code
from polyccm_aws.config import CloudConfig
from polyccm_aws.instance_store import InstanceStore, state_of
from polyccm_aws.naming import route_name
from polyccm_aws.node_directory import NodeDirectory
from polyccm_aws.provider_id import instance_id_from_node_name
from polyccm_aws.tagging import ClusterTagging

log = logging.getLogger(__name__)

VIEW_TTL = 30.0
"""Seconds a described route table is trusted (longer than a pass, shorter than a period)."""

#: Route fields that name a target, in the order a conflict message prefers them.
_TARGET_FIELDS = (
    "InstanceId",
    "NatGatewayId",
    "TransitGatewayId",
    "VpcPeeringConnectionId",
    "GatewayId",
    "EgressOnlyInternetGatewayId",
    "LocalGatewayId",
    "CarrierGatewayId",
    "NetworkInterfaceId",
    "CoreNetworkArn",
)


def route_target(entry: Mapping[str, Any]) -> str:
    """What a route-table entry points at (``nat-0abc``, ``pcx-...``, ``i-...``), or ``""``."""
    return next((str(entry[f]) for f in _TARGET_FIELDS if entry.get(f)), "")


@dataclass
class _TableView:
    """One described route table: its id and its routes by destination CIDR."""

    table_id: str
    routes: dict[str, Mapping[str, Any]]
    taken_at: float
    blackholes: set[str] = field(default_factory=set)
    """CIDRs judged blackholed when listed (their instance gone, even if EC2 says active)."""


class AwsRoutes(Routes):
    """The Routes capability backed by one VPC route table."""

    def __init__(
        self,
        api: AwsApi,
        config: CloudConfig,
        tagging: ClusterTagging,
        store: InstanceStore,
        directory: NodeDirectory,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._config = config
        self._tagging = tagging
        self._store = store
        self._directory = directory
        self._clock = clock
        self._lock = threading.Lock()
        self._describing = threading.Lock()
        self._view: _TableView | None = None

    # -- the route table ----------------------------------------------------------------------

    def _describe(self) -> _TableView:
        """Describe the table now (one DescribeRouteTables) and remember it."""
        if self._config.route_table_id:
            answer = self._api.call(
                "ec2", "describe_route_tables", RouteTableIds=[self._config.route_table_id]
            )
            tables = list(answer.get("RouteTables", ()))
        else:
            answer = self._api.call(
                "ec2", "describe_route_tables", Filters=[self._tagging.tag_filter()]
            )
            tables = [
                t
                for t in answer.get("RouteTables", ())
                if self._tagging.has_cluster_tag(t.get("Tags"))
            ]
        if not tables:
            raise CloudError(
                f"no route table for cluster {self._tagging.cluster_id!r}: set RouteTableID in "
                f"the cloud config or tag one table with {self._tagging.tag_key}"
            )
        if len(tables) > 1:
            ids = ", ".join(str(t["RouteTableId"]) for t in tables)
            raise CloudError(
                f"several route tables are tagged for cluster {self._tagging.cluster_id!r} "
                f"({ids}); set RouteTableID in the cloud config"
            )
        table: Mapping[str, Any] = tables[0]
        view = _TableView(
            table_id=str(table["RouteTableId"]),
            routes={
                str(r["DestinationCidrBlock"]): r
                for r in table.get("Routes", ())
                if r.get("DestinationCidrBlock")
            },
            taken_at=self._clock(),
        )
        with self._lock:
            self._view = view
        return view

    def _known(self) -> _TableView:
        """The table as last described, if recent enough; else described now (once, however
        many creations ask at the same time)."""
        with self._describing:
            with self._lock:
                view = self._view
            if view is not None and self._clock() - view.taken_at < VIEW_TTL:
                return view
            return self._describe()

    def _remember(self, cidr: str, entry: Mapping[str, Any] | None) -> None:
        """Record our own write to the table, so later calls of the pass see it."""
        with self._lock:
            if self._view is None:
                return
            self._view.blackholes.discard(cidr)
            if entry is None:
                self._view.routes.pop(cidr, None)
            else:
                self._view.routes[cidr] = entry

    # -- Routes -------------------------------------------------------------------------------

    def list_routes(self, cluster_name: str) -> list[Route]:
        view = self._describe()
        entries = list(view.routes.values())
        ids = [str(r["InstanceId"]) for r in entries if r.get("InstanceId")]
        instances = self._store.by_ids(ids) if ids else {}
        routes: list[Route] = []
        for entry in entries:
            instance_id = str(entry.get("InstanceId") or "")
            blackhole = entry.get("State") == "blackhole"
            if not instance_id and not blackhole:
                continue  # local, gateway and peering routes are not ours
            target = ""
            if instance_id:
                instance = instances.get(instance_id)
                if instance is None or state_of(instance) == "terminated":
                    blackhole = True
                else:
                    target = self._directory.node_of(instance_id) or str(
                        instance.get("PrivateDnsName", "")
                    )
            cidr = str(entry["DestinationCidrBlock"])
            if blackhole:
                with self._lock:
                    view.blackholes.add(cidr)
            routes.append(Route(route_name(cluster_name, cidr), target, cidr, blackhole))
        return routes

    def _instance_for(self, node_name: str) -> str:
        instance_id = self._directory.instance_of(node_name) or instance_id_from_node_name(
            node_name
        )
        if instance_id:
            return instance_id
        found = self._store.by_names([node_name]).get(node_name)
        if isinstance(found, Exception):
            raise found
        if found is None:
            raise InstanceNotFound(f"no live EC2 instance for node {node_name!r}")
        return str(found["InstanceId"])

    def _is_blackhole(self, view: _TableView, cidr: str, entry: Mapping[str, Any]) -> bool:
        """EC2's blackhole state, or an instance route whose instance is gone (as listed)."""
        if entry.get("State") == "blackhole" or cidr in view.blackholes:
            return True
        other = str(entry.get("InstanceId") or "")
        if not other:
            return False
        instance = self._store.by_ids([other]).get(other)
        return instance is None or state_of(instance) == "terminated"

    def create_route(
        self, cluster_name: str, name_hint: str, route: Route, *, target: Node
    ) -> None:
        instance_id = self._directory.remember_node(target) or self._instance_for(route.target_node)
        instance = self._store.by_ids([instance_id]).get(instance_id)
        if instance is None or state_of(instance) == "terminated":
            raise InstanceNotFound(f"instance {instance_id} of node {route.target_node!r} is gone")
        if instance.get("SourceDestCheck", True):
            self._api.call(
                "ec2",
                "modify_instance_attribute",
                InstanceId=instance_id,
                SourceDestCheck={"Value": False},
            )
            self._store.invalidate([instance_id])
        cidr = route.destination_cidr
        view = self._known()
        current = view.routes.get(cidr)
        if current is None:
            try:
                self._write("create_route", view.table_id, cidr, instance_id)
                return
            except AwsApiError as error:
                if error_code(error) != "RouteAlreadyExists":
                    raise
            view = self._describe()  # written by someone else since we looked
            current = view.routes.get(cidr)
            if current is None:
                raise CloudError(
                    f"route {cidr} in {view.table_id} appeared and vanished; retrying later"
                )
        self._settle(view, cidr, current, instance_id)

    def _settle(
        self, view: _TableView, cidr: str, current: Mapping[str, Any], instance_id: str
    ) -> None:
        """The CIDR is already routed: fine if to our instance, replaced if a blackhole,
        refused otherwise."""
        blackhole = self._is_blackhole(view, cidr, current)
        if current.get("InstanceId") == instance_id and not blackhole:
            return
        if not blackhole:
            raise CloudError(
                f"route table {view.table_id} already routes {cidr} to "
                f"{route_target(current) or 'another target'}; polyccm replaces only blackholed "
                "routes, so remove that route or give the node another pod CIDR"
            )
        log.info(
            "replacing blackholed route %s (was %s)", cidr, route_target(current) or "no target"
        )
        self._write("replace_route", view.table_id, cidr, instance_id)

    def _write(self, operation: str, table_id: str, cidr: str, instance_id: str) -> None:
        self._api.call(
            "ec2",
            operation,
            RouteTableId=table_id,
            DestinationCidrBlock=cidr,
            InstanceId=instance_id,
        )
        self._remember(
            cidr,
            {
                "DestinationCidrBlock": cidr,
                "InstanceId": instance_id,
                "State": "active",
                "Origin": "CreateRoute",
            },
        )

    def delete_route(self, cluster_name: str, route: Route) -> None:
        table_id = self._known().table_id
        try:
            self._api.call(
                "ec2",
                "delete_route",
                RouteTableId=table_id,
                DestinationCidrBlock=route.destination_cidr,
            )
        except AwsApiError as error:
            if error_code(error) != "InvalidRoute.NotFound":
                raise
        self._remember(route.destination_cidr, None)
