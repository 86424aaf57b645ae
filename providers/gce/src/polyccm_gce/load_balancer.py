"""The legacy network load balancer, built as cloud-provider-gcp builds it, with its names.

For a service whose load balancer is named ``<lb>`` (``a`` + UID without dashes, 32 chars):

* an HTTP health check: the shared ``k8s-<cluster-id>-node`` (kube-proxy's ``:10256/healthz``)
  for ``externalTrafficPolicy: Cluster``, or ``<lb>`` on the service's ``healthCheckNodePort``
  (``/healthz``) for ``Local``;
* a health-check firewall from Google's prober ranges: ``k8s-<cluster-id>-node-http-hc`` for
  the shared check, ``k8s-<lb>-http-hc`` for a per-service one;
* the firewall ``k8s-fw-<lb>`` letting ``loadBalancerSourceRanges`` (default anywhere) reach
  the service ports on the nodes' network tags (``node-tags`` from gce.conf, else the tags the
  backend instances carry);
* the target pool ``<lb>`` in the cluster's region with the nodes' instances (created with the
  first 200, the rest added 1,000 at a time) and the health check;
* the forwarding rule ``<lb>`` (the service ports' range, TCP or UDP) to the pool, on the
  ``loadBalancerIP`` when set (a static address the user reserved in the region).

Each piece is read first and written only when missing or different, so a second ensure writes
nothing, and a load balancer cloud-provider-gcp made (the same names) is adopted, not doubled.
Delete removes them in reverse order; the shared health check and its firewall go when the last
pool using them is gone. The internal load balancer (``networking.gke.io/load-balancer-type:
Internal``: backend services and instance groups) is not built: such a service is refused with
:class:`~polyccm.errors.InvalidServiceSpec`, which the service controller reports as a Warning.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from polyccm.cloud import LoadBalancer, LoadBalancerIngress, LoadBalancerStatus
from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Node, Service

from polyccm_gce.api import GceApi, GceApiError, Json
from polyccm_gce.instances import InstanceLookup
from polyccm_gce.naming import InstanceRef, InvalidProviderID, instance_ref, parse_provider_id

log = logging.getLogger(__name__)

INTERNAL_ANNOTATIONS = (
    "networking.gke.io/load-balancer-type",
    "cloud.google.com/load-balancer-type",
)
#: Where Google's load-balancer health checks come from.
PROBER_RANGES = ("35.191.0.0/16", "130.211.0.0/22", "209.85.152.0/22", "209.85.204.0/22")
NODES_HEALTH_CHECK_PORT = 10256
HEALTH_CHECK_PATH = "/healthz"
#: Upstream's timings for the shared nodes check and a per-service one.
NODES_CHECK_TIMING = {
    "checkIntervalSec": 8,
    "timeoutSec": 1,
    "healthyThreshold": 1,
    "unhealthyThreshold": 3,
}
SERVICE_CHECK_TIMING = NODES_CHECK_TIMING
POOL_CREATE_LIMIT = 200
POOL_ADD_CHUNK = 1000


def nodes_health_check_name(cluster_id: str) -> str:
    return f"k8s-{cluster_id}-node"


def health_check_firewall_name(cluster_id: str, check_name: str, *, shared: bool) -> str:
    return f"k8s-{cluster_id}-node-http-hc" if shared else f"k8s-{check_name}-http-hc"


def firewall_name(lb_name: str) -> str:
    return f"k8s-fw-{lb_name}"


class GceLoadBalancer(LoadBalancer):
    """External network load balancers in the cluster's region."""

    def __init__(
        self,
        api: GceApi,
        lookup: InstanceLookup,
        *,
        region: str,
        network_url: str,
        node_tags: Sequence[str] = (),
        cluster_id: Callable[[], str],
    ) -> None:
        self.api = api
        self.lookup = lookup
        self.region = region
        self.network_url = network_url
        self.node_tags = tuple(node_tags)
        self.cluster_id = cluster_id

    # -- reads -------------------------------------------------------------------------

    def _get(self, method: str, path: str) -> Json | None:
        try:
            return self.api.get(method, path)
        except GceApiError as error:
            if error.not_found:
                return None
            raise

    def _rule(self, name: str) -> Json | None:
        return self._get(
            "compute.forwardingRules.get", f"regions/{self.region}/forwardingRules/{name}"
        )

    def _pool(self, name: str) -> Json | None:
        return self._get("compute.targetPools.get", f"regions/{self.region}/targetPools/{name}")

    def get_load_balancer(self, cluster_name: str, service: Service) -> LoadBalancerStatus | None:
        rule = self._rule(self.get_load_balancer_name(cluster_name, service))
        return None if rule is None else _status(rule)

    # -- ensure ------------------------------------------------------------------------

    def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        protocol, ports = _check(service)
        name = self.get_load_balancer_name(cluster_name, service)
        description = json.dumps({"kubernetes.io/service-name": service.key})
        check, check_port, shared = self._health_check_of(service, name)
        self._ensure_health_check(check, check_port, description)
        self._ensure_firewall(
            health_check_firewall_name(self.cluster_id(), check, shared=shared),
            description=description,
            sources=list(PROBER_RANGES),
            protocol="tcp",
            ports=[str(check_port)],
            nodes=nodes,
        )
        sources = list(service.load_balancer_source_ranges) or ["0.0.0.0/0"]
        self._ensure_firewall(
            firewall_name(name),
            description=description,
            sources=sources,
            protocol=protocol.lower(),
            ports=ports,
            nodes=nodes,
        )
        self._ensure_pool(name, description, service, nodes, check)
        rule = self._ensure_rule(name, description, service, protocol, ports)
        return _status(rule)

    def _health_check_of(self, service: Service, name: str) -> tuple[str, int, bool]:
        if service.external_traffic_policy == "Local" and service.health_check_node_port:
            return name, service.health_check_node_port, False
        return nodes_health_check_name(self.cluster_id()), NODES_HEALTH_CHECK_PORT, True

    def _ensure_health_check(self, name: str, port: int, description: str) -> None:
        wanted: dict[str, Any] = {
            "name": name,
            "port": port,
            "requestPath": HEALTH_CHECK_PATH,
            **NODES_CHECK_TIMING,
        }
        current = self._get("compute.httpHealthChecks.get", f"global/httpHealthChecks/{name}")
        if current is None:
            body = {**wanted, "description": description}
            self._insert("compute.httpHealthChecks.insert", "global/httpHealthChecks", body)
        elif any(current.get(key) != value for key, value in wanted.items()):
            self.api.mutate(
                "compute.httpHealthChecks.patch",
                "PATCH",
                f"global/httpHealthChecks/{name}",
                wanted,
            )

    def _target_tags(self, nodes: Sequence[Node]) -> list[str]:
        if self.node_tags:
            return list(self.node_tags)
        tags: set[str] = set()
        for instance in self.lookup.many(nodes).values():
            tags.update(instance.tags.items)
        return sorted(tags)

    def _ensure_firewall(
        self,
        name: str,
        *,
        description: str,
        sources: list[str],
        protocol: str,
        ports: list[str],
        nodes: Sequence[Node],
    ) -> None:
        current = self._get("compute.firewalls.get", f"global/firewalls/{name}")
        tags = self.node_tags or (
            tuple(current.get("targetTags", ())) if current is not None else ()
        )
        wanted: dict[str, Any] = {
            "sourceRanges": sorted(sources),
            "allowed": [{"IPProtocol": protocol, "ports": sorted(ports, key=_port_key)}],
        }
        if current is None:
            target_tags = list(tags) or self._target_tags(nodes)
            body = {
                "name": name,
                "description": description,
                "network": self.network_url,
                **wanted,
                **({"targetTags": target_tags} if target_tags else {}),
            }
            self._insert("compute.firewalls.insert", "global/firewalls", body)
            return
        have = {
            "sourceRanges": sorted(current.get("sourceRanges", ())),
            "allowed": [
                {
                    "IPProtocol": a.get("IPProtocol"),
                    "ports": sorted(a.get("ports", ()), key=_port_key),
                }
                for a in current.get("allowed", ())
            ],
        }
        changes: dict[str, Any] = {k: v for k, v in wanted.items() if have[k] != v}
        if self.node_tags and sorted(current.get("targetTags", ())) != sorted(self.node_tags):
            changes["targetTags"] = list(self.node_tags)
        if changes:
            self.api.mutate("compute.firewalls.patch", "PATCH", f"global/firewalls/{name}", changes)

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
        self, name: str, description: str, service: Service, nodes: Sequence[Node], check: str
    ) -> None:
        affinity = "CLIENT_IP" if service.session_affinity == "ClientIP" else "NONE"
        check_url = f"{self.api.base}global/httpHealthChecks/{check}"
        pool = self._pool(name)
        if pool is not None and pool.get("sessionAffinity", "NONE") != affinity:
            # A pool's affinity cannot change: make it again, as upstream does.
            self._delete_rule_and_pool(name)
            pool = None
        if pool is None:
            refs = list(self._refs(nodes).values())
            body = {
                "name": name,
                "description": description,
                "sessionAffinity": affinity,
                "instances": [self._instance_url(r) for r in refs[:POOL_CREATE_LIMIT]],
                "healthChecks": [check_url],
            }
            self._insert("compute.targetPools.insert", f"regions/{self.region}/targetPools", body)
            self._add_instances(name, refs[POOL_CREATE_LIMIT:])
            return
        self._sync_pool(pool, nodes)
        checks = [instance_ref_or_name(url) for url in pool.get("healthChecks", ())]
        if checks != [check]:
            path = f"regions/{self.region}/targetPools/{name}"
            if pool.get("healthChecks"):
                self.api.mutate(
                    "compute.targetPools.removeHealthCheck",
                    "POST",
                    f"{path}/removeHealthCheck",
                    {"healthChecks": [{"healthCheck": u} for u in pool["healthChecks"]]},
                )
            self.api.mutate(
                "compute.targetPools.addHealthCheck",
                "POST",
                f"{path}/addHealthCheck",
                {"healthChecks": [{"healthCheck": check_url}]},
            )

    def _sync_pool(self, pool: Json, nodes: Sequence[Node]) -> None:
        """Add and remove instances so the pool holds exactly the nodes' instances."""
        name = pool["name"]
        wanted = self._refs(nodes)
        have: dict[tuple[str, str], str] = {}
        for url in pool.get("instances", ()):
            ref = instance_ref(url)
            if ref is not None:
                have[(ref.zone, ref.name)] = url
        self._add_instances(name, [ref for key, ref in wanted.items() if key not in have])
        gone = [url for key, url in have.items() if key not in wanted]
        for start in range(0, len(gone), POOL_ADD_CHUNK):
            self.api.mutate(
                "compute.targetPools.removeInstance",
                "POST",
                f"regions/{self.region}/targetPools/{name}/removeInstance",
                {"instances": [{"instance": url} for url in gone[start : start + POOL_ADD_CHUNK]]},
            )

    def _add_instances(self, name: str, refs: Sequence[InstanceRef]) -> None:
        for start in range(0, len(refs), POOL_ADD_CHUNK):
            chunk = refs[start : start + POOL_ADD_CHUNK]
            self.api.mutate(
                "compute.targetPools.addInstance",
                "POST",
                f"regions/{self.region}/targetPools/{name}/addInstance",
                {"instances": [{"instance": self._instance_url(r)} for r in chunk]},
            )

    def _ensure_rule(
        self, name: str, description: str, service: Service, protocol: str, ports: list[str]
    ) -> Json:
        numbers = [int(p) for p in ports]
        port_range = f"{min(numbers)}-{max(numbers)}"
        rule = self._rule(name)
        if rule is not None:
            same = (
                rule.get("IPProtocol") == protocol
                and rule.get("portRange") == port_range
                and (
                    not service.load_balancer_ip
                    or rule.get("IPAddress") == service.load_balancer_ip
                )
            )
            if same:
                return rule
            self._delete(
                "compute.forwardingRules.delete", f"regions/{self.region}/forwardingRules/{name}"
            )
        body: dict[str, Any] = {
            "name": name,
            "description": description,
            "IPProtocol": protocol,
            "portRange": port_range,
            "target": f"{self.api.base}regions/{self.region}/targetPools/{name}",
        }
        if service.load_balancer_ip:
            body["IPAddress"] = service.load_balancer_ip
        try:
            self._insert(
                "compute.forwardingRules.insert", f"regions/{self.region}/forwardingRules", body
            )
        except GceApiError as error:
            if service.load_balancer_ip and error.status == 400:
                raise InvalidServiceSpec(
                    f"loadBalancerIP {service.load_balancer_ip} cannot be used: reserve it as "
                    f"a static external address in region {self.region} first ({error})"
                ) from None
            raise
        made = self._rule(name)
        if made is None:
            raise GceApiError("compute.forwardingRules.get", 404, "notFound", f"{name} vanished")
        return made

    def _insert(self, method: str, path: str, body: Json) -> None:
        try:
            self.api.mutate(method, "POST", path, body)
        except GceApiError as error:
            if not error.already_exists:
                raise

    # -- update ------------------------------------------------------------------------

    def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        pool = self._pool(self.get_load_balancer_name(cluster_name, service))
        if pool is None:
            raise GceApiError(
                "compute.targetPools.get", 404, "notFound", "the load balancer's pool is gone"
            )
        self._sync_pool(pool, nodes)

    # -- delete ------------------------------------------------------------------------

    def _delete(self, method: str, path: str) -> bool:
        """Delete; False when it was already gone."""
        try:
            self.api.mutate(method, "DELETE", path)
        except GceApiError as error:
            if error.not_found:
                return False
            raise
        return True

    def _delete_rule_and_pool(self, name: str) -> None:
        self._delete(
            "compute.forwardingRules.delete", f"regions/{self.region}/forwardingRules/{name}"
        )
        self._delete("compute.targetPools.delete", f"regions/{self.region}/targetPools/{name}")

    def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        name = self.get_load_balancer_name(cluster_name, service)
        self._delete_rule_and_pool(name)
        self._delete("compute.firewalls.delete", f"global/firewalls/{firewall_name(name)}")
        # The service's own check (externalTrafficPolicy Local, now or before).
        self._delete("compute.httpHealthChecks.delete", f"global/httpHealthChecks/{name}")
        self._delete(
            "compute.firewalls.delete",
            f"global/firewalls/{health_check_firewall_name('', name, shared=False)}",
        )
        self._delete_shared_check_if_unused()

    def _delete_shared_check_if_unused(self) -> None:
        """The shared nodes check and its firewall, once no target pool uses the check."""
        shared = nodes_health_check_name(self.cluster_id())
        if self._get("compute.httpHealthChecks.get", f"global/httpHealthChecks/{shared}") is None:
            return
        try:
            self._delete("compute.httpHealthChecks.delete", f"global/httpHealthChecks/{shared}")
        except GceApiError as error:
            if error.reason == "resourceInUseByAnotherResource":
                return  # another service's pool still uses it
            raise
        fw = health_check_firewall_name(self.cluster_id(), shared, shared=True)
        self._delete("compute.firewalls.delete", f"global/firewalls/{fw}")


