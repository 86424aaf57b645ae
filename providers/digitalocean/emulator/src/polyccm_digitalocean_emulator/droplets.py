"""Droplets and their actions.

A droplet is ``new`` and locked until its create action completes, then ``active``; power
actions lock it while ``in-progress`` and change its status when they complete (``off`` after
power_off or shutdown, ``active`` after power_on, reboot or power_cycle). Timing comes from
:class:`polyccm_digitalocean_emulator.settings.EmulatorSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from polyccm_digitalocean_emulator import catalog
from polyccm_digitalocean_emulator.network import PublicAddresses
from polyccm_digitalocean_emulator.util import iso_time

#: Droplet action types the emulator carries out, with the status each leaves the droplet in.
POWER_ACTIONS: dict[str, str] = {
    "power_off": "off",
    "shutdown": "off",
    "power_on": "active",
    "reboot": "active",
    "power_cycle": "active",
}


@dataclass
class Droplet:
    id: int
    name: str
    region: str
    size: catalog.Size
    image: catalog.Image
    vpc_uuid: str
    private_ip: str
    public_ip: str | None
    ipv6: str | None
    created_at: float
    tags: list[str] = field(default_factory=list)
    status: str = "new"
    locked: bool = True
    monitoring: bool = False

    def render(self) -> dict[str, Any]:
        v4: list[dict[str, Any]] = []
        if self.public_ip is not None:
            netmask, gateway = PublicAddresses.v4_details(self.public_ip)
            v4.append(
                {"ip_address": self.public_ip, "netmask": netmask, "gateway": gateway,
                 "type": "public"}
            )  # fmt: skip
        v4.append(
            {"ip_address": self.private_ip, "netmask": "255.255.240.0", "gateway": "",
             "type": "private"}
        )  # fmt: skip
        v6: list[dict[str, Any]] = []
        if self.ipv6 is not None:
            v6.append(
                {"ip_address": self.ipv6, "netmask": 64,
                 "gateway": PublicAddresses.v6_gateway(), "type": "public"}
            )  # fmt: skip
        features = ["private_networking"]
        if self.ipv6 is not None:
            features.append("ipv6")
        if self.monitoring:
            features.append("monitoring")
        return {
            "id": self.id,
            "name": self.name,
            "memory": self.size.memory,
            "vcpus": self.size.vcpus,
            "disk": self.size.disk,
            "disk_info": [{"type": "local", "size": {"amount": self.size.disk, "unit": "gib"}}],
            "locked": self.locked,
            "status": self.status,
            "kernel": None,
            "created_at": iso_time(self.created_at),
            "features": features,
            "backup_ids": [],
            "next_backup_window": None,
            "snapshot_ids": [],
            "image": self.image.render(),
            "volume_ids": [],
            "size": self.size.render(),
            "size_slug": self.size.slug,
            "networks": {"v4": v4, "v6": v6},
            "region": catalog.render_region(self.region),
            "tags": list(self.tags),
            "vpc_uuid": self.vpc_uuid,
        }


@dataclass
class Action:
    """A droplet action; ``completed_at`` is set when it completes."""

    id: int
    type: str
    droplet_id: int
    region: str
    started_at: float
    completed_at: float | None = None

    @property
    def status(self) -> str:
        return "in-progress" if self.completed_at is None else "completed"

    def render(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "type": self.type,
            "started_at": iso_time(self.started_at),
            "completed_at": None if self.completed_at is None else iso_time(self.completed_at),
            "resource_id": self.droplet_id,
            "resource_type": "droplet",
            "region": catalog.render_region(self.region),
            "region_slug": self.region,
        }
