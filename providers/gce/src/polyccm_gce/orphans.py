"""``polyccm orphans`` for GCE: the cluster's forwarding rules, target pools, backend services,
firewalls, health checks (legacy HTTP ones and the ``healthChecks`` API's), instance groups
and routes that no Service or Node accounts for.

GCE resources carry no tags, so the marks are names, descriptions and what a piece points at,
as upstream and polyccm make them:

* **A Service's load balancer** ``<lb>`` (``a`` + UID, 32 characters): the forwarding rule and
  target pool ``<lb>``, the firewalls ``k8s-fw-<lb>`` and ``k8s-<lb>-http-hc``, the health
  check ``<lb>``; each described ``{"kubernetes.io/service-name": ...}``. Those names alone say
  nothing of the cluster (``<lb>`` has no cluster in it), so the pieces of one ``<lb>`` are taken
  for this cluster's only when one of them shows it: the pool uses this cluster's shared health
  check ``k8s-<cluster-id>-node``, or holds the instance of one of its Nodes, or a firewall
  targets only its nodes' network tags (``node-tags``, else the tags its instances carry). They
  are orphans, all together, when no Service claims ``<lb>``. The deny firewall
  ``k8s-fw-<lb>-deny`` (``--enable-l4-deny-firewall``) is one of them.
* **An internal load balancer** ``<lb>``: the forwarding rule, the regional backend service
  and (``externalTrafficPolicy: Local``) the health check ``<lb>`` of the ``healthChecks`` API,
  described as above, the firewall ``k8s-fw-<lb>``, and ``<lb>-hc`` (upstream gives it no
  description: its name and its targets mark it); the backend service using this cluster's
  instance group ``k8s-ig--<cluster-id>`` or shared check ``k8s-<cluster-id>-node`` shows the
  cluster.
* **The internal load balancers' shared pieces** (upstream's gce_loadbalancer_internal.go):
  the instance groups ``k8s-ig--<cluster-id>`` in the region's zones, the ``healthChecks`` API's
  ``k8s-<cluster-id>-node`` with its firewall ``k8s-<cluster-id>-node-hc``, and the shared
  backend services ``k8s-<cluster-id>-internal-...``: orphans when no backend service (or, for
  those, forwarding rule) outside the orphans uses them and no claiming Service is internal
  (whatever nodes the groups hold: no load balancer needs them).
* **The shared health check** ``k8s-<cluster-id>-node`` and its firewall
  ``k8s-<cluster-id>-node-http-hc``: orphans when no target pool outside the orphans uses the
  check and no claiming Service would (``externalTrafficPolicy: Cluster``).
* **Routes** named ``<cluster[:26]>-<node UID>``, described ``k8s-node-route``, on the
  cluster's network (the route controller's own listing): orphans when their next-hop instance
  is no Node's (the route controller's mapping, from providerIDs).

Deletion order: forwarding rules and routes, then target pools and backend services, then
health checks, instance groups and firewalls. Each piece is read again first and kept (an
error) when it no longer carries its marks; "in use" is retried shortly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from polyccm.cloud import Route
from polyccm.errors import CloudError, RetryAfter
from polyccm.objects import Node, Service
from polyccm.ops.contract import CloudResource, Orphans, claims_load_balancer
from polyccm.ops.orphans import unclaimed_reason

from polyccm_gce.api import GceApi, GceApiError, Json
from polyccm_gce.descriptions import SERVICE_NAME, decoded
from polyccm_gce.internal_lb import group_name, is_internal
from polyccm_gce.internal_lb import health_check_firewall_name as internal_check_firewall
from polyccm_gce.load_balancer import (
    GceLoadBalancer,
    deny_name,
    firewall_name,
    health_check_firewall_name,
    nodes_health_check_name,
)
from polyccm_gce.naming import NodeDirectory, instance_ref, last
from polyccm_gce.routes import DESCRIPTION, GceRoutes, route_prefix
from polyccm_gce.sdk import compute_v1

FORWARDING_RULE, TARGET_POOL, HEALTH_CHECK, FIREWALL, ROUTE = (
    "forwarding-rule",
    "target-pool",
    "http-health-check",
    "firewall",
    "route",
)
BACKEND_SERVICE, CHECK, INSTANCE_GROUP = "backend-service", "health-check", "instance-group"
ORDER = {FORWARDING_RULE: 0, ROUTE: 0, TARGET_POOL: 1, BACKEND_SERVICE: 1, HEALTH_CHECK: 2,
         CHECK: 2, INSTANCE_GROUP: 2, FIREWALL: 2}  # fmt: skip
LOAD_BALANCER_NAME = re.compile(r"a[0-9a-f]{31}")
NODE_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
IN_USE_RETRY_SECONDS = 5.0
FIREWALL_PREFIX = firewall_name("")
CHECK_FIREWALL_AROUND = tuple(health_check_firewall_name("", "\0", shared=False).split("\0"))
DENY_SUFFIX = deny_name("").removeprefix(FIREWALL_PREFIX)
INTERNAL_CHECK_SUFFIX = internal_check_firewall("")
BY_NAME = "markedByName"
"""A detail of a piece upstream gives no description: its name is its mark."""


def described_service(description: str) -> str | None:
    """The ``kubernetes.io/service-name`` of a description, or None (no such JSON)."""
    value = (decoded(description) or {}).get(SERVICE_NAME)
    return value if isinstance(value, str) and value else None


def _load_balancer_of_firewall(name: str) -> str | None:
    """``<lb>`` of ``k8s-fw-<lb>``, ``k8s-fw-<lb>-deny``, ``k8s-<lb>-http-hc`` or (internal)
    ``<lb>-hc``."""
    head, tail = CHECK_FIREWALL_AROUND
    if name.startswith(FIREWALL_PREFIX):
        inner = name.removeprefix(FIREWALL_PREFIX)
        if inner.endswith(DENY_SUFFIX):
            inner = inner.removesuffix(DENY_SUFFIX)
    elif name.endswith(INTERNAL_CHECK_SUFFIX) and not name.startswith("k8s-"):
        inner = name.removesuffix(INTERNAL_CHECK_SUFFIX)
    elif name.startswith(head) and name.endswith(tail):
        inner = name[len(head) : len(name) - len(tail)]
    else:
        return None
    return inner if LOAD_BALANCER_NAME.fullmatch(inner) else None


@dataclass
class _LoadBalancer:
    """The pieces found under one ``<lb>`` name, and what shows they are this cluster's."""

    name: str
    pieces: list[tuple[str, str]] = field(default_factory=list)
    by_name: set[tuple[str, str]] = field(default_factory=set)
    """Pieces marked by their name alone (no description)."""
    services: list[str] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)

    @property
    def service(self) -> str:
        """The Service the pieces were made for (upstream describes a health check by its own
        name, not the Service's)."""
        return next((s for s in self.services if "/" in s), "")


