"""Security groups for load balancers and the ingress rules on the nodes' groups.

A load balancer's own group is found by name in the VPC (so groups made by cloud-provider-aws are
reused), created with this cluster's ``owned`` tag when missing, and deleted only when it carries
that tag. Node groups get one rule per load balancer, and lose it when the load balancer goes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from polyccm.errors import CloudError

from polyccm_aws.api import AwsApi, AwsApiError, error_code
from polyccm_aws.coalesce import Coalescer
from polyccm_aws.instance_store import Instance
from polyccm_aws.sg_rules import Rule, permissions, ungroup
from polyccm_aws.tagging import ClusterTagging, tag_list

log = logging.getLogger(__name__)
SecurityGroup = Mapping[str, Any]


class SecurityGroupInUse(CloudError):
    """A group could not be deleted yet (``DependencyViolation``); try again shortly."""


def node_security_group(instance: Instance, cluster_groups: Collection[str]) -> str | None:
    """The group of ``instance`` that load balancers open: the one tagged for the cluster
    (``cluster_groups``: a set or a mapping by group id), else its only group (upstream's
    rule); an ambiguous choice is an error."""
    groups = [str(g["GroupId"]) for g in instance.get("SecurityGroups") or () if g.get("GroupId")]
    tagged = [g for g in groups if g in cluster_groups]
    if len(tagged) > 1:
        raise CloudError(
            f"instance {instance.get('InstanceId')} has several security groups tagged for the "
            f"cluster ({', '.join(tagged)}); tag only the node group"
        )
    if tagged:
        return tagged[0]
    if len(groups) > 1:
        raise CloudError(
            f"instance {instance.get('InstanceId')} has several security groups and none is "
            "tagged for the cluster; tag the node group"
        )
    return groups[0] if groups else None


def rules_from(group: SecurityGroup, source_group_id: str) -> set[Rule]:
    """The ingress rules of ``group`` whose source is ``source_group_id``."""
    return {r for r in ungroup(group.get("IpPermissions") or ()) if r.group_id == source_group_id}


def _apply(
    groups: dict[str, SecurityGroup], group_id: str, add: set[Rule], remove: set[Rule] | None
) -> None:
    """Apply a change to ``group_id`` in ``groups`` (``remove`` None: the group was deleted)."""
    group = groups.get(group_id)
    if group is None:
        return
    if remove is None:
        del groups[group_id]
        return
    rules = (ungroup(group.get("IpPermissions") or ()) | add) - remove
    groups[group_id] = {**group, "IpPermissions": permissions(rules)}


class SecurityGroups:
    """EC2 security-group operations used by the load balancers."""

    def __init__(
        self,
        api: AwsApi,
        tagging: ClusterTagging,
        *,
        max_age: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._tagging = tagging
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._cluster: tuple[float, dict[str, SecurityGroup]] | None = None
        """The cluster's groups as last read, with this process's rule changes since applied."""
        self._during_read: list[tuple[str, set[Rule], set[Rule] | None]] | None = None
        """Changes made while a read runs (it may or may not see them): applied to its answer."""
        self._reads: Coalescer[str, dict[str, SecurityGroup]] = Coalescer(
            lambda keys: dict.fromkeys(keys, self._read_cluster_groups()), window=0.0
        )

    def describe(self, group_ids: Iterable[str]) -> list[SecurityGroup]:
        ids = sorted(set(group_ids))
        if not ids:
            return []
        answer = self._api.call(
            "ec2", "describe_security_groups", Filters=[{"Name": "group-id", "Values": ids}]
        )
        return list(answer.get("SecurityGroups", ()))

    def find_by_name(self, name: str, vpc_id: str | None = None) -> list[SecurityGroup]:
        filters: list[dict[str, Any]] = [{"Name": "group-name", "Values": [name]}]
        if vpc_id:
            filters.append({"Name": "vpc-id", "Values": [vpc_id]})
        answer = self._api.call("ec2", "describe_security_groups", Filters=filters)
        return list(answer.get("SecurityGroups", ()))

    def cluster_groups(self) -> dict[str, SecurityGroup]:
        """Every group tagged for this cluster, by id, as read within ``max_age`` seconds.

        The node groups' rules grow with every load balancer (a read of them costs the cloud
        more each time), so one read serves the ensures of a burst: concurrent callers share
        it, and every rule this process authorizes or revokes, and every group it deletes, is
        applied to it. Without ``max_age`` each call reads anew."""
        if self._max_age <= 0:
            return self._read_cluster_groups()
        with self._lock:
            known = self._cluster
        if known is not None and self._clock() - known[0] < self._max_age:
            return dict(known[1])
        return dict(self._reads.get(["cluster"])["cluster"])

    def _read_cluster_groups(self) -> dict[str, SecurityGroup]:
        with self._lock:
            self._during_read = []
        try:
            answer = self._api.call(
                "ec2", "describe_security_groups", Filters=[self._tagging.tag_filter()]
            )
        finally:
            with self._lock:
                during, self._during_read = self._during_read or [], None
        groups = {
            str(g["GroupId"]): g
            for g in answer.get("SecurityGroups", ())
            if self._tagging.has_cluster_tag(g.get("Tags"))
        }
        for group_id, add, remove in during:
            _apply(groups, group_id, add, remove)
        with self._lock:
            self._cluster = (self._clock(), groups)
        return groups

    def _applied(self, group_id: str, *, add: set[Rule], remove: set[Rule] | None) -> None:
        """Keep the shared read of the cluster's groups in step with a change made to one
        (``remove`` None: it was deleted)."""
        with self._lock:
            if self._during_read is not None:
                self._during_read.append((group_id, add, remove))
            if self._cluster is not None and group_id in self._cluster[1]:
                at, groups = self._cluster
                groups = dict(groups)
                _apply(groups, group_id, add, remove)
                self._cluster = (at, groups)

    def _forget(self, group_id: str) -> None:
        """A deleted group leaves the shared read."""
        self._applied(group_id, add=set(), remove=None)

    @staticmethod
    def referencing_among(
        groups: Mapping[str, SecurityGroup], group_id: str
    ) -> list[SecurityGroup]:
        """Those of ``groups`` with an ingress rule whose source is ``group_id`` (what
        :meth:`referencing` answers, within ``groups``)."""
        return [group for group in groups.values() if rules_from(group, group_id)]

    def referencing(self, group_id: str) -> list[SecurityGroup]:
        """Groups with an ingress rule whose source is ``group_id``."""
        answer = self._api.call(
            "ec2",
            "describe_security_groups",
            Filters=[{"Name": "ip-permission.group-id", "Values": [group_id]}],
        )
        return list(answer.get("SecurityGroups", ()))

    def ensure(
        self, name: str, description: str, vpc_id: str, extra_tags: Mapping[str, str]
    ) -> SecurityGroup:
        """Group ``name`` in ``vpc_id``, created (and tagged ``owned``) if missing: as the lookup
        by name described it, or, just created, with no ingress rule (as AWS makes a group). So
        its rules are known without reading the group again."""
        existing = self.find_by_name(name, vpc_id)
        if existing:
            group = existing[0]
            self._repair_tags(group)
            return group
        try:
            answer = self._api.call(
                "ec2",
                "create_security_group",
                GroupName=name,
                Description=description,
                VpcId=vpc_id,
                TagSpecifications=[
                    {
                        "ResourceType": "security-group",
                        "Tags": tag_list(self._tagging.owned_tags(extra_tags)),
                    }
                ],
            )
        except AwsApiError as error:
            if error_code(error) != "InvalidGroup.Duplicate":
                raise
            raced = self.find_by_name(name, vpc_id)
            if not raced:
                raise
            return raced[0]
        log.info("created security group %s (%s)", name, answer["GroupId"])
        return {"GroupId": str(answer["GroupId"]), "GroupName": name, "IpPermissions": []}

    def _repair_tags(self, group: SecurityGroup) -> None:
        """Add our ownership tag to an untagged group of ours; refuse another cluster's."""
        if self._tagging.has_cluster_tag(group.get("Tags")):
            return
        foreign = [
            t["Key"]
            for t in group.get("Tags") or ()
            if str(t.get("Key", "")).startswith("kubernetes.io/cluster/")
        ]
        if foreign:
            raise CloudError(
                f"security group {group['GroupId']} belongs to another cluster ({foreign[0]})"
            )
        self._api.call(
            "ec2",
            "create_tags",
            Resources=[group["GroupId"]],
            Tags=tag_list(self._tagging.owned_tags()),
        )

    def set_rules(self, group: SecurityGroup, desired: set[Rule]) -> bool:
        """Make the group's ingress exactly ``desired``; True when something changed."""
        actual = ungroup(group.get("IpPermissions") or ())
        return self.change(str(group["GroupId"]), add=desired - actual, remove=actual - desired)

    def change(self, group_id: str, *, add: set[Rule], remove: set[Rule]) -> bool:
        """Authorize ``add`` and revoke ``remove`` on ``group_id``."""
        if add:
            try:
                self._api.call(
                    "ec2",
                    "authorize_security_group_ingress",
                    GroupId=group_id,
                    IpPermissions=permissions(add),
                )
            except AwsApiError as error:
                if error_code(error) != "InvalidPermission.Duplicate":
                    raise
            self._applied(group_id, add=add, remove=set())
        if remove:
            try:
                self._api.call(
                    "ec2",
                    "revoke_security_group_ingress",
                    GroupId=group_id,
                    IpPermissions=permissions(remove),
                )
            except AwsApiError as error:
                if error_code(error) != "InvalidPermission.NotFound":
                    raise
            self._applied(group_id, add=set(), remove=remove)
        return bool(add or remove)

    def delete_owned(
        self,
        group_ids: Iterable[str],
        *,
        described: Iterable[SecurityGroup] = (),
        unreferenced: Collection[str] = (),
    ) -> None:
        """Delete the groups among ``group_ids`` tagged ``owned`` by this cluster, after removing
        every rule elsewhere that references them. Raise SecurityGroupInUse while AWS still
        reports a dependency (a deleted load balancer's interfaces linger for a while).

        Groups in ``described`` (just read by the caller) are not read again, and the caller
        has already removed the rules that reference those in ``unreferenced``."""
        wanted = set(group_ids)
        known = {str(g["GroupId"]): g for g in described if str(g["GroupId"]) in wanted}
        busy: list[str] = []
        for group in [*known.values(), *self.describe(wanted - set(known))]:
            group_id = str(group["GroupId"])
            if not self._tagging.is_owned(group.get("Tags")):
                log.info("keeping security group %s: not owned by this cluster", group_id)
                continue
            if group_id not in unreferenced:
                self.revoke_references(group_id)
            try:
                self._api.call("ec2", "delete_security_group", GroupId=group_id)
            except AwsApiError as error:
                if error_code(error) == "InvalidGroup.NotFound":
                    self._forget(group_id)
                    continue
                if error_code(error) != "DependencyViolation":
                    raise
                busy.append(group_id)
                continue
            self._forget(group_id)
        if busy:
            raise SecurityGroupInUse(
                f"security groups {', '.join(busy)} are still in use (the load balancer's "
                "network interfaces are being released); will retry"
            )

    def revoke_references(self, group_id: str) -> None:
        """Remove every ingress rule, in other groups, whose source is ``group_id``."""
        for other in self.referencing(group_id):
            self.remove_source(other, group_id)

    def remove_source(self, group: SecurityGroup, source_group_id: str) -> None:
        """Remove the rules of ``group`` whose source is ``source_group_id``."""
        self.change(str(group["GroupId"]), add=set(), remove=rules_from(group, source_group_id))
