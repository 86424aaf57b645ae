"""Test support: a network load balancer made in the emulator as cloud-provider-gcp leaves it,
through the compute API alone (no polyccm code), for the tests of adoption (``polyccm plan``)
and of leaks (``polyccm orphans``).

What upstream's ``ensureExternalLoadBalancer`` leaves: the HTTP health check (shared
``k8s-<cluster-id>-node`` on ``:10256/healthz``, or ``<lb>`` on the ``healthCheckNodePort`` for
``externalTrafficPolicy: Local``) described by its own name; the target pool ``<lb>`` with the
instances and the check; the forwarding rule ``<lb>``; the firewall ``k8s-fw-<lb>`` to the
rule's address, described by the Service and that address; the check's firewall from Google's
prober ranges (described by the cluster id when shared), made with the first load balancer
that needed the check; with ``deny`` (upstream's ``--enable-l4-deny-firewall``) the allow
firewalls at priority 999 and the deny firewall ``k8s-fw-<lb>-deny`` last, at 1000
(gce_loadbalancer_external.go:1230-1270@v36.3.8). Descriptions are upstream's exact
strings. Upstream reserves the address first and releases it once the rule holds it; here the
rule takes an ephemeral address directly, which ends in the same state.
"""

from __future__ import annotations

from collections.abc import Sequence

from polyccm.cloud import default_load_balancer_name
from polyccm.objects import Service

from polyccm_gce_emulator.testing import REGION, ZONE, ComputeApi, ComputeApiError

#: Upstream's default source ranges of load-balancer health checks, in its order.
HEALTH_CHECK_SOURCES = ["130.211.0.0/22", "35.191.0.0/16", "209.85.152.0/22", "209.85.204.0/22"]


def _service_description(service: Service) -> str:
    return f'{{"kubernetes.io/service-name":"{service.key}"}}'


def _exists(compute: ComputeApi, path: str) -> bool:
    try:
        compute.get(path)
    except ComputeApiError as error:
        if error.status == 404:
            return False
        raise
    return True


def _firewall(
    compute: ComputeApi,
    name: str,
    description: str,
    *,
    sources: Sequence[str],
    protocol: str,
    ports: Sequence[str],
    tags: Sequence[str],
    destination: str = "",
    priority: int = 1000,
) -> None:
    body = {
        "name": name,
        "description": description,
        "network": "global/networks/default",
        "sourceRanges": list(sources),
        "targetTags": list(tags),
        "allowed": [{"IPProtocol": protocol, "ports": list(ports)}],
        "priority": priority,
    }
    if destination:
        body["destinationRanges"] = [destination]
    compute.do("POST", "global/firewalls", body)


def network_load_balancer(
    compute: ComputeApi,
    service: Service,
    *,
    cluster_id: str,
    instances: Sequence[str],
    tags: Sequence[str],
    firewall_ports: Sequence[str],
    deny: bool = False,
) -> str:
    """Make ``service``'s load balancer as upstream would for ``instances`` (names in
    :data:`ZONE`) with nodes tagged ``tags``; ``firewall_ports`` as upstream writes them (ports,
    consecutive ones as ``low-high``). Its name."""
    name = default_load_balancer_name(service)
    local = service.external_traffic_policy == "Local" and service.health_check_node_port
    check = name if local else f"k8s-{cluster_id}-node"
    check_port = service.health_check_node_port if local else 10256
    new_check = not _exists(compute, f"global/httpHealthChecks/{check}")
    if new_check:
        compute.do(
            "POST",
            "global/httpHealthChecks",
            {
                "name": check,
                "description": f'{{"kubernetes.io/service-name":"{check}"}}',
                "port": check_port,
                "requestPath": "/healthz",
                "checkIntervalSec": 8,
                "timeoutSec": 1,
                "healthyThreshold": 1,
                "unhealthyThreshold": 3,
            },
        )
    compute.do(
        "POST",
        f"regions/{REGION}/targetPools",
        {
            "name": name,
            "description": _service_description(service),
            "instances": [f"zones/{ZONE}/instances/{instance}" for instance in instances],
            "sessionAffinity": "CLIENT_IP" if service.session_affinity == "ClientIP" else "NONE",
            "healthChecks": [f"global/httpHealthChecks/{check}"],
        },
    )
    numbers = [port.port for port in service.ports]
    compute.do(
        "POST",
        f"regions/{REGION}/forwardingRules",
        {
            "name": name,
            "description": _service_description(service),
            "IPProtocol": service.ports[0].protocol,
            "portRange": f"{min(numbers)}-{max(numbers)}",
            "target": f"regions/{REGION}/targetPools/{name}",
            "networkTier": "PREMIUM",
        },
    )
    address = compute.get(f"regions/{REGION}/forwardingRules/{name}")["IPAddress"]
    with_address = (
        f'{{"kubernetes.io/service-name":"{service.key}", "kubernetes.io/service-ip":"{address}"}}'
    )
    _firewall(
        compute,
        f"k8s-fw-{name}",
        with_address,
        sources=list(service.load_balancer_source_ranges) or ["0.0.0.0/0"],
        protocol=service.ports[0].protocol.lower(),
        ports=firewall_ports,
        tags=tags,
        destination=address,
        priority=999 if deny else 1000,
    )
    if new_check:
        _firewall(
            compute,
            f"k8s-{check}-http-hc" if local else f"k8s-{cluster_id}-node-http-hc",
            with_address if local else f'{{"kubernetes.io/cluster-id":"{cluster_id}"}}',
            sources=HEALTH_CHECK_SOURCES,
            protocol="tcp",
            ports=[str(check_port)],
            tags=tags,
            destination=address,
            priority=999 if deny else 1000,
        )
    if deny:
        compute.do("POST", "global/firewalls", {
            "name": f"k8s-fw-{name}-deny", "description": with_address,
            "network": "global/networks/default", "sourceRanges": ["0.0.0.0/0"],
            "destinationRanges": [address], "targetTags": list(tags),
            "denied": [{"IPProtocol": "all"}], "priority": 1000})  # fmt: skip
    return name