class _Groups:
    """The load balancers' pieces by ``<lb>`` name."""

    def __init__(self) -> None:
        self.found: dict[str, _LoadBalancer] = {}

    def piece(
        self, kind: str, name: str, lb_name: str, description: str, *, by_name: bool = False
    ) -> _LoadBalancer | None:
        """Count a piece under ``<lb>`` when its description names a Service (or ``by_name``:
        its name is its mark); the group, or None when it is no load balancer's."""
        service = described_service(description)
        if not LOAD_BALANCER_NAME.fullmatch(lb_name) or (service is None and not by_name):
            return None
        group = self.found.setdefault(lb_name, _LoadBalancer(lb_name))
        group.pieces.append((kind, name))
        if service is None:
            group.by_name.add((kind, name))
        else:
            group.services.append(service)
        return group

    def internal(self, backends: Sequence[Any], checks: Sequence[Any], cluster_id: str) -> None:
        """Internal load balancers' backend services (marked by this cluster's instance group
        or shared check) and per-Service health checks."""
        instance_group, shared = group_name(cluster_id), nodes_health_check_name(cluster_id)
        for backend in backends:
            group = self.piece(BACKEND_SERVICE, backend.name, backend.name, backend.description)
            if group is None:
                continue
            if instance_group in {last(b.group) for b in backend.backends}:
                group.marks.append(f"backend service uses instance group {instance_group}")
            if shared in {last(url) for url in backend.health_checks}:
                group.marks.append(f"backend service uses health check {shared}")
        for check in checks:
            self.piece(CHECK, check.name, check.name, check.description)


