"""The internal passthrough load balancer, built as cloud-provider-gcp builds it, with its names.

A Service asks for it with ``networking.gke.io/load-balancer-type: Internal`` (else the legacy
``cloud.google.com/load-balancer-type``; ``internal`` is accepted too; the first of the two
keys present decides), or with the ``loadBalancerClass``
``networking.gke.io/l4-regional-internal-legacy``. For a load balancer named ``<lb>`` and the
cluster id ``<cid>``, in the order ensure makes them:

* the finalizer ``gke.networking.io/l4-ilb-v1`` on the Service (removed once delete is done);
* the unmanaged instance group ``k8s-ig--<cid>`` in each zone holding nodes (at most 1,000 of
  them, by name), shared by every internal load balancer of the cluster; nodes labelled with
  another subnetwork (``cloud.google.com/gke-node-pool-subnet``) are left out;
* the health check (the ``healthChecks`` API, type HTTP): the shared ``k8s-<cid>-node`` on
  ``:10256/healthz`` for ``externalTrafficPolicy: Cluster``, else ``<lb>`` on the Service's
  ``healthCheckNodePort`` (described with the Service's name);
* the regional backend service ``<lb>`` (INTERNAL, the Service's protocol and affinity, the
  instance groups and the health check), or with
  ``alpha.cloud.google.com/load-balancer-backend-share: "true"`` and traffic policy Cluster the
  shared ``k8s-<cid>-internal-<proto>-nmv1-<hash of the affinity>``;
* the forwarding rule ``<lb>`` (INTERNAL, the service ports, or all ports beyond five) on the
  cluster's subnetwork or the one ``networking.gke.io/internal-load-balancer-subnet`` names,
  with ``allowGlobalAccess`` from
  ``networking.gke.io/internal-load-balancer-allow-global-access: "true"``; made again when it
  differs (keeping its address while its subnetwork stays the same);
* the firewalls ``k8s-fw-<lb>`` (the source ranges to the service ports at the rule's address)
  and ``k8s-<cid>-node-hc`` (shared check) or ``<lb>-hc``, from Google's prober ranges.

With gce.conf's ``alpha-features = ILBSubsets``, a Service this controller never served (no
``l4-ilb-v1`` finalizer, no forwarding rule, not of the legacy internal class) is left to
GKE's ingress-gce (:class:`~polyccm.errors.ImplementedElsewhere`), as upstream.

Each piece is read and written only when missing or different, compared as upstream compares
it, so an internal load balancer upstream made is adopted with no write. Delete removes exactly
upstream's pieces: the address ``<lb>``, the rule, the backend service (unless in use), the
firewall and upstream's legacy one named ``<lb>``, the health check and its firewall (unless
the check is in use), the instance groups in the region's zones (unless in use), then the
finalizer.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from polyccm.errors import ImplementedElsewhere, InvalidServiceSpec
from polyccm.kube.api import MERGE_PATCH, SERVICES, ApiError
from polyccm.objects import Node, Service

from polyccm_gce.api import GceApiError
from polyccm_gce.descriptions import firewall_description, says, service_description
from polyccm_gce.lb_metrics import IlbState
from polyccm_gce.naming import InstanceRef, InvalidProviderID, last, parse_provider_id
from polyccm_gce.sdk import compute_v1
from polyccm_gce.service_spec import INTERNAL_ANNOTATIONS, port_ranges

if TYPE_CHECKING:
    from polyccm_gce.load_balancer import GceLoadBalancer

log = logging.getLogger(__name__)

ILB_FINALIZER = "gke.networking.io/l4-ilb-v1"
ILB_FINALIZER_V2 = "gke.networking.io/l4-ilb-v2"
"""GKE's newer L4 controller's: a Service carrying it (and no v1 resources) is its."""
INTERNAL_CLASS = "networking.gke.io/l4-regional-internal-legacy"
EXTERNAL_CLASS = "networking.gke.io/l4-regional-external-legacy"
GLOBAL_ACCESS = "networking.gke.io/internal-load-balancer-allow-global-access"
SUBNET = "networking.gke.io/internal-load-balancer-subnet"
BACKEND_SHARE = (
    "alpha.cloud.google.com/load-balancer-backend-share",
    "cloud.google.com/load-balancer-backend-share",
)
SUBNET_LABEL = "cloud.google.com/gke-node-pool-subnet"
PROBER_RANGES = ("130.211.0.0/22", "209.85.152.0/22", "209.85.204.0/22", "35.191.0.0/16")
NODES_HEALTH_CHECK_PORT = 10256
HEALTH_CHECK_PATH = "/healthz"
CHECK_TIMING = {"check_interval_sec": 8, "timeout_sec": 1, "healthy_threshold": 1,
                "unhealthy_threshold": 3}  # fmt: skip
SUBSETS_ELSEWHERE = "alpha feature ILBSubsets: GKE's ingress-gce serves it"
MAX_PORTS = 5
MAX_GROUP_SIZE = 1000


def is_internal(service: Service) -> bool:
    """Whether ``service`` asks for the internal load balancer, as upstream's
    ``GetLoadBalancerAnnotationType`` decides."""
    if service.load_balancer_class == INTERNAL_CLASS:
        return True
    if service.load_balancer_class == EXTERNAL_CLASS:
        return False
    for key in INTERNAL_ANNOTATIONS:
        if key in service.annotations:
            return service.annotations[key] in ("Internal", "internal")
    return False


def is_internal_rule(rule: compute_v1.ForwardingRule | None) -> bool:
    return rule is not None and rule.load_balancing_scheme.upper() == "INTERNAL"


def _path(url: str) -> str:
    """A resource URL without its endpoint (``projects/...``): what names the resource."""
    at = url.find("projects/")
    return url[at:] if at >= 0 else url


def group_name(cluster_id: str) -> str:
    return f"k8s-ig--{cluster_id}" if cluster_id else "k8s-ig"


def backend_service_name(lb: str, cluster_id: str, protocol: str, affinity: str, *,
                         shared: bool) -> str:  # fmt: skip
    if not shared:
        return lb
    digest = hashlib.sha1(affinity.encode()).hexdigest()[:16]  # upstream names it so
    return f"k8s-{cluster_id}-internal-{protocol.lower()}-nmv1-{digest}"


def health_check_name(lb: str, cluster_id: str, *, shared: bool) -> str:
    return f"k8s-{cluster_id}-node" if shared else lb


def health_check_firewall_name(check: str) -> str:
    return f"{check}-hc"


class InternalLoadBalancer:
    """One call's view of the internal load balancers, over ``lb``'s API, region, network,
    node tags and cluster id (made per call, so ``polyccm plan``'s copy of ``lb`` plans it)."""

    def __init__(self, lb: GceLoadBalancer) -> None:
        self.lb = lb
        self.api = lb.api
        self.region = lb.region

    # -- clients and small reads -----------------------------------------------------------

    @property
    def _groups(self) -> compute_v1.InstanceGroupsClient:
        return self.api.client(compute_v1.InstanceGroupsClient)

    @property
    def _checks(self) -> compute_v1.HealthChecksClient:
        return self.api.client(compute_v1.HealthChecksClient)

    @property
    def _backends(self) -> compute_v1.RegionBackendServicesClient:
        return self.api.client(compute_v1.RegionBackendServicesClient)

    def _project_url(self, project: str) -> str:
        return f"{self.api.base.rsplit('projects/', 1)[0]}projects/{project}/"

    def subnetwork_url(self, service: Service) -> str:
        """The annotation's subnetwork, else gce.conf's ``subnetwork-name``, else the
        network's own subnetwork in the region (an auto-mode network's, named as it)."""
        if not service.annotations.get(SUBNET) and self.lb.subnetwork_url:
            return self.lb.subnetwork_url
        network_project = _path(self.lb.network_url).split("/")[1]
        name = service.annotations.get(SUBNET) or self.lb.subnetwork_name
        name = name or last(self.lb.network_url)
        return f"{self._project_url(network_project)}regions/{self.region}/subnetworks/{name}"

    # -- ensure ----------------------------------------------------------------------------

    def ensure(
        self,
        cluster_name: str,
        service: Service,
        nodes: Sequence[Node],
        existing: compute_v1.ForwardingRule | None,
    ) -> compute_v1.ForwardingRule:
        """Build or correct the internal load balancer; the forwarding rule as it is after."""
        # cloud-provider-gcp's gate (gce_loadbalancer_internal.go:64-82): a new Service whose
        # loadBalancerClass or v2 finalizer says another controller builds it is left to it.
        if (
            existing is None
            and ILB_FINALIZER not in service.finalizers
            and (service.load_balancer_class != INTERNAL_CLASS)
        ):
            if service.load_balancer_class is not None:
                raise ImplementedElsewhere(
                    f"service {service.key}: loadBalancerClass {service.load_balancer_class}"
                )
            if self.lb.ilb_subsets:  # gce_loadbalancer_internal.go:70-75
                raise ImplementedElsewhere(f"service {service.key}: {SUBSETS_ELSEWHERE}")
            if ILB_FINALIZER_V2 in service.finalizers:
                raise ImplementedElsewhere(f"service {service.key}: finalizer {ILB_FINALIZER_V2}")
        protocol = self._protocol(service)
        # Counted from here, as upstream's deferred SetL4ILBService (internal.go:90-96, 256-265).
        state = IlbState()
        try:
            rule = self._ensure(cluster_name, service, nodes, existing, protocol)
            state = IlbState(
                success=True,
                global_access=service.annotations.get(GLOBAL_ACCESS) == "true",
                custom_subnet=bool(service.annotations.get(SUBNET)),
            )
            return rule
        finally:
            self.lb.metrics.set_ilb(service.key, state)

    def _ensure(
        self,
        cluster_name: str,
        service: Service,
        nodes: Sequence[Node],
        existing: compute_v1.ForwardingRule | None,
        protocol: str,
    ) -> compute_v1.ForwardingRule:
        self.set_finalizer(service, present=True)

        cluster_id = self.lb.cluster_id()
        name = self.lb.get_load_balancer_name(cluster_name, service)
        local = service.external_traffic_policy == "Local"
        shared_backend = _shares_backend(service) and not local
        affinity = "CLIENT_IP" if service.session_affinity == "ClientIP" else "NONE"
        backend = backend_service_name(
            name, cluster_id, protocol, service.session_affinity or "None", shared=shared_backend
        )
        groups = self.ensure_groups(cluster_id, nodes)
        previous_backend = None
        if existing is not None and existing.backend_service:
            previous_backend = self._get(
                self._backends.get,
                region=self.region,
                backend_service=last(existing.backend_service),
            )
        shared_check = not local
        check = health_check_name(name, cluster_id, shared=shared_check)
        check_port = NODES_HEALTH_CHECK_PORT if shared_check else service.health_check_node_port
        check_url = self.ensure_health_check(check, service, shared=shared_check, port=check_port)

        subnet = self.subnetwork_url(service)
        wanted = self._rule_body(
            name, service, protocol, backend=backend, subnet=subnet, existing=existing
        )
        remade = existing is not None and not _rules_equal(existing, wanted)
        if remade:
            self.lb._delete(self.lb._rules.delete_unary, region=self.region, forwarding_rule=name)
        self.ensure_backend_service(
            backend,
            "" if shared_backend else service_description(service.key),
            protocol=protocol,
            affinity=affinity,
            groups=groups,
            check_url=check_url,
        )
        if existing is None or remade:
            self.lb._insert(
                self.lb._rules.insert_unary, region=self.region, forwarding_rule_resource=wanted
            )
        rule = self.lb._rule(name)
        if rule is None:
            raise GceApiError("compute.forwardingRules.get", 404, "notFound", f"{name} vanished")
        address = rule.I_p_address
        ports = [str(port.port) for port in service.ports]
        sources = list(service.load_balancer_source_ranges) or ["0.0.0.0/0"]
        self.ensure_firewall(
            f"k8s-fw-{name}",
            description=firewall_description(service.key, address),
            destination=address,
            sources=sources,
            protocol=protocol.lower(),
            ports=port_ranges(ports),
            nodes=nodes,
        )
        self.ensure_firewall(
            f"k8s-{cluster_id}-node-hc" if shared_check else f"{name}-hc",
            description="",
            destination="",
            sources=list(PROBER_RANGES),
            protocol="tcp",
            ports=[str(check_port)],
            nodes=nodes,
        )
        if previous_backend is not None:
            self._clear_previous(service, cluster_id, previous_backend, backend, check)
        return rule

    @staticmethod
    def _protocol(service: Service) -> str:
        if not service.ports:
            raise InvalidServiceSpec("the service has no ports")
        protocols = {port.protocol.upper() or "TCP" for port in service.ports}
        if len(protocols) > 1:
            raise InvalidServiceSpec(
                f"ports use {', '.join(sorted(protocols))}: an internal load balancer serves "
                "one protocol, TCP or UDP"
            )
        protocol = protocols.pop()
        if protocol not in ("TCP", "UDP"):
            raise InvalidServiceSpec(f"Invalid protocol {protocol}, only TCP and UDP are supported")
        return protocol

    def _rule_body(
        self,
        name: str,
        service: Service,
        protocol: str,
        *,
        backend: str,
        subnet: str,
        existing: compute_v1.ForwardingRule | None,
    ) -> compute_v1.ForwardingRule:
        ports = [str(port.port) for port in service.ports]
        # The address: loadBalancerIP, else the rule's own while its subnetwork stays
        # (upstream's ilbIPToUse, gce_loadbalancer_internal.go:1073-1085).
        address = service.load_balancer_ip
        if not address and existing is not None and _path(existing.subnetwork) == _path(subnet):
            address = existing.I_p_address
        rule = compute_v1.ForwardingRule(
            name=name,
            description=service_description(service.key),
            backend_service=(
                f"{self._project_url(self.api.project)}regions/{self.region}"
                f"/backendServices/{backend}"
            ),
            I_p_protocol=protocol,
            load_balancing_scheme="INTERNAL",
            subnetwork=subnet,
            network=self.lb.network_url,
        )
        if address:
            rule.I_p_address = address
        if len(ports) > MAX_PORTS:
            rule.all_ports = True
        else:
            rule.ports = ports
        if service.annotations.get(GLOBAL_ACCESS) == "true":
            rule.allow_global_access = True
        return rule

    def set_finalizer(self, service: Service, *, present: bool) -> None:
        """Add or remove ``gke.networking.io/l4-ilb-v1`` on the Service (the same UID),
        guarded by its resourceVersion; nothing outside a term (no Kubernetes API)."""
        kube = self.lb.kube
        if kube is None or (ILB_FINALIZER in service.finalizers) == present:
            return
        for attempt in range(3):
            try:
                current = Service(kube.get(SERVICES, service.name, service.namespace))
            except ApiError as error:
                if error.not_found:
                    return
                raise
            if current.uid != service.uid or (ILB_FINALIZER in current.finalizers) == present:
                return
            kept = [f for f in current.finalizers if f != ILB_FINALIZER]
            finalizers = [*kept, ILB_FINALIZER] if present else kept
            body = {"metadata": {"finalizers": finalizers or None,
                                 "resourceVersion": current.resource_version}}  # fmt: skip
            try:
                kube.patch(SERVICES, service.name, body, service.namespace, patch_type=MERGE_PATCH)
            except ApiError as error:
                if error.status == 409 and attempt < 2:
                    continue
                if error.not_found:
                    return
                raise
            log.info(
                "service %s: %s finalizer %s",
                service.key,
                "added" if present else "removed",
                ILB_FINALIZER,
            )
            return

    def _get(self, rpc: Any, **fields: Any) -> Any:
        return self.lb._get(rpc, **fields)

    # -- instance groups -------------------------------------------------------------------

    def _zoned(self, nodes: Sequence[Node]) -> dict[str, dict[str, InstanceRef]]:
        """The nodes' instances by zone, without nodes labelled with another subnetwork
        (gce_loadbalancer_internal.go:274-299)."""
        default_subnet = self.lb.subnetwork_name or last(self.lb.network_url)
        zoned: dict[str, dict[str, InstanceRef]] = {}
        for node in nodes:
            label = node.labels.get(SUBNET_LABEL, "")
            if label and label != default_subnet:
                continue
            try:
                ref = parse_provider_id(node.provider_id)
            except InvalidProviderID:
                continue
            zoned.setdefault(ref.zone, {})[ref.name] = ref
        return zoned

    def ensure_groups(self, cluster_id: str, nodes: Sequence[Node]) -> list[str]:
        """``k8s-ig--<cid>`` in each zone with nodes, holding exactly those nodes' instances
        (the first 1,000 by name); their URLs."""
        name = group_name(cluster_id)
        links = []
        for zone, refs in sorted(self._zoned(nodes).items()):
            wanted = dict(sorted(refs.items())[:MAX_GROUP_SIZE])
            group = self._get(self._groups.get, zone=zone, instance_group=name)
            have: set[str] = set()
            if group is None:
                self.lb._insert(
                    self._groups.insert_unary,
                    zone=zone,
                    instance_group_resource=compute_v1.InstanceGroup(name=name),
                )
                group = self._get(self._groups.get, zone=zone, instance_group=name)
                if group is None:
                    raise GceApiError("compute.instanceGroups.get", 404, "notFound", name)
            else:
                listed = self.api.items(
                    self._groups.list_instances,
                    zone=zone,
                    instance_group=name,
                    instance_groups_list_instances_request_resource=(
                        compute_v1.InstanceGroupsListInstancesRequest(instance_state="ALL")
                    ),
                )
                have = {last(item.instance) for item in listed}
            gone = sorted(have - set(wanted))
            if gone:
                self.api.run(
                    self._groups.remove_instances_unary,
                    zone=zone,
                    instance_group=name,
                    instance_groups_remove_instances_request_resource=(
                        compute_v1.InstanceGroupsRemoveInstancesRequest(
                            instances=[
                                compute_v1.InstanceReference(
                                    instance=f"{self._project_url(self.api.project)}zones/"
                                    f"{zone}/instances/{n}"
                                )
                                for n in gone
                            ]
                        )
                    ),
                )
            added = [ref for n, ref in wanted.items() if n not in have]
            if added:
                self.api.run(
                    self._groups.add_instances_unary,
                    zone=zone,
                    instance_group=name,
                    instance_groups_add_instances_request_resource=(
                        compute_v1.InstanceGroupsAddInstancesRequest(
                            instances=[
                                compute_v1.InstanceReference(instance=self.lb._instance_url(ref))
                                for ref in added
                            ]
                        )
                    ),
                )
            links.append(group.self_link)
        return links

    # -- health check ----------------------------------------------------------------------

    def ensure_health_check(self, name: str, service: Service, *, shared: bool, port: int) -> str:
        """The HTTP health check, made or corrected as upstream's ``ensureInternalHealthCheck``
        (a longer interval or timeout, a higher threshold, set by hand, stays); its URL."""
        description = "" if shared else service_description(service.key)
        wanted = compute_v1.HealthCheck(
            name=name,
            description=description,
            type_="HTTP",
            http_health_check=compute_v1.HTTPHealthCheck(port=port, request_path=HEALTH_CHECK_PATH),
            **CHECK_TIMING,
        )
        current = self._get(self._checks.get, health_check=name)
        if current is None:
            self.lb._insert(self._checks.insert_unary, health_check_resource=wanted)
            current = self._get(self._checks.get, health_check=name)
            if current is None:
                raise GceApiError("compute.healthChecks.get", 404, "notFound", f"{name} vanished")
            return str(current.self_link)
        http = current.http_health_check if "http_health_check" in current else None
        drifted = (
            http is None
            or http.port != port
            or http.request_path != HEALTH_CHECK_PATH
            or current.description != description
            or any(getattr(current, key) < least for key, least in CHECK_TIMING.items())
        )
        if drifted:
            for key, least in CHECK_TIMING.items():
                setattr(wanted, key, max(getattr(current, key), least))
            self.api.run(self._checks.update_unary, health_check=name, health_check_resource=wanted)
        return str(current.self_link)

    # -- backend service -------------------------------------------------------------------

    def ensure_backend_service(
        self,
        name: str,
        description: str,
        *,
        protocol: str,
        affinity: str,
        groups: Sequence[str],
        check_url: str,
    ) -> None:
        wanted = compute_v1.BackendService(
            name=name,
            description=description,
            protocol=protocol,
            session_affinity=affinity,
            load_balancing_scheme="INTERNAL",
            health_checks=[check_url],
            backends=[compute_v1.Backend(group=g) for g in groups],
        )
        current = self._get(self._backends.get, region=self.region, backend_service=name)
        if current is None:
            self.lb._insert(
                self._backends.insert_unary, region=self.region, backend_service_resource=wanted
            )
            return
        same = (
            current.protocol == protocol
            and current.description == description
            and current.session_affinity == affinity
            and current.load_balancing_scheme == "INTERNAL"
            and {_path(u) for u in current.health_checks} == {_path(check_url)}
            and _groups_of(current) == {_path(g) for g in groups}
        )
        if not same:
            wanted.fingerprint = current.fingerprint
            self.api.run(
                self._backends.update_unary,
                region=self.region,
                backend_service=name,
                backend_service_resource=wanted,
            )

    # -- firewalls -------------------------------------------------------------------------

    def ensure_firewall(
        self,
        name: str,
        *,
        description: str,
        destination: str,
        sources: list[str],
        protocol: str,
        ports: list[str],
        nodes: Sequence[Node],
    ) -> None:
        """Made, or patched to the whole wanted rule when it differs as upstream's
        ``firewallRuleEqual`` compares (sets, the description by what it says)."""
        tags = self.lb._target_tags(nodes)
        wanted = compute_v1.Firewall(
            name=name,
            description=description,
            network=self.lb.network_url,
            source_ranges=sorted(sources),
            target_tags=tags,
            allowed=[compute_v1.Allowed(I_p_protocol=protocol, ports=ports)],
        )
        if destination:
            wanted.destination_ranges = [destination]
        current = self._get(self.lb._firewalls.get, firewall=name)
        if current is None:
            self.lb._insert(self.lb._firewalls.insert_unary, firewall_resource=wanted)
            return
        same = (
            (current.description == description or says(current.description, description))
            and [(a.I_p_protocol, set(a.ports)) for a in current.allowed]
            == [(protocol, set(ports))]
            and set(current.source_ranges) == set(sources)
            and set(current.destination_ranges) == ({destination} if destination else set())
            and set(current.target_tags) == set(tags)
        )
        if not same:
            self.api.run(self.lb._firewalls.patch_unary, firewall=name, firewall_resource=wanted)

    # -- update ----------------------------------------------------------------------------

    def update(self, cluster_name: str, service: Service, nodes: Sequence[Node]) -> None:
        """The nodes changed: the instance groups, and the backend service's list of them."""
        self._subsets_elsewhere(service)  # gce_loadbalancer_internal.go:353-356
        if service.load_balancer_class not in (None, INTERNAL_CLASS):
            raise ImplementedElsewhere(
                f"service {service.key}: loadBalancerClass {service.load_balancer_class}"
            )
        cluster_id = self.lb.cluster_id()
        groups = self.ensure_groups(cluster_id, nodes)
        name = self.lb.get_load_balancer_name(cluster_name, service)
        shared = _shares_backend(service) and service.external_traffic_policy != "Local"
        backend = backend_service_name(
            name, cluster_id, self._protocol(service), service.session_affinity or "None",
            shared=shared,
        )  # fmt: skip
        current = self._get(self._backends.get, region=self.region, backend_service=backend)
        if current is None:
            raise GceApiError("compute.regionBackendServices.get", 404, "notFound", backend)
        if _groups_of(current) != {_path(g) for g in groups}:
            current.backends = [compute_v1.Backend(group=g) for g in groups]
            self.api.run(
                self._backends.update_unary,
                region=self.region,
                backend_service=backend,
                backend_service_resource=current,
            )

    # -- delete ----------------------------------------------------------------------------

    def delete(self, cluster_name: str, service: Service) -> None:
        """Exactly upstream's pieces (gce_loadbalancer_internal.go:384-471), then the
        finalizer."""
        self._subsets_elsewhere(service)  # gce_loadbalancer_internal.go:388-391
        if service.load_balancer_class not in (None, INTERNAL_CLASS):
            raise ImplementedElsewhere(
                f"service {service.key}: loadBalancerClass {service.load_balancer_class}"
            )
        lb = self.lb
        cluster_id = lb.cluster_id()
        name = lb.get_load_balancer_name(cluster_name, service)
        addresses = self.api.client(compute_v1.AddressesClient)
        try:
            lb._delete(addresses.delete_unary, region=self.region, address=name)
        except GceApiError as error:  # upstream goes on whatever this answers
            log.info("service %s: address %s not deleted: %s", service.key, name, error)
        lb._delete(lb._rules.delete_unary, region=self.region, forwarding_rule=name)
        local = service.external_traffic_policy == "Local"
        protocols = {port.protocol.upper() or "TCP" for port in service.ports}
        protocol = protocols.pop() if len(protocols) == 1 else "UDP"
        backend = backend_service_name(
            name, cluster_id, protocol, service.session_affinity or "None",
            shared=_shares_backend(service) and not local,
        )  # fmt: skip
        self.lb._delete_unless_used(self._backends.delete_unary, region=self.region,
                                 backend_service=backend)  # fmt: skip
        lb._delete(lb._firewalls.delete_unary, firewall=f"k8s-fw-{name}")
        lb._delete(lb._firewalls.delete_unary, firewall=name)
        self._delete_check_and_firewall(health_check_name(name, cluster_id, shared=not local))
        zones = self.api.items(
            self.api.client(compute_v1.ZonesClient).list, filter=f'name eq "{self.region}-.*"'
        )
        for zone in sorted(z.name for z in zones):
            self.lb._delete_unless_used(
                self._groups.delete_unary, zone=zone, instance_group=group_name(cluster_id)
            )
        self.set_finalizer(service, present=False)
        self.lb.metrics.forget_ilb(service.key)

    def _subsets_elsewhere(self, service: Service) -> None:
        """:class:`ImplementedElsewhere` with ILBSubsets for a Service this controller never
        served (no v1 finalizer, not of the legacy internal class), as upstream."""
        if (
            self.lb.ilb_subsets
            and ILB_FINALIZER not in service.finalizers
            and service.load_balancer_class != INTERNAL_CLASS
        ):
            raise ImplementedElsewhere(f"service {service.key}: {SUBSETS_ELSEWHERE}")

    def _delete_check_and_firewall(self, check: str) -> None:
        try:
            self.lb._delete(self._checks.delete_unary, health_check=check)
        except GceApiError as error:
            if error.in_use:
                return  # another load balancer's backend service uses it: both stay
            raise
        self.lb._delete(self.lb._firewalls.delete_unary, firewall=health_check_firewall_name(check))

    def _clear_previous(
        self,
        service: Service,
        cluster_id: str,
        previous: compute_v1.BackendService,
        backend: str,
        check: str,
    ) -> None:
        """After a change of backend service or health check, the old ones go, as upstream's
        ``clearPreviousInternalResources`` (failures are only logged)."""
        try:
            if previous.name != backend:
                self.lb._delete_unless_used(
                    self._backends.delete_unary, region=self.region, backend_service=previous.name
                )
            if len(previous.health_checks) == 1 and last(previous.health_checks[0]) != check:
                self._delete_check_and_firewall(last(previous.health_checks[0]))
        except GceApiError as error:
            log.warning("service %s: previous pieces not deleted: %s", service.key, error)


def _shares_backend(service: Service) -> bool:
    return any(service.annotations.get(key) == "true" for key in BACKEND_SHARE)


def _groups_of(backend: compute_v1.BackendService) -> set[str]:
    return {_path(b.group) for b in backend.backends}


def _rules_equal(old: compute_v1.ForwardingRule, new: compute_v1.ForwardingRule) -> bool:
    """Upstream's ``forwardingRulesEqual`` (gce_loadbalancer_internal.go:1144-1160): an
    address not asked for matches any."""
    return (
        (not old.I_p_address or not new.I_p_address or old.I_p_address == new.I_p_address)
        and old.I_p_protocol == new.I_p_protocol
        and old.load_balancing_scheme == new.load_balancing_scheme
        and set(old.ports) == set(new.ports)
        and old.all_ports == new.all_ports
        and _path(old.backend_service) == _path(new.backend_service)
        and old.allow_global_access == new.allow_global_access
        and _path(old.subnetwork) == _path(new.subnetwork)
    )
