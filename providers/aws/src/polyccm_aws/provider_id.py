"""Provider IDs of EC2 instances, parsed and formatted as cloud-provider-aws does.

Accepted forms (upstream ``MapToAWSInstanceID``): ``aws:///<zone>/<id>``, ``aws:////<id>``,
``aws://<zone>/<id>`` and a bare ``<id>``; the instance id is the last path segment and must
start with ``i-``. Fargate nodes (``aws:///<zone>/fargate-<ip>``, upstream's "fargate" variant)
name no EC2 instance: :func:`fargate_node_id` recognises them. Node names that are
resource-based hostnames (``i-0abc`` or ``i-0abc.ec2.internal``) map to their instance id
without a cloud call.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import urlsplit

SCHEME = "aws"
_INSTANCE_ID = re.compile(r"^i-[^/]*$")
_RESOURCE_BASED_NAME = re.compile(r"^(i-[0-9a-f]+)(?:\..*)?$")


class InvalidProviderID(ValueError):
    """A provider ID that does not name an EC2 instance."""


@functools.lru_cache(maxsize=16384)
def instance_id_from_provider_id(provider_id: str) -> str:
    """The EC2 instance id inside ``provider_id``; raise InvalidProviderID when there is none.
    Remembered for the last 16,384 IDs: every load balancer's ensure parses every node's."""
    text = provider_id if provider_id.startswith(f"{SCHEME}://") else f"{SCHEME}:///{provider_id}"
    if "://" in provider_id and not provider_id.startswith(f"{SCHEME}://"):
        raise InvalidProviderID(f"provider ID {provider_id!r} does not start with aws://")
    parts = urlsplit(text)
    tokens = parts.path.strip("/").split("/")
    instance_id = tokens[-1] if tokens else ""
    if not instance_id or not _INSTANCE_ID.match(instance_id):
        raise InvalidProviderID(f"provider ID {provider_id!r} does not name an EC2 instance")
    return instance_id


FARGATE_PREFIX = "fargate-"


def fargate_node_id(provider_id: str) -> str | None:
    """The ``fargate-...`` id of a Fargate node's provider ID (its last path segment, as for an
    instance id), else None."""
    if "://" in provider_id and not provider_id.startswith(f"{SCHEME}://"):
        return None
    tail = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return tail if tail.startswith(FARGATE_PREFIX) else None


def zone_from_provider_id(provider_id: str) -> str:
    """The zone of ``aws:///<zone>/<id>`` (or ``aws://<zone>/<id>``), ``""`` when none."""
    text = provider_id if provider_id.startswith(f"{SCHEME}://") else f"{SCHEME}:///{provider_id}"
    parts = urlsplit(text)
    tokens = [t for t in parts.path.strip("/").split("/") if t]
    return tokens[0] if len(tokens) > 1 else parts.netloc


def format_provider_id(zone: str, instance_id: str) -> str:
    """``aws:///<zone>/<id>``, the form upstream writes to ``spec.providerID``."""
    return f"{SCHEME}:///{zone}/{instance_id}"


def instance_id_from_node_name(name: str) -> str | None:
    """The instance id of a resource-based node name (``i-0abc...[.domain]``), else None."""
    match = _RESOURCE_BASED_NAME.match(name)
    return match.group(1) if match else None


def region_from_zone(zone: str) -> str:
    """The region of an availability zone (``us-east-1a`` -> ``us-east-1``), or ``""``."""
    match = re.match(r"^(?:[a-zA-Z]+-)+\d+", zone)
    return match.group(0) if match else ""
