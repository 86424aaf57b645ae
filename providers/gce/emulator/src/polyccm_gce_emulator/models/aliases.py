"""Alias IP ranges (VPC-native instances) and the subnetwork secondary ranges they come from.

A subnetwork may carry ``secondaryIpRanges`` (``rangeName`` + ``ipCidrRange``), given at
``subnetworks.insert``: IPv4 CIDRs inside no other range of the subnetwork, names unique in
it. An interface's ``aliasIpRanges`` (``ipCidrRange`` + ``subnetworkRangeName``), given at
``instances.insert`` or replaced with ``instances.updateNetworkInterface``, come from the named
secondary range, or from the primary range without a name. ``ipCidrRange`` is a CIDR, a single
address (a /32) or a netmask alone (``/24``), for which the first free block of that size is
taken, as GCE does. A range another interface already holds is refused. These are plain
functions over the stored bodies, so the instances model calls them in one line each.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from polyccm_gce_emulator.errors import Invalid
from polyccm_gce_emulator.models.base import check_name

Network = ipaddress.IPv4Network


def secondary_ranges(subnet_body: dict[str, Any], given: object) -> list[dict[str, str]]:
    """``secondaryIpRanges`` of a new subnetwork, checked against its primary range."""
    if given is None:
        return []
    if not isinstance(given, list):
        raise Invalid(f"Invalid value for field 'resource.secondaryIpRanges': '{given}'.")
    taken: list[Network] = [Network(subnet_body["ipCidrRange"])]
    names: set[str] = set()
    result: list[dict[str, str]] = []
    for index, item in enumerate(given):
        where = f"resource.secondaryIpRanges[{index}]"
        if not isinstance(item, dict):
            raise Invalid(f"Invalid value for field '{where}': '{item}'.")
        name = check_name(item.get("rangeName"), f"{where}.rangeName")
        if name in names:
            raise Invalid(f"Invalid value for field '{where}.rangeName': '{name}'. Duplicate.")
        try:
            network = Network(str(item.get("ipCidrRange")), strict=True)
        except ValueError:
            raise Invalid(
                f"Invalid value for field '{where}.ipCidrRange': '{item.get('ipCidrRange')}'. "
                "Invalid IPCidrRange."
            ) from None
        clash = next((other for other in taken if network.overlaps(other)), None)
        if clash is not None:
            raise Invalid(
                f"Invalid IPCidrRange: {network} conflicts with existing range {clash} of "
                "the subnetwork."
            )
        names.add(name)
        taken.append(network)
        result.append({"rangeName": name, "ipCidrRange": str(network)})
    return result


def _source(subnet_body: dict[str, Any] | None, range_name: str, where: str) -> Network:
    """The range aliases named ``range_name`` come from (the primary one when empty)."""
    if subnet_body is None:
        raise Invalid(
            f"Invalid value for field '{where}': alias IP ranges need a subnetwork; legacy "
            "networks have none."
        )
    if not range_name:
        return Network(subnet_body["ipCidrRange"])
    for secondary in subnet_body.get("secondaryIpRanges", []):
        if secondary["rangeName"] == range_name:
            return Network(secondary["ipCidrRange"])
    raise Invalid(
        f"Invalid value for field '{where}.subnetworkRangeName': '{range_name}'. The "
        "subnetwork has no secondary range of that name."
    )


def alias_ranges(
    subnet_body: dict[str, Any] | None,
    given: object,
    prefix: str,
    in_use: Iterable[str],
) -> list[dict[str, str]]:
    """The ``aliasIpRanges`` an interface stores for the ``given`` ones; ``in_use`` are the
    alias CIDRs other interfaces hold."""
    if given is None or given == []:
        return []
    where = f"{prefix}.aliasIpRanges"
    if not isinstance(given, list):
        raise Invalid(f"Invalid value for field '{where}': '{given}'.")
    taken = [Network(cidr) for cidr in in_use]
    result: list[dict[str, str]] = []
    for index, item in enumerate(given):
        at = f"{where}[{index}]"
        if not isinstance(item, dict) or not item.get("ipCidrRange"):
            raise Invalid(f"Required field '{at}.ipCidrRange' not specified")
        range_name = str(item.get("subnetworkRangeName") or "")
        source = _source(subnet_body, range_name, at)
        network = _pick(str(item["ipCidrRange"]), source, taken, at)
        taken.append(network)
        stored = {"ipCidrRange": str(network)}
        if range_name:
            stored["subnetworkRangeName"] = range_name
        result.append(stored)
    return result


def _pick(text: str, source: Network, taken: list[Network], at: str) -> Network:
    """The alias ``text`` asks for, inside ``source`` and clear of ``taken``."""
    if text.startswith("/"):
        try:
            size = int(text[1:])
        except ValueError:
            size = -1
        if not source.prefixlen <= size <= 32:
            raise Invalid(f"Invalid value for field '{at}.ipCidrRange': '{text}'.")
        for block in source.subnets(new_prefix=size):
            if not any(block.overlaps(other) for other in taken):
                return block
        raise Invalid(f"Invalid value for field '{at}.ipCidrRange': '{text}'. The range "
                      f"{source} has no free /{size}.")  # fmt: skip
    try:
        network = Network(text, strict=True)
    except ValueError:
        raise Invalid(
            f"Invalid value for field '{at}.ipCidrRange': '{text}'. Invalid IPCidrRange."
        ) from None
    if not network.subnet_of(source):
        raise Invalid(
            f"Invalid value for field '{at}.ipCidrRange': '{text}'. The alias range is not "
            f"within the subnetwork range {source}."
        )
    if any(network.overlaps(other) for other in taken):
        raise Invalid(
            f"Invalid value for field '{at}.ipCidrRange': '{text}'. The alias range is "
            "already in use by another network interface."
        )
    return network


def held_aliases(instances: Iterable[Any], skip: object = None) -> list[str]:
    """Every alias CIDR the ``instances`` (Resources) hold, but those of interface ``skip``."""
    return [
        alias["ipCidrRange"]
        for instance in instances
        for nic in instance.body.get("networkInterfaces", [])
        if nic is not skip
        for alias in nic.get("aliasIpRanges", [])
    ]
