"""VPCs: each region gets a default VPC the first time something is placed there, as a
DigitalOcean account does; droplets take their private address from their VPC's range."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from polyccm_digitalocean_emulator.network import AddressPool
from polyccm_digitalocean_emulator.timers import Clock
from polyccm_digitalocean_emulator.util import iso_time


@dataclass
class Vpc:
    id: str
    name: str
    region: str
    ip_range: str
    created_at: float
    description: str = ""
    default: bool = False
    pool: AddressPool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.pool = AddressPool(ipaddress.IPv4Network(self.ip_range))

    def render(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "urn": f"do:vpc:{self.id}",
            "name": self.name,
            "description": self.description,
            "region": self.region,
            "ip_range": self.ip_range,
            "default": self.default,
            "created_at": iso_time(self.created_at),
        }


def default_range(region_index: int) -> str:
    """The default VPC's range of the ``region_index``-th region: 10.(100+i).0.0/20."""
    return f"10.{100 + region_index}.0.0/20"


def overlaps(ip_range: str, vpcs: list[Vpc]) -> Vpc | None:
    network = ipaddress.IPv4Network(ip_range)
    for vpc in vpcs:
        if network.overlaps(ipaddress.IPv4Network(vpc.ip_range)):
            return vpc
    return None


def new_default(vpc_id: str, region: str, region_index: int, clock: Clock) -> Vpc:
    return Vpc(
        id=vpc_id,
        name=f"default-{region}",
        region=region,
        ip_range=default_range(region_index),
        created_at=clock.now(),
        description="",
        default=True,
    )