class GceOrphans(Orphans):
    """Finds and deletes this cluster's leaked load-balancer pieces and routes."""

    def __init__(self, balancer: GceLoadBalancer, routes: GceRoutes) -> None:
        self._lb = balancer
        self._api: GceApi = balancer.api
        self._routes = routes

    # -- reading ----------------------------------------------------------------------------------

    def _health_checks(self) -> list[Json]:
        """Every legacy HTTP health check (REST, in pages)."""
        found: list[Json] = []
        token = ""
        while True:
            query = "?maxResults=500" + (f"&pageToken={token}" if token else "")
            page = self._api.rest("compute.httpHealthChecks.list", "GET", _CHECKS + query)
            found += page.get("items") or []
            token = str(page.get("nextPageToken") or "")
            if not token:
                return found

    def _listed(self) -> tuple[list[Any], list[Any], list[Any], list[Json]]:
        lb = self._lb
        return (
            self._api.items(lb._rules.list, region=lb.region),
            self._api.items(lb._pools.list, region=lb.region),
            self._api.items(lb._firewalls.list, project=lb.network_project),
            self._health_checks(),
        )

    def _internal_listed(self, group: str) -> tuple[list[Any], list[Any], list[tuple[str, Any]]]:
        """The region's backend services, the ``healthChecks`` API's checks, and the instance
        groups named ``group`` in the region's zones (zone, group)."""
        lb = self._lb
        backends = self._api.items(
            self._api.client(compute_v1.RegionBackendServicesClient).list, region=lb.region
        )
        checks = self._api.items(self._api.client(compute_v1.HealthChecksClient).list)
        zones = self._api.items(
            self._api.client(compute_v1.ZonesClient).list, filter=f'name eq "{lb.region}-.*"'
        )
        groups_client = self._api.client(compute_v1.InstanceGroupsClient)
        groups = [
            (zone.name, item)
            for zone in sorted(zones, key=lambda z: str(z.name))
            for item in self._api.items(
                groups_client.list, zone=zone.name, filter=f'name eq "{group}"'
            )
        ]
        return backends, checks, groups

    # -- finding ----------------------------------------------------------------------------------

    def find_orphans(
        self, cluster_name: str, services: Sequence[Service], nodes: Sequence[Node]
    ) -> list[CloudResource]:
        lb = self._lb
        claiming = [s for s in services if claims_load_balancer(s)]
        claimed = {lb.get_load_balancer_name(cluster_name, s) for s in claiming}
        directory = NodeDirectory().learn(nodes)
        tags = frozenset(lb._target_tags(nodes)) if nodes else frozenset()
        shared = nodes_health_check_name(lb.cluster_id())
        rules, pools, firewalls, checks = self._listed()
        cluster_id = lb.cluster_id()
        backends, checks_v2, instance_groups = self._internal_listed(group_name(cluster_id))
        groups = _Groups()
        piece = groups.piece

        for rule in rules:
            piece(FORWARDING_RULE, rule.name, rule.name, rule.description)
        for pool in pools:
            group = piece(TARGET_POOL, pool.name, pool.name, pool.description)
            if group is None:
                continue
            if shared in {last(url) for url in pool.health_checks}:
                group.marks.append(f"pool uses health check {shared}")
            for url in pool.instances:
                ref = instance_ref(url)
                node = directory.node_at(ref.zone, ref.name) if ref else None
                if node is not None:
                    group.marks.append(f"pool holds node {node}'s instance")
                    break
        groups.internal(backends, checks_v2, cluster_id)
        for firewall in firewalls:
            owner = _load_balancer_of_firewall(firewall.name)
            internal_hc = firewall.name == internal_check_firewall(owner or "")
            group = piece(FIREWALL, firewall.name, owner or "", firewall.description,
                          by_name=internal_hc and not firewall.description)  # fmt: skip
            targets = set(firewall.target_tags)
            if group is not None and targets and targets <= tags:
                group.marks.append(f"firewall targets node tags {', '.join(sorted(targets))}")
        for check in checks:
            name = str(check.get("name", ""))
            piece(HEALTH_CHECK, name, name, str(check.get("description", "")))

        found: list[CloudResource] = []
        orphaned: set[str] = set()
        for group in groups.found.values():
            if group.name in claimed or not group.marks:
                continue
            orphaned.add(group.name)
            found += self._resources(group, services)
        found += self._shared(
            shared,
            in_use=any(
                shared in {last(url) for url in pool.health_checks}
                for pool in pools
                if pool.name not in orphaned
            )
            or any(lb._health_check_of(s, "")[2] for s in claiming),
            checks=checks,
            firewalls=firewalls,
        )
        found += self._internal_shared(
            cluster_id,
            claiming=claiming,
            orphaned=orphaned,
            rules=rules,
            backends=backends,
            checks=checks_v2,
            groups=instance_groups,
            firewalls=firewalls,
        )
        found += self._orphan_routes(cluster_name, nodes, directory)
        return found

    def _internal_shared(
        self,
        cluster_id: str,
        *,
        claiming: Sequence[Service],
        orphaned: set[str],
        rules: Sequence[Any],
        backends: Sequence[Any],
        checks: Sequence[Any],
        groups: Sequence[tuple[str, Any]],
        firewalls: Sequence[Any],
    ) -> list[CloudResource]:
        """The internal load balancers' shared pieces no live one uses or would use."""
        internal = [s for s in claiming if is_internal(s)]
        kept_backends = [b for b in backends if b.name not in orphaned]
        used_groups = {last(b.group) for bs in kept_backends for b in bs.backends}
        used_checks = {last(url) for bs in kept_backends for url in bs.health_checks}
        used_backends = {last(r.backend_service) for r in rules if r.name not in orphaned}
        shared_check = nodes_health_check_name(cluster_id)
        found: list[tuple[str, str, str, dict[str, str]]] = []
        mark = f"(cluster id {cluster_id})"
        if not internal:
            found += [
                (INSTANCE_GROUP, f"{zone}/{item.name}", "no internal load balancer uses it",
                 {"zone": zone, "instanceGroup": item.name})
                for zone, item in groups if item.name not in used_groups
            ]  # fmt: skip
        check_needed = shared_check in used_checks or any(
            s.external_traffic_policy != "Local" for s in internal
        )
        if not check_needed:
            reason = "no internal load balancer uses the shared health check"
            if any(c.name == shared_check for c in checks):
                found.append((CHECK, shared_check, reason, {}))
            firewall = internal_check_firewall(shared_check)
            if any(f.name == firewall for f in firewalls):
                found.append((FIREWALL, firewall, reason, {}))
        prefix = f"k8s-{cluster_id}-internal-"
        found += [
            (BACKEND_SERVICE, b.name, "no internal forwarding rule uses the shared backend "
             "service", {})
            for b in backends
            if b.name.startswith(prefix) and b.name not in used_backends and not internal
        ]  # fmt: skip
        return [
            CloudResource(
                kind=kind,
                id=name,
                mark=f"name {details.get('instanceGroup', name)} {mark}",
                reason=reason,
                delete_order=ORDER[kind],
                name=details.get("instanceGroup", ""),
                details={"clusterId": cluster_id, **details},
            )
            for kind, name, reason, details in found
        ]

    def _resources(
        self, group: _LoadBalancer, services: Sequence[Service]
    ) -> Iterator[CloudResource]:
        service = group.service
        reason = unclaimed_reason(
            group.name, service, services, lambda s: self._lb.get_load_balancer_name("", s)
        )
        mark = f"{group.marks[0]}, {SERVICE_NAME}={service or group.name}"
        for kind, name in group.pieces:
            by_name = {BY_NAME: "true"} if (kind, name) in group.by_name else {}
            yield CloudResource(
                kind=kind,
                id=name,
                mark=mark,
                reason=reason,
                delete_order=ORDER[kind],
                details={"loadBalancer": group.name, "service": service, **by_name},
            )

    def _shared(
        self, shared: str, *, in_use: bool, checks: Sequence[Json], firewalls: Sequence[Any]
    ) -> list[CloudResource]:
        """The shared health check and its firewall, when nothing uses or will use them."""
        if in_use:
            return []
        cluster_id = self._lb.cluster_id()
        firewall = health_check_firewall_name(cluster_id, shared, shared=True)
        present = [(HEALTH_CHECK, shared)] if any(c.get("name") == shared for c in checks) else []
        if any(f.name == firewall for f in firewalls):
            present.append((FIREWALL, firewall))
        return [
            CloudResource(
                kind=kind,
                id=name,
                mark=f"name {name} (cluster id {cluster_id})",
                reason="no load balancer of a live Service uses the shared health check",
                delete_order=ORDER[kind],
                details={"clusterId": cluster_id},
            )
            for kind, name in present
        ]

    def _orphan_routes(
        self, cluster_name: str, nodes: Sequence[Node], directory: NodeDirectory
    ) -> list[CloudResource]:
        prefix = route_prefix(cluster_name)
        names = {node.name for node in nodes}
        routes = GceRoutes(
            self._api, self._routes.lookup, directory, network_url=self._routes.network_url
        )
        found = []
        for route in routes.list_routes(cluster_name):
            if not NODE_UID.fullmatch(route.name.removeprefix(prefix)):
                continue
            if route.target_node in names:
                continue
            gone = "; its instance is gone too" if route.blackhole else ""
            found.append(
                CloudResource(
                    kind=ROUTE,
                    id=route.name,
                    mark=f"name {prefix}<node uid>, description {DESCRIPTION}, this network",
                    reason=f"node {route.target_node} no longer exists{gone}",
                    delete_order=ORDER[ROUTE],
                    details={"destination": route.destination_cidr, "node": route.target_node},
                )
            )
        return found

    # -- deleting ---------------------------------------------------------------------------------

    def delete_orphan(self, cluster_name: str, resource: CloudResource) -> None:
        lb, name = self._lb, resource.id
        try:
            if resource.kind == FORWARDING_RULE:
                rule = lb._rule(name)
                if rule is not None:
                    _still_marked(resource, rule.description)
                    lb._delete(lb._rules.delete_unary, region=lb.region, forwarding_rule=name)
            elif resource.kind == TARGET_POOL:
                pool = lb._pool(name)
                if pool is not None:
                    _still_marked(resource, pool.description)
                    lb._delete(lb._pools.delete_unary, region=lb.region, target_pool=name)
            elif resource.kind == FIREWALL:
                # In a Shared VPC's host project (gce.conf network-project-id), as ensure.
                project = lb.network_project
                firewall = lb._get(lb._firewalls.get, project=project, firewall=name)
                if firewall is not None:
                    _still_marked(resource, firewall.description)
                    lb._delete(lb._firewalls.delete_unary, project=project, firewall=name)
            elif resource.kind == HEALTH_CHECK:
                check = lb._check_get(name)
                if check is not None:
                    _still_marked(resource, str(check.get("description", "")))
                    lb._delete_check(name)
            elif resource.kind == BACKEND_SERVICE:
                backends = self._api.client(compute_v1.RegionBackendServicesClient)
                backend = lb._get(backends.get, region=lb.region, backend_service=name)
                if backend is not None:
                    _still_marked(resource, backend.description)
                    lb._delete(backends.delete_unary, region=lb.region, backend_service=name)
            elif resource.kind == CHECK:
                checks = self._api.client(compute_v1.HealthChecksClient)
                check_v2 = lb._get(checks.get, health_check=name)
                if check_v2 is not None:
                    _still_marked(resource, check_v2.description)
                    lb._delete(checks.delete_unary, health_check=name)
            elif resource.kind == INSTANCE_GROUP:
                zone, group = resource.details["zone"], resource.details["instanceGroup"]
                lb._delete(
                    self._api.client(compute_v1.InstanceGroupsClient).delete_unary,
                    zone=zone,
                    instance_group=group,
                )
            elif resource.kind == ROUTE:
                self._delete_route(cluster_name, name)
            else:
                raise CloudError(f"unknown kind of resource {resource.kind!r}")
        except GceApiError as error:
            if error.in_use:
                raise RetryAfter(str(error), IN_USE_RETRY_SECONDS) from error
            raise

    def _delete_route(self, cluster_name: str, name: str) -> None:
        client = self._api.client(compute_v1.RoutesClient)
        try:
            route = self._api.invoke(client.get, project=self._api.project, route=name)
        except GceApiError as error:
            if error.not_found:
                return
            raise
        own_network = last(route.network) == last(self._routes.network_url)
        if not (
            route.name.startswith(route_prefix(cluster_name))
            and route.description == DESCRIPTION
            and own_network
        ):
            raise CloudError(f"route {name} no longer carries this cluster's marks; kept")
        self._routes.delete_route(cluster_name, Route(name, "", route.dest_range))


_CHECKS = "global/httpHealthChecks"


def _still_marked(resource: CloudResource, description: str) -> None:
    """A load-balancer piece still describes its Service (the shared pieces are marked by their
    name, which is what was read)."""
    if resource.details.get("clusterId") or resource.details.get(BY_NAME):
        return
    if described_service(description) is None:
        raise CloudError(
            f"{resource.kind} {resource.id} no longer carries this cluster's marks; kept"
        )
