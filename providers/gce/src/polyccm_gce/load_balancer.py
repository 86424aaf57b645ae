"""The legacy network load balancer, built as cloud-provider-gcp builds it, with its names.

For a service whose load balancer is named ``<lb>`` (``a`` + UID without dashes, 32 chars),
in the order ensure makes them:

* an HTTP health check: the shared ``k8s-<cluster-id>-node`` (kube-proxy's ``:10256/healthz``)
  for ``externalTrafficPolicy: Cluster``, or ``<lb>`` on the service's ``healthCheckNodePort``
  (``/healthz``) for ``Local``;
* the target pool ``<lb>`` in the cluster's region with the nodes' instances (created with the
  first 200, the rest added 1,000 at a time) and the health check;
* the forwarding rule ``<lb>`` (the service ports' range, TCP or UDP) to the pool, on the
  ``loadBalancerIP`` when set (a static address the user reserved in the region), in the
  network tier of ``cloud.google.com/network-tier`` (PREMIUM without it; with it, a rule or an
  address ``<lb>`` of the other tier is deleted first, as upstream);
* a health-check firewall from Google's prober ranges: ``k8s-<cluster-id>-node-http-hc`` for
  the shared check, ``k8s-<lb>-http-hc`` (to the rule's address) for a per-service one;
* the firewall ``k8s-fw-<lb>`` letting ``spec.loadBalancerSourceRanges``, else the
  ``service.beta.kubernetes.io/load-balancer-source-ranges`` annotation (default anywhere;
  compared as networks), reach the service ports (consecutive ones as a range) at the rule's
  address (``destinationRanges``, as upstream) on the nodes' network tags: ``node-tags`` from
  gce.conf, else per instance the longest tag that prefixes its name (upstream's
  ``computeHostTags``; an instance without one is an error before any write, so no firewall is
  ever made without targets).

A change the rule cannot take in place (ports, protocol, ``loadBalancerIP``, a pool made again
for its session affinity) deletes and re-creates it on the same address: the rule's ephemeral
address is held as the static address ``<lb>`` meanwhile and released after, as upstream; an
``externalTrafficPolicy`` flip swaps the pool's health check and deletes the one it no longer
uses with its firewall (the shared one once no pool uses it).

The firewalls come last because they name the rule's address (upstream reserves the address
first instead); the service's status is written only once all are there. Descriptions are
upstream's exact bytes (:mod:`polyccm_gce.descriptions`), read by what they say. Each piece is
read first and written only when missing or different (but a new load balancer, one without
its forwarding rule, inserts its own pool and firewalls at once, and reads one only when GCE
answers 409 that it exists), so a second ensure writes nothing, and
a load balancer cloud-provider-gcp made (the same names) is adopted, not doubled (its
firewall's ports, consecutive ones merged into ranges as upstream writes them, count as the
same ports); when the rule's address changes (a new ``loadBalancerIP``), the firewalls follow
it. The shared check's firewall gets no destination: upstream gives it the address of whichever
load balancer made it first, and compares it with nothing. Validation
(:mod:`polyccm_gce.service_spec`) comes before any call.
Delete removes them as upstream does: the service's firewall while the address ``<lb>`` (one
an interrupted edit left), the rule, the pool and the health checks go in turn; the shared
health check and its firewall go when the last pool using them is gone. The internal load
balancer (``networking.gke.io/load-balancer-type: Internal``: backend services and instance
groups) is :mod:`polyccm_gce.internal_lb`'s: ensure, update and delete hand such a service to
it (and a rule of the other scheme is deleted first, as upstream does when a Service changes
scheme).
A service GKE's regional backend-service controller owns (``cloud.google.com/l4-rbs: enabled``,
its finalizers, or a forwarding rule ``<lb>`` with a backend service) is neither built, updated
nor deleted: :class:`~polyccm.errors.ImplementedElsewhere`, as upstream answers. Upstream puts
its own finalizer ``gke.networking.io/l4-netlb-v1`` on the Services it serves and removes it
once their load balancer is deleted; delete removes it too (with the Kubernetes API the
provider gets at each term), so a Service upstream served is not left terminating for ever
after the switch.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from polyccm.cloud import LoadBalancer, LoadBalancerIngress, LoadBalancerStatus
from polyccm.errors import CloudError, ImplementedElsewhere, InvalidServiceSpec
from polyccm.events import EventRecorder
from polyccm.kube.api import MERGE_PATCH, SERVICES, ApiError, KubeApi
from polyccm.objects import Node, Service

from polyccm_gce import internal_lb
from polyccm_gce.api import GceApi, GceApiError, Json
from polyccm_gce.descriptions import (
    cluster_description,
    firewall_description,
    health_check_description,
    says,
    service_description,
)
from polyccm_gce.instances import InstanceLookup
from polyccm_gce.lb_metrics import DENY_DISABLED, DENY_IPV4, DENY_NONE, ERROR, SUCCESS, L4Metrics
from polyccm_gce.naming import (
    InstanceRef,
    InvalidProviderID,
    instance_ref,
    last,
    parse_provider_id,
)
from polyccm_gce.sdk import compute_v1
from polyccm_gce.service_options import (
    DEFAULT_TIER,
    asks_for_tier,
    network_tier,
    normalised,
    source_ranges,
)
from polyccm_gce.service_spec import (
    LEGACY_FINALIZER,
    check_ours,
    implemented_elsewhere,
    port_key,
    port_ranges,
    validate_service,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
#: (Named as strings: google-cloud-compute is loaded in the background, not at this import.)
R = TypeVar(
    "R", "compute_v1.TargetPoolsAddInstanceRequest", "compute_v1.TargetPoolsRemoveInstanceRequest"
)

#: Where Google's load-balancer health checks come from.
PROBER_RANGES = ("35.191.0.0/16", "130.211.0.0/22", "209.85.152.0/22", "209.85.204.0/22")
NODES_HEALTH_CHECK_PORT = 10256
HEALTH_CHECK_PATH = "/healthz"
#: Upstream's timings for the shared nodes check and a per-service one: the least an existing
#: check keeps (a longer interval or timeout, a higher threshold, set by hand, stays).
NODES_CHECK_TIMING = {
    "checkIntervalSec": 8,
    "timeoutSec": 1,
    "healthyThreshold": 1,
    "unhealthyThreshold": 3,
}
SERVICE_CHECK_TIMING = NODES_CHECK_TIMING
POOL_CREATE_LIMIT = 200
#: Firewall priorities as upstream's (gce_loadbalancer_external.go:48-50@v36.3.8): the deny
#: firewall at GCE's default, the allow ones just above it while deny firewalls are made.
DEFAULT_PRIORITY = 1000
DENY_PRIORITY = DEFAULT_PRIORITY
ALLOW_PRIORITY_WITH_DENY = DEFAULT_PRIORITY - 1
POOL_ADD_CHUNK = 1000


def nodes_health_check_name(cluster_id: str) -> str:
    return f"k8s-{cluster_id}-node"


def health_check_firewall_name(cluster_id: str, check_name: str, *, shared: bool) -> str:
    return f"k8s-{cluster_id}-node-http-hc" if shared else f"k8s-{check_name}-http-hc"


def firewall_name(lb_name: str) -> str:
    return f"k8s-fw-{lb_name}"


def deny_name(lb_name: str) -> str:
    """The deny firewall (``--enable-l4-deny-firewall``, upstream's MakeFirewallDenyName),
    deleted with the load balancer (always: its IP may go to someone else)."""
    return f"k8s-fw-{lb_name}-deny"


class GceLoadBalancer(LoadBalancer):
    """External network load balancers in the cluster's region (internal ones:
    :mod:`polyccm_gce.internal_lb`)."""

    subnetwork_name = ""
    """gce.conf's ``subnetwork-name`` (the provider sets it): internal load balancers' subnet."""
    subnetwork_url = ""
    """Its URL (``subnetwork-name`` may be one, in another project or region)."""
    ilb_subsets = False
    """gce.conf's ``alpha-features = ILBSubsets`` (the provider sets it): GKE's ingress-gce
    builds new internal load balancers (:mod:`polyccm_gce.internal_lb`)."""

    def __init__(
        self,
        api: GceApi,
        lookup: InstanceLookup,
        *,
        region: str,
        network_url: str,
        node_tags: Sequence[str] = (),
        cluster_id: Callable[[], str],
        network_project: str = "",
    ) -> None:
        self.api = api
        self.network_project = network_project or api.project
        """Where the firewalls live: gce.conf's ``network-project-id`` (a Shared VPC's host
        project), else the cluster's project."""
        self.deny_firewall = False
        """``--enable-l4-deny-firewall``: each ensure makes the deny firewall ``k8s-fw-<lb>-deny``
        and the allow firewalls at priority 999."""
        self.deny_cleanup = False
        """``--enable-l4-deny-firewall-rollback-cleanup``: each ensure deletes the deny
        firewall upstream's ``--enable-l4-deny-firewall`` made."""
        self.recorder: EventRecorder | None = None
        """The term's event recorder (set by ``initialize``), for the firewall changes a
        Shared VPC's security admin must make."""
        self.lookup = lookup
        self.region = region
        self.network_url = network_url
        self.node_tags = tuple(node_tags)
        self.cluster_id = cluster_id
        self._tags_lock = threading.Lock()
        self._tags_for: tuple[frozenset[str], tuple[str, ...]] | None = None
        self.kube: KubeApi | None = None
        """The term's Kubernetes API (set by the provider's ``initialize``; None outside a
        term, where nothing is deleted)."""
        self.metrics = L4Metrics()
        """Upstream's number_of_l4_netlbs and number_of_l4_ilbs (:mod:`polyccm_gce.lb_metrics`)."""
        self.insert_first = True
        """A new load balancer's own pieces are inserted without a read first (False: read
        first, as ``polyccm plan`` needs, whose inserts are never sent for GCE to answer 409)."""

    # -- reads -------------------------------------------------------------------------

    @property
    def _rules(self) -> compute_v1.ForwardingRulesClient:
        return self.api.client(compute_v1.ForwardingRulesClient)

    @property
    def _pools(self) -> compute_v1.TargetPoolsClient:
        return self.api.client(compute_v1.TargetPoolsClient)

    @property
    def _addresses(self) -> compute_v1.AddressesClient:
        return self.api.client(compute_v1.AddressesClient)

    @property
    def _firewalls(self) -> compute_v1.FirewallsClient:
        return self.api.client(compute_v1.FirewallsClient)

    def _get(self, rpc: Callable[..., T], **fields: Any) -> T | None:
        fields.setdefault("project", self.api.project)
        try:
            return self.api.invoke(rpc, **fields)
        except GceApiError as error:
            if error.not_found:
                return None
            raise

    def _check_get(self, name: str) -> Json | None:
        """A legacy HTTP health check (REST: the SDK has no client for them)."""
        try:
            return self.api.rest("compute.httpHealthChecks.get", "GET", _checks_path(name))
        except GceApiError as error:
            if error.not_found:
                return None
            raise

    def _rule(self, name: str) -> compute_v1.ForwardingRule | None:
        return self._get(self._rules.get, region=self.region, forwarding_rule=name)

    def _pool(self, name: str) -> compute_v1.TargetPool | None:
        return self._get(self._pools.get, region=self.region, target_pool=name)

    def get_load_balancer(self, cluster_name: str, service: Service) -> LoadBalancerStatus | None:
        rule = self._rule(self.get_load_balancer_name(cluster_name, service))
        return None if rule is None else _status(rule)

    # -- ensure ------------------------------------------------------------------------

    def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        protocol, ports = validate_service(service)
        sources, tier = source_ranges(service), network_tier(service)
        name = self.get_load_balancer_name(cluster_name, service)
        existing = self._rule(name)
        if internal_lb.is_internal(service) or internal_lb.is_internal_rule(existing):
            internal = self._internal_route(cluster_name, service, nodes, existing)
            if internal is not None:
                return internal
            existing = None
        if existing is not None and existing.backend_service:
            reason = implemented_elsewhere(service, rule_backend_service=existing.backend_service)
            if reason is not None:
                raise ImplementedElsewhere(f"service {service.key}: {reason}")
        # Counted from here, as upstream's deferred SetL4NetLBService (external.go:76-85).
        status, deny = (
            ERROR,
            DENY_DISABLED if self.deny_cleanup and not self.deny_firewall else DENY_NONE,
        )
        try:
            made = self._ensure_external(
                service, name, existing, nodes, protocol=protocol, ports=ports, sources=sources,
                tier=tier,
            )  # fmt: skip
            status, deny = SUCCESS, DENY_IPV4 if self.deny_firewall else deny
            return made
        finally:
            self.metrics.set_netlb(service.key, status, deny)

    def _ensure_external(
        self,
        service: Service,
        name: str,
        existing: compute_v1.ForwardingRule | None,
        nodes: Sequence[Node],
        *,
        protocol: str,
        ports: list[str],
        sources: list[str],
        tier: str,
    ) -> LoadBalancerStatus:
        if not self.node_tags:
            self._target_tags(nodes)  # an error before any write when no tag targets a node
        if asks_for_tier(service):
            existing = self._delete_wrong_tier(name, existing, tier)
        if self.deny_cleanup and not self.deny_firewall:  # gce_loadbalancer_external.go:217-223
            self._delete_deny_firewall(name)
        # No rule yet: a new load balancer, whose own pool and firewalls are most likely
        # absent too, so they are inserted straight away (an existing one answers 409 and is
        # read and corrected then) instead of read first.
        fresh = existing is None and self.insert_first
        description = service_description(service.key)
        # The rule's address, kept as a static address ``<lb>`` while the rule is made again
        # (upstream's ensureStaticIP), so an edit does not change the service's IP.
        keep = _AddressKeeper(
            self,
            name,
            description,
            tier=tier,
            rule=existing,
            requested=service.load_balancer_ip,
        )
        check, check_port, shared = self._health_check_of(service, name)
        self._ensure_health_check(check, check_port)
        if self._ensure_pool(name, description, service, nodes, check, fresh=fresh, keep=keep):
            existing = None  # made again, with its pool
        rule = self._ensure_rule(
            name, description, service, protocol, ports, rule=existing, keep=keep, tier=tier
        )
        address = rule.I_p_address  # empty only in a plan that would create the rule
        self._ensure_firewall(
            health_check_firewall_name(self.cluster_id(), check, shared=shared),
            description=(
                cluster_description(self.cluster_id())
                if shared
                else firewall_description(service.key, address)
            ),
            destination="" if shared else address,
            sources=list(PROBER_RANGES),
            protocol="tcp",
            ports=[str(check_port)],
            nodes=nodes,
            fresh=fresh and not shared,
            service=service,
            priority=self._allow_priority,
        )
        self._ensure_firewall(
            firewall_name(name),
            description=firewall_description(service.key, address),
            destination=address,
            sources=sources,
            protocol=protocol.lower(),
            ports=ports,
            nodes=nodes,
            fresh=fresh,
            service=service,
            priority=self._allow_priority,
        )
        # Last, once the allow firewalls are above it, as upstream (external.go:302-307).
        if self.deny_firewall:
            self._ensure_deny_firewall(name, service, address, nodes, fresh=fresh)
        return _status(rule)

    @property
    def _allow_priority(self) -> int:
        return ALLOW_PRIORITY_WITH_DENY if self.deny_firewall else DEFAULT_PRIORITY

    def _ensure_deny_firewall(
        self, name: str, service: Service, address: str, nodes: Sequence[Node], *, fresh: bool
    ) -> None:
        """``k8s-fw-<lb>-deny``: every protocol from anywhere to the rule's address denied on
        the nodes' tags, at priority 1000, as upstream's ensureDenyNodeFirewall
        (gce_loadbalancer_external.go:1230-1295@v36.3.8); patched whole when what upstream's
        firewallsEqual compares differs (not the target tags). A Shared VPC's host refusing
        the write (403) is logged and the sync goes on, as upstream (no event)."""
        fw_name = deny_name(name)
        wanted = compute_v1.Firewall(
            name=fw_name,
            description=firewall_description(service.key, address),
            network=self.network_url,
            source_ranges=["0.0.0.0/0"],
            target_tags=self._target_tags(nodes),
            denied=[compute_v1.Denied(I_p_protocol="all")],
            priority=DENY_PRIORITY,
        )
        if address:
            wanted.destination_ranges = [address]
        where = {"project": self.network_project}
        try:
            current = None if fresh else self._get(self._firewalls.get, **where, firewall=fw_name)
            if current is None:
                if self._inserted(self._firewalls.insert_unary, **where, firewall_resource=wanted):
                    return
                current = self._get(self._firewalls.get, **where, firewall=fw_name)
                if current is None:
                    raise GceApiError(
                        "compute.firewalls.get", 404, "notFound", f"{fw_name} vanished"
                    )
            if _firewalls_equal(current, wanted):
                return
            self.api.run(
                self._firewalls.patch_unary, **where, firewall=fw_name, firewall_resource=wanted
            )
        except GceApiError as error:
            if error.status != 403 or self.network_project == self.api.project:
                raise
            log.info("service %s: no permission to write %s (Shared VPC): %s", service.key,
                     fw_name, error)  # fmt: skip

    def _internal_route(
        self,
        cluster_name: str,
        service: Service,
        nodes: Sequence[Node],
        existing: compute_v1.ForwardingRule | None,
    ) -> LoadBalancerStatus | None:
        """An internal service's load balancer (an external one of the same name deleted
        first); None once an internal one is deleted for a service that is external now (as
        upstream's EnsureLoadBalancer, gce_loadbalancer.go:171-189)."""
        internal = internal_lb.InternalLoadBalancer(self)
        if not internal_lb.is_internal(service):
            internal.delete(cluster_name, service)
            return None
        if existing is not None and not internal_lb.is_internal_rule(existing):
            self.ensure_load_balancer_deleted(cluster_name, service, internal=False)
            existing = None
        return _status(internal.ensure(cluster_name, service, nodes, existing))

    def _health_check_of(self, service: Service, name: str) -> tuple[str, int, bool]:
        if service.external_traffic_policy == "Local" and service.health_check_node_port:
            return name, service.health_check_node_port, False
        return nodes_health_check_name(self.cluster_id()), NODES_HEALTH_CHECK_PORT, True

    def _ensure_health_check(self, name: str, port: int) -> None:
        wanted: dict[str, Any] = {
            "name": name,
            "port": port,
            "requestPath": HEALTH_CHECK_PATH,
            **NODES_CHECK_TIMING,
        }
        description = health_check_description(name)
        current = self._check_get(name)
        if current is None:
            body = {**wanted, "description": description}
            try:
                self.api.rest_mutate(
                    "compute.httpHealthChecks.insert", "POST", _checks_path(), body
                )
            except GceApiError as error:
                if not error.already_exists:
                    raise
            return
        # As upstream's mergeHTTPHealthChecks: a timing is raised to the default, never lowered.
        for key, least in NODES_CHECK_TIMING.items():
            wanted[key] = max(int(current.get(key) or 0), least)
        if any(current.get(key) != value for key, value in wanted.items()) or not says(
            str(current.get("description", "")), description
        ):
            self.api.rest_mutate(
                "compute.httpHealthChecks.patch",
                "PATCH",
                _checks_path(name),
                {**wanted, "description": description},
            )

    def _target_tags(self, nodes: Sequence[Node]) -> list[str]:
        """``node-tags`` from gce.conf, else, per instance, the longest of its tags that
        prefixes its name, as upstream's ``computeHostTags`` (never another tag the nodes
        carry); :class:`CloudError` when an instance has none or there is no instance, so no
        firewall is made without targets (GCE would apply it to the whole network). Read once
        for a set of nodes and kept until the set changes (as upstream's ``GetNodeTags``), so
        a burst of load balancers on the same nodes lists their instances once."""
        if self.node_tags:
            return list(self.node_tags)
        names = frozenset(node.name for node in nodes)
        with self._tags_lock:
            if self._tags_for is not None and self._tags_for[0] == names:
                return list(self._tags_for[1])
            tags: set[str] = set()
            for instance in self.lookup.many(nodes, "tags/items").values():
                prefixes = [t for t in instance.tags.items if instance.name.startswith(t)]
                if not prefixes:
                    raise CloudError(
                        f"no node-tags in gce.conf and instance {instance.name} has no tag that "
                        "prefixes its name: not making a firewall without target tags"
                    )
                tags.add(max(prefixes, key=len))
            if not tags:
                raise CloudError(
                    "no node-tags in gce.conf and no instance of the nodes found: not making a "
                    "firewall without target tags"
                )
            self._tags_for = (names, tuple(sorted(tags)))
            return sorted(tags)

    def _ensure_firewall(
        self,
        name: str,
        *,
        description: str,
        destination: str,
        sources: list[str],
        protocol: str,
        ports: list[str],
        nodes: Sequence[Node],
        fresh: bool = False,
        service: Service,
        priority: int = DEFAULT_PRIORITY,
    ) -> None:
        """``destination``: the one address the firewall lets traffic to ("": any, and an
        existing firewall's destination is left as it is). ``fresh``: most likely absent, so
        inserted without a read first (read and corrected when GCE answers 409)."""
        wanted: dict[str, Any] = {
            "source_ranges": normalised(sources),
            "allowed": [(protocol, sorted(ports, key=port_key))],
        }
        # Consecutive ports as one range, as upstream writes them (getPortsAndProtocol).
        allowed = [compute_v1.Allowed(I_p_protocol=protocol, ports=port_ranges(ports))]
        current = (
            None
            if fresh
            else self._get(self._firewalls.get, project=self.network_project, firewall=name)
        )
        if current is None:
            body = compute_v1.Firewall(
                name=name,
                description=description,
                network=self.network_url,
                source_ranges=sorted(sources),
                allowed=allowed,
                target_tags=list(self.node_tags) or self._target_tags(nodes),
                priority=priority,
            )
            if destination:
                body.destination_ranges = [destination]
            try:
                inserted = self._inserted(
                    self._firewalls.insert_unary,
                    project=self.network_project,
                    firewall_resource=body,
                )
            except GceApiError as error:
                command = f"create {name} --network {last(self.network_url)} "
                self._ask_for_manual_change(service, error, command + self._gcloud_args(body))
                return
            if inserted:
                return
            current = self._get(self._firewalls.get, project=self.network_project, firewall=name)
            if current is None:  # deleted again meanwhile
                raise GceApiError("compute.firewalls.get", 404, "notFound", f"{name} vanished")
        have = {
            "source_ranges": normalised(current.source_ranges),
            "allowed": [(a.I_p_protocol, sorted(a.ports, key=port_key)) for a in current.allowed],
        }
        changes = compute_v1.Firewall(name=name)  # GCE requires the name in a patch
        if have["source_ranges"] != wanted["source_ranges"]:
            changes.source_ranges = wanted["source_ranges"]
        # Upstream writes consecutive ports as one range (80-81): the same rule.
        if have["allowed"] not in (wanted["allowed"], [(protocol, port_ranges(ports))]):
            changes.allowed = allowed
        if self.node_tags and sorted(current.target_tags) != sorted(self.node_tags):
            changes.target_tags = list(self.node_tags)
        if destination and list(current.destination_ranges) != [destination]:
            changes.destination_ranges = [destination]
        if not says(current.description, description):
            changes.description = description
        if current.priority != priority:  # as upstream's firewallNeedsUpdate (external.go:1028)
            changes.priority = priority
        if changes != compute_v1.Firewall(name=name):
            try:
                self.api.run(
                    self._firewalls.patch_unary,
                    project=self.network_project,
                    firewall=name,
                    firewall_resource=changes,
                )
            except GceApiError as error:
                whole = compute_v1.Firewall(
                    description=description,
                    source_ranges=wanted["source_ranges"],
                    allowed=allowed,
                    target_tags=list(self.node_tags) or list(current.target_tags),
                )
                self._ask_for_manual_change(
                    service, error, f"update {name} {self._gcloud_args(whole)}"
                )

    def _ask_for_manual_change(self, service: Service, error: GceApiError, command: str) -> None:
        """A firewall write GCE refused (403) in a Shared VPC's host project: upstream's
        ``LoadBalancerManualChange`` event with the gcloud command for its security admin, and
        the sync goes on (raise anything else)."""
        if error.status != 403 or self.network_project == self.api.project:
            raise error
        log.info("service %s: firewall change left to the network's admin: %s", service.key, error)
        if self.recorder is not None:
            self.recorder.event(
                service.raw,
                "Normal",
                "LoadBalancerManualChange",
                f"Firewall change required by security admin: `gcloud compute firewall-rules "
                f"{command}`",
            )

    def _gcloud_args(self, firewall: compute_v1.Firewall) -> str:
        """upstream's firewallToGcloudArgs (gce_util.go:189-205): sorted, the project last."""
        allow = ",".join(
            sorted(f"{a.I_p_protocol}:{port}" for a in firewall.allowed for port in a.ports)
        )
        return (
            f"--description {json.dumps(firewall.description)} --allow {allow} "
            f"--source-ranges {','.join(sorted(firewall.source_ranges))} "
            f"--target-tags {','.join(sorted(firewall.target_tags))} "
            f"--project {self.network_project}"
        )

    def _instance_url(self, ref: InstanceRef) -> str:
        return f"{self.api.base}{ref.path}"

    def _refs(self, nodes: Sequence[Node]) -> dict[tuple[str, str], InstanceRef]:
        refs: dict[tuple[str, str], InstanceRef] = {}
        for node in nodes:
            try:
                ref = parse_provider_id(node.provider_id)
            except InvalidProviderID:
                continue
            refs[(ref.zone, ref.name)] = ref
        return refs

    def _ensure_pool(
        self,
        name: str,
        description: str,
        service: Service,
        nodes: Sequence[Node],
        check: str,
        *,
        fresh: bool = False,
        keep: _AddressKeeper | None = None,
    ) -> bool:
        """Make or correct the pool; True when its forwarding rule was deleted on the way
        (its address held by ``keep`` first). ``fresh``: most likely absent, so made without a
        read first."""
        affinity = "CLIENT_IP" if service.session_affinity == "ClientIP" else "NONE"
        check_url = f"{self.api.base}{_checks_path(check)}"
        if fresh and self._make_pool(name, description, affinity, nodes, check_url):
            return False
        pool = self._pool(name)
        remade = False
        # An empty affinity is left as it is, as upstream (gce_loadbalancer_external.go:893).
        if pool is not None and pool.session_affinity and pool.session_affinity != affinity:
            # A pool's affinity cannot change: make it again, as upstream does; the rule on
            # it goes too and comes back on the same address.
            if keep is not None:
                keep.hold()
            self._delete_rule_and_pool(name)
            pool, remade = None, True
        if pool is None:
            self._make_pool(name, description, affinity, nodes, check_url)
            return remade
        self._sync_pool(pool, nodes)
        checks = [last(url) for url in pool.health_checks]
        if checks != [check]:
            if pool.health_checks:
                self.api.run(
                    self._pools.remove_health_check_unary,
                    region=self.region,
                    target_pool=name,
                    target_pools_remove_health_check_request_resource=(
                        compute_v1.TargetPoolsRemoveHealthCheckRequest(
                            health_checks=_check_refs(pool.health_checks)
                        )
                    ),
                )
            self.api.run(
                self._pools.add_health_check_unary,
                region=self.region,
                target_pool=name,
                target_pools_add_health_check_request_resource=(
                    compute_v1.TargetPoolsAddHealthCheckRequest(
                        health_checks=_check_refs([check_url])
                    )
                ),
            )
            # externalTrafficPolicy flipped: the check the pool used goes, with its firewall,
            # as upstream's DeleteExternalTargetPoolAndChecks (the shared one once unused).
            for old in checks:
                if old != check:
                    self._delete_unused_check(name, old)
        return False

    def _delete_unused_check(self, lb_name: str, check: str) -> None:
        if check == lb_name:
            self._delete_check(check)
            self._delete(
                self._firewalls.delete_unary,
                project=self.network_project,
                firewall=health_check_firewall_name("", check, shared=False),
            )
        elif check == nodes_health_check_name(self.cluster_id()):
            self._delete_shared_check_if_unused()

    def _make_pool(
        self, name: str, description: str, affinity: str, nodes: Sequence[Node], check_url: str
    ) -> bool:
        """Insert the pool with the first instances and add the rest; False when GCE answers
        that it exists already (nothing added)."""
        refs = list(self._refs(nodes).values())
        body = compute_v1.TargetPool(
            name=name,
            description=description,
            session_affinity=affinity,
            instances=[self._instance_url(r) for r in refs[:POOL_CREATE_LIMIT]],
            health_checks=[check_url],
        )
        if not self._inserted(
            self._pools.insert_unary, region=self.region, target_pool_resource=body
        ):
            return False
        self._add_instances(name, refs[POOL_CREATE_LIMIT:])
        return True

    def _sync_pool(self, pool: compute_v1.TargetPool, nodes: Sequence[Node]) -> None:
        """Add and remove instances so the pool holds exactly the nodes' instances."""
        name = pool.name
        wanted = self._refs(nodes)
        # The pool's URLs are mostly ours, written as we write them: looked up, not parsed.
        ours = {self._instance_url(ref): key for key, ref in wanted.items()}
        have: dict[tuple[str, str], str] = {}
        for url in pool.instances:
            key = ours.get(url)
            if key is None:
                ref = instance_ref(url)
                if ref is None:
                    continue
                key = (ref.zone, ref.name)
            have[key] = url
        self._add_instances(name, [ref for key, ref in wanted.items() if key not in have])
        gone = [url for key, url in have.items() if key not in wanted]
        for start in range(0, len(gone), POOL_ADD_CHUNK):
            chunk = gone[start : start + POOL_ADD_CHUNK]
            self.api.run(
                self._pools.remove_instance_unary,
                region=self.region,
                target_pool=name,
                target_pools_remove_instance_request_resource=_naming_instances(
                    compute_v1.TargetPoolsRemoveInstanceRequest, chunk
                ),
            )

    def _add_instances(self, name: str, refs: Sequence[InstanceRef]) -> None:
        for start in range(0, len(refs), POOL_ADD_CHUNK):
            chunk = refs[start : start + POOL_ADD_CHUNK]
            urls = [self._instance_url(r) for r in chunk]
            self.api.run(
                self._pools.add_instance_unary,
                region=self.region,
                target_pool=name,
                target_pools_add_instance_request_resource=_naming_instances(
                    compute_v1.TargetPoolsAddInstanceRequest, urls
                ),
            )

    def _ensure_rule(
        self,
        name: str,
        description: str,
        service: Service,
        protocol: str,
        ports: list[str],
        *,
        rule: compute_v1.ForwardingRule | None,
        keep: _AddressKeeper,
        tier: str,
    ) -> compute_v1.ForwardingRule:
        """``rule``: the forwarding rule as read at the start of this ensure (None: none).
        One made again takes the address ``keep`` held, released once the rule has it."""
        numbers = [int(p) for p in ports]
        port_range = f"{min(numbers)}-{max(numbers)}"
        if rule is not None:
            same = (
                rule.I_p_protocol == protocol
                and rule.port_range == port_range
                and (not service.load_balancer_ip or rule.I_p_address == service.load_balancer_ip)
            )
            if same:
                return rule
            keep.hold()
            self._delete(self._rules.delete_unary, region=self.region, forwarding_rule=name)
        body = compute_v1.ForwardingRule(
            name=name,
            description=description,
            I_p_protocol=protocol,
            port_range=port_range,
            target=f"{self.api.base}regions/{self.region}/targetPools/{name}",
            network_tier=tier,
        )
        if service.load_balancer_ip:
            self._check_requested_tier(service.load_balancer_ip, tier)
        address = service.load_balancer_ip or keep.address
        if address:
            body.I_p_address = address
        try:
            self._insert(
                self._rules.insert_unary, region=self.region, forwarding_rule_resource=body
            )
        except GceApiError as error:
            if service.load_balancer_ip and error.status == 400:
                raise InvalidServiceSpec(
                    f"loadBalancerIP {service.load_balancer_ip} cannot be used: reserve it as "
                    f"a static external address in region {self.region} first ({error})"
                ) from None
            raise
        keep.release()
        made = self._rule(name)
        if made is None:
            raise GceApiError("compute.forwardingRules.get", 404, "notFound", f"{name} vanished")
        return made

    def _insert(self, rpc: Callable[..., compute_v1.Operation], **fields: Any) -> None:
        self._inserted(rpc, **fields)

    def _inserted(self, rpc: Callable[..., compute_v1.Operation], **fields: Any) -> bool:
        """Insert; False when it exists already."""
        try:
            self.api.run(rpc, **fields)
        except GceApiError as error:
            if not error.already_exists:
                raise
            return False
        return True

    # -- update ------------------------------------------------------------------------

    def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        if internal_lb.is_internal(service):
            internal_lb.InternalLoadBalancer(self).update(cluster_name, service, nodes)
            return
        check_ours(service)
        pool = self._pool(self.get_load_balancer_name(cluster_name, service))
        if pool is None:
            raise GceApiError(
                "compute.targetPools.get", 404, "notFound", "the load balancer's pool is gone"
            )
        self._sync_pool(pool, nodes)

    # -- delete ------------------------------------------------------------------------

    def _delete(self, rpc: Callable[..., compute_v1.Operation], **fields: Any) -> bool:
        """Delete; False when it was already gone."""
        try:
            self.api.run(rpc, **fields)
        except GceApiError as error:
            if error.not_found:
                return False
            raise
        return True

    def _delete_unless_used(self, rpc: Callable[..., compute_v1.Operation], **fields: Any) -> bool:
        """Delete; False when it was already gone or another resource still uses it."""
        return _unless_in_use(lambda: self._delete(rpc, **fields))

    def _check_requested_tier(self, ip: str, tier: str) -> None:
        """:class:`InvalidServiceSpec` when ``loadBalancerIP`` is a static address of another
        network tier than the Service's, with upstream's words (verifyUserRequestedIP)."""
        for held in self.api.items(self._addresses.list, region=self.region):
            if held.address == ip and (held.network_tier or DEFAULT_TIER) != tier:
                raise InvalidServiceSpec(
                    f'requested IP "{ip}" belongs to the {_tier_word(held.network_tier)} '
                    f"network tier; expected {_tier_word(tier)}"
                )

    def _release_address(self, name: str) -> None:
        self._delete(self._addresses.delete_unary, region=self.region, address=name)

    def _reserve_address(self, name: str, description: str, address: str, tier: str) -> None:
        """Reserve ``address`` (the rule's ephemeral one: GCE promotes it) as the static
        address ``name``; one already reserved (409, or 400 for its IP) is taken as it is."""
        body = compute_v1.Address(
            name=name, description=description, address=address, network_tier=tier
        )
        try:
            self.api.run(self._addresses.insert_unary, region=self.region, address_resource=body)
        except GceApiError as error:
            if not (error.already_exists or error.status == 400):
                raise

    def _delete_wrong_tier(
        self, name: str, rule: compute_v1.ForwardingRule | None, tier: str
    ) -> compute_v1.ForwardingRule | None:
        """Delete the rule and the address ``<lb>`` of another tier than the annotation's, as
        upstream's deleteWrongNetworkTieredResources; the rule left (None when deleted)."""
        if rule is not None and (rule.network_tier or DEFAULT_TIER) != tier:
            log.info("forwarding rule %s: %s, wanted %s: made again", name, rule.network_tier, tier)
            self._delete(self._rules.delete_unary, region=self.region, forwarding_rule=name)
            rule = None
        held = self._get(self._addresses.get, region=self.region, address=name)
        if held is not None and (held.network_tier or DEFAULT_TIER) != tier:
            self._release_address(name)
        return rule

    def _delete_rule_and_pool(self, name: str) -> None:
        self._delete(self._rules.delete_unary, region=self.region, forwarding_rule=name)
        self._delete(self._pools.delete_unary, region=self.region, target_pool=name)

    def ensure_load_balancer_deleted(
        self, cluster_name: str, service: Service, *, internal: bool | None = None
    ) -> None:
        """``internal``: which scheme's pieces go (default: the one the service asks for)."""
        if internal_lb.is_internal(service) if internal is None else internal:
            internal_lb.InternalLoadBalancer(self).delete(cluster_name, service)
            return
        check_ours(service)
        name = self.get_load_balancer_name(cluster_name, service)
        # As upstream: the firewall goes while the rule, the pool and the checks go in turn.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gce-fw") as aside:
            firewall = aside.submit(
                self._delete_firewalls, firewall_name(name), deny_name(name), service=service
            )
            # An address ``<lb>`` an interrupted edit left behind (upstream's too).
            self._release_address(name)
            self._delete_pool_and_checks(name, service)
            firewall.result()
        self._release_upstream_finalizer(service)
        self.metrics.forget_netlb(service.key)

    def _delete_deny_firewall(self, name: str) -> None:
        """The rollback cleanup: ``k8s-fw-<lb>-deny`` read first and deleted only when there
        (no 404 in the audit log, no write on a sync that finds none), a Shared VPC's host
        refusing (403) skipped, as upstream's ensureFirewallDeleted (external.go:1297-1317)."""
        where = {"project": self.network_project, "firewall": deny_name(name)}
        try:
            if self._get(self._firewalls.get, **where) is not None:
                self._delete(self._firewalls.delete_unary, **where)
        except GceApiError as error:
            if error.status != 403 or self.network_project == self.api.project:
                raise
            log.info("no permission to delete %s (Shared VPC): %s", where["firewall"], error)

    def _delete_firewalls(self, *names: str, service: Service | None = None) -> None:
        """Delete firewalls; one a Shared VPC's host refuses (403) is asked of its admin by
        an event about ``service``, as upstream (gce_loadbalancer_external.go:383-404)."""
        for name in names:
            try:
                self._delete(
                    self._firewalls.delete_unary, project=self.network_project, firewall=name
                )
            except GceApiError as error:
                if service is None:
                    raise
                command = f"delete {name} --project {self.network_project}"
                self._ask_for_manual_change(service, error, command)

    def _delete_pool_and_checks(self, name: str, service: Service | None = None) -> None:
        self._delete_rule_and_pool(name)
        # The service's own check (externalTrafficPolicy Local, now or before).
        self._delete_check(name)
        self._delete_firewalls(health_check_firewall_name("", name, shared=False), service=service)
        self._delete_shared_check_if_unused(service)

    def _release_upstream_finalizer(self, service: Service) -> None:
        """Remove upstream's ``gke.networking.io/l4-netlb-v1`` from the Service (the same UID),
        guarded by its resourceVersion, as upstream does when its load balancer is gone."""
        if self.kube is None or LEGACY_FINALIZER not in service.finalizers:
            return
        for _attempt in range(3):
            try:
                current = Service(self.kube.get(SERVICES, service.name, service.namespace))
            except ApiError as error:
                if error.not_found:
                    return
                raise
            if current.uid != service.uid or LEGACY_FINALIZER not in current.finalizers:
                return
            kept = [f for f in current.finalizers if f != LEGACY_FINALIZER]
            body = {"metadata": {"finalizers": kept or None,
                                 "resourceVersion": current.resource_version}}  # fmt: skip
            try:
                self.kube.patch(
                    SERVICES, service.name, body, service.namespace, patch_type=MERGE_PATCH
                )
            except ApiError as error:
                if error.status == 409 and _attempt < 2:
                    continue  # changed meanwhile: read it again
                if error.not_found:
                    return
                raise
            log.info("service %s: removed upstream's finalizer %s", service.key, LEGACY_FINALIZER)
            return

    def _delete_shared_check_if_unused(self, service: Service | None = None) -> None:
        """The shared nodes check and its firewall, once no target pool uses the check."""
        shared = nodes_health_check_name(self.cluster_id())
        if not _unless_in_use(lambda: self._delete_check(shared)):
            return  # gone already, or another service's pool still uses it
        fw = health_check_firewall_name(self.cluster_id(), shared, shared=True)
        self._delete_firewalls(fw, service=service)

    def _delete_check(self, name: str) -> bool:
        """Delete a legacy HTTP health check (REST); False when it was already gone."""
        try:
            self.api.rest_mutate("compute.httpHealthChecks.delete", "DELETE", _checks_path(name))
        except GceApiError as error:
            if error.not_found:
                return False
            raise
        return True


