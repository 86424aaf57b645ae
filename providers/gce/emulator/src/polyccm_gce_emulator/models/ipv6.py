"""IPv6 on subnetworks and instance interfaces, as the compute v1 discovery document names the
fields.

A subnetwork made with ``stackType`` ``IPV4_IPV6`` (or ``IPV6_ONLY``) and an
``ipv6AccessType`` gets a /64: ``externalIpv6Prefix`` for EXTERNAL (a global unicast range),
``internalIpv6Prefix`` and ``ipv6CidrRange`` for INTERNAL (a ULA range). An interface asked
with ``stackType`` ``IPV4_IPV6`` in such a subnetwork takes a /96 of it, as GCE gives one to
each VM: INTERNAL puts it in the interface's ``ipv6Address`` (``internalIpv6PrefixLength`` 96);
EXTERNAL puts it in the ``externalIpv6`` of the interface's ``ipv6AccessConfigs`` entry (type
``DIRECT_IPV6``, which the request must hold, as GCE wants it). Either way the interface shows
``ipv6AccessType``. Each VM's /96 is derived from its IPv4 address in the subnetwork, so no two
interfaces share one.
"""

from __future__ import annotations

import hashlib
import ipaddress
from typing import Any

from polyccm_gce_emulator.errors import Invalid

STACK_TYPES = ("IPV4_ONLY", "IPV4_IPV6", "IPV6_ONLY")
ACCESS_TYPES = ("EXTERNAL", "INTERNAL")
#: Where the emulator's /64s come from: Google's external range and a ULA one.
_EXTERNAL_BASE = ipaddress.IPv6Network("2600:1900:4000::/48")
_INTERNAL_BASE = ipaddress.IPv6Network("fd20:a:b::/48")


def _prefix(base: ipaddress.IPv6Network, seed: str) -> ipaddress.IPv6Network:
    """A /64 of ``base`` chosen by ``seed`` (stable, one per subnetwork)."""
    index = int(hashlib.sha256(seed.encode()).hexdigest()[:4], 16)
    return ipaddress.IPv6Network((int(base.network_address) + (index << 64), 64))


def subnetwork_fields(body: dict[str, Any], seed: str) -> dict[str, Any]:
    """The IPv6 fields of a new subnetwork from its insert ``body`` (``seed``: its path)."""
    stack = body.get("stackType", "IPV4_ONLY")
    if stack not in STACK_TYPES:
        raise Invalid(f"Invalid value for field 'resource.stackType': '{stack}'.")
    if stack == "IPV4_ONLY":
        if body.get("ipv6AccessType"):
            raise Invalid(
                "Invalid value for field 'resource.ipv6AccessType': an IPv4-only subnetwork "
                "has no IPv6 access type."
            )
        return {"stackType": stack}
    access = body.get("ipv6AccessType")
    if access not in ACCESS_TYPES:
        raise Invalid(
            f"Invalid value for field 'resource.ipv6AccessType': '{access or ''}'. A dual-stack "
            "subnetwork needs EXTERNAL or INTERNAL."
        )
    fields: dict[str, Any] = {"stackType": stack, "ipv6AccessType": access}
    if access == "EXTERNAL":
        fields["externalIpv6Prefix"] = str(_prefix(_EXTERNAL_BASE, seed))
    else:
        prefix = str(_prefix(_INTERNAL_BASE, seed))
        fields["internalIpv6Prefix"] = prefix
        fields["ipv6CidrRange"] = prefix
    return fields


def interface_fields(
    subnet: dict[str, Any] | None, nic: dict[str, Any], ipv4: str, where: str
) -> dict[str, Any]:
    """The IPv6 fields of an interface asked as ``nic`` in ``subnet`` (its body, None for a
    legacy network) whose IPv4 address is ``ipv4``; ``where`` names the interface in errors."""
    stack = nic.get("stackType", "IPV4_ONLY")
    if stack not in STACK_TYPES:
        raise Invalid(f"Invalid value for field '{where}.stackType': '{stack}'.")
    if stack == "IPV4_ONLY":
        if nic.get("ipv6AccessConfigs"):
            raise Invalid(
                f"Invalid value for field '{where}.ipv6AccessConfigs': an IPv4-only interface "
                "has no IPv6 access config."
            )
        return {"stackType": stack}
    access = (subnet or {}).get("ipv6AccessType")
    if subnet is None or access is None:
        raise Invalid(
            f"Invalid value for field '{where}.stackType': '{stack}'. The subnetwork has no "
            "IPv6 range."
        )
    prefix_key = "externalIpv6Prefix" if access == "EXTERNAL" else "internalIpv6Prefix"
    prefix = ipaddress.IPv6Network(subnet[prefix_key])
    slot = int(ipaddress.IPv4Address(ipv4)) & 0xFFFFFFFF
    address = str(ipaddress.IPv6Address(int(prefix.network_address) + (slot << 32)))
    fields: dict[str, Any] = {"stackType": stack, "ipv6AccessType": access}
    if access == "INTERNAL":
        fields.update(ipv6Address=address, internalIpv6PrefixLength=96)
        return fields
    configs = nic.get("ipv6AccessConfigs") or []
    if len(configs) != 1 or configs[0].get("type", "DIRECT_IPV6") != "DIRECT_IPV6":
        raise Invalid(
            f"Invalid value for field '{where}.ipv6AccessConfigs': an interface in a subnetwork "
            "with EXTERNAL IPv6 access needs one access config of type DIRECT_IPV6."
        )
    fields["ipv6AccessConfigs"] = [
        {
            "kind": "compute#accessConfig",
            "type": "DIRECT_IPV6",
            "name": str(configs[0].get("name", "external-ipv6")),
            "externalIpv6": address,
            "externalIpv6PrefixLength": 96,
            "networkTier": "PREMIUM",
        }
    ]
    return fields
