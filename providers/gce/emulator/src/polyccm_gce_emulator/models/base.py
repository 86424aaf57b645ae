"""One project's store of resources and operations, and the name and reference rules of the API.

Resources are kept as the JSON bodies the API shows, with references as
:class:`~polyccm_gce_emulator.models.common.Link` values.
"""

from __future__ import annotations

import heapq
import ipaddress
import itertools
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from polyccm_gce_emulator.errors import (
    AlreadyExists,
    Invalid,
    NotFound,
    OperationFailure,
    QuotaExceeded,
    ResourceNotReady,
)
from polyccm_gce_emulator.models.common import Link, new_id, timestamp
from polyccm_gce_emulator.models.operations import Operation, OperationFault
from polyccm_gce_emulator.settings import EmulatorSettings

API_PATH = "compute/v1/"
NAME_PATTERN = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
_NAME = re.compile(NAME_PATTERN)
# Any host, then compute/v1/: clients write references with googleapis.com or with the
# emulator's own address, and GCE itself accepts either API host.
_URL = re.compile(r"^https?://[^/]+/compute/v1/(projects/.+)$")


def check_name(name: object, field_name: str = "resource.name") -> str:
    """``name`` when it is a valid RFC 1035 resource name, else 400 invalid (as GCE says it)."""
    if not isinstance(name, str) or not name:
        raise Invalid(f"Required field '{field_name}' not specified")
    if not _NAME.fullmatch(name):
        raise Invalid(
            f"Invalid value for field '{field_name}': '{name}'. "
            f"Must be a match of regex '(?:{NAME_PATTERN})'"
        )
    return name


def reference(value: object, project: str, field_name: str, collection: str) -> Link:
    """The path a reference names, from any form the API accepts: a full URL on any API host,
    ``projects/p/...``, or relative to the project (``zones/z/...``, ``regions/r/...``,
    ``global/...``), each of the partial forms also with a leading ``/`` (upstream's GCE CCM
    sends ``/zones/z/instances/n`` to targetPools and GCE resolves it against the project);
    ``collection`` (``instances``, ``networks``...) must be the resource type."""
    if not isinstance(value, str) or not value:
        raise Invalid(f"Required field '{field_name}' not specified")
    match = _URL.match(value)
    path = match.group(1) if match else value
    if not match and path.startswith("/"):
        path = path[1:]
    if path.startswith(("zones/", "regions/", "global/")):
        path = f"projects/{project}/{path}"
    parts = path.split("/")
    shaped = (
        (len(parts) == 4 and collection in ("zones", "regions"))
        or (len(parts) == 5 and parts[2] == "global")
        or (len(parts) == 6 and parts[2] in ("zones", "regions"))
    )
    if not shaped or parts[0] != "projects" or parts[-2] != collection or not all(parts):
        raise Invalid(f"Invalid value for field '{field_name}': '{value}'. The URL is malformed.")
    return Link(path)


def resource_path(project: str, scope: str, collection: str, name: str) -> str:
    """``projects/p/<scope>/<collection>/<name>``; zones and regions have no scope."""
    middle = f"{scope}/" if scope else ""
    return f"projects/{project}/{middle}{collection}/{name}"


def name_of(link: str) -> str:
    return link.rsplit("/", 1)[-1]


State = Literal["creating", "live", "deleting"]


@dataclass
class Resource:
    """One resource: its scope (``global``, ``zones/z``, ``regions/r``), collection, and the body
    the API shows. A resource being created is invisible unless its kind says otherwise
    (instances show as PROVISIONING); one being deleted is visible until its operation ends."""

    project: str
    scope: str
    collection: str
    body: dict[str, Any]
    state: State = "creating"
    visible_while_creating: bool = False
    busy: bool = False
    """An operation that excludes others (an instance's stop or start) is under way."""

    @property
    def name(self) -> str:
        return str(self.body["name"])

    @property
    def path(self) -> str:
        return resource_path(self.project, self.scope, self.collection, self.name)

    @property
    def link(self) -> Link:
        return Link(self.path)

    @property
    def visible(self) -> bool:
        return self.state != "creating" or self.visible_while_creating


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    operation: Operation = field(compare=False)


#: Where external (NAT and load-balancer) addresses come from: never contacted, only shown.
EXTERNAL_POOL = ipaddress.IPv4Network("35.184.0.0/13")

