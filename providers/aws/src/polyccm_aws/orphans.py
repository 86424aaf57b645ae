"""``polyccm orphans`` for AWS: the cluster's load balancers, target groups and security groups
that no Service accounts for.

Marks, all required: the cluster's ``owned`` tag (``kubernetes.io/cluster/<id>=owned`` or the
legacy ``KubernetesCluster=<id>``), and the shape upstream and polyccm give what they make for a
Service: a load balancer or target group also carries ``kubernetes.io/service-name`` and is
named ``a<uid>`` (load balancers) or ``k8s-...`` (target groups); a security group is a
classic ELB's ``k8s-elb-<load balancer name>`` or an NLB's managed group (its description). A
load balancer the cluster owns for another reason (kops tags its API load balancer ``owned``)
has another name and no service tag, and is never listed.

A Service accounts for the load balancer named after it (``a`` + its UID) while it wants one or
holds the cleanup finalizer; a target group for a live load balancer, or, unattached, for a
Service that still wants one (an interrupted create reuses it); a ``k8s-elb-`` group for its
live load balancer; a managed NLB group for its Service. Everything a load balancer in use
references is kept. Deletion order: load balancers, then target groups, then security groups
(whose rules in other groups are revoked first).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from polyccm.errors import CloudError, RetryAfter
from polyccm.objects import Node, Service
from polyccm.ops.contract import CloudResource, Orphans, claims_load_balancer
from polyccm.ops.orphans import unclaimed_reason

from polyccm_aws.api import AwsApi, AwsApiError, error_code
from polyccm_aws.config import CloudConfig
from polyccm_aws.naming import (
    NLB_SECURITY_GROUP_DESCRIPTION,
    default_load_balancer_name,
    elb_security_group_name,
    nlb_security_group_name,
)
from polyccm_aws.network import Network
from polyccm_aws.nlb import NetworkLb
from polyccm_aws.security_groups import SecurityGroupInUse, SecurityGroups
from polyccm_aws.tagging import LEGACY_CLUSTER_TAG, SERVICE_NAME_TAG, ClusterTagging, tag_map
from polyccm_aws.zones import Zones

CLASSIC_ELB, NLB, TARGET_GROUP, SECURITY_GROUP = (
    "classic-elb",
    "nlb",
    "target-group",
    "security-group",
)
ORDER = {CLASSIC_ELB: 0, NLB: 0, TARGET_GROUP: 1, SECURITY_GROUP: 2}
LOAD_BALANCER_NAME = re.compile(r"a[0-9a-f]{31}")
ELB_GROUP_PREFIX = elb_security_group_name("")
TAGS_PER_CALL = 20
SECURITY_GROUP_RETRY_SECONDS = 10.0

Described = Mapping[str, Any]


def _chunks(items: Sequence[str], size: int = TAGS_PER_CALL) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class AwsOrphans(Orphans):
    """Finds and deletes this cluster's leaked ELBs, NLBs, target groups and security groups."""

    def __init__(
        self, api: AwsApi, config: CloudConfig, tagging: ClusterTagging, zones: Zones
    ) -> None:
        self._api = api
        self._tagging = tagging
        self._groups = SecurityGroups(api, tagging)
        self._nlb = NetworkLb(
            api, config, tagging, self._groups, Network(api, config, tagging, zones)
        )

    # -- marks ------------------------------------------------------------------------------------

    def _mark(self, tags: Iterable[Mapping[str, Any]] | None) -> str | None:
        """How ``tags`` say the resource is this cluster's own, or ``None``."""
        if not self._tagging.is_owned(tags):
            return None
        found = tag_map(tags)
        if found.get(self._tagging.tag_key) == "owned":
            return f"tag {self._tagging.tag_key}=owned"
        return f"tag {LEGACY_CLUSTER_TAG}={self._tagging.cluster_id}"

    def _service_mark(self, tags: Iterable[Mapping[str, Any]] | None) -> tuple[str, str] | None:
        """(mark, service) for a resource made for a Service of this cluster."""
        mark = self._mark(tags)
        service = tag_map(tags).get(SERVICE_NAME_TAG)
        if mark is None or not service:
            return None
        return f"{mark}, {SERVICE_NAME_TAG}={service}", service

    def _elb_tags(self, names: Sequence[str]) -> dict[str, list[Mapping[str, Any]]]:
        tags: dict[str, list[Mapping[str, Any]]] = {}
        for chunk in _chunks(names):
            answer = self._api.call("elb", "describe_tags", LoadBalancerNames=list(chunk))
            for description in answer.get("TagDescriptions") or ():
                tags[str(description["LoadBalancerName"])] = list(description.get("Tags") or ())
        return tags

    def _elbv2_tags(self, arns: Sequence[str]) -> dict[str, list[Mapping[str, Any]]]:
        tags: dict[str, list[Mapping[str, Any]]] = {}
        for chunk in _chunks(arns):
            answer = self._api.call("elbv2", "describe_tags", ResourceArns=list(chunk))
            for description in answer.get("TagDescriptions") or ():
                tags[str(description["ResourceArn"])] = list(description.get("Tags") or ())
        return tags

    # -- finding ----------------------------------------------------------------------------------

    def _load_balancers(self) -> Iterator[tuple[str, str, str, list[Any] | None, list[str]]]:
        """(kind, name, id, tags, security groups) of every classic ELB and NLB."""
        elbs = [
            lb
            for page in self._api.pages("elb", "describe_load_balancers")
            for lb in page.get("LoadBalancerDescriptions") or ()
        ]
        elb_tags = self._elb_tags([str(lb["LoadBalancerName"]) for lb in elbs])
        for lb in elbs:
            name = str(lb["LoadBalancerName"])
            yield CLASSIC_ELB, name, name, elb_tags.get(name), list(lb.get("SecurityGroups") or ())
        nlbs = [
            lb
            for page in self._api.pages("elbv2", "describe_load_balancers")
            for lb in page.get("LoadBalancers") or ()
            if lb.get("Type") == "network"
        ]
        nlb_tags = self._elbv2_tags([str(lb["LoadBalancerArn"]) for lb in nlbs])
        for lb in nlbs:
            arn = str(lb["LoadBalancerArn"])
            groups = list(lb.get("SecurityGroups") or ())
            yield NLB, str(lb["LoadBalancerName"]), arn, nlb_tags.get(arn), groups

    def find_orphans(
        self, cluster_name: str, services: Sequence[Service], nodes: Sequence[Node]
    ) -> list[CloudResource]:
        claiming = [s for s in services if claims_load_balancer(s)]
        claimed = {default_load_balancer_name(s) for s in claiming}
        found: list[CloudResource] = []
        live_groups: set[str] = set()
        live_names: set[str] = set()
        orphaned_arns: set[str] = set()
        for kind, name, ident, tags, groups in self._load_balancers():
            marked = self._service_mark(tags) if LOAD_BALANCER_NAME.fullmatch(name) else None
            if marked is None or name in claimed:
                live_groups.update(groups)
                live_names.add(name)
                continue
            mark, service = marked
            if kind == NLB:
                orphaned_arns.add(ident)
            found.append(
                CloudResource(
                    kind=kind,
                    id=ident,
                    name=name if ident != name else "",
                    mark=f"{mark}, name a<uid>",
                    reason=unclaimed_reason(name, service, services, default_load_balancer_name),
                    delete_order=ORDER[kind],
                    details={"service": service},
                )
            )
        found += self._target_groups(orphaned_arns, {s.key for s in claiming})
        found += self._security_groups(cluster_name, live_groups, live_names | claimed, claiming)
        return found

    def _target_groups(self, orphaned: set[str], wanting: set[str]) -> list[CloudResource]:
        groups = [
            g
            for page in self._api.pages("elbv2", "describe_target_groups")
            for g in page.get("TargetGroups") or ()
            if str(g.get("TargetGroupName", "")).startswith("k8s-")
        ]
        tags = self._elbv2_tags([str(g["TargetGroupArn"]) for g in groups])
        found: list[CloudResource] = []
        for group in groups:
            arn = str(group["TargetGroupArn"])
            marked = self._service_mark(tags.get(arn))
            if marked is None:
                continue
            mark, service = marked
            users = [str(a) for a in group.get("LoadBalancerArns") or ()]
            if users and not set(users) <= orphaned:
                continue  # a load balancer in use sends traffic through it
            if not users and service in wanting:
                continue  # its Service's next ensure may take it up again
            reason = (
                "used only by orphaned load balancers"
                if users
                else f"attached to no load balancer, and service {service} wants none"
            )
            found.append(
                CloudResource(
                    kind=TARGET_GROUP,
                    id=arn,
                    name=str(group.get("TargetGroupName", "")),
                    mark=mark,
                    reason=reason,
                    delete_order=ORDER[TARGET_GROUP],
                    details={"service": service},
                )
            )
        return found

    def _security_groups(
        self,
        cluster_name: str,
        live_groups: set[str],
        kept_balancers: set[str],
        claiming: Sequence[Service],
    ) -> list[CloudResource]:
        """``k8s-elb-`` groups of load balancers neither live nor claimed, managed NLB groups
        no claiming Service is named for; none that a live load balancer uses."""
        managed_names = {nlb_security_group_name(cluster_name, s) for s in claiming}
        answer = self._api.call(
            "ec2", "describe_security_groups", Filters=[self._tagging.tag_filter()]
        )
        found: list[CloudResource] = []
        for group in answer.get("SecurityGroups") or ():
            group_id, name = str(group["GroupId"]), str(group.get("GroupName", ""))
            mark = self._mark(group.get("Tags"))
            if mark is None or group_id in live_groups:
                continue
            if name.startswith(ELB_GROUP_PREFIX):
                balancer = name.removeprefix(ELB_GROUP_PREFIX)
                if not LOAD_BALANCER_NAME.fullmatch(balancer):
                    continue
                if balancer in kept_balancers:
                    continue
                reason = f"its load balancer {balancer} is gone or orphaned"
            elif group.get("Description") == NLB_SECURITY_GROUP_DESCRIPTION:
                if name in managed_names:
                    continue
                reason = "no Service's NLB uses this managed group"
            else:
                continue
            found.append(
                CloudResource(
                    kind=SECURITY_GROUP,
                    id=group_id,
                    name=name,
                    mark=f"{mark}, name {name}",
                    reason=reason,
                    delete_order=ORDER[SECURITY_GROUP],
                    details={"vpc": str(group.get("VpcId", ""))},
                )
            )
        return found

    # -- deleting ---------------------------------------------------------------------------------

    def delete_orphan(self, cluster_name: str, resource: CloudResource) -> None:
        if resource.kind == CLASSIC_ELB:
            self._delete_elb(resource.id)
        elif resource.kind == NLB:
            self._delete_nlb(resource.id, resource.name)
        elif resource.kind == TARGET_GROUP:
            self._delete_target_group(resource.id)
        elif resource.kind == SECURITY_GROUP:
            self._delete_security_group(resource.id)
        else:
            raise CloudError(f"unknown kind of resource {resource.kind!r}")

    def _still_marked(self, what: str, tags: list[Mapping[str, Any]] | None) -> None:
        if self._service_mark(tags) is None:
            raise CloudError(f"{what} no longer carries this cluster's marks; kept")

    def _delete_elb(self, name: str) -> None:
        tags = self._elb_tags([name]).get(name)
        if tags is None:
            return
        self._still_marked(f"classic ELB {name}", tags)
        self._api.call("elb", "delete_load_balancer", LoadBalancerName=name)

    def _delete_nlb(self, arn: str, name: str) -> None:
        try:
            tags = self._elbv2_tags([arn]).get(arn)
        except AwsApiError as error:
            if error_code(error) == "LoadBalancerNotFound":
                return
            raise
        if tags is None:
            return
        self._still_marked(f"NLB {name}", tags)
        self._nlb.sync_node_rules(name, set(), {})
        self._api.call("elbv2", "delete_load_balancer", LoadBalancerArn=arn)

    def _delete_target_group(self, arn: str) -> None:
        try:
            tags = self._elbv2_tags([arn]).get(arn)
        except AwsApiError as error:
            if error_code(error) == "TargetGroupNotFound":
                return
            raise
        if tags is None:
            return
        self._still_marked(f"target group {arn}", tags)
        self._nlb.delete_target_group(arn)

    def _delete_security_group(self, group_id: str) -> None:
        found = self._groups.describe([group_id])
        if not found:
            return
        if self._mark(found[0].get("Tags")) is None:
            raise CloudError(f"security group {group_id} is no longer owned by this cluster; kept")
        try:
            self._groups.delete_owned([group_id])
        except SecurityGroupInUse as error:
            raise RetryAfter(str(error), SECURITY_GROUP_RETRY_SECONDS) from error
