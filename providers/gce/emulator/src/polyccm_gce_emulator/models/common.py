"""Small values every model shares: links, ids, timestamps and fingerprints.

References between resources are :class:`Link` values holding the path below ``compute/v1/``
(``projects/p/zones/z/...``); the HTTP layer renders them as full URLs with the base URL the
client used, so selfLinks point back at whichever address the emulator was reached through.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import time
from datetime import UTC, datetime
from typing import Any


class Link(str):
    """A reference to a resource: its path below ``compute/v1/``, rendered as a full URL."""


def render(value: Any, base: str) -> Any:
    """``value`` with every :class:`Link` turned into ``base + path`` (``base`` ends in
    ``compute/v1/``), deep-copied so the stored body never leaks out."""
    if isinstance(value, Link):
        return base + value
    if isinstance(value, dict):
        return {key: render(item, base) for key, item in value.items()}
    if isinstance(value, list):
        return [render(item, base) for item in value]
    return value


def timestamp(at: float | None = None) -> str:
    """RFC 3339 with milliseconds and an offset, as GCE writes ``creationTimestamp``."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}-00:00"


_ids = random.Random()


def new_id() -> str:
    """A uint64 resource id, as the API sends it: a decimal string."""
    return str(_ids.randrange(10**18, 2**63))


def fingerprint(value: Any) -> str:
    """A fingerprint of ``value``: 8 bytes of a hash, base64, as GCE's look."""
    digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).digest()
    return base64.b64encode(digest[:8]).decode()
