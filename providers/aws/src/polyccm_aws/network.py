"""The VPC and subnets a load balancer lives in.

The VPC is ``VPC`` from the cloud config, else the VPC of the backend instances, else the one VPC
holding subnets tagged for the cluster. Subnets come from the ``aws-load-balancer-subnets``
annotation (ids or Name tags) or are discovered as upstream does (:func:`choose_subnets`): one per
availability zone among the subnets tagged for the cluster or for no cluster, public ones only
for internet-facing load balancers, ties broken by the role tag, then the cluster tag, then id.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from polyccm.errors import CloudError

from polyccm_aws import annotations as ann
from polyccm_aws.api import AwsApi, AwsApiError, error_code
from polyccm_aws.config import CloudConfig
from polyccm_aws.instance_store import Instance
from polyccm_aws.tagging import (
    ROLE_ELB_TAG,
    ROLE_INTERNAL_ELB_TAG,
    ClusterTagging,
    has_no_cluster_tag,
    tag_map,
)
from polyccm_aws.zones import Zones

Subnet = Mapping[str, Any]
RouteTable = Mapping[str, Any]


def is_public(subnet_id: str, route_tables: Sequence[RouteTable]) -> bool:
    """Whether the subnet's route table (explicit, else the VPC's main one) routes to an
    internet gateway."""
    table = next(
        (
            t
            for t in route_tables
            if any(a.get("SubnetId") == subnet_id for a in t.get("Associations") or ())
        ),
        None,
    ) or next(
        (t for t in route_tables if any(a.get("Main") for a in t.get("Associations") or ())), None
    )
    if table is None:
        return False
    return any(str(r.get("GatewayId", "")).startswith("igw") for r in table.get("Routes") or ())


def choose_subnets(
    subnets: Sequence[Subnet],
    route_tables: Sequence[RouteTable],
    *,
    internal: bool,
    tagging: ClusterTagging,
    zone_types: Mapping[str, str],
) -> list[str]:
    """Upstream's subnet discovery: among subnets tagged for this cluster or for none, one per
    regular availability zone (public ones only unless ``internal``), zones sorted."""
    role = ROLE_INTERNAL_ELB_TAG if internal else ROLE_ELB_TAG
    best: dict[str, Subnet] = {}
    subnets = [
        s
        for s in subnets
        if tagging.has_cluster_tag(s.get("Tags")) or has_no_cluster_tag(s.get("Tags"))
    ]

    def rank(subnet: Subnet) -> tuple[bool, bool, str]:
        tags = tag_map(subnet.get("Tags"))
        return (
            role not in tags,
            not tagging.has_cluster_tag(subnet.get("Tags")),
            subnet["SubnetId"],
        )

    for subnet in subnets:
        zone, subnet_id = subnet.get("AvailabilityZone"), subnet.get("SubnetId")
        if not zone or not subnet_id:
            continue
        if not internal and not is_public(str(subnet_id), route_tables):
            continue
        current = best.get(str(zone))
        if current is None or rank(subnet) < rank(current):
            best[str(zone)] = subnet
    return [
        str(best[zone]["SubnetId"])
        for zone in sorted(best)
        if zone_types.get(zone, "availability-zone") == "availability-zone"
    ]


def no_subnets_error(name: str, *, internal: bool, tagging: ClusterTagging) -> CloudError:
    """The error when no subnet fits a load balancer, saying how to tag one."""
    role = ROLE_INTERNAL_ELB_TAG if internal else ROLE_ELB_TAG
    public = "" if internal else "public (routed to an internet gateway) "
    return CloudError(
        f"no {public}subnet for load balancer {name}: tag subnets with {role}=1 and "
        f"{tagging.tag_key}=shared, or name them in {ann.SUBNETS}"
    )


class Network:
    """VPC and subnet lookups for load balancers. With ``max_age`` the VPC's subnets and route
    tables are listed once for every load balancer ensured within that many seconds (a burst
    of Services asked for the same two lists each, several times)."""

    def __init__(
        self,
        api: AwsApi,
        config: CloudConfig,
        tagging: ClusterTagging,
        zones: Zones,
        *,
        max_age: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._config = config
        self._tagging = tagging
        self._zones = zones
        self._vpc_id: str | None = config.vpc or None
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._listed: dict[tuple[str, str], tuple[float, list[Any]]] = {}

    def _listing(self, operation: str, key: str, vpc_id: str) -> list[Any]:
        """Every item under ``key`` of ``operation`` for the VPC, remembered ``max_age``."""
        with self._lock:
            found = self._listed.get((operation, vpc_id))
        if found is not None and self._clock() - found[0] < self._max_age:
            return found[1]
        answer = self._api.call("ec2", operation, Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])
        items = list(answer.get(key, ()))
        if self._max_age > 0:
            with self._lock:
                self._listed[(operation, vpc_id)] = (self._clock(), items)
        return items

    def vpc_id(self, instances: Iterable[Instance] = ()) -> str:
        """The cluster's VPC (remembered once found)."""
        if self._vpc_id:
            return self._vpc_id
        counts = Counter(str(i["VpcId"]) for i in instances if i.get("VpcId"))
        if counts:
            self._vpc_id = counts.most_common(1)[0][0]
            return self._vpc_id
        answer = self._api.call("ec2", "describe_subnets", Filters=[self._tagging.tag_filter()])
        vpcs = {
            str(s["VpcId"])
            for s in answer.get("Subnets", ())
            if self._tagging.has_cluster_tag(s.get("Tags"))
        }
        if len(vpcs) != 1:
            raise CloudError(
                "cannot tell the cluster's VPC: set VPC in [Global] of the cloud config "
                f"(subnets tagged {self._tagging.tag_key} are in {len(vpcs)} VPCs)"
            )
        self._vpc_id = vpcs.pop()
        return self._vpc_id

    def subnets_for(self, named: Sequence[str] | None, *, internal: bool, vpc_id: str) -> list[str]:
        """The subnet ids for a load balancer: the annotated ones, else discovered ones."""
        if named is not None:
            return self._resolve(named, vpc_id)
        subnets = [
            s
            for s in self._listing("describe_subnets", "Subnets", vpc_id)
            if self._tagging.has_cluster_tag(s.get("Tags")) or has_no_cluster_tag(s.get("Tags"))
        ]
        # Upstream falls back to the CCM's own subnet when nothing is tagged; without instance
        # metadata that is SubnetID from the cloud config.
        if not subnets and self._config.subnet_id:
            subnets = list(
                self._api.call("ec2", "describe_subnets", SubnetIds=[self._config.subnet_id]).get(
                    "Subnets", ()
                )
            )
        tables: list[RouteTable] = []
        if not internal:
            tables = self._listing("describe_route_tables", "RouteTables", vpc_id)
        zone_types = {}
        for subnet in subnets:
            zone = self._zones.get(str(subnet.get("AvailabilityZone", "")))
            if zone is not None:
                zone_types[zone.name] = zone.zone_type
        return choose_subnets(
            subnets, tables, internal=internal, tagging=self._tagging, zone_types=zone_types
        )

    def _resolve(self, named: Sequence[str], vpc_id: str) -> list[str]:
        ids = [n for n in named if n.startswith("subnet-")]
        names = [n for n in named if not n.startswith("subnet-")]
        found: list[Subnet] = []
        try:
            if ids:
                found += self._api.call("ec2", "describe_subnets", SubnetIds=ids).get("Subnets", ())
            if names:
                found += self._api.call(
                    "ec2",
                    "describe_subnets",
                    Filters=[
                        {"Name": "tag:Name", "Values": names},
                        {"Name": "vpc-id", "Values": [vpc_id]},
                    ],
                ).get("Subnets", ())
        except AwsApiError as error:
            if error_code(error) != "InvalidSubnetID.NotFound":
                raise
            raise ann.invalid(ann.SUBNETS, ",".join(named), str(error)) from None
        if len(found) != len(named):
            raise ann.invalid(
                ann.SUBNETS, ",".join(named), f"found {len(found)} of {len(named)} subnets"
            )
        return [str(s["SubnetId"]) for s in found]

    def subnet_cidrs(self, subnet_ids: Sequence[str]) -> list[str]:
        if not subnet_ids:
            return []
        wanted = set(subnet_ids)
        with self._lock:
            listed = [
                subnet
                for (operation, _), (at, subnets) in self._listed.items()
                if operation == "describe_subnets" and self._clock() - at < self._max_age
                for subnet in subnets
                if subnet.get("SubnetId") in wanted
            ]
        if {s.get("SubnetId") for s in listed} == wanted:
            return [str(s["CidrBlock"]) for s in listed]
        answer = self._api.call("ec2", "describe_subnets", SubnetIds=list(subnet_ids))
        return [str(s["CidrBlock"]) for s in answer.get("Subnets", ())]
