"""``polyccm plan``: what the controllers would do right now, found without changing anything.

The cluster is read once (nodes and services, list only) and the cloud through the provider's
read-only paths; the decisions are the controllers' own functions: the cloud-node
controller's :func:`~polyccm.controllers.nodeplan.plan_node_init` (the very plan it applies)
and the rules of :mod:`polyccm.controllers.nodeinfo`, the lifecycle controller's
:func:`~polyccm.controllers.nodelifecycle.lifecycle_actions`, the service controller's choice of
services and backends, the route controller's
:func:`~polyccm.controllers.route.plan_routes`, and the provider's
:class:`~polyccm.ops.contract.LoadBalancerPlanner`, which plans with ensure's own code. Only the
controllers selected by ``--controllers`` are planned, under the conditions the manager starts
them. Output is :mod:`polyccm.ops.render`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from polyccm.app.options import CONTROLLER_ALIASES, ManagerOptions
from polyccm.cloud import CloudProvider, InstanceMetadata, InstancesV2, LoadBalancer, NodeAddress
from polyccm.controllers import nodeinfo, nodelifecycle
from polyccm.controllers.nodeplan import NodeInitPlan, plan_node_init
from polyccm.controllers.route import plan_routes
from polyccm.controllers.service import backend_set, needs_cleanup
from polyccm.errors import CloudError, ImplementedElsewhere, LeadershipLost
from polyccm.objects import UNINITIALIZED_TAINT, Node, Service, wants_load_balancer
from polyccm.ops.contract import (
    DELETE,
    FAIL,
    SKIP,
    UNCHANGED,
    Difference,
    LoadBalancerPlan,
    LoadBalancerPlanner,
    Problem,
)

# Node actions (beside the lifecycle controller's DELETE, TAINT, UNTAINT).
INITIALISE = "initialise"
"""cloud-node would remove the uninitialised taint and set the providerID (unless the node has
one), the labels whose value changes and the addresses (if they change)."""
INITIALISE_FAILS = "initialise-fails"
"""cloud-node would fail to initialise the node (a FailedToInitialize event); it stays tainted."""
INITIALISE_WAITS = "initialise-waits"
"""The cloud asked cloud-node to wait (a RetryAfter, such as a rate limit): the node stays
tainted until it asks again after the delay, and no event is recorded."""
ADDRESSES = "addresses"
"""The address refresh would rewrite an initialised node's addresses."""
LABELS = "labels"
"""cloud-node would make the GA labels of an initialised node match its beta labels."""

BATCH = 100
"""Nodes per bulk metadata lookup, as the cloud-node controller asks."""


class PlanNotSupported(Exception):
    """The provider lacks what planning a selected controller needs (exit status 2)."""


@dataclass(frozen=True)
class NodeChange:
    """What would happen to one node."""

    node: str
    action: str
    provider_id: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    addresses: tuple[tuple[str, str], ...] = ()
    message: str = ""


@dataclass(frozen=True)
class ServicePlan:
    """What the service controller would do for one service."""

    service: str
    """``namespace/name``."""
    plan: LoadBalancerPlan


@dataclass(frozen=True)
class RouteChange:
    """A route the route controller would create or delete."""

    action: str
    """``create`` or ``delete``."""
    node: str
    destination_cidr: str
    name: str = ""


@dataclass(frozen=True)
class Plan:
    """Everything ``polyccm plan`` reports."""

    provider: str
    cluster_name: str
    nodes: tuple[NodeChange, ...] = ()
    load_balancers: tuple[ServicePlan, ...] = ()
    routes: tuple[RouteChange, ...] = ()
    not_planned: tuple[str, ...] = ()
    """Selected controllers that would not start (their capability is missing), with why."""

    @property
    def changes(self) -> bool:
        """Whether anything would change (exit status 1) rather than nothing (0)."""
        return bool(
            self.nodes
            or self.routes
            or any(s.plan.action not in UNCHANGED for s in self.load_balancers)
        )


def make_plan(
    provider: CloudProvider,
    options: ManagerOptions,
    nodes: Sequence[Node],
    services: Sequence[Service],
) -> Plan:
    """The plan for ``nodes`` and ``services`` (everything the cluster has) under ``options``.

    Raises :class:`PlanNotSupported` when the service controller is selected and the provider
    offers load balancers but cannot plan them."""
    selected = options.controllers
    not_planned = [
        f"{name}: a controller of the provider's own; plan does not cover it"
        for name in sorted(selected - set(CONTROLLER_ALIASES))
    ]
    node_changes: list[NodeChange] = []
    instances = provider.instances_v2()
    for controller in ("cloud-node", "cloud-node-lifecycle"):
        if controller in selected and instances is None:
            not_planned.append(f"{controller}: the provider offers no InstancesV2")
    if instances is not None:
        if "cloud-node" in selected:
            node_changes += _cloud_node(instances, nodes)
        if "cloud-node-lifecycle" in selected:
            node_changes += _lifecycle(instances, nodes)
    balancers: list[ServicePlan] = []
    if "service" in selected:
        balancer = provider.load_balancer()
        if balancer is None:
            not_planned.append("service: the provider offers no LoadBalancer")
        else:
            planner = provider.load_balancer_planner()
            if planner is None:
                raise PlanNotSupported(
                    f"provider {options.provider} cannot plan load balancers (it offers no "
                    "LoadBalancerPlanner); pass --controllers=*,-service to plan the rest"
                )
            balancers = _services(options.cluster_name, balancer, planner, nodes, services)
    routes: list[RouteChange] = []
    if options.route_controller_on:
        cloud_routes = provider.routes()
        if cloud_routes is None:
            not_planned.append("route: the provider offers no Routes")
        elif not options.cluster_cidrs:
            not_planned.append("route: no --cluster-cidr")
        else:
            create, delete = plan_routes(
                nodes, cloud_routes.list_routes(options.cluster_name), options.cluster_cidrs
            )
            routes = [RouteChange("create", node.name, cidr) for node, cidr in create]
            routes += [
                RouteChange("delete", r.target_node, r.destination_cidr, r.name) for r in delete
            ]
    return Plan(
        provider=options.provider,
        cluster_name=options.cluster_name,
        nodes=tuple(node_changes),
        load_balancers=tuple(balancers),
        routes=tuple(routes),
        not_planned=tuple(not_planned),
    )


