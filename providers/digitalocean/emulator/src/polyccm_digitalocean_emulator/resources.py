"""The smaller resources: tags, certificates and firewalls.

Tags hold no state of their own beyond their name: a droplet's ``tags`` list says what is
tagged, so counts and filters can never disagree with the droplets.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from polyccm_digitalocean_emulator.util import iso_time

CERTIFICATE_LIFETIME = 90 * 24 * 3600


@dataclass
class Certificate:
    id: str
    name: str
    type: str
    created_at: float
    dns_names: list[str]
    sha1_fingerprint: str
    state: str

    @classmethod
    def from_request(cls, certificate_id: str, body: Mapping[str, Any], now: float) -> Certificate:
        kind = str(body.get("type") or ("lets_encrypt" if "dns_names" in body else "custom"))
        material = str(body.get("leaf_certificate") or certificate_id)
        return cls(
            id=certificate_id,
            name=str(body["name"]),
            type=kind,
            created_at=now,
            dns_names=[str(name) for name in body.get("dns_names", [])],
            sha1_fingerprint=hashlib.sha1(material.encode()).hexdigest(),
            state="pending" if kind == "lets_encrypt" else "verified",
        )

    def render(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "not_after": iso_time(self.created_at + CERTIFICATE_LIFETIME),
            "sha1_fingerprint": self.sha1_fingerprint,
            "created_at": iso_time(self.created_at),
            "dns_names": list(self.dns_names),
            "state": self.state,
            "type": self.type,
        }


@dataclass
class Firewall:
    id: str
    created_at: float
    spec: dict[str, Any]

    def render(self) -> dict[str, Any]:
        body = copy.deepcopy(self.spec)
        body.setdefault("inbound_rules", [])
        body.setdefault("outbound_rules", [])
        body.setdefault("droplet_ids", [])
        body.setdefault("tags", [])
        body.update(
            id=self.id, status="succeeded", created_at=iso_time(self.created_at),
            pending_changes=[],
        )  # fmt: skip
        return body


def render_tag(name: str, droplet_ids: list[int], base_url: str) -> dict[str, Any]:
    """A tag and what carries it (only droplets can carry tags in the emulator)."""
    droplets: dict[str, Any] = {"count": len(droplet_ids)}
    if droplet_ids:
        droplets["last_tagged_uri"] = f"{base_url}/v2/droplets/{droplet_ids[-1]}"
    resources: dict[str, Any] = dict(droplets)
    resources.update(
        droplets=droplets,
        images={"count": 0},
        volumes={"count": 0},
        volume_snapshots={"count": 0},
        databases={"count": 0},
    )
    return {"name": name, "resources": resources}