#: Quota metric of each collection (see ``EmulatorSettings.quotas``).
QUOTA_METRICS = {
    "routes": "ROUTES",
    "firewalls": "FIREWALLS",
    "forwardingRules": "FORWARDING_RULES",
    "targetPools": "TARGET_POOLS",
    "addresses": "STATIC_ADDRESSES",
    "instances": "INSTANCES",
    "networks": "NETWORKS",
    "subnetworks": "SUBNETWORKS",
    "httpHealthChecks": "HEALTH_CHECKS",
    "healthChecks": "HEALTH_CHECKS",
    "backendServices": "BACKEND_SERVICES",
    "instanceGroups": "INSTANCE_GROUPS",
}

Effect = Callable[[], None]


class ProjectBase:
    """One project's resources and operations; the domain mixins add the methods of each API.

    Time only moves in :meth:`advance`, which the HTTP layer calls before every request: each
    operation whose PENDING or RUNNING time has passed takes its next step then, in the order
    the steps fell due, so a client sees effects exactly as late as the operations say.
    """

    def __init__(
        self,
        project: str,
        settings: EmulatorSettings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.project = project
        self.settings = settings
        self.clock = clock
        self.peers: Mapping[str, ProjectBase] = {}
        """Every project of the emulator by id (set by its backends)."""
        self.resources: dict[tuple[str, str], dict[str, Resource]] = {}
        self.operations: dict[str, Operation] = {}
        self._due: list[_Due] = []
        self._seq = itertools.count()
        #: Set by the HTTP layer for one request: the next operation fails with this error.
        self.operation_fault: OperationFault | None = None
        self._external_used: set[ipaddress.IPv4Address] = set()
        self._external_cursor = 0

    # -- storage ---------------------------------------------------------------------------

    def collection(self, scope: str, collection: str) -> dict[str, Resource]:
        return self.resources.setdefault((scope, collection), {})

    def path(self, scope: str, collection: str, name: str) -> str:
        return resource_path(self.project, scope, collection, name)

    def find(self, scope: str, collection: str, name: str) -> Resource:
        """The visible resource, else 404 notFound."""
        found = self.collection(scope, collection).get(name)
        if found is None or not found.visible:
            raise NotFound(self.path(scope, collection, name))
        return found

    def find_link(self, link: str) -> Resource | None:
        """The visible resource a link names, in this project (``None`` when absent)."""
        parts = link.split("/")
        if len(parts) >= 4 and parts[1] != self.project:
            # Another project's (a Shared VPC route's next hop): looked up there when it exists.
            other = self.peers.get(parts[1])
            return None if other is None else other.find_link(link)
        if len(parts) < 4:
            return None
        scope, collection, name = "/".join(parts[2:-2]), parts[-2], parts[-1]
        found = self.collection(scope, collection).get(name)
        return found if found is not None and found.visible else None

    def require_link(self, link: str) -> Resource:
        found = self.find_link(link)
        if found is None:
            raise NotFound(link)
        return found

    def visible(self, scope: str, collection: str) -> list[Resource]:
        """Visible resources of one collection, sorted by name."""
        items = self.collection(scope, collection).values()
        return sorted((item for item in items if item.visible), key=lambda item: item.name)

    def view(self, resource: Resource) -> dict[str, Any]:
        """The body the API shows for ``resource``; mixins add fields computed from the rest of
        the project (a route's warnings, a network's subnetworks)."""
        return dict(resource.body)

    def every(self, collection: str) -> Iterator[Resource]:
        """Every visible resource of a collection, across scopes."""
        for (_scope, kind), items in list(self.resources.items()):
            if kind == collection:
                yield from (item for item in items.values() if item.visible)

    # -- create, modify, delete ------------------------------------------------------------

    def create(
        self,
        scope: str,
        collection: str,
        body: dict[str, Any],
        *,
        kind: str,
        visible_while_creating: bool = False,
        running_seconds: float | None = None,
        on_start: Effect | None = None,
        on_done: Effect | None = None,
    ) -> Operation:
        """Reserve the name (409 when taken, 403 over quota) and start an insert operation; the
        resource goes live when it is DONE (or vanishes when ``on_done`` raises
        :class:`OperationFailure`)."""
        name = check_name(body.get("name"))
        items = self.collection(scope, collection)
        if name in items:
            raise AlreadyExists(self.path(scope, collection, name))
        self._check_quota(collection)
        stored = {
            "kind": kind,
            "id": new_id(),
            "creationTimestamp": timestamp(self.clock()),
            **body,
            "name": name,
        }
        resource = Resource(
            self.project, scope, collection, stored, visible_while_creating=visible_while_creating
        )
        stored["selfLink"] = resource.link
        items[name] = resource

        def done() -> None:
            try:
                if on_done is not None:
                    on_done()
            except OperationFailure:
                items.pop(name, None)
                raise
            resource.state = "live"

        def failed() -> None:
            items.pop(name, None)

        return self.schedule(
            resource,
            "insert",
            running_seconds=running_seconds,
            on_start=on_start,
            on_done=done,
            on_fail=failed,
        )

    def modify(
        self,
        resource: Resource,
        operation_type: str,
        on_done: Effect,
        *,
        on_start: Effect | None = None,
        running_seconds: float | None = None,
    ) -> Operation:
        """An operation that changes a live resource when it is DONE."""
        self._require_ready(resource)
        return self.schedule(
            resource,
            operation_type,
            on_start=on_start,
            on_done=on_done,
            running_seconds=running_seconds,
        )

    def delete(
        self,
        resource: Resource,
        *,
        running_seconds: float | None = None,
        on_start: Effect | None = None,
        on_done: Effect | None = None,
    ) -> Operation:
        """Start deleting ``resource``: it stays visible until the operation is DONE."""
        self._require_ready(resource)
        resource.state = "deleting"
        items = self.collection(resource.scope, resource.collection)

        def done() -> None:
            if on_done is not None:
                on_done()
            items.pop(resource.name, None)

        def failed() -> None:
            resource.state = "live"

        return self.schedule(
            resource,
            "delete",
            running_seconds=running_seconds,
            on_start=on_start,
            on_done=done,
            on_fail=failed,
        )

    def _require_ready(self, resource: Resource) -> None:
        if resource.state != "live" or resource.busy:
            raise ResourceNotReady(f"The resource '{resource.path}' is not ready")

    def _check_quota(self, collection: str) -> None:
        metric = QUOTA_METRICS.get(collection)
        if metric is None:
            return
        limit = self.settings.quotas.get(metric)
        if limit is None:
            return
        used = sum(len(items) for (_s, kind), items in self.resources.items() if kind == collection)
        if used >= limit:
            raise QuotaExceeded(metric, limit)

    # -- external addresses ----------------------------------------------------------------

    def allocate_external(self) -> str:
        """A free external address (ephemeral, or for a new static address)."""
        # From a cursor that moves on, so an address given back is not handed out again at
        # once: a restarted instance gets a new ephemeral address, as on GCE.
        size = EXTERNAL_POOL.num_addresses - 2
        for step in range(size):
            offset = 1 + (self._external_cursor + step) % size
            address = EXTERNAL_POOL.network_address + offset
            if address not in self._external_used:
                self._external_used.add(address)
                self._external_cursor = offset
                return str(address)
        raise OperationFailure("IP_SPACE_EXHAUSTED", "No external address is left.", 400)

    def release_external(self, address: str) -> None:
        self._external_used.discard(ipaddress.IPv4Address(address))

    # -- operations ------------------------------------------------------------------------

    def schedule(
        self,
        resource: Resource,
        operation_type: str,
        *,
        running_seconds: float | None = None,
        on_start: Effect | None = None,
        on_done: Effect | None = None,
        on_fail: Effect | None = None,
    ) -> Operation:
        """A new PENDING operation on ``resource``, in the resource's own scope."""
        now = self.clock()
        pending = self.settings.pending_seconds
        running = self.settings.running_seconds if running_seconds is None else running_seconds
        operation = Operation.begin(
            project=self.project,
            scope=resource.scope,
            operation_type=operation_type,
            target=resource.link,
            target_id=str(resource.body.get("id", "")),
            now=now,
            pending_seconds=pending,
            running_seconds=running,
            on_start=on_start,
            on_done=on_done,
            on_fail=on_fail,
            fault=self.operation_fault,
        )
        self.operation_fault = None
        self.operations[operation.name] = operation
        heapq.heappush(self._due, _Due(operation.next_step_at(), next(self._seq), operation))
        return operation

    def advance(self) -> None:
        """Take every operation step that has fallen due, oldest first."""
        now = self.clock()
        while self._due and self._due[0].at <= now:
            due = heapq.heappop(self._due)
            due.operation.step(due.at)
            following = due.operation.next_step_at()
            if following != float("inf"):
                heapq.heappush(self._due, _Due(following, next(self._seq), due.operation))

    def operation(self, scope: str, name: str) -> Operation:
        found = self.operations.get(name)
        if found is None or found.scope != scope:
            raise NotFound(f"projects/{self.project}/{scope}/operations/{name}")
        return found
