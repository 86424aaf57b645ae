"""The public-access firewall, as upstream's firewall controller keeps it
(cloud-controller-manager/do/firewall_controller.go@v0.1.68).

:func:`firewall_request` is the firewall the Services ask for (a pure function of the Services
and the settings, upstream's ``createReconciledFirewallRequest``): named
``PUBLIC_ACCESS_FIREWALL_NAME``, applied to the droplets tagged ``PUBLIC_ACCESS_FIREWALL_TAGS``,
all outbound traffic allowed, and inbound from anywhere to

* every NodePort of a ``NodePort`` Service, unless it is annotated
  ``kubernetes.digitalocean.com/firewall-managed: "false"`` (a value that is no boolean counts
  as managed, as upstream logs and treats it);
* for a ``LoadBalancer`` Service whose load balancer is REGIONAL_NETWORK and EXTERNAL (those
  forward to the nodes without translating ports): its ports, and the health-check port from
  the load balancer alone (by its id annotation) when the id is known.

:class:`PublicAccessFirewall` finds the firewall (by the id it last saw, else by name among
all firewalls), compares it with the request as upstream does (rule order, tag order and the
``all``/``0`` spelling of every port ignored) and updates it, or creates it when there is none
or it was deleted behind polyccm's back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from polyccm.objects import Service

from polyccm_digitalocean.annotations import (
    KUBE_PROXY_HEALTH_PORT,
    LOAD_BALANCER_ID,
    NETWORK,
    REGIONAL_NETWORK,
    TYPE,
)
from polyccm_digitalocean.api import DigitalOceanApi, NotFound

log = logging.getLogger(__name__)

#: The Service annotation that takes a NodePort Service out of the firewall.
FIREWALL_MANAGED = "kubernetes.digitalocean.com/firewall-managed"
#: Seconds between two passes over every Service (firewall_controller.go:42).
RECONCILE_PERIOD = 5 * 60
ANYWHERE = ["0.0.0.0/0", "::/0"]
#: Every outbound port open, as upstream's allowAllOutboundRules (firewall_controller.go:58-80).
#: Upstream's ICMP rule has no ports (godo omits the empty field); the published API document
#: requires them and says an ICMP rule's are always "0", so "0" is sent.
OUTBOUND_RULES: list[dict[str, Any]] = [
    {"protocol": "tcp", "ports": "all", "destinations": {"addresses": ANYWHERE}},
    {"protocol": "udp", "ports": "all", "destinations": {"addresses": ANYWHERE}},
    {"protocol": "icmp", "ports": "0", "destinations": {"addresses": ANYWHERE}},
]
#: Go's strconv.ParseBool, which upstream's getBool uses (annotations.go:24-36).
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
_LB_TYPES = ("REGIONAL", REGIONAL_NETWORK)
_NETWORKS = ("EXTERNAL", "INTERNAL")


class FirewallSpecError(ValueError):
    """A LoadBalancer Service's type or network annotation is none upstream knows: upstream
    then builds no firewall at all (firewall_controller.go:324-331), nor does polyccm."""


def is_managed(service: Service) -> bool:
    """Whether a NodePort Service's ports belong in the firewall (upstream's isManaged)."""
    value = service.annotations.get(FIREWALL_MANAGED)
    if value is None or value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    log.warning("firewall: %s: %s=%r is no boolean; its ports are opened", service.key,
                FIREWALL_MANAGED, value)  # fmt: skip
    return True


def _protocol(service: Service, protocol: str, port: str) -> str | None:
    if protocol in ("TCP", "UDP"):
        return protocol.lower()
    log.warning("firewall: %s: port %s: %s is not supported, skipped", service.key, port,
                protocol)  # fmt: skip
    return None


def _lb_type(service: Service, default_type: str) -> tuple[str, str]:
    lb_type = service.annotations.get(TYPE) or default_type
    network = service.annotations.get(NETWORK) or "EXTERNAL"
    if lb_type not in _LB_TYPES:
        raise FirewallSpecError(f"{service.key}: only load balancer types {_LB_TYPES} open "
                                f"firewall ports, not {lb_type!r}")  # fmt: skip
    if network not in _NETWORKS:
        raise FirewallSpecError(f"{service.key}: only load balancer networks {_NETWORKS} "
                                f"are known, not {network!r}")  # fmt: skip
    return lb_type, network


def _health_check_port(service: Service) -> int:
    # loadbalancers.go:1385-1393: the health-check node port under externalTrafficPolicy
    # Local (GetServiceHealthCheckPathPort), else kube-proxy's.
    if service.external_traffic_policy == "Local" and service.health_check_node_port:
        return service.health_check_node_port
    return KUBE_PROXY_HEALTH_PORT


def firewall_request(
    services: Iterable[Service], *, name: str, tags: Iterable[str], default_type: str
) -> dict[str, Any]:
    """The firewall the Services ask for (firewall_controller.go:282-395)."""
    inbound: list[dict[str, Any]] = []
    lb_ports: dict[tuple[str, int], dict[str, Any]] = {}
    for service in services:
        if service.type == "NodePort":
            if not is_managed(service):
                continue
            for port in service.ports:
                if not port.node_port:
                    continue
                protocol = _protocol(service, port.protocol, port.name)
                if protocol:
                    inbound.append({"protocol": protocol, "ports": str(port.node_port),
                                    "sources": {"addresses": ANYWHERE}})  # fmt: skip
        elif service.type == "LoadBalancer":
            lb_type, network = _lb_type(service, default_type)
            if lb_type != REGIONAL_NETWORK or network != "EXTERNAL":
                continue
            lb_id = service.annotations.get(LOAD_BALANCER_ID, "")
            sources = {"load_balancer_uids": [lb_id]} if lb_id else {"addresses": ANYWHERE}
            lb_ports.setdefault(("tcp", _health_check_port(service)), sources)
            for port in service.ports:
                protocol = _protocol(service, port.protocol, port.name)
                if protocol:
                    lb_ports.setdefault((protocol, port.port), {"addresses": ANYWHERE})
    for (protocol, number), sources in lb_ports.items():
        inbound.append({"protocol": protocol, "ports": str(number), "sources": sources})
    inbound.sort(key=lambda rule: (rule["protocol"], rule["ports"]))
    return {"name": name, "inbound_rules": inbound, "outbound_rules": OUTBOUND_RULES,
            "tags": list(tags)}  # fmt: skip


def _comparable(firewall: Mapping[str, Any]) -> tuple[Any, ...]:
    """What upstream compares (firewall_controller_diff.go:62-120): name, rules in any order
    (``all`` and ``0`` both meaning every port), tags in any order."""

    def rules(key: str, peers: str) -> list[str]:
        found = []
        for rule in firewall.get(key) or []:
            ports = str(rule.get("ports") or "0")
            ends = {k: sorted(v) for k, v in (rule.get(peers) or {}).items() if v}
            found.append(repr((rule.get("protocol"), "0" if ports == "all" else ports, ends)))
        return sorted(found)

    inbound, outbound = rules("inbound_rules", "sources"), rules("outbound_rules", "destinations")
    return firewall.get("name"), inbound, outbound, sorted(firewall.get("tags") or [])


class PublicAccessFirewall:
    """The firewall ``name`` on DigitalOcean, kept equal to the requests it is given."""

    def __init__(self, api: DigitalOceanApi, name: str) -> None:
        self.api = api
        self.name = name
        self._cached: dict[str, Any] | None = None

    def current(self) -> dict[str, Any] | None:
        """The firewall, by the id last seen (when it still exists), else by name."""
        if self._cached is not None:
            try:
                answer = self.api.call("firewalls.get", firewall_id=self._cached["id"])
                return dict(answer["firewall"])
            except NotFound:
                log.warning("firewall: %s (%s) no longer exists", self.name, self._cached["id"])
                self._cached = None
        for firewall in self.api.pages("firewalls.list", "firewalls"):
            if firewall.get("name") == self.name:
                return dict(firewall)
        return None

    def refresh(self) -> None:
        """Read the firewall again (the periodic pass: a change made behind polyccm's back is
        then seen and undone, firewall_controller.go:538-561)."""
        self._cached = self.current()

    def ensure(self, request: Mapping[str, Any]) -> str:
        """Make the firewall what ``request`` asks; ``"unchanged"``, ``"updated"`` or
        ``"created"``."""
        firewall = self._cached if self._cached is not None else self.current()
        if firewall is not None and _comparable(firewall) == _comparable(request):
            self._cached = firewall
            return "unchanged"
        if firewall is not None:
            try:
                self._cached = self.api.call("firewalls.update", firewall_id=firewall["id"],
                                             body=dict(request))["firewall"]  # fmt: skip
                log.info("firewall: %s updated: %d inbound rules", self.name,
                         len(request["inbound_rules"]))  # fmt: skip
                return "updated"
            except NotFound:  # deleted since: made again, as upstream does
                self._cached = None
        self._cached = self.api.call("firewalls.create", body=dict(request))["firewall"]
        log.info("firewall: %s created: %d inbound rules", self.name,
                 len(request["inbound_rules"]))  # fmt: skip
        return "created"
