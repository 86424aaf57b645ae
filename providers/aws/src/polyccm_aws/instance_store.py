"""EC2 instances by id and by private DNS name, batched and briefly cached.

Every capability asks this store, so a node looked up by the node controller, the lifecycle
controller and the service controller within a few seconds costs one DescribeInstances call.
Lookups by id ask for up to 500 ids per call; an id EC2 does not know (``InvalidInstanceID
.NotFound``) is read from the error, remembered as missing, and the rest asked again, instead of
falling back to one call per id as upstream does. Lookups by node name use the
``private-dns-name`` filter, 200 names per call, and ignore terminated instances. Concurrent
single lookups are merged by a :class:`~polyccm_aws.coalesce.Coalescer`.

Instances are kept as :func:`slim_instance` leaves them: only what the capabilities read (ids,
state, type, placement, addresses, interfaces, security groups, subnet, VPC, tags), about a
fifth of what DescribeInstances returns, so the cache of 5,000 nodes' instances stays small.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from polyccm_aws.api import AwsApi, AwsApiError, error_code
from polyccm_aws.coalesce import Coalescer
from polyccm_aws.tagging import ClusterTagging

Instance = Mapping[str, Any]
"""An instance as DescribeInstances returns it."""

IDS_PER_CALL = 500
NAMES_PER_CALL = 200
ALIVE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")
_ID_IN_MESSAGE = re.compile(r"i-[0-9a-zA-Z]+")


_KEPT = frozenset(
    {
        "InstanceId",
        "InstanceType",
        "State",
        "Placement",
        "PrivateDnsName",
        "PrivateIpAddress",
        "PublicDnsName",
        "PublicIpAddress",
        "SecurityGroups",
        "SourceDestCheck",
        "SubnetId",
        "VpcId",
        "Tags",
    }
)
"""Top-level fields of an instance that some capability reads; :func:`slim_instance`."""
_KEPT_INTERFACE = frozenset(
    {"Attachment", "Status", "PrivateIpAddresses", "Ipv6Addresses", "Groups", "SubnetId", "VpcId"}
)


def slim_instance(instance: Instance) -> Instance:
    """``instance`` with only the fields the capabilities read (:data:`_KEPT`; interfaces keep
    their device index, status, addresses, groups, subnet and VPC), short strings interned: a
    DescribeInstances answer also carries block devices, metadata options, launch details and
    more, several kilobytes per instance that nothing here reads."""
    slim: dict[str, Any] = {key: _interned(instance[key]) for key in _KEPT if key in instance}
    interfaces = instance.get("NetworkInterfaces")
    if interfaces:
        slim["NetworkInterfaces"] = [_slim_interface(interface) for interface in interfaces]
    return slim


def _slim_interface(interface: Mapping[str, Any]) -> dict[str, Any]:
    slim = {key: _interned(value) for key, value in interface.items() if key in _KEPT_INTERFACE}
    attachment = interface.get("Attachment")
    if isinstance(attachment, Mapping):
        slim["Attachment"] = {"DeviceIndex": attachment.get("DeviceIndex", 0)}
    return slim


def _interned(value: Any) -> Any:
    """A copy of ``value`` whose short strings are interned (zones, states, group ids, tag
    keys and values repeat across thousands of instances)."""
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= 64 else value
    if isinstance(value, Mapping):
        return {sys.intern(str(k)): _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(item) for item in value]
    return value


class AmbiguousInstanceName(LookupError):
    """More than one live instance carries the node's private DNS name."""


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class InstanceStore:
    """Cached, batched DescribeInstances. ``None`` in a result means "no such instance"."""

    def __init__(
        self,
        api: AwsApi,
        *,
        ttl: float = 10.0,
        window: float = 0.02,
        name_filter_tagging: ClusterTagging | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._ttl = ttl
        self._clock = clock
        self._tagging = name_filter_tagging
        self._lock = threading.Lock()
        self._by_id: dict[str, tuple[float, Instance | None]] = {}
        self._by_name: dict[str, tuple[float, str | None]] = {}
        self._ids = Coalescer(self._describe_ids, window=window, max_keys=IDS_PER_CALL)
        self._names = Coalescer(self._describe_names, window=window, max_keys=NAMES_PER_CALL)

    # -- public -------------------------------------------------------------------------------

    @property
    def caches(self) -> bool:
        """Whether answers are kept at all (a store with no lifetime asks every time)."""
        return self._ttl > 0

    def by_ids(
        self, ids: Iterable[str], *, max_age: float | None = None
    ) -> dict[str, Instance | None]:
        """Instances by id (terminated ones included, as EC2 returns them). ``max_age``: how
        old a cached answer may be, when longer than the store's lifetime (a store without a
        cache keeps none)."""
        wanted = list(dict.fromkeys(ids))
        result, stale = self._cached_ids(wanted, max_age)
        if stale:
            result.update(self._ids.get(stale))
        return result

    def by_names(self, names: Iterable[str]) -> dict[str, Instance | Exception | None]:
        """Live (not terminated) instances by private DNS name."""
        wanted = list(dict.fromkeys(names))
        now = self._clock()
        known: dict[str, str | None] = {}
        stale: list[str] = []
        with self._lock:
            for name in wanted:
                entry = self._by_name.get(name)
                if entry is not None and now - entry[0] < self._ttl:
                    known[name] = entry[1]
                else:
                    stale.append(name)
        fetched: dict[str, Instance | Exception | None] = dict(self._names.get(stale))
        ids = [i for i in known.values() if i]
        instances = self.by_ids(ids) if ids else {}
        result: dict[str, Instance | Exception | None] = {}
        for name in wanted:
            if name in fetched:
                result[name] = fetched[name]
            else:
                instance_id = known.get(name)
                instance = instances.get(instance_id) if instance_id else None
                alive = instance is not None and state_of(instance) != "terminated"
                result[name] = instance if alive else None
        return result

    def invalidate(self, ids: Iterable[str] | None = None) -> None:
        """Forget cached instances (all of them when ``ids`` is None)."""
        with self._lock:
            if ids is None:
                self._by_id.clear()
                self._by_name.clear()
            else:
                for instance_id in ids:
                    self._by_id.pop(instance_id, None)

    # -- fetching -----------------------------------------------------------------------------

    def _cached_ids(
        self, wanted: list[str], max_age: float | None = None
    ) -> tuple[dict[str, Instance | None], list[str]]:
        now = self._clock()
        ttl = max(self._ttl, max_age or 0.0) if self._ttl > 0 else 0.0
        result: dict[str, Instance | None] = {}
        stale: list[str] = []
        with self._lock:
            for instance_id in wanted:
                entry = self._by_id.get(instance_id)
                if entry is not None and now - entry[0] < ttl:
                    result[instance_id] = entry[1]
                else:
                    stale.append(instance_id)
        return result, stale

    def _remember(self, instances: Mapping[str, Instance | None]) -> None:
        now = self._clock()
        with self._lock:
            for instance_id, instance in instances.items():
                self._by_id[instance_id] = (now, instance)

    def _describe_ids(self, ids: list[str]) -> dict[str, Instance | None]:
        found: dict[str, Instance | None] = {}
        for chunk in _chunks(ids, IDS_PER_CALL):
            found.update(self._describe_chunk(chunk))
        self._remember(found)
        return found

    def _describe_chunk(self, chunk: list[str]) -> dict[str, Instance | None]:
        result: dict[str, Instance | None] = dict.fromkeys(chunk)
        remaining = list(chunk)
        while remaining:
            try:
                instances = self._describe(InstanceIds=remaining)
            except AwsApiError as error:
                if error_code(error) not in (
                    "InvalidInstanceID.NotFound",
                    "InvalidInstanceID.Malformed",
                ):
                    raise
                unknown = set(_ID_IN_MESSAGE.findall(str(error))) & set(remaining)
                if not unknown:  # an error we cannot attribute: ask by filter, which never fails
                    instances = self._describe(
                        Filters=[{"Name": "instance-id", "Values": remaining}]
                    )
                    remaining = []
                else:
                    remaining = [i for i in remaining if i not in unknown]
                    continue
            for instance in instances:
                result[str(instance["InstanceId"])] = instance
            break
        return result

    def _describe_names(self, names: list[str]) -> dict[str, Instance | Exception | None]:
        result: dict[str, Instance | Exception | None] = dict.fromkeys(names)
        by_name: dict[str, list[Instance]] = {}
        for chunk in _chunks(names, NAMES_PER_CALL):
            instances = self._describe(
                Filters=[
                    {"Name": "private-dns-name", "Values": chunk},
                    {"Name": "instance-state-name", "Values": list(ALIVE_STATES)},
                ]
            )
            for instance in instances:
                if self._tagging is not None and not self._tagging.has_cluster_tag(
                    instance.get("Tags")
                ):
                    continue
                by_name.setdefault(str(instance.get("PrivateDnsName", "")), []).append(instance)
        now = self._clock()
        found: dict[str, Instance | None] = {}
        for name in names:
            matches = by_name.get(name, [])
            if len(matches) > 1:
                result[name] = AmbiguousInstanceName(
                    f"{len(matches)} live EC2 instances have the private DNS name {name!r}"
                )
                continue
            match = matches[0] if matches else None
            result[name] = match
            if match is not None:
                found[str(match["InstanceId"])] = match
            with self._lock:
                self._by_name[name] = (now, str(match["InstanceId"]) if match else None)
        self._remember(found)
        return result

    def _describe(self, **params: Any) -> list[Instance]:
        if "Filters" in params:
            params["MaxResults"] = 1000
        instances: list[Instance] = []
        for page in self._api.pages("ec2", "describe_instances", **params):
            for reservation in page.get("Reservations", ()):
                instances.extend(map(slim_instance, reservation.get("Instances", ())))
        return instances


def state_of(instance: Instance) -> str:
    """The instance's state name (``running``, ``stopped``, ``terminated``...)."""
    return str((instance.get("State") or {}).get("Name", ""))
