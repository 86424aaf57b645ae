"""Addresses handed out by the emulator: public IPv4 and IPv6, and private addresses per VPC.

Public IPv4 addresses come from 198.18.0.0/15 and IPv6 from 2001:db8::/32, ranges reserved
for testing, so an emulated address can never be mistaken for (or reach) a real host.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

PUBLIC_V4 = ipaddress.IPv4Network("198.18.0.0/15")
PUBLIC_V6 = ipaddress.IPv6Network("2001:db8:100::/64")


def _usable(network: ipaddress.IPv4Network) -> Iterator[ipaddress.IPv4Address]:
    for address in network.hosts():
        last = int(address) & 0xFF
        if last not in (0, 1, 255):  # keep network, gateway and broadcast-looking ones out
            yield address


class AddressPool:
    """Sequential addresses from one IPv4 network; released ones are not reused (as on a
    cloud, a new resource does not inherit a recently freed address)."""

    def __init__(self, network: ipaddress.IPv4Network) -> None:
        self.network = network
        self._next = _usable(network)
        self.left = sum(1 for _ in _usable(network))
        """Addresses not yet handed out."""

    def take(self) -> str:
        try:
            address = str(next(self._next))
        except StopIteration:
            raise RuntimeError(f"no address left in {self.network}") from None
        self.left -= 1
        return address

    @property
    def netmask(self) -> str:
        return str(self.network.netmask)

    @property
    def gateway(self) -> str:
        return str(self.network.network_address + 1)


class PublicAddresses:
    """Public IPv4 and IPv6 addresses for droplets and load balancers."""

    def __init__(self) -> None:
        self.v4 = AddressPool(PUBLIC_V4)
        self._v6 = 0x10

    def take_v6(self) -> str:
        self._v6 += 1
        return str(PUBLIC_V6.network_address + self._v6)

    @staticmethod
    def v4_details(address: str) -> tuple[str, str]:
        """Netmask and gateway shown for a public IPv4 address (a /20 around it)."""
        block = ipaddress.IPv4Network(f"{address}/20", strict=False)
        return str(block.netmask), str(block.network_address + 1)

    @staticmethod
    def v6_gateway() -> str:
        return str(PUBLIC_V6.network_address + 1)
