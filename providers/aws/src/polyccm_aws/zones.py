"""Availability zones of the region: zone ids (``use1-az6``) and zone types, cached.

Zones never change while the process runs, so one DescribeAvailabilityZones answers every later
question; an unknown zone triggers at most one refresh a minute.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from polyccm_aws.api import AwsApi

REFRESH_INTERVAL = 60.0


@dataclass(frozen=True)
class Zone:
    name: str
    zone_id: str
    zone_type: str
    """``availability-zone``, ``local-zone``, ``wavelength-zone``..."""


class Zones:
    """Zone details by name."""

    def __init__(self, api: AwsApi, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._clock = clock
        self._lock = threading.Lock()
        self._zones: dict[str, Zone] = {}
        self._fetched_at: float | None = None

    def get(self, name: str) -> Zone | None:
        """The zone called ``name``, or None when EC2 does not list it."""
        with self._lock:
            zone = self._zones.get(name)
            due = self._fetched_at is None or self._clock() - self._fetched_at > REFRESH_INTERVAL
            if zone is not None or not due:
                return zone
            answer = self._api.call("ec2", "describe_availability_zones", AllAvailabilityZones=True)
            self._zones = {
                str(z["ZoneName"]): Zone(
                    str(z["ZoneName"]),
                    str(z.get("ZoneId", "")),
                    str(z.get("ZoneType", "availability-zone")),
                )
                for z in answer.get("AvailabilityZones", ())
            }
            self._fetched_at = self._clock()
            return self._zones.get(name)
