"""The HTTP layer's handlers: one per operation served (:mod:`.urls` routes to them).

Each handler gets a :class:`Call` whose request already matched the OpenAPI document, asks the
:class:`~polyccm_packet_emulator.backend.Backend`, and returns a :class:`Reply` shaped as the
document's response.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from polyccm_packet_emulator import catalog, render
from polyccm_packet_emulator.backend import Backend, Device
from polyccm_packet_emulator.errors import Forbidden, NotFound, Unprocessable

BASE_PATH = "/metal/v1"
DEFAULT_PER_PAGE = 10
MAX_PER_PAGE = 1000


@dataclass
class Call:
    backend: Backend
    path: dict[str, str]
    query: Mapping[str, list[str]]
    body: Any

    def one(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    def many(self, name: str) -> list[str]:
        """A list parameter (``include=a,b`` or ``types=a&types=b``)."""
        return [part for value in self.query.get(name, []) for part in value.split(",") if part]

    @property
    def now(self) -> float:
        return self.backend.clock.now()


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Call], Reply]


def _device(call: Call, item: Device) -> dict[str, Any]:
    return render.device(item, call.backend.project, call.now, include=call.many("include"),
                         exclude=call.many("exclude"))  # fmt: skip


# -- projects, metros ---------------------------------------------------------------------------


def find_project(call: Call) -> Reply:
    project = call.backend.find_project(call.path["id"])
    return Reply(200, render.project(project, include=("project",)))


def find_metros(call: Call) -> Reply:
    metros = [render.metro(m.code) for m in catalog.METROS]
    return Reply(200, {"metros": metros, "href": f"{BASE_PATH}/locations/metros"})


def get_metro(call: Call) -> Reply:
    for metro in catalog.METROS:
        if call.path["id"] in (metro.id, metro.code):
            return Reply(200, render.metro(metro.code))
    raise NotFound()


# -- devices ------------------------------------------------------------------------------------


def _matches(call: Call, item: Device) -> bool:
    hostname, tag = call.one("hostname"), call.one("tag")
    metro, facility, search = call.one("metro"), call.one("facility"), call.one("search")
    if hostname and hostname not in item.hostname:
        return False
    if tag and tag not in item.tags:
        return False
    if metro and metro != item.metro:
        return False
    if facility and facility != item.facility:
        return False
    if search:
        haystack = [item.hostname, item.id[:8], item.plan, item.facility, *item.tags,
                    *(a.address for a in item.addresses)]  # fmt: skip
        return any(search in text for text in haystack)
    return True


def find_project_devices(call: Call) -> Reply:
    project = call.backend.find_project(call.path["id"])
    devices = sorted(project.devices.values(), key=lambda d: (d.created, d.hostname))
    matched = [d for d in devices if _matches(call, d)]
    page = int(call.one("page") or 1)
    per_page = min(int(call.one("per_page") or DEFAULT_PER_PAGE), MAX_PER_PAGE)
    start = (page - 1) * per_page
    url = f"{BASE_PATH}/projects/{project.id}/devices"
    return Reply(200, {
        "devices": [_device(call, d) for d in matched[start : start + per_page]],
        "meta": _meta(url, call.query, page, per_page, len(matched)),
        "href": url,
    })  # fmt: skip


def _meta(
    url: str, query: Mapping[str, list[str]], page: int, per_page: int, total: int
) -> dict[str, Any]:
    """The API's list ``meta``: page numbers, the total, and links that keep the filters."""
    last = max(1, -(-total // per_page))

    def link(number: int) -> dict[str, str]:
        params = [(k, v) for k, values in query.items() if k not in ("page", "per_page")
                  for v in values]  # fmt: skip
        params += [("page", str(number)), ("per_page", str(per_page))]
        return {"href": f"{url}?{urlencode(params)}"}

    meta: dict[str, Any] = {"current_page": page, "last_page": last, "total": total,
                            "first": link(1), "last": link(last), "self": link(page)}  # fmt: skip
    if page > 1:
        meta["previous"] = link(min(page - 1, last))
    if page < last:
        meta["next"] = link(page + 1)
    return meta


def create_device(call: Call) -> Reply:
    created = call.backend.create_device(call.path["id"], call.body)
    return Reply(201, _device(call, created))


def find_device(call: Call) -> Reply:
    return Reply(200, _device(call, call.backend.device(call.path["id"])))


def delete_device(call: Call) -> Reply:
    call.backend.delete_device(call.path["id"])
    return Reply(204)


def perform_action(call: Call) -> Reply:
    call.backend.act(call.path["id"], str(call.body.get("type")))
    return Reply(202)


def find_device_metadata(call: Call) -> Reply:
    return Reply(200, render.metadata(call.backend.device(call.path["id"]), call.now))


# -- IP reservations ----------------------------------------------------------------------------


def _ip_list(call: Call, types: list[str], limit: int) -> tuple[list[dict[str, Any]], int]:
    """The project's reservations, then its devices' own blocks, of ``types`` (any when empty):
    the first ``limit`` rendered, and how many there are (only those shown are rendered)."""
    project = call.backend.project
    include = call.many("include")
    wanted = set(types)
    shown: list[dict[str, Any]] = []
    total = 0
    for reservation in project.ips.values():
        if not wanted or reservation.kind in wanted:
            total += 1
            if len(shown) < limit:
                shown.append(render.reservation(reservation, project, include))
    for item in project.devices.values():
        for block in item.addresses:
            if not wanted or render.block_type(block) in wanted:
                total += 1
                if len(shown) < limit:
                    shown.append(render.device_block(block, item, project, include))
    return shown, total


def find_ip_reservations(call: Call) -> Reply:
    project = call.backend.find_project(call.path["id"])
    per_page = min(int(call.one("per_page") or 250), MAX_PER_PAGE)
    items, total = _ip_list(call, call.many("types"), per_page)
    url = f"{BASE_PATH}/projects/{project.id}/ips"
    return Reply(200, {"ip_addresses": items,
                       "meta": _meta(url, call.query, 1, per_page, total),
                       "href": url})  # fmt: skip


def request_ip_reservation(call: Call) -> Reply:
    created = call.backend.request_ips(call.path["id"], call.body)
    project = call.backend.project
    return Reply(201, render.reservation(created, project, call.many("include")))


def _find_ip(call: Call, ip_id: str) -> tuple[str, dict[str, Any]]:
    """``("reservation" | "block" | "assignment", body)`` for an id of ``/ips/{id}``."""
    project = call.backend.project
    include = call.many("include")
    if ip_id in project.ips:
        return "reservation", render.reservation(project.ips[ip_id], project, include)
    elastic = call.backend.assignment_of(ip_id)
    if elastic is not None:
        return "elastic-assignment", render.elastic_assignment(elastic, ip_id)
    for item in project.devices.values():
        for block in item.addresses:
            if block.id == ip_id:
                return "assignment", render.assignment(block, item, include)
            if render.management_reservation_id(block) == ip_id:
                return "block", render.device_block(block, item, project, include)
    raise NotFound()


def create_ip_assignment(call: Call) -> Reply:
    address = call.body.get("address")
    if not isinstance(address, str) or not address:
        raise Unprocessable("Address can't be blank")
    reservation, assignment_id = call.backend.assign_ip(call.path["id"], address)
    return Reply(201, render.elastic_assignment(reservation, assignment_id))


def find_ip_address(call: Call) -> Reply:
    return Reply(200, _find_ip(call, call.path["id"])[1])


def delete_ip_address(call: Call) -> Reply:
    kind, _ = _find_ip(call, call.path["id"])
    if kind == "elastic-assignment":  # unassigns the Elastic IP from its device
        call.backend.unassign_ip(call.path["id"])
        return Reply(204)
    if kind != "reservation":
        # 403: the document lists no 422 for this operation.
        raise Forbidden("This IP block belongs to a device and cannot be deleted")
    call.backend.delete_ip(call.path["id"])
    return Reply(204)


# -- BGP ----------------------------------------------------------------------------------------


def _sessions(call: Call, sessions: list[Any]) -> list[dict[str, Any]]:
    backend = call.backend
    return [render.bgp_session(s, backend.device(s.device_id).state(call.now)) for s in sessions]


def find_bgp_config(call: Call) -> Reply:
    project = call.backend.find_project(call.path["id"])
    sessions = _sessions(call, list(project.sessions.values()))
    return Reply(200, render.bgp_config(project.bgp, project, sessions))


def request_bgp_config(call: Call) -> Reply:
    call.backend.request_bgp(call.path["id"], call.body)
    return Reply(204)


def find_bgp_sessions(call: Call) -> Reply:
    sessions = call.backend.device_sessions(call.path["id"])
    href = f"{BASE_PATH}/devices/{call.path['id']}/bgp/sessions"
    return Reply(200, {"bgp_sessions": _sessions(call, sessions), "href": href})


def create_bgp_session(call: Call) -> Reply:
    created = call.backend.create_session(call.path["id"], call.body)
    return Reply(201, _sessions(call, [created])[0])


def find_bgp_session(call: Call) -> Reply:
    return Reply(200, _sessions(call, [call.backend.session(call.path["id"])])[0])


def delete_bgp_session(call: Call) -> Reply:
    call.backend.delete_session(call.path["id"])
    return Reply(204)


def bgp_neighbors(call: Call, device: Device | None = None) -> list[dict[str, Any]]:
    backend = call.backend
    device = device or backend.device(call.path["id"])
    config = backend.project.bgp
    if config is None:
        return []
    return [render.bgp_neighbor(s, device, config) for s in backend.device_sessions(device.id)]


def get_bgp_neighbor_data(call: Call) -> Reply:
    href = f"{BASE_PATH}/devices/{call.path['id']}/bgp/neighbors"
    return Reply(200, {"bgp_neighbors": bgp_neighbors(call), "href": href})