# -- nodes --------------------------------------------------------------------------------------


def _metadata(
    instances: InstancesV2, nodes: Sequence[Node]
) -> dict[str, InstanceMetadata | Exception]:
    """Bulk metadata lookups in the cloud-node controller's batches; a failed batch maps each
    of its nodes to the error."""
    answers: dict[str, InstanceMetadata | Exception] = {}
    for start in range(0, len(nodes), BATCH):
        chunk = nodes[start : start + BATCH]
        try:
            answers.update(instances.instances_metadata(chunk))
        except LeadershipLost:
            raise
        except Exception as error:  # noqa: BLE001 - each node reports the failure
            answers.update({node.name: error for node in chunk})
    return answers


def _cloud_node(instances: InstancesV2, nodes: Sequence[Node]) -> list[NodeChange]:
    tainted = [n for n in nodes if n.has_taint(UNINITIALIZED_TAINT)]
    refreshed = [n for n in nodes if n.provider_id and not n.has_taint(UNINITIALIZED_TAINT)]
    answers = _metadata(instances, tainted + refreshed) if tainted or refreshed else {}
    changes = [_initialisation(plan_node_init(node, answers.get(node.name))) for node in tainted]
    for node in nodes:
        if node.has_taint(UNINITIALIZED_TAINT):
            continue
        fixes = nodeinfo.ga_label_fixes(node.labels)
        if fixes:
            changes.append(NodeChange(node.name, LABELS, labels=fixes))
    for node in refreshed:
        found = answers.get(node.name)
        if not isinstance(found, InstanceMetadata):
            continue
        try:
            addresses = nodeinfo.refreshed_addresses(node, found)
        except ValueError:
            continue  # the refresh logs and skips such a node too
        if addresses is not None:
            changes.append(NodeChange(node.name, ADDRESSES, addresses=_pairs(addresses)))
    return changes


def _initialisation(plan: NodeInitPlan) -> NodeChange:
    """The cloud-node controller's plan for a tainted node, as ``plan`` prints it: exactly
    what the controller would write (providerID only when it sets one, addresses only when
    they change) or why the node stays tainted."""
    if plan.retry_after is not None:
        return NodeChange(plan.node, INITIALISE_WAITS, message=plan.failure)
    if plan.failure:
        return NodeChange(plan.node, INITIALISE_FAILS, message=plan.failure)
    return NodeChange(
        plan.node,
        INITIALISE,
        provider_id=plan.provider_id,
        labels=dict(plan.labels),
        addresses=_pairs(plan.addresses or ()),
    )


def _pairs(addresses: Sequence[NodeAddress]) -> tuple[tuple[str, str], ...]:
    return tuple((a.type, a.address) for a in addresses)


def _lifecycle(instances: InstancesV2, nodes: Sequence[Node]) -> list[NodeChange]:
    return [
        NodeChange(node.name, action, provider_id=node.provider_id)
        for node, action in nodelifecycle.lifecycle_actions(nodes, instances)
    ]


# -- services -----------------------------------------------------------------------------------


def _services(
    cluster_name: str,
    balancer: LoadBalancer,
    planner: LoadBalancerPlanner,
    nodes: Sequence[Node],
    services: Sequence[Service],
) -> list[ServicePlan]:
    backends = backend_set(nodes)
    plans: list[ServicePlan] = []
    for service in sorted(services, key=lambda s: s.key):
        if needs_cleanup(service):
            plans.append(ServicePlan(service.key, _deletion(cluster_name, balancer, service)))
        elif wants_load_balancer(service) and service.deletion_timestamp is None:
            plans.append(
                ServicePlan(service.key, _ensure(cluster_name, planner, service, backends))
            )
    return plans


def _ensure(
    cluster_name: str, planner: LoadBalancerPlanner, service: Service, backends: Sequence[Node]
) -> LoadBalancerPlan:
    try:
        return planner.plan_load_balancer(cluster_name, service, backends)
    except ImplementedElsewhere:
        return LoadBalancerPlan(SKIP)
    except CloudError as error:
        return LoadBalancerPlan(FAIL, problems=(Problem.error(str(error)),))


def _deletion(cluster_name: str, balancer: LoadBalancer, service: Service) -> LoadBalancerPlan:
    """The service holds the finalizer but wants no load balancer: the controller deletes the
    load balancer (if the cloud still has it) and removes the finalizer."""
    name = balancer.get_load_balancer_name(cluster_name, service)
    try:
        existing = balancer.get_load_balancer(cluster_name, service)
    except ImplementedElsewhere:
        existing = None
    except CloudError as error:
        return LoadBalancerPlan(DELETE, name, problems=(Problem.error(str(error)),))
    differences = [Difference("finalizer", "remove service.kubernetes.io/load-balancer-cleanup")]
    if existing is not None:
        differences.insert(0, Difference("load-balancer", f"delete {name}"))
    return LoadBalancerPlan(DELETE, name, differences=tuple(differences))
