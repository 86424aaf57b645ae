"""What the ``nodeipam`` controller runs with, read from the command line as cloud-provider-gcp
reads it, and the command lines it refuses (a :class:`~polyccm.errors.ConfigError`: one line,
exit 2). No SDK import: the provider reads this at start-up.

Upstream (cmd/cloud-controller-manager/nodeipamcontroller.go:45-102@4e24531 and
pkg/controller/nodeipam/starter.go:33-131) starts node IPAM when ``nodeipam`` is among
``--controllers`` (it is by default), with ``--allocate-node-cidrs``, a valid ``--cluster-cidr``
(one CIDR, or one per family) and ``--service-cluster-ip-range`` of at most two CIDRs of
different families; ``--cidr-allocator-type`` (default ``RangeAllocator``) picks the allocator.
polyccm has the cloud one, ``CloudAllocator``, only: each node's pod CIDRs are its instance's
alias IP range and IPv6 range (:mod:`polyccm_gce.nodeipam`). The other types upstream knows
(``RangeAllocator``, ``IPAMFromCluster``, ``IPAMFromCloud``) and unknown ones are refused.

One difference: without ``--allocate-node-cidrs`` upstream's whole process stops ("the
AllocateNodeCIDRs is not enabled", starter.go:55-57, fatal in k8s.io/cloud-provider
app/controllermanager.go:223-225); polyccm runs without node IPAM and says so.
"""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import dataclass
from enum import Enum

from polyccm.errors import ConfigError

CONTROLLER = "nodeipam"
CLOUD_ALLOCATOR = "CloudAllocator"
#: The other allocator types upstream's nodeipam knows (cidr_allocator.go:42-55@4e24531).
OTHER_ALLOCATORS = ("RangeAllocator", "IPAMFromCluster", "IPAMFromCloud")


class Stack(Enum):
    """The pod CIDR families, in order (cloud_cidr_allocator.go:65-74@4e24531)."""

    IPV4 = "IPv4"
    IPV4_IPV6 = "IPv4_IPv6"
    IPV6_IPV4 = "IPv6_IPv4"
    IPV6 = "IPv6"


@dataclass(frozen=True)
class NodeIpamSettings:
    """How the ``nodeipam`` controller gives pod CIDRs."""

    stack: Stack = Stack.IPV4


def _networks(text: str, flag: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for item in text.split(","):
        try:
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise ConfigError(f"{flag}: {item.strip()!r} is not a CIDR") from None
    return networks


def stack_of(service_cidrs: str) -> Stack:
    """The stack ``--service-cluster-ip-range`` gives: its first CIDR's family first, both
    families with two (cloud_cidr_allocator.go:132-144@4e24531); IPv4 without one."""
    if not service_cidrs.strip():
        return Stack.IPV4
    networks = _networks(service_cidrs, "--service-cluster-ip-range")
    families = [network.version for network in networks]
    if families == [4, 6]:
        return Stack.IPV4_IPV6
    if families == [6, 4]:
        return Stack.IPV6_IPV4
    return Stack.IPV6 if families == [6] else Stack.IPV4


def _check_service_cidrs(text: str) -> None:
    """nodeipamcontroller.go options Validate (:71-83) and starter.go:76-101."""
    if not text.strip():
        return
    if len(text.split(",")) > 2:
        raise ConfigError("--service-cluster-ip-range can not contain more than two entries")
    networks = _networks(text, "--service-cluster-ip-range")
    if len(networks) == 2 and networks[0].version == networks[1].version:
        raise ConfigError(
            "--service-cluster-ip-range: the two CIDRs are not dual-stack (give one IPv4 and "
            "one IPv6)"
        )


def _check_cluster_cidrs(cidrs: tuple[str, ...], options: argparse.Namespace) -> None:
    """starter.go:59-74 (ProcessCIDRs) and :152-223 (the mask sizes)."""
    from polyccm.app.options import cluster_cidr_problem

    if not cidrs:
        raise ConfigError(
            "--allocate-node-cidrs needs --cluster-cidr (upstream's nodeipam will not start "
            "without it), or disable node IPAM with --controllers=*,-nodeipam"
        )
    problem = cluster_cidr_problem(cidrs)
    if problem:
        raise ConfigError(problem)
    mask = getattr(options, "node_cidr_mask_size", 0)
    by_family = getattr(options, "node_cidr_mask_size_ipv4", 0) or getattr(
        options, "node_cidr_mask_size_ipv6", 0
    )
    if mask and len(cidrs) > 1:
        raise ConfigError("usage of --node-cidr-mask-size is not allowed with dual-stack clusters")
    if mask and by_family:
        raise ConfigError(
            "usage of --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6 is not allowed "
            "if --node-cidr-mask-size is set"
        )


def nodeipam_settings(options: argparse.Namespace) -> NodeIpamSettings | None:
    """The settings of the ``nodeipam`` controller, ``None`` when it does not run (not
    selected, or ``--allocate-node-cidrs`` false); :class:`ConfigError` for a command line
    upstream refuses, or one asking for an allocator polyccm does not have."""
    service_cidrs = str(getattr(options, "service_cluster_ip_range", "") or "")
    _check_service_cidrs(service_cidrs)
    if CONTROLLER not in getattr(options, "controllers", frozenset({CONTROLLER})):
        return None
    if not getattr(options, "allocate_node_cidrs", False):
        return None
    for flag in ("enable_multi_subnet_cluster", "enable_multi_networking"):
        if getattr(options, flag, False):
            raise ConfigError(
                f"--{flag.replace('_', '-')}: GKE's multi-network IPAM is not implemented by "
                "polyccm's GCE nodeipam; start without it"
            )
    allocator = str(getattr(options, "cidr_allocator_type", "RangeAllocator"))
    if allocator in OTHER_ALLOCATORS:
        raise ConfigError(
            f"--cidr-allocator-type={allocator}: polyccm's GCE nodeipam has only "
            f"{CLOUD_ALLOCATOR} (pod CIDRs from the instances' alias IP ranges); give "
            f"--cidr-allocator-type={CLOUD_ALLOCATOR}, or --controllers=*,-nodeipam"
        )
    if allocator != CLOUD_ALLOCATOR:
        raise ConfigError(f"--cidr-allocator-type: invalid CIDR allocator type: {allocator}")
    _check_cluster_cidrs(tuple(getattr(options, "cluster_cidr", ()) or ()), options)
    return NodeIpamSettings(stack=stack_of(service_cidrs))
