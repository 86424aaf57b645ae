"""Security-group ingress rules as comparable values (pure).

EC2 groups rules (one permission, many CIDRs); comparing desired and actual state is simpler one
rule per source, so permissions are ungrouped into :class:`Rule` values, diffed as sets, and
turned back into API permissions for Authorize/RevokeSecurityGroupIngress.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

NLB_CLIENT_RULE = "kubernetes.io/rule/nlb/client"
NLB_HEALTH_RULE = "kubernetes.io/rule/nlb/health"
NLB_MTU_RULE = "kubernetes.io/rule/nlb/mtu"


@dataclass(frozen=True, order=True)
class Rule:
    """One ingress rule: a protocol and port range from one source (CIDR or group)."""

    protocol: str
    from_port: int | None
    to_port: int | None
    cidr: str = ""
    group_id: str = ""
    description: str = ""

    def to_permission(self) -> dict[str, Any]:
        permission: dict[str, Any] = {"IpProtocol": self.protocol}
        if self.protocol != "-1":
            permission["FromPort"] = self.from_port
            permission["ToPort"] = self.to_port
        described = {"Description": self.description} if self.description else {}
        if self.group_id:
            permission["UserIdGroupPairs"] = [{"GroupId": self.group_id, **described}]
        elif ipaddress.ip_network(self.cidr, strict=False).version == 6:
            permission["Ipv6Ranges"] = [{"CidrIpv6": self.cidr, **described}]
        else:
            permission["IpRanges"] = [{"CidrIp": self.cidr, **described}]
        return permission


def cidr_rule(protocol: str, port: int, cidr: str, description: str = "") -> Rule:
    return Rule(protocol, port, port, cidr=cidr, description=description)


def icmp_fragmentation_rule(cidr: str, description: str = "") -> Rule:
    """ICMP type 3 code 4 ("fragmentation needed"), which path-MTU discovery needs."""
    if ipaddress.ip_network(cidr, strict=False).version == 6:
        return Rule("icmpv6", 2, 0, cidr=cidr, description=description)
    return Rule("icmp", 3, 4, cidr=cidr, description=description)


def group_rule(group_id: str) -> Rule:
    """All traffic from another security group (the ELB's group to the nodes' group)."""
    return Rule("-1", None, None, group_id=group_id)


def ungroup(permissions: Iterable[Mapping[str, Any]]) -> set[Rule]:
    """Described permissions as one rule per source."""
    rules: set[Rule] = set()
    for permission in permissions:
        protocol = str(permission.get("IpProtocol", "-1")).lower()
        if protocol in ("all", "-1"):
            protocol, from_port, to_port = "-1", None, None
        else:
            from_port, to_port = permission.get("FromPort"), permission.get("ToPort")
        for ip_range in permission.get("IpRanges") or ():
            rules.add(
                Rule(
                    protocol,
                    from_port,
                    to_port,
                    cidr=str(ip_range["CidrIp"]),
                    description=str(ip_range.get("Description") or ""),
                )
            )
        for ip_range in permission.get("Ipv6Ranges") or ():
            rules.add(
                Rule(
                    protocol,
                    from_port,
                    to_port,
                    cidr=str(ip_range["CidrIpv6"]),
                    description=str(ip_range.get("Description") or ""),
                )
            )
        for pair in permission.get("UserIdGroupPairs") or ():
            rules.add(
                Rule(
                    protocol,
                    from_port,
                    to_port,
                    group_id=str(pair["GroupId"]),
                    description=str(pair.get("Description") or ""),
                )
            )
    return rules


def permissions(rules: Iterable[Rule]) -> list[dict[str, Any]]:
    """Rules as API permissions, in a stable order."""
    return [rule.to_permission() for rule in sorted(rules)]


def load_balancer_rules(
    ports: Iterable[tuple[str, int]], source_ranges: Iterable[str]
) -> set[Rule]:
    """What upstream opens on a load balancer's own group: each (protocol, port) from every
    source range, plus ICMP fragmentation-needed from the same ranges."""
    ranges = list(source_ranges)
    rules = {cidr_rule(protocol.lower(), port, cidr) for protocol, port in ports for cidr in ranges}
    rules.update(icmp_fragmentation_rule(cidr) for cidr in ranges)
    return rules


def nlb_node_rules(
    *,
    load_balancer_name: str,
    protocol: str,
    traffic_ports: Iterable[int],
    health_ports: Iterable[int],
    client_cidrs: Iterable[str],
    subnet_cidrs: Iterable[str],
) -> set[Rule]:
    """The rules upstream puts on node groups for an NLB: client traffic from the source ranges
    and health checks from the NLB's subnets, labelled ``<kind>=<lb name>`` in the description.
    The health rules are left out when the client rules already cover them."""
    clients = list(client_cidrs)
    traffic = set(traffic_ports)
    health = set(health_ports)
    client_label = f"{NLB_CLIENT_RULE}={load_balancer_name}"
    rules = {cidr_rule(protocol, port, cidr, client_label) for port in traffic for cidr in clients}
    covered = clients == ["0.0.0.0/0"] and protocol == "tcp" and health == traffic
    if not covered:
        health_label = f"{NLB_HEALTH_RULE}={load_balancer_name}"
        rules.update(
            cidr_rule("tcp", port, cidr, health_label) for port in health for cidr in subnet_cidrs
        )
    return rules


def is_nlb_rule_of(rule: Rule, load_balancer_name: str) -> bool:
    return rule.description in (
        f"{NLB_CLIENT_RULE}={load_balancer_name}",
        f"{NLB_HEALTH_RULE}={load_balancer_name}",
    )


def mtu_rules_for(rules: Iterable[Rule]) -> set[Rule]:
    """Upstream keeps one ICMP fragmentation rule per client CIDR of any NLB on a node group."""
    return {
        icmp_fragmentation_rule(rule.cidr, NLB_MTU_RULE)
        for rule in rules
        if rule.description.startswith(NLB_CLIENT_RULE) and rule.cidr
    }
