"""What every emulated account can use: regions, droplet sizes and base images.

Slugs, names and figures are DigitalOcean's public ones, so code that hard-codes ``nyc3`` or
``s-1vcpu-1gb`` works unchanged. Every size is offered in every region here: the emulator does
not model regional stock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REGIONS: dict[str, str] = {
    "nyc1": "New York 1",
    "nyc3": "New York 3",
    "sfo2": "San Francisco 2",
    "sfo3": "San Francisco 3",
    "ams3": "Amsterdam 3",
    "fra1": "Frankfurt 1",
    "lon1": "London 1",
    "sgp1": "Singapore 1",
    "tor1": "Toronto 1",
    "blr1": "Bangalore 1",
    "syd1": "Sydney 1",
}
REGION_FEATURES = ("backups", "ipv6", "metadata", "install_agent", "storage", "image_transfer")


@dataclass(frozen=True)
class Size:
    slug: str
    memory: int
    vcpus: int
    disk: int
    transfer: float
    price_monthly: float
    description: str

    def render(self) -> dict[str, Any]:
        return {
            "slug": self.slug,
            "memory": self.memory,
            "vcpus": self.vcpus,
            "disk": self.disk,
            "transfer": self.transfer,
            "price_monthly": self.price_monthly,
            "price_hourly": round(self.price_monthly / 672, 5),
            "regions": sorted(REGIONS),
            "available": True,
            "description": self.description,
            "disk_info": [{"type": "local", "size": {"amount": self.disk, "unit": "gib"}}],
        }


SIZES: dict[str, Size] = {
    size.slug: size
    for size in (
        Size("s-1vcpu-512mb-10gb", 512, 1, 10, 0.5, 4.0, "Basic"),
        Size("s-1vcpu-1gb", 1024, 1, 25, 1.0, 6.0, "Basic"),
        Size("s-1vcpu-2gb", 2048, 1, 50, 2.0, 12.0, "Basic"),
        Size("s-2vcpu-2gb", 2048, 2, 60, 3.0, 18.0, "Basic"),
        Size("s-2vcpu-4gb", 4096, 2, 80, 4.0, 24.0, "Basic"),
        Size("s-4vcpu-8gb", 8192, 4, 160, 5.0, 48.0, "Basic"),
        Size("g-2vcpu-8gb", 8192, 2, 25, 4.0, 63.0, "General Purpose"),
        Size("c-2", 4096, 2, 25, 4.0, 42.0, "CPU-Optimized"),
        Size("m-2vcpu-16gb", 16384, 2, 50, 4.0, 84.0, "Memory-Optimized"),
    )
}


@dataclass(frozen=True)
class Image:
    id: int
    slug: str
    name: str
    distribution: str
    min_disk_size: int

    def render(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "distribution": self.distribution,
            "slug": self.slug,
            "public": True,
            "regions": sorted(REGIONS),
            "created_at": "2024-04-25T14:47:25Z",
            "type": "base",
            "min_disk_size": self.min_disk_size,
            "size_gigabytes": 2.36,
            "description": f"{self.distribution} {self.name}",
            "tags": [],
            "status": "available",
        }


IMAGES: tuple[Image, ...] = (
    Image(155149183, "ubuntu-24-04-x64", "24.04 (LTS) x64", "Ubuntu", 7),
    Image(129211873, "ubuntu-22-04-x64", "22.04 (LTS) x64", "Ubuntu", 7),
    Image(142518370, "debian-12-x64", "12 x64", "Debian", 10),
)


def find_image(reference: str | int) -> Image | None:
    """The image named by slug or numeric id (droplet create accepts either)."""
    for image in IMAGES:
        if reference in (image.slug, image.id, str(image.id)):
            return image
    return None


def render_region(slug: str) -> dict[str, Any]:
    return {
        "name": REGIONS[slug],
        "slug": slug,
        "features": list(REGION_FEATURES),
        "available": True,
        "sizes": list(SIZES),
    }