def instance_ref_or_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _port_key(port: str) -> tuple[int, str]:
    head = port.split("-", 1)[0]
    return (int(head) if head.isdigit() else 0, port)


def _sorted_ports(allowed: Json) -> list[str]:
    return sorted(allowed.get("ports", ()), key=_port_key)


def _check(service: Service) -> tuple[str, list[str]]:
    """The one protocol and the ports of the service; InvalidServiceSpec for what the legacy
    network load balancer cannot do."""
    for key in INTERNAL_ANNOTATIONS:
        if service.annotations.get(key, "").lower() == "internal":
            raise InvalidServiceSpec(
                f"{key}: Internal is not supported yet by polyccm's GCE provider (only the "
                "external network load balancer is); remove the annotation or use "
                "cloud-provider-gcp for internal load balancers"
            )
    if not service.ports:
        raise InvalidServiceSpec("the service has no ports")
    protocols = {port.protocol.upper() or "TCP" for port in service.ports}
    if len(protocols) > 1 or not protocols <= {"TCP", "UDP"}:
        raise InvalidServiceSpec(
            f"ports use {', '.join(sorted(protocols))}: a GCE network load balancer serves one "
            "protocol, TCP or UDP"
        )
    return protocols.pop(), sorted({str(port.port) for port in service.ports}, key=_port_key)


def _status(rule: Json) -> LoadBalancerStatus:
    address = str(rule.get("IPAddress", ""))
    return LoadBalancerStatus(ingress=(LoadBalancerIngress(ip=address),) if address else ())
