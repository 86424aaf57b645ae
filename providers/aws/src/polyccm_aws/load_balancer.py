"""The LoadBalancer capability: validate the service, pick ELB or NLB, and guard the edges.

Every ensure starts with :func:`~polyccm_aws.lb_spec.build_spec`, so invalid annotations are
refused before any cloud call; values upstream reads leniently come back as warnings in the
status. A load balancer of the other type under the service's name means the type annotation
changed after creation, which upstream forbids: refused too, rather than leaving the old one
behind. Backend updates need only the load balancer itself, so they go on when the service's
annotations stop validating. Deletion looks for both types, so a changed annotation cannot leak
a load balancer, and finishes interrupted creates and deletions (security groups still in use
are retried after a short fixed delay).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from polyccm.cloud import LoadBalancer, LoadBalancerStatus
from polyccm.errors import ImplementedElsewhere, InvalidServiceSpec, RetryAfter
from polyccm.objects import Node, Service

from polyccm_aws import annotations as ann
from polyccm_aws.api import AwsApi, AwsApiError
from polyccm_aws.config import CloudConfig
from polyccm_aws.elb import ClassicElb, elb_status
from polyccm_aws.instance_store import Instance, InstanceStore, state_of
from polyccm_aws.lb_spec import HealthProbeDefaults, LoadBalancerSpec, build_spec
from polyccm_aws.network import Network
from polyccm_aws.nlb import NetworkLb, nlb_status
from polyccm_aws.node_directory import NodeDirectory
from polyccm_aws.security_groups import SecurityGroupInUse, SecurityGroups
from polyccm_aws.tagging import ClusterTagging
from polyccm_aws.zones import Zones

log = logging.getLogger(__name__)
T = TypeVar("T")
SECURITY_GROUP_RETRY_SECONDS = 10.0
BACKEND_MAX_AGE = 600.0
"""How old a cached backend instance may be (upstream's ELB instance cache: 10 minutes). A new
node's instance is always looked up; one the node controller or the lifecycle controller has
just read is reused, so load balancers made after a burst of nodes cost no DescribeInstances.
An instance the cloud refuses as a target (it stopped meanwhile) is looked up afresh."""
NETWORK_MAX_AGE = 30.0
"""How long one listing of the VPC's subnets and route tables, and of which security groups are
the cluster's, serves the load balancers ensured meanwhile (a subnet or node group tagged anew
is used within this long)."""
REFUSED_TARGET_CODES = frozenset({"InvalidTarget", "InvalidInstance"})
"""ELBv2's and the classic ELB's error for an instance that cannot be registered."""


def _lenient_groups(service: Service, annotation: str) -> tuple[str, ...]:
    """The groups named by ``annotation``, ignoring invalid entries (used when deleting)."""
    return tuple(
        g for g in (ann.parse_list(service.annotations, annotation) or ()) if g.startswith("sg-")
    )


class AwsLoadBalancer(LoadBalancer):
    """Classic ELBs and NLBs for services of type LoadBalancer."""

    def __init__(
        self,
        api: AwsApi,
        config: CloudConfig,
        tagging: ClusterTagging,
        *,
        store: InstanceStore,
        zones: Zones,
        directory: NodeDirectory,
    ) -> None:
        max_age = NETWORK_MAX_AGE if store.caches else 0.0
        groups = SecurityGroups(api, tagging, max_age=max_age)
        network = Network(api, config, tagging, zones, max_age=max_age)
        self._store = store
        self._directory = directory
        self._probe = HealthProbeDefaults.from_config(config)
        self._elb = ClassicElb(api, config, tagging, groups, network)
        self._nlb = NetworkLb(api, config, tagging, groups, network)
        self._selected: tuple[tuple[Node, ...], tuple[tuple[str, str], ...], list[str]] | None = (
            None
        )
        """The last backend nodes given, a ``target-node-labels`` choice, and the instance ids
        it selected: the service controller gives every ensure of a burst the same node
        objects (one list per node cache version), so a thousand nodes are read once, not once
        per Service."""

    def _spec(self, service: Service) -> LoadBalancerSpec:
        spec = build_spec(service, self._probe)
        for warning in spec.warnings:
            log.warning("service %s: %s", service.key, warning)
        return spec

    def _backends(
        self, target_node_labels: Mapping[str, str], nodes: Sequence[Node]
    ) -> dict[str, Instance]:
        """Live (not terminated) instances of the nodes selected by ``target-node-labels``, by
        id, from one batched lookup; each kind registers only the running ones."""
        given = tuple(nodes)
        labels = tuple(sorted(target_node_labels.items()))
        selected = self._selected
        if selected is not None and selected[1] == labels and selected[0] == given:
            ids = selected[2]  # the same node objects (compared by identity first)
        else:
            ids = self._instance_ids(target_node_labels, given)
            self._selected = (given, labels, ids)
        found = self._store.by_ids(ids, max_age=BACKEND_MAX_AGE) if ids else {}
        return {
            instance_id: instance
            for instance_id, instance in found.items()
            if instance is not None and state_of(instance) != "terminated"
        }

    def _instance_ids(
        self, target_node_labels: Mapping[str, str], nodes: Sequence[Node]
    ) -> list[str]:
        """The instance ids of the nodes ``target-node-labels`` selects (each node learnt by
        the node directory on the way)."""
        ids: list[str] = []
        for node in nodes:
            if target_node_labels and not all(
                key in node.labels and (not value or node.labels[key] == value)
                for key, value in target_node_labels.items()
            ):
                continue
            instance_id = self._directory.remember_node(node)
            if instance_id is None:
                log.warning("node %s has no usable providerID; not a backend", node.name)
                continue
            ids.append(instance_id)
        return ids

    def get_load_balancer(self, cluster_name: str, service: Service) -> LoadBalancerStatus | None:
        if ann.is_external(service.annotations):
            return None
        name = self.get_load_balancer_name(cluster_name, service)
        if service.annotations.get(ann.TYPE) == ann.NLB:
            description = self._nlb.describe(name)
            return nlb_status(description) if description is not None else None
        description = self._elb.describe(name)
        return elb_status(description) if description is not None else None

    def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        spec = self._spec(service)
        name = self.get_load_balancer_name(cluster_name, service)
        if spec.is_nlb:
            existing = self._nlb.describe(name)
            if existing is None and self._elb.describe(name) is not None:
                raise self._type_changed(name, "a classic ELB", ann.NLB)
            instances = self._backends(spec.target_node_labels, nodes)
            status = self._guard(
                lambda: self._nlb.ensure(
                    service, spec, name, instances, existing, cluster_name=cluster_name
                ),
                instances,
            )
        else:
            existing_elb = self._elb.describe(name)
            if existing_elb is None and self._nlb.describe(name) is not None:
                raise self._type_changed(name, "an NLB", "classic")
            instances = self._backends(spec.target_node_labels, nodes)
            status = self._guard(
                lambda: self._elb.ensure(service, spec, name, instances, existing_elb), instances
            )
        return dataclasses.replace(status, warnings=status.warnings + spec.warnings)

    @staticmethod
    def _type_changed(name: str, actual: str, wanted: str) -> InvalidServiceSpec:
        return InvalidServiceSpec(
            f"annotation {ann.TYPE}: the load balancer type cannot change after creation "
            f"({name} is {actual}, the annotation asks for {wanted}); restore the annotation, "
            "or delete and re-create the service"
        )

    def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        if ann.is_external(service.annotations):
            raise ImplementedElsewhere(f"service {service.key} is managed by another controller")
        name = self.get_load_balancer_name(cluster_name, service)
        try:
            spec: LoadBalancerSpec | None = self._spec(service)
        except InvalidServiceSpec as error:
            # The load balancer exists and its nodes change: keep it serving. What the update
            # needs is read from the load balancer itself (and leniently from annotations).
            log.warning(
                "service %s: %s; updating the backends of its load balancer anyway",
                service.key,
                error,
            )
            spec = None
        annotations = service.annotations
        if spec is not None:
            labels, is_nlb = spec.target_node_labels, spec.is_nlb
        else:
            labels = ann.parse_key_values(annotations, ann.TARGET_NODE_LABELS)
            is_nlb = annotations.get(ann.TYPE) == ann.NLB
        instances = self._backends(labels, nodes)
        if is_nlb:
            self._guard(lambda: self._nlb.update(spec, name, instances), instances)
        else:
            annotated = _lenient_groups(service, ann.SECURITY_GROUPS)
            extra = _lenient_groups(service, ann.EXTRA_SECURITY_GROUPS)
            self._guard(lambda: self._elb.update(name, instances, annotated, extra), instances)

    def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        if ann.is_external(service.annotations):
            return
        name = self.get_load_balancer_name(cluster_name, service)
        annotated = _lenient_groups(service, ann.SECURITY_GROUPS)
        extra = _lenient_groups(service, ann.EXTRA_SECURITY_GROUPS)

        def delete_nlb() -> bool:
            return self._nlb.delete(service, name, cluster_name=cluster_name, annotated=annotated)

        def delete_elb() -> bool:
            return self._elb.delete(service, name, annotated=annotated, extra=extra)

        order = (delete_nlb, delete_elb)
        if service.annotations.get(ann.TYPE) != ann.NLB:
            order = (delete_elb, delete_nlb)
        for delete in order:
            if self._guard(delete):
                return

    def _guard(self, action: Callable[[], T], instances: Mapping[str, Instance] | None = None) -> T:
        try:
            return action()
        except SecurityGroupInUse as error:
            raise RetryAfter(str(error), SECURITY_GROUP_RETRY_SECONDS) from error
        except AwsApiError as error:
            if instances and error.code in REFUSED_TARGET_CODES:
                self._store.invalidate(instances)  # the retry reads their state afresh
            raise
