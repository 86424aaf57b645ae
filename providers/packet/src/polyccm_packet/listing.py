"""The project's devices, listed once for many lookups.

Nodes arrive in bursts (a scale-up, a restart's initial list), and the node controller asks
about them in batches of up to 100, several batches at a time. Listing the project's every
device for each batch would cost N/100 listings of N/100 pages; :class:`ProjectDevices` makes
one listing serve them all: a listing is reused for :data:`LISTING_TTL` seconds, and batches
that ask while one is being made wait for it instead of making their own.

A reused listing may be up to :data:`LISTING_TTL` seconds old. It serves node initialisation
and the address refresh; the node-lifecycle controller's questions (does the device still
exist, is it powered off?) and any device a reused listing lacks get a current listing, one
begun at most :data:`CURRENT` seconds before they were asked (:meth:`ProjectDevices.listing`
with ``started_after``), so the two questions of one lifecycle pass share it. So a kept listing
never makes a device look missing, nor a deleted or powered-off one look alive. Devices are
kept as :func:`slim` records, the few fields the lookups read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from polyccm_packet.api import MetalClient

log = logging.getLogger(__name__)

#: Seconds a listing answers lookups for (those it can answer: see the module's docstring). A
#: burst of 5,000 new nodes takes the control plane itself about 30 s to take in, so a listing
#: that lived 30 s ran out mid-burst, and the burst listed every device again (10 more calls
#: and 5,000 devices decoded again: 29 -> 43 s to initialise them). A node's type, zone and
#: addresses a minute old are as good for initialising it (cloud-provider-aws keeps instances
#: ten minutes).
LISTING_TTL = 60.0
#: Seconds a listing may have begun before a question and still be current for it.
CURRENT = 1.0
#: Devices a page of the listing carries (Metal allows 1,000; a device's JSON is about 4 KB, so a
#: page is about 2 MB: 5,000 devices are 10 requests).
DEVICE_PAGE_SIZE = 500

Device = Mapping[str, Any]


def slim(device: Device) -> dict[str, Any]:
    """The fields of ``device`` that the instance lookups read: id, hostname, state, IP
    addresses (family, address, public), and the plan's, metro's and facility's codes."""
    plan, metro, facility = (device.get(k) for k in ("plan", "metro", "facility"))
    return {
        "id": device.get("id"),
        "hostname": device.get("hostname"),
        "state": device.get("state"),
        "ip_addresses": [
            {k: ip.get(k) for k in ("address_family", "address", "public")}
            for ip in device.get("ip_addresses") or ()
        ],
        "plan": {"slug": plan.get("slug")} if isinstance(plan, Mapping) else None,
        "metro": {"code": metro.get("code")} if isinstance(metro, Mapping) else None,
        "facility": {"code": facility.get("code")} if isinstance(facility, Mapping) else None,
    }


@dataclass(frozen=True)
class Listing:
    """Every device of the project, as one listing found them."""

    started: float
    """When the listing's first page was asked for (the clock of :class:`ProjectDevices`)."""
    by_id: Mapping[str, Device] = field(default_factory=dict)
    by_hostname: Mapping[str, Device] = field(default_factory=dict)


class ProjectDevices:
    """One listing of the project's devices at a time, shared by every lookup that asks while
    it is fresh."""

    def __init__(
        self,
        api: MetalClient,
        *,
        ttl: float = LISTING_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._latest: Listing | None = None

    def listing(self, *, started_after: float | None = None) -> Listing:
        """A listing begun after ``started_after`` (default: one at most :attr:`ttl` seconds
        old), made now when there is none; callers that ask while it is being made get it."""
        threshold = self.clock() - self.ttl if started_after is None else started_after
        with self._lock:
            latest = self._latest
            if latest is not None and latest.started >= threshold:
                return latest
            started = self.clock()
            by_id: dict[str, Device] = {}
            by_hostname: dict[str, Device] = {}
            for device in self.api.pages(
                "devices.find_project_devices", "devices", self.api.config.project_id,
                per_page=DEVICE_PAGE_SIZE,
            ):  # fmt: skip
                record = slim(device)
                by_id[str(record["id"])] = record
                by_hostname.setdefault(str(record.get("hostname") or ""), record)
            log.debug("listed the project's %d devices", len(by_id))
            self._latest = Listing(started, by_id, by_hostname)
            return self._latest

    def kept(self) -> Listing | None:
        """The listing kept, while at most :attr:`ttl` seconds old (no request)."""
        latest = self._latest
        if latest is not None and latest.started >= self.clock() - self.ttl:
            return latest
        return None
