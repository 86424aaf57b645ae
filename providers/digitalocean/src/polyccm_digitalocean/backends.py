"""Which nodes a load balancer may send traffic to, and the network stack they allow: pure.

As upstream's filterAndClassifyNodes and getNetworkStack (v0.1.66 on): a node is IPv4, IPv6 or
dual-stack by its ExternalIP addresses. An INTERNAL load balancer takes every node; a REGIONAL
EXTERNAL one also takes a node whose only address is a private IPv4 InternalIP; a
REGIONAL_NETWORK EXTERNAL one (DigitalOcean forwards to the droplets' public addresses) only
nodes with a public address. An IPv6-only node is never an EXTERNAL backend. A REGIONAL_NETWORK
EXTERNAL load balancer with no ``network-stack`` is DUALSTACK only when every backend is
dual-stack; asked for DUALSTACK with an IPv4-only backend, it is refused.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Node

from polyccm_digitalocean.annotations import (
    DUALSTACK,
    IPV4,
    NETWORK_STACK,
    REGIONAL_NETWORK,
    TYPE,
)

IPV4_ONLY, IPV6_ONLY, DUAL, NO_ADDRESS = "ipv4", "ipv6", "dual", "none"


def _is_ipv6(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 6
    except ValueError:
        return False


def classify(node: Node, *, private_ok: bool) -> str:
    """``node``'s stack by its ExternalIPs; with ``private_ok``, a node with none counts as IPv4
    when it has an IPv4 InternalIP."""
    external = [a for kind, a in node.addresses if kind == "ExternalIP"]
    v6 = any(_is_ipv6(a) for a in external)
    v4 = any(not _is_ipv6(a) for a in external)
    if not external and private_ok:
        v4 = any(kind == "InternalIP" and not _is_ipv6(a) for kind, a in node.addresses)
    if v4 and v6:
        return DUAL
    if v4:
        return IPV4_ONLY
    return IPV6_ONLY if v6 else NO_ADDRESS


@dataclass(frozen=True)
class Backends:
    """The nodes kept as backends, and whether every one of them is dual-stack."""

    nodes: tuple[Node, ...]
    all_dual_stack: bool


def backends(nodes: Sequence[Node], lb_type: str, network: str) -> Backends:
    """The nodes a ``lb_type`` ``network`` load balancer takes; :class:`InvalidServiceSpec` for a
    REGIONAL_NETWORK EXTERNAL one that has nodes but none with a public address."""
    if network == "INTERNAL":
        return Backends(tuple(nodes), all_dual_stack=False)
    private_ok = lb_type != REGIONAL_NETWORK
    kept: list[Node] = []
    dual = ipv4 = unready = 0
    for node in nodes:
        stack = classify(node, private_ok=private_ok)
        if stack == NO_ADDRESS:
            unready += 1
        elif stack != IPV6_ONLY:
            kept.append(node)
            dual += stack == DUAL
            ipv4 += stack == IPV4_ONLY
    if not kept and unready and lb_type == REGIONAL_NETWORK:
        raise InvalidServiceSpec(
            "a REGIONAL_NETWORK EXTERNAL load balancer needs at least one node with a public "
            f"IPv4 address and no node has one (for private-only nodes set {TYPE} to REGIONAL "
            "or the network annotation to INTERNAL)"
        )
    return Backends(tuple(kept), all_dual_stack=dual > 0 and ipv4 == 0)


def network_stack(asked: str, from_nodes: bool, found: Backends, lb_type: str) -> str:
    """The stack to send: ``asked`` (the spec's), or with ``from_nodes`` DUALSTACK when every
    backend is dual-stack; a REGIONAL_NETWORK asked for DUALSTACK with an IPv4-only backend is
    refused (it would have no IPv6 to forward to)."""
    if from_nodes:
        return DUALSTACK if found.all_dual_stack else IPV4
    if (
        asked == DUALSTACK
        and lb_type == REGIONAL_NETWORK
        and found.nodes
        and not (found.all_dual_stack)
    ):
        raise InvalidServiceSpec(
            f"annotation {NETWORK_STACK}: DUALSTACK needs every node to have an IPv6 address on a "
            "REGIONAL_NETWORK load balancer, and some have none"
        )
    return asked