def _checks_path(name: str = "") -> str:
    """Legacy HTTP health checks below the project's URL (``global/httpHealthChecks/NAME``)."""
    return f"global/httpHealthChecks/{name}" if name else "global/httpHealthChecks"


def _firewalls_equal(have: compute_v1.Firewall, want: compute_v1.Firewall) -> bool:
    """Upstream's firewallsEqual (gce_loadbalancer_external.go:1319-1332@v36.3.8): source
    ranges as networks, allowed and denied ports per protocol, priority, destination ranges and
    description as they are; not the network nor the target tags."""
    return (
        normalised(have.source_ranges) == normalised(want.source_ranges)
        and _effects(have.allowed) == _effects(want.allowed)
        and _effects(have.denied) == _effects(want.denied)
        and have.priority == want.priority
        and list(have.destination_ranges) == list(want.destination_ranges)
        and have.description == want.description
    )


def _effects(
    rules: Sequence[compute_v1.Allowed] | Sequence[compute_v1.Denied],
) -> dict[str, set[int]]:
    """Ports per protocol (upper case), ranges spread, as upstream's portsPerProtocol."""
    effects: dict[str, set[int]] = {}
    for rule in rules:
        ports = effects.setdefault(rule.I_p_protocol.upper(), set())
        for port in rule.ports:
            start, _, end = port.partition("-")
            ports.update(range(int(start), int(end or start) + 1))
    return effects


