"""Routes for pod networks: one entry per node pod CIDR in the cluster's VPC route table.

The table is ``RouteTableID`` from the cloud config, else the one table tagged for the cluster.
Each route targets the node's instance, whose source/destination check is turned off so it may
forward pod traffic. Listing costs one DescribeRouteTables plus one (usually cached)
DescribeInstances; a route whose instance is gone is reported as a blackhole.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from polyccm.cloud import Route, Routes
from polyccm.errors import CloudError, InstanceNotFound

from polyccm_aws.api import AwsApi, AwsApiError, error_code
from polyccm_aws.config import CloudConfig
from polyccm_aws.instance_store import InstanceStore, state_of
from polyccm_aws.naming import route_name
from polyccm_aws.node_directory import NodeDirectory
from polyccm_aws.provider_id import instance_id_from_node_name
from polyccm_aws.tagging import ClusterTagging

log = logging.getLogger(__name__)


class AwsRoutes(Routes):
    """The Routes capability backed by one VPC route table."""

    def __init__(
        self,
        api: AwsApi,
        config: CloudConfig,
        tagging: ClusterTagging,
        store: InstanceStore,
        directory: NodeDirectory,
    ) -> None:
        self._api = api
        self._config = config
        self._tagging = tagging
        self._store = store
        self._directory = directory

    def _table(self) -> Mapping[str, Any]:
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
        return table

    def list_routes(self, cluster_name: str) -> list[Route]:
        table = self._table()
        entries = [r for r in table.get("Routes", ()) if r.get("DestinationCidrBlock")]
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

    def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None:
        instance_id = self._instance_for(route.target_node)
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
        table = self._table()
        table_id = str(table["RouteTableId"])
        current = next(
            (
                r
                for r in table.get("Routes", ())
                if r.get("DestinationCidrBlock") == route.destination_cidr
            ),
            None,
        )
        if current is not None:
            if current.get("InstanceId") == instance_id and current.get("State") != "blackhole":
                return
            if current.get("State") == "blackhole":
                log.info("replacing blackholed route %s", route.destination_cidr)
            self._api.call(
                "ec2",
                "replace_route",
                RouteTableId=table_id,
                DestinationCidrBlock=route.destination_cidr,
                InstanceId=instance_id,
            )
            return
        self._api.call(
            "ec2",
            "create_route",
            RouteTableId=table_id,
            DestinationCidrBlock=route.destination_cidr,
            InstanceId=instance_id,
        )

    def delete_route(self, cluster_name: str, route: Route) -> None:
        table_id = str(self._table()["RouteTableId"])
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
