"""What the emulated Metal offers: metros, their facilities, plans and operating systems.

Ids are fixed UUIDs so answers are stable across runs; codes are Equinix Metal's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

_NAMESPACE = uuid.UUID("6f1c1f52-8f1e-4c44-9a55-2f1d0c6a7e10")


def stable_id(kind: str, code: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{kind}:{code}"))


@dataclass(frozen=True)
class Metro:
    code: str
    name: str
    country: str
    facilities: tuple[str, ...]

    @property
    def id(self) -> str:
        return stable_id("metro", self.code)


METROS: tuple[Metro, ...] = (
    Metro("da", "Dallas", "US", ("da11", "da6")),
    Metro("sv", "Silicon Valley", "US", ("sv15", "sv16")),
    Metro("ny", "New York", "US", ("ny5", "ny7")),
    Metro("am", "Amsterdam", "NL", ("am6",)),
    Metro("sg", "Singapore", "SG", ("sg1",)),
)
METRO_BY_CODE = {metro.code: metro for metro in METROS}
METRO_OF_FACILITY = {code: metro for metro in METROS for code in metro.facilities}

#: Plan slug -> (class, cores, memory): what devices may be created with.
PLANS = {
    "c3.small.x86": ("c3.small.x86", 8, "32GB"),
    "c3.medium.x86": ("c3.medium.x86", 24, "64GB"),
    "m3.small.x86": ("m3.small.x86", 8, "64GB"),
    "m3.large.x86": ("m3.large.x86", 32, "256GB"),
}
OPERATING_SYSTEMS = {
    "ubuntu_22_04": ("Ubuntu", "22.04"),
    "ubuntu_24_04": ("Ubuntu", "24.04"),
    "debian_12": ("Debian", "12"),
    "flatcar_stable": ("Flatcar", "stable"),
}
#: The peer ASN and router addresses a device's BGP neighbours show (Metal's own).
PEER_ASN = 65530
PEER_IPS = {4: ["169.254.255.1", "169.254.255.2"], 6: ["fc00::e", "fc00::f"]}