def _unless_in_use(delete: Callable[[], bool]) -> bool:
    """Run ``delete`` (True: deleted); False when GCE answers that another resource uses it."""
    try:
        return delete()
    except GceApiError as error:
        if error.in_use:
            return False
        raise


def _tier_word(tier: str) -> str:
    """A tier as upstream names it in messages (``Standard``, ``Premium``)."""
    return (tier or DEFAULT_TIER).capitalize()


def _check_refs(urls: Sequence[str]) -> list[compute_v1.HealthCheckReference]:
    return [compute_v1.HealthCheckReference(health_check=url) for url in urls]


def _naming_instances(request_class: type[R], urls: Sequence[str]) -> R:
    """An add or remove instance request naming ``urls``, the references added to its
    protobuf message directly: the same request, where proto-plus would wrap each reference at
    ~20 µs (100 ms of CPU for a pool of 5,000 nodes)."""
    request = request_class()
    message = request_class.pb(request)
    for url in urls:
        message.instances.add(instance=url)
    return request


def _status(rule: compute_v1.ForwardingRule) -> LoadBalancerStatus:
    address = rule.I_p_address
    return LoadBalancerStatus(ingress=(LoadBalancerIngress(ip=address),) if address else ())


class _AddressKeeper:
    """The address of a forwarding rule about to be made again, held as the static address
    ``<lb>`` meanwhile and released once the new rule has it, as upstream does (not for a
    ``loadBalancerIP``, the user's own)."""

    def __init__(
        self,
        balancer: GceLoadBalancer,
        name: str,
        description: str,
        *,
        tier: str,
        rule: compute_v1.ForwardingRule | None,
        requested: str,
    ) -> None:
        self.balancer = balancer
        self.name = name
        self.description = description
        self.tier = tier
        self.current = "" if rule is None or requested else rule.I_p_address
        self.address = ""
        """The address held ("" when none)."""

    def hold(self) -> None:
        if self.current and not self.address:
            self.balancer._reserve_address(self.name, self.description, self.current, self.tier)
            self.address = self.current

    def release(self) -> None:
        if self.address:
            self.balancer._release_address(self.name)
