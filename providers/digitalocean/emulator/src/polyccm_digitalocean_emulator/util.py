"""Small helpers shared by the emulator's models."""

from __future__ import annotations

import datetime


def iso_time(epoch: float) -> str:
    """DigitalOcean's timestamp format: UTC, whole seconds, ``Z``."""
    moment = datetime.datetime.fromtimestamp(int(epoch), tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