def internal_load_balancer(
    compute: ComputeApi,
    service: Service,
    *,
    cluster_id: str,
    instances: Sequence[str],
    tags: Sequence[str],
    firewall_ports: Sequence[str],
) -> str:
    """Make ``service``'s internal load balancer as cloud-provider-gcp v36.3.8's
    ``ensureInternalLoadBalancer`` leaves it (gce_loadbalancer_internal.go:59-272) for
    ``instances`` (names in :data:`ZONE`): the instance group ``k8s-ig--<cid>`` (made with its
    name alone, then the instances added), the HTTP health check in the ``healthChecks`` API
    (shared ``k8s-<cid>-node`` with no description, or ``<lb>`` described by the Service), the
    regional backend service ``<lb>``, the INTERNAL forwarding rule on the default subnetwork,
    and the firewalls ``k8s-fw-<lb>`` and ``k8s-<cid>-node-hc`` / ``<lb>-hc`` (no description,
    no destination). Upstream reserves the address ``<lb>`` and releases it once the rule holds
    it; here the rule takes its address directly, which ends in the same state. Its name."""
    name = default_load_balancer_name(service)
    local = service.external_traffic_policy == "Local"
    check = name if local else f"k8s-{cluster_id}-node"
    check_port = service.health_check_node_port if local else 10256
    group = f"zones/{ZONE}/instanceGroups/k8s-ig--{cluster_id}"
    if not _exists(compute, group):
        compute.do("POST", f"zones/{ZONE}/instanceGroups", {"name": f"k8s-ig--{cluster_id}"})
        compute.do(
            "POST",
            f"{group}/addInstances",
            {"instances": [{"instance": f"zones/{ZONE}/instances/{i}"} for i in instances]},
        )
    if not _exists(compute, f"global/healthChecks/{check}"):
        compute.do(
            "POST",
            "global/healthChecks",
            {
                "name": check,
                "description": _service_description(service) if local else "",
                "type": "HTTP",
                "httpHealthCheck": {"port": check_port, "requestPath": "/healthz"},
                "checkIntervalSec": 8,
                "timeoutSec": 1,
                "healthyThreshold": 1,
                "unhealthyThreshold": 3,
            },
        )
    protocol = service.ports[0].protocol or "TCP"
    compute.do(
        "POST",
        f"regions/{REGION}/backendServices",
        {
            "name": name,
            "description": _service_description(service),
            "protocol": protocol,
            "sessionAffinity": "CLIENT_IP" if service.session_affinity == "ClientIP" else "NONE",
            "loadBalancingScheme": "INTERNAL",
            "healthChecks": [compute.get(f"global/healthChecks/{check}")["selfLink"]],
            "backends": [{"group": compute.get(group)["selfLink"]}],
        },
    )
    ports = [str(port.port) for port in service.ports]
    rule: dict[str, object] = {
        "name": name,
        "description": _service_description(service),
        "backendService": f"regions/{REGION}/backendServices/{name}",
        "IPProtocol": protocol,
        "loadBalancingScheme": "INTERNAL",
        "subnetwork": f"regions/{REGION}/subnetworks/default",
        "network": "global/networks/default",
    }
    if len(ports) > 5:
        rule["allPorts"] = True
    else:
        rule["ports"] = ports
    if service.annotations.get("networking.gke.io/internal-load-balancer-allow-global-access") == (
        "true"
    ):
        rule["allowGlobalAccess"] = True
    compute.do("POST", f"regions/{REGION}/forwardingRules", rule)
    address = compute.get(f"regions/{REGION}/forwardingRules/{name}")["IPAddress"]
    _firewall(
        compute,
        f"k8s-fw-{name}",
        f'{{"kubernetes.io/service-name":"{service.key}", "kubernetes.io/service-ip":"{address}"}}',
        sources=list(service.load_balancer_source_ranges) or ["0.0.0.0/0"],
        protocol=protocol.lower(),
        ports=firewall_ports,
        tags=tags,
        destination=address,
    )
    check_firewall = f"{name}-hc" if local else f"k8s-{cluster_id}-node-hc"
    if not _exists(compute, f"global/firewalls/{check_firewall}"):
        _firewall(
            compute,
            check_firewall,
            "",
            sources=HEALTH_CHECK_SOURCES,
            protocol="tcp",
            ports=[str(check_port)],
            tags=tags,
        )
    return name
