"""What a Service's fields and annotations ask of the external load balancer beyond its ports:
the source ranges its firewall lets in and the network tier of its address and rule, read as
cloud-provider-gcp reads them (no SDK import here: ``polyccm check-service`` uses it offline).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service

SOURCE_RANGES_ANNOTATION = "service.beta.kubernetes.io/load-balancer-source-ranges"
"""Read when ``spec.loadBalancerSourceRanges`` is empty (comma-separated CIDRs)."""
NETWORK_TIER_ANNOTATION = "cloud.google.com/network-tier"
"""``Standard`` or ``Premium``; without it, the address and the rule are PREMIUM."""
OPTION_ANNOTATIONS = frozenset({SOURCE_RANGES_ANNOTATION, NETWORK_TIER_ANNOTATION})
"""The annotations read here, whose values ensure (and ``polyccm check-service``) refuse."""
TIERS = {"Standard": "STANDARD", "Premium": "PREMIUM"}
DEFAULT_TIER = "PREMIUM"
ANYWHERE = "0.0.0.0/0"


def normalised(ranges: Iterable[str]) -> list[str]:
    """``ranges`` as the networks they name (``192.0.2.7/24`` is ``192.0.2.0/24``), sorted and
    without duplicates: two firewalls letting in the same networks compare equal. A value that
    is no CIDR is kept as written (it compares with nothing else)."""
    found: set[str] = set()
    for value in ranges:
        try:
            found.add(str(ipaddress.ip_network(value.strip(), strict=False)))
        except ValueError:
            found.add(value)
    return sorted(found)


def _parsed(values: list[str], where: str) -> list[str]:
    networks = []
    for value in values:
        try:
            networks.append(str(ipaddress.ip_network(value, strict=False)))
        except ValueError:
            raise InvalidServiceSpec(
                f"{where}: {value!r} is not a CIDR (expecting ranges such as 10.0.0.0/24)"
            ) from None
    return sorted(set(networks))


def source_ranges(service: Service) -> list[str]:
    """The networks the service's firewall lets in: ``spec.loadBalancerSourceRanges``, else
    the annotation, else anywhere; normalised. :class:`InvalidServiceSpec` for a value that is
    not a CIDR."""
    if service.load_balancer_source_ranges:
        return _parsed(list(service.load_balancer_source_ranges), "spec.loadBalancerSourceRanges")
    value = service.annotations.get(SOURCE_RANGES_ANNOTATION, "").strip()
    if not value:
        return [ANYWHERE]
    return _parsed(value.split(","), SOURCE_RANGES_ANNOTATION)


def network_tier(service: Service) -> str:
    """``STANDARD`` or ``PREMIUM`` as GCE writes them; :class:`InvalidServiceSpec` for an
    annotation value upstream does not support."""
    value = service.annotations.get(NETWORK_TIER_ANNOTATION)
    if value is None:
        return DEFAULT_TIER
    tier = TIERS.get(value)
    if tier is None:
        raise InvalidServiceSpec(
            f"{NETWORK_TIER_ANNOTATION}: unsupported network tier {value!r} "
            f"(expecting {' or '.join(TIERS)})"
        )
    return tier


def asks_for_tier(service: Service) -> bool:
    """Whether the annotation names a tier: only then are pieces of the other tier deleted,
    as upstream does (an unannotated load balancer keeps whatever tier it has)."""
    return NETWORK_TIER_ANNOTATION in service.annotations
