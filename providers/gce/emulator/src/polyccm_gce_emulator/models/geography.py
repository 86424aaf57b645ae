"""Zones, regions and machine types: the fixed geography every emulated project sees.

Three regions are enough for multi-zone and multi-region tests; each project's auto-mode
network gets the subnetwork ranges GCE gives these regions.
"""

from __future__ import annotations

import re

from polyccm_gce_emulator.errors import Invalid
from polyccm_gce_emulator.models.base import ProjectBase, Resource, reference
from polyccm_gce_emulator.models.common import Link, new_id, timestamp

#: Region -> (its zones, the auto-mode subnetwork range GCE gives it).
REGIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "us-central1": (("a", "b", "c", "f"), "10.128.0.0/20"),
    "us-east1": (("b", "c", "d"), "10.142.0.0/20"),
    "europe-west1": (("b", "c", "d"), "10.132.0.0/20"),
}

#: Machine type -> (guest CPUs, memory MB); ``custom-<cpus>-<mb>`` is accepted too.
MACHINE_TYPES: dict[str, tuple[int, int]] = {
    "f1-micro": (1, 614),
    "g1-small": (1, 1740),
    "e2-micro": (2, 1024),
    "e2-small": (2, 2048),
    "e2-medium": (2, 4096),
    "e2-standard-2": (2, 8192),
    "e2-standard-4": (4, 16384),
    "e2-standard-8": (8, 32768),
    "n1-standard-1": (1, 3840),
    "n1-standard-2": (2, 7680),
    "n1-standard-4": (4, 15360),
    "n1-standard-8": (8, 30720),
    "n2-standard-2": (2, 8192),
    "n2-standard-4": (4, 16384),
    "n2-standard-8": (8, 32768),
}
_CUSTOM = re.compile(r"custom-(\d+)-(\d+)")


def region_of(zone: str) -> str:
    """``us-central1`` for ``us-central1-a``."""
    return zone.rsplit("-", 1)[0]


def all_zones() -> list[str]:
    return [
        f"{region}-{suffix}" for region, (suffixes, _) in REGIONS.items() for suffix in suffixes
    ]


class GeographyMixin(ProjectBase):
    """Zones and regions as read-only resources, and the checks that use them."""

    def seed_geography(self) -> None:
        for region, (suffixes, _) in REGIONS.items():
            zones = [f"{region}-{suffix}" for suffix in suffixes]
            self.collection("", "regions")[region] = Resource(
                self.project,
                "",
                "regions",
                {
                    "kind": "compute#region",
                    "id": new_id(),
                    "creationTimestamp": timestamp(0),
                    "name": region,
                    "description": region,
                    "status": "UP",
                    "zones": [Link(f"projects/{self.project}/zones/{zone}") for zone in zones],
                    "selfLink": Link(f"projects/{self.project}/regions/{region}"),
                    "supportsPzs": False,
                },
                state="live",
            )
            for zone in zones:
                self._seed_zone(region, zone)

    def _seed_zone(self, region: str, zone: str) -> None:
        self.collection("", "zones")[zone] = Resource(
            self.project,
            "",
            "zones",
            {
                "kind": "compute#zone",
                "id": new_id(),
                "creationTimestamp": timestamp(0),
                "name": zone,
                "description": zone,
                "status": "UP",
                "region": Link(f"projects/{self.project}/regions/{region}"),
                "selfLink": Link(f"projects/{self.project}/zones/{zone}"),
                "availableCpuPlatforms": ["Intel Broadwell", "AMD Rome"],
                "supportsPzs": False,
            },
            state="live",
        )

    def open_zone(self, zone: str) -> None:
        """A zone Google opens in an existing region (the control API's ``zones``): listed by
        ``zones.list`` and named by its region from now on."""
        region = self.region(region_of(zone))
        if zone in self.collection("", "zones"):
            return
        self._seed_zone(region.name, zone)
        region.body["zones"] = [
            *region.body["zones"],
            Link(f"projects/{self.project}/zones/{zone}"),
        ]

    def zone(self, name: str) -> Resource:
        """The zone (404 for a zone GCE does not have here)."""
        return self.find("", "zones", name)

    def region(self, name: str) -> Resource:
        return self.find("", "regions", name)

    def machine_type(self, value: object, zone: str) -> Link:
        """The machine type link of an instance, from ``zones/z/machineTypes/t`` or a URL."""
        link = reference(value, self.project, "resource.machineType", "machineTypes")
        parts = link.split("/")
        name = parts[-1]
        if parts[-3] != zone:
            raise Invalid(
                f"Invalid value for field 'resource.machineType': '{value}'. "
                f"Machine type must be in zone '{zone}'."
            )
        if name not in MACHINE_TYPES and not _CUSTOM.fullmatch(name):
            raise Invalid(
                f"Invalid value for field 'resource.machineType': '{value}'. "
                f"Machine type with name '{name}' does not exist in zone '{zone}'."
            )
        return link
