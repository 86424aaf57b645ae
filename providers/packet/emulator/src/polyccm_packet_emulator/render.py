"""Resources as the Metal API shows them: the document's schemas, filled from the model.

Nested objects follow the API's ``include``/``exclude`` convention: ``project`` is a bare
``{"href": ...}`` unless included; an excluded attribute is cut down to its ``href``.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from typing import Any

from polyccm_packet_emulator import catalog
from polyccm_packet_emulator.backend import (
    Assignment,
    BgpConfig,
    BgpSession,
    Device,
    IpReservation,
    Project,
)

API = "/metal/v1"


def iso_time(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(int(epoch), tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def href(kind: str, item_id: str) -> dict[str, str]:
    return {"href": f"{API}/{kind}/{item_id}"}


def iqn(item: Device) -> str:
    return f"iqn.2026-06.net.packet:device.{item.id[:8]}"


def metro(code: str) -> dict[str, Any]:
    found = catalog.METRO_BY_CODE[code]
    return {"id": found.id, "code": found.code, "name": found.name, "country": found.country,
            "href": f"{API}/locations/metros/{found.id}"}  # fmt: skip


def facility(code: str) -> dict[str, Any]:
    facility_id = catalog.stable_id("facility", code)
    return {"id": facility_id, "code": code, "name": f"{code.upper()}",
            "features": ["baremetal", "backend_transfer", "layer_2", "global_ipv4"],
            "ip_ranges": [], "metro": metro(catalog.METRO_OF_FACILITY[code].code),
            "href": f"{API}/facilities/{facility_id}"}  # fmt: skip


def nested(include: Sequence[str], name: str) -> list[str]:
    """What ``include`` asks of the objects under ``name`` (``ip_addresses.parent_block`` asks
    ``parent_block`` of each address)."""
    prefix = name + "."
    return [part.removeprefix(prefix) for part in include if part.startswith(prefix)]


def project(item: Project, include: Sequence[str] = ()) -> dict[str, Any]:
    if "project" not in include:
        return href("projects", item.id)
    return {
        "id": item.id, "name": item.name, "href": f"{API}/projects/{item.id}",
        "created_at": iso_time(item.created), "updated_at": iso_time(item.created),
        "type": "default", "customdata": {}, "tags": [], "backend_transfer_enabled": False,
        "devices": [href("devices", d) for d in item.devices],
        "bgp_config": {"href": f"{API}/projects/{item.id}/bgp-config"},
        "organization": {"href": f"{API}/organizations/{catalog.stable_id('org', 'polyccm')}"},
        "members": [], "memberships": [], "invitations": [], "ssh_keys": [], "volumes": [],
        "max_devices": {}, "network_status": {},
    }  # fmt: skip


def parent_block(item: Assignment, included: bool) -> dict[str, Any]:
    """The block ``item`` is assigned from (the device's own block, as ``/ips`` lists it):
    its href, or with ``included`` its network, as the document's ``ParentBlock``."""
    block_href = f"{API}/ips/{management_reservation_id(item)}"
    if not included:
        return {"href": block_href}
    network = item.network
    return {"href": block_href, "network": str(network.network_address),
            "cidr": network.prefixlen, "netmask": str(network.netmask)}  # fmt: skip


def assignment(item: Assignment, device: Device, include: Sequence[str] = ()) -> dict[str, Any]:
    """A device's address; ``include`` as asked of the address itself (``parent_block``)."""
    network = item.network
    return {
        "id": item.id, "address": item.address, "address_family": item.family,
        "cidr": network.prefixlen, "gateway": item.gateway,
        "netmask": str(network.netmask), "network": str(network.network_address),
        "public": item.public, "management": True, "manageable": True, "enabled": True,
        "global_ip": False, "state": "active", "created_at": iso_time(item.created),
        "assigned_to": href("devices", device.id), "href": f"{API}/ips/{item.id}",
        "metro": metro(device.metro),
        "parent_block": parent_block(item, "parent_block" in include),
    }  # fmt: skip


def management_reservation_id(item: Assignment) -> str:
    """The id of the block a device's address comes from, as listed among the project's IPs."""
    return str(uuid.uuid5(uuid.UUID(item.id), "reservation"))


def _reservation_fields(
    network: Any, kind: str, owner: Project, include: Sequence[str]
) -> dict[str, Any]:
    return {
        "address": str(network.network_address), "address_family": network.version,
        "cidr": network.prefixlen, "netmask": str(network.netmask),
        "network": str(network.network_address),
        "gateway": str(network.network_address), "type": kind,
        "public": kind != "private_ipv4", "global_ip": kind == "global_ipv4",
        "addon": True, "bill": True, "enabled": True, "manageable": True,
        "project": project(owner, include), "project_lite": href("projects", owner.id),
        "state": "created", "available": f"{API}/ips/{{id}}/available",
    }  # fmt: skip


def reservation(item: IpReservation, owner: Project, include: Sequence[str] = ()) -> dict[str, Any]:
    body = _reservation_fields(item.network, item.kind, owner, include)
    body.update(
        id=item.id, href=f"{API}/ips/{item.id}", available=f"{API}/ips/{item.id}/available",
        management=False, tags=list(item.tags), details=item.details,
        customdata=dict(item.customdata), created_at=iso_time(item.created),
        assignments=[
            elastic_assignment(item, assignment_id)
            if "assignments" in include else {"href": f"{API}/ips/{assignment_id}"}
            for assignment_id in item.assignments
        ],
    )  # fmt: skip
    if item.metro is not None:
        body["metro"] = metro(item.metro)
    if item.facility is not None:
        body["facility"] = facility(item.facility)
    return body


def elastic_assignment(item: IpReservation, assignment_id: str) -> dict[str, Any]:
    """An Elastic IP's assignment to a device (``createIPAssignment``'s answer)."""
    device_id, created = item.assignments[assignment_id]
    network = item.network
    body = {
        "id": assignment_id, "address": str(network.network_address),
        "address_family": network.version, "cidr": network.prefixlen,
        "gateway": str(network.network_address), "netmask": str(network.netmask),
        "network": str(network.network_address), "public": True, "management": False,
        "manageable": True, "enabled": True, "global_ip": item.kind == "global_ipv4",
        "created_at": iso_time(created), "assigned_to": href("devices", device_id),
        "href": f"{API}/ips/{assignment_id}", "parent_block": {"href": f"{API}/ips/{item.id}"},
    }  # fmt: skip
    if item.metro is not None:
        body["metro"] = metro(item.metro)
    return body


def block_type(item: Assignment) -> str:
    """The reservation type of a device's own block (``public_ipv4``, ``private_ipv4``...)."""
    return "private_ipv4" if not item.public else f"public_ipv{item.family}"


def device_block(
    item: Assignment, device: Device, owner: Project, include: Sequence[str] = ()
) -> dict[str, Any]:
    """A device's own address block, as the project's IP list shows it (management)."""
    kind = block_type(item)
    block_id = management_reservation_id(item)
    body = _reservation_fields(item.network, kind, owner, include)
    body.update(
        id=block_id, href=f"{API}/ips/{block_id}", available=f"{API}/ips/{block_id}/available",
        management=True, tags=[], details="", customdata={},
        created_at=iso_time(item.created), assignments=[{"href": f"{API}/ips/{item.id}"}],
        metro=metro(device.metro), facility=facility(device.facility),
    )  # fmt: skip
    return body


def device(
    item: Device, owner: Project, now: float, *, include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> dict[str, Any]:  # fmt: skip
    distro, version = catalog.OPERATING_SYSTEMS[item.operating_system]
    plan_class, cores, memory = catalog.PLANS[item.plan]
    state = item.state(now)
    body: dict[str, Any] = {
        "id": item.id, "short_id": item.id[:8], "hostname": item.hostname,
        "description": item.description, "state": state,
        "locked": False, "always_pxe": False, "billing_cycle": "hourly",
        "spot_instance": False, "network_frozen": False, "bonding_mode": 4,
        "tags": list(item.tags), "customdata": dict(item.customdata),
        "userdata": item.userdata, "user": "root", "iqn": iqn(item),
        "created_at": iso_time(item.created), "updated_at": iso_time(item.updated),
        "href": f"{API}/devices/{item.id}",
        "facility": facility(item.facility), "metro": metro(item.metro),
        "plan": {"id": catalog.stable_id("plan", item.plan), "slug": item.plan,
                 "name": item.plan, "class": plan_class, "line": "baremetal",
                 "type": "standard", "description": f"{cores} cores, {memory}",
                 "href": f"{API}/plans/{catalog.stable_id('plan', item.plan)}"},
        "operating_system": {"id": catalog.stable_id("os", item.operating_system),
                             "slug": item.operating_system, "name": f"{distro} {version}",
                             "distro": distro.lower(), "version": version,
                             "href": f"{API}/operating-systems/"
                                     f"{catalog.stable_id('os', item.operating_system)}"},
        "project": project(owner, include), "project_lite": href("projects", owner.id),
        "ip_addresses": [assignment(a, item, nested(include, "ip_addresses"))
                         for a in item.addresses],
        "provisioning_percentage": 100.0 if state not in ("queued", "provisioning") else 50.0,
        "ssh_keys": [], "volumes": [], "network_ports": [], "actions": [
            {"type": kind, "name": kind.replace("_", " ").title()}
            for kind in ("power_on", "power_off", "reboot")
        ],
    }  # fmt: skip
    for name in exclude:
        value = body.get(name)
        if isinstance(value, dict):
            body[name] = {"href": value.get("href", "")}
        elif name in body and name not in ("id", "href"):
            # Lists are left out whole: the document's items (ip_addresses' assigned_to, ...)
            # require more than an href.
            del body[name]
    return body


def bgp_config(item: BgpConfig | None, owner: Project, sessions: list[dict[str, Any]]) -> Any:
    if item is None:
        return {}  # the document: "When BGP configuration is not enabled empty structure"
    body: dict[str, Any] = {
        "id": item.id, "asn": item.asn, "deployment_type": item.deployment_type,
        "md5": item.md5, "status": "enabled", "max_prefix": 10, "route_object": "",
        "ranges": [], "sessions": sessions, "created_at": iso_time(item.created),
        "requested_at": iso_time(item.created), "project": href("projects", owner.id),
        "href": f"{API}/bgp-configs/{item.id}",
    }  # fmt: skip
    return body


def bgp_session(item: BgpSession, device_state: str) -> dict[str, Any]:
    return {
        "id": item.id, "address_family": item.family, "default_route": item.default_route,
        "device": href("devices", item.device_id), "href": f"{API}/bgp/sessions/{item.id}",
        "learned_routes": [], "status": "up" if device_state == "active" else "down",
        "created_at": iso_time(item.created), "updated_at": iso_time(item.created),
    }  # fmt: skip


def bgp_neighbor(session: BgpSession, dev: Device, config: BgpConfig) -> dict[str, Any]:
    """What the device must peer with for ``session`` (Metal's routers, the project's ASN)."""
    family = 6 if session.family == "ipv6" else 4
    own = next(a for a in dev.addresses if a.family == family and (family == 6 or not a.public))
    routes_out = ([{"route": "::/0" if family == 6 else "0.0.0.0/0", "exact": True}]
                  if session.default_route else [])  # fmt: skip
    neighbor: dict[str, Any] = {
        "address_family": family, "customer_as": config.asn, "customer_ip": own.address,
        "md5_enabled": config.md5 is not None, "multihop": True,
        "peer_as": catalog.PEER_ASN, "peer_ips": list(catalog.PEER_IPS[family]),
        "routes_in": [{"route": str(own.network), "exact": False}], "routes_out": routes_out,
    }  # fmt: skip
    if config.md5 is not None:
        neighbor["md5_password"] = config.md5
    return neighbor


def metadata(dev: Device, now: float) -> dict[str, Any]:
    """The device's metadata, as ``GET /devices/{id}/metadata`` and the metadata service
    (``/metadata``) show it."""
    distro, version = catalog.OPERATING_SYSTEMS[dev.operating_system]
    mac = "0c:c4:7a:" + ":".join(dev.id.replace("-", "")[i : i + 2] for i in (0, 2, 4))
    return {
        "id": dev.id, "hostname": dev.hostname, "iqn": iqn(dev),
        "operating_system": {"slug": dev.operating_system, "distro": distro.lower(),
                             "version": version},
        "plan": dev.plan, "class": dev.plan, "facility": dev.facility, "metro": dev.metro,
        "private_subnets": ["10.0.0.0/8"], "reserved": False, "specs": {}, "ssh_keys": [],
        "state": dev.state(now), "switch_short_id": dev.id[:8], "tags": list(dev.tags),
        "customdata": dict(dev.customdata), "volumes": [],
        "network": {
            "addresses": [f"{a.address}/{a.network.prefixlen}" for a in dev.addresses],
            "interfaces": [{"name": "eth0", "mac": mac, "bond": "bond0"}],
            "network": {"bonding": {"mode": 4, "link_aggregation": "bonded", "mac": mac}},
        },
    }  # fmt: skip
