"""Load balancers: their specs (with DigitalOcean's defaults filled in), the checks that turn
an invalid spec into a 422, and the ``new`` -> ``active`` life that assigns the ``ip``.

The request has already matched the OpenAPI document when these checks run; they cover what
the document cannot say (a certificate that does not exist, a droplet in another region, two
rules on one entry port, ...).
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from polyccm_digitalocean_emulator import catalog
from polyccm_digitalocean_emulator.errors import Unprocessable
from polyccm_digitalocean_emulator.util import iso_time

#: Values DigitalOcean fills in for fields a create or update leaves out.
DEFAULTS: dict[str, Any] = {
    "size_unit": 1,
    "algorithm": "round_robin",
    "redirect_http_to_https": False,
    "enable_proxy_protocol": False,
    "enable_backend_keepalive": False,
    "http_idle_timeout_seconds": 60,
    "disable_lets_encrypt_dns_records": False,
    "network": "EXTERNAL",
    "network_stack": "IPV4",
    "type": "REGIONAL",
    "tls_cipher_policy": "DEFAULT",
}
HEALTH_CHECK_DEFAULTS: dict[str, Any] = {
    "protocol": "http",
    "port": 80,
    "path": "/",
    "check_interval_seconds": 10,
    "response_timeout_seconds": 5,
    "unhealthy_threshold": 5,
    "healthy_threshold": 3,
}
TLS_ENTRY_PROTOCOLS = ("https", "http2", "http3")
#: Entry protocols whose traffic must reach the droplets in the same protocol family.
_LAYER4 = ("tcp", "udp")
#: The entry protocols a rule may pass TLS through on (to the same target protocol).
_PASSTHROUGH = ("https", "http2")
#: Fields an update cannot change (the load balancer would have to be recreated).
FIXED_ON_UPDATE = ("region", "vpc_uuid", "network")


@dataclass
class LoadBalancer:
    id: str
    region: str
    spec: dict[str, Any]
    created_at: float
    status: str = "new"
    ip: str = ""
    ipv6: str = ""
    droplet_ids: dict[int, None] = field(default_factory=dict)
    """The droplets behind it, in the order they were added (a dict: adding, removing and
    forgetting a destroyed droplet cost the same with 5,000 of them as with one)."""
    tag: str = ""

    def render(self, droplet_ids: Iterable[int]) -> dict[str, Any]:
        body = copy.deepcopy(self.spec)
        body.update(
            id=self.id,
            ip=self.ip,
            status=self.status,
            created_at=iso_time(self.created_at),
            region=catalog.render_region(self.region),
            droplet_ids=list(droplet_ids),
        )
        if self.ipv6:
            body["ipv6"] = self.ipv6
        if self.tag:
            body["tag"] = self.tag
        return body


#: The fields the model keeps apart from the spec (5,000 droplet ids are not copied into it).
PLACEMENT = frozenset({"region", "droplet_ids", "tag"})


def normalized(body: Mapping[str, Any], *, project_id: str, vpc_uuid: str) -> dict[str, Any]:
    """The stored spec of a create/update body: every field with its value or default, without
    the placement fields (``region``, ``droplet_ids``, ``tag``) the model keeps apart."""
    spec = {key: copy.deepcopy(value) for key, value in body.items() if key not in PLACEMENT}
    for key, value in DEFAULTS.items():
        spec.setdefault(key, value)
    # The document: "This field has been deprecated. You can no longer specify an algorithm";
    # upstream's CCM still sends its annotation's value, which "does nothing, as the algorithm
    # field on the API is ignored" (v0.1.68 lb_annotations.go:116-121). Taken, never kept.
    spec["algorithm"] = DEFAULTS["algorithm"]
    spec.setdefault("name", "")
    spec["health_check"] = {**HEALTH_CHECK_DEFAULTS, **spec.get("health_check", {})}
    sticky = {"type": "none", **spec.get("sticky_sessions", {})}
    spec["sticky_sessions"] = sticky
    firewall = spec.get("firewall") or {}
    spec["firewall"] = {"allow": list(firewall.get("allow", [])),
                        "deny": list(firewall.get("deny", []))}  # fmt: skip
    spec["forwarding_rules"] = [normalized_rule(rule) for rule in spec["forwarding_rules"]]
    spec.setdefault("project_id", project_id)
    spec.setdefault("vpc_uuid", vpc_uuid)
    return spec


def normalized_rule(rule: Mapping[str, Any]) -> dict[str, Any]:
    return {"certificate_id": "", "tls_passthrough": False, **rule}


def rule_key(rule: Mapping[str, Any]) -> tuple[str, int, str, int]:
    """What identifies a forwarding rule when rules are added or removed."""
    return (
        str(rule["entry_protocol"]),
        int(rule["entry_port"]),
        str(rule["target_protocol"]),
        int(rule["target_port"]),
    )


def check_rules(rules: Iterable[Mapping[str, Any]], certificates: Mapping[str, Any]) -> None:
    """Refuse forwarding rules DigitalOcean would refuse (422)."""
    seen: set[tuple[int, bool]] = set()
    for rule in rules:
        entry, target = rule["entry_protocol"], rule["target_protocol"]
        entry_port, target_port = int(rule["entry_port"]), int(rule["target_port"])
        for name, port in (("entry_port", entry_port), ("target_port", target_port)):
            if not 1 <= port <= 65535:
                raise Unprocessable(f"forwarding rule {name} {port} must be between 1 and 65535")
        # An http3 rule (QUIC) shares its entry port with the https or http2 rule of the same
        # port: DigitalOcean requires that pairing, and upstream's CCM always sends it
        # (digitalocean-cloud-controller-manager v0.1.68 loadbalancers.go:1111 and
        # buildHTTP3ForwardingRule 1051-1084). Only two http3 rules, or two others, clash.
        slot = (entry_port, entry == "http3")
        if slot in seen:
            raise Unprocessable(
                f"forwarding rules must have unique entry ports: {entry_port} is used twice"
            )
        seen.add(slot)
        if (entry in _LAYER4 or target in _LAYER4) and entry != target:
            raise Unprocessable(
                f"forwarding rule on port {entry_port}: entry protocol {entry} cannot forward "
                f"to target protocol {target}"
            )
        certificate_id = rule.get("certificate_id") or ""
        passthrough = bool(rule.get("tls_passthrough"))
        if passthrough and certificate_id:
            raise Unprocessable(
                f"forwarding rule on port {entry_port}: tls_passthrough cannot be combined "
                "with a certificate_id"
            )
        # DigitalOcean's document (digitalocean-openapi.yaml:52994-52997, forwarding_rule) ties
        # tls_passthrough to no protocol, and upstream's CCM passes http2 through as http2
        # (v0.1.68 loadbalancers.go:1210-1211, 1266-1271): TLS entry protocols that forward
        # to themselves pass through; the emulator is never stricter than the cloud.
        if passthrough and (entry not in _PASSTHROUGH or target != entry):
            raise Unprocessable(
                f"forwarding rule on port {entry_port}: tls_passthrough requires https (or "
                "http2) entry and the same target protocol"
            )
        if entry in TLS_ENTRY_PROTOCOLS and not passthrough and not certificate_id:
            raise Unprocessable(
                f"forwarding rule on port {entry_port}: entry protocol {entry} requires a "
                "certificate_id or tls_passthrough"
            )
        if certificate_id and certificate_id not in certificates:
            raise Unprocessable(f"certificate {certificate_id} could not be found")


def check_spec(body: Mapping[str, Any], certificates: Mapping[str, Any]) -> None:
    """Refuse what the OpenAPI document allows but DigitalOcean refuses (422)."""
    check_rules(body.get("forwarding_rules", []), certificates)
    if "size" in body and "size_unit" in body:
        raise Unprocessable("only one of size or size_unit may be set")
    health = body.get("health_check", {})
    port = health.get("port")
    if port is not None and not 1 <= int(port) <= 65535:
        raise Unprocessable(f"health check port {port} must be between 1 and 65535")
    for name in ("check_interval_seconds", "response_timeout_seconds"):
        value = health.get(name)
        if value is not None and not 3 <= int(value) <= 300:
            raise Unprocessable(f"health check {name} must be between 3 and 300")
    for name in ("healthy_threshold", "unhealthy_threshold"):
        value = health.get(name)
        if value is not None and not 2 <= int(value) <= 10:
            raise Unprocessable(f"health check {name} must be between 2 and 10")
    sticky = body.get("sticky_sessions", {})
    if sticky.get("type") == "cookies" and not (
        sticky.get("cookie_name") and sticky.get("cookie_ttl_seconds")
    ):
        raise Unprocessable(
            "sticky sessions of type cookies require cookie_name and cookie_ttl_seconds"
        )
    firewall = body.get("firewall") or {}
    for kind in ("allow", "deny"):
        for rule in firewall.get(kind, []):
            _check_firewall_rule(kind, rule)


def _check_firewall_rule(kind: str, rule: str) -> None:
    source, _, value = rule.partition(":")
    try:
        if source == "ip":
            ipaddress.ip_address(value)
            return
        if source == "cidr":
            ipaddress.ip_network(value, strict=False)
            return
    except ValueError:
        pass
    raise Unprocessable(
        f"firewall {kind} rule {rule!r} is invalid: use ip:<address> or cidr:<network>"
    )
