"""The model of one emulated Metal account: a project, its devices, IP reservations and BGP.

No HTTP here: the handlers in :mod:`.routes` ask, this module answers or raises the API's
errors. State changes that take time (a device provisioning, a power action) are computed from
the clock when read, so there is no background thread and a
:class:`~polyccm_packet_emulator.timers.ManualClock` moves time in tests.
"""

from __future__ import annotations

import ipaddress
import itertools
import uuid
from dataclasses import dataclass, field

from polyccm_packet_emulator import catalog
from polyccm_packet_emulator.errors import NotFound, Unprocessable
from polyccm_packet_emulator.settings import EmulatorSettings
from polyccm_packet_emulator.timers import Clock

#: Where addresses come from: documentation and benchmarking ranges, never routable.
PUBLIC_V4 = ipaddress.ip_network("198.18.0.0/16")
ELASTIC_V4 = ipaddress.IPv4Network("198.19.0.0/16")
PRIVATE_V4 = ipaddress.ip_network("10.64.0.0/16")
PUBLIC_V6 = ipaddress.ip_network("2001:db8:1000::/40")
POWER_ACTIONS = ("power_on", "power_off", "reboot")


def new_id() -> str:
    return str(uuid.uuid4())


@dataclass
class Assignment:
    """One address block of a device (``ip_addresses`` of a device)."""

    id: str
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    public: bool
    created: float

    @property
    def family(self) -> int:
        return self.network.version

    @property
    def address(self) -> str:
        # Metal numbers a device's /31 (/127) as network = gateway and the device the address
        # after it (the document's BgpNeighborData: customer_ip 10.32.16.1 in 10.32.16.0/31);
        # Python's hosts() of a /31 would start at the network itself.
        if self.network.num_addresses == 1:
            return str(self.network.network_address)
        return str(self.network.network_address + 1)

    @property
    def gateway(self) -> str:
        return str(self.network.network_address)


@dataclass
class Device:
    id: str
    hostname: str
    plan: str
    operating_system: str
    metro: str
    facility: str
    tags: list[str]
    description: str
    customdata: dict[str, object]
    userdata: str
    created: float
    ready_at: float
    addresses: list[Assignment]
    power: str = "on"
    """``on`` or ``off``: where the last power action leads."""
    power_at: float = 0.0
    """When the last power action completes."""
    updated: float = 0.0

    def state(self, now: float) -> str:
        if now < self.ready_at:
            halfway = self.created + (self.ready_at - self.created) / 2
            return "queued" if now < halfway else "provisioning"
        if now < self.power_at:
            return "powering_on" if self.power == "on" else "powering_off"
        return "active" if self.power == "on" else "inactive"

    def private_v4(self) -> Assignment:
        return next(a for a in self.addresses if a.family == 4 and not a.public)


@dataclass
class IpReservation:
    id: str
    kind: str
    """``public_ipv4`` (elastic), ``private_ipv4``, ``public_ipv6``, ``global_ipv4``."""
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    metro: str | None
    facility: str | None
    tags: list[str]
    details: str
    customdata: dict[str, object]
    created: float
    assignments: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Where an Elastic IP is assigned: assignment id to (device id, when)."""


@dataclass
class BgpConfig:
    id: str
    asn: int
    deployment_type: str
    md5: str | None
    created: float


@dataclass
class BgpSession:
    id: str
    device_id: str
    family: str
    default_route: bool
    created: float


@dataclass
class Project:
    id: str
    name: str
    created: float
    devices: dict[str, Device] = field(default_factory=dict)
    ips: dict[str, IpReservation] = field(default_factory=dict)
    bgp: BgpConfig | None = None
    sessions: dict[str, BgpSession] = field(default_factory=dict)


class Backend:
    """One project (the one ``polyccm-dev`` hands out), as the Metal API sees it."""

    def __init__(self, settings: EmulatorSettings, clock: Clock, *, project_id: str) -> None:
        self.settings = settings
        self.clock = clock
        self.project_id = project_id
        self.reset()

    def reset(self) -> None:
        """Forget every device, reservation and BGP setting; the project stays (same id)."""
        self.project = Project(self.project_id, "polyccm", self.clock.now())
        self._sessions_of: dict[str, dict[str, BgpSession]] = {}
        """Each device's sessions by id (an index of ``project.sessions``)."""
        self._blocks = {
            "public4": _blocks(PUBLIC_V4, 31),
            "private4": _blocks(PRIVATE_V4, 31),
            "public6": _blocks(PUBLIC_V6, 127),
        }
        # .0 is a valid /32 but trips clients that avoid "buggy" addresses; start at .1.
        self._elastic = ipaddress.IPv4Address(ELASTIC_V4.network_address) + 1

    # -- lookups ------------------------------------------------------------------------------

    def find_project(self, project_id: str) -> Project:
        if project_id != self.project.id:
            raise NotFound()
        return self.project

    def device(self, device_id: str) -> Device:
        found = self.project.devices.get(device_id)
        if found is None:
            raise NotFound()
        return found

    def device_by_name_or_id(self, key: str) -> Device:
        for device in self.project.devices.values():
            if key in (device.id, device.hostname):
                return device
        raise NotFound()

    def reservation(self, ip_id: str) -> IpReservation:
        found = self.project.ips.get(ip_id)
        if found is None:
            raise NotFound()
        return found

    def session(self, session_id: str) -> BgpSession:
        found = self.project.sessions.get(session_id)
        if found is None:
            raise NotFound()
        return found

    # -- devices ------------------------------------------------------------------------------

    def create_device(self, project_id: str, spec: dict[str, object]) -> Device:
        self.find_project(project_id)
        metro = _metro_code(spec.get("metro"))
        facility_in = spec.get("facility")
        if metro not in catalog.METRO_BY_CODE:
            raise Unprocessable(f"Metro {metro!r} is not a valid metro code")
        if spec.get("plan") not in catalog.PLANS:
            raise Unprocessable(f"Plan {spec.get('plan')!r} is not a valid plan")
        if spec.get("operating_system") not in catalog.OPERATING_SYSTEMS:
            raise Unprocessable(f"Operating system {spec.get('operating_system')!r} is not valid")
        facilities = catalog.METRO_BY_CODE[metro].facilities
        facility = str(facility_in) if facility_in in facilities else facilities[0]
        now = self.clock.now()
        device_id = new_id()
        hostname = str(spec.get("hostname") or f"device-{device_id[:8]}")
        wanted = spec.get("ip_addresses")
        addresses = [self._assign("private4", False, now)]
        # A list without a public IPv4 entry makes a private-only device (the document's
        # IPAddress: "public" defaults to true); no list is the default, which has one.
        if not isinstance(wanted, list) or any(
            isinstance(item, dict)
            and item.get("address_family", 4) == 4
            and item.get("public", True) is not False
            for item in wanted
        ):
            addresses.insert(0, self._assign("public4", True, now))
        # The document's default asks for public IPv4, private IPv4 and public IPv6.
        if not isinstance(wanted, list) or any(
            isinstance(item, dict) and item.get("address_family") == 6 for item in wanted
        ):
            addresses.append(self._assign("public6", True, now))
        tags = spec.get("tags")
        customdata = spec.get("customdata")
        device = Device(
            id=device_id,
            hostname=hostname,
            plan=str(spec["plan"]),
            operating_system=str(spec["operating_system"]),
            metro=metro,
            facility=facility,
            tags=[str(t) for t in tags] if isinstance(tags, list) else [],
            description=str(spec.get("description", "")),
            customdata=dict(customdata) if isinstance(customdata, dict) else {},
            userdata=str(spec.get("userdata", "")),
            created=now,
            ready_at=now + self.settings.device_active_delay,
            addresses=addresses,
            updated=now,
        )
        self.project.devices[device_id] = device
        return device

    def _assign(self, pool: str, public: bool, now: float) -> Assignment:
        return Assignment(new_id(), next(self._blocks[pool]), public, now)

    def delete_device(self, device_id: str) -> None:
        self.device(device_id)
        del self.project.devices[device_id]
        for session_id in self._sessions_of.pop(device_id, {}):
            del self.project.sessions[session_id]

    def act(self, device_id: str, kind: str) -> None:
        """A power action: ``power_off``/``power_on``/``reboot`` as the API's ``performAction``."""
        device = self.device(device_id)
        now = self.clock.now()
        state = device.state(now)
        if kind not in POWER_ACTIONS:
            raise Unprocessable(f"Action {kind!r} is not supported by this emulator")
        if state in ("queued", "provisioning", "powering_on", "powering_off"):
            raise Unprocessable(f"Device is {state}; try again when the action completes")
        if kind == "power_off" and state == "inactive":
            raise Unprocessable("Device is already powered off")
        if kind == "power_on" and state == "active":
            raise Unprocessable("Device is already powered on")
        if kind == "reboot" and state == "inactive":
            raise Unprocessable("Device is powered off; power it on instead")
        device.power = "off" if kind == "power_off" else "on"
        device.power_at = now + self.settings.action_delay
        device.updated = now

    # -- IP reservations ----------------------------------------------------------------------

    def request_ips(self, project_id: str, spec: dict[str, object]) -> IpReservation:
        self.find_project(project_id)
        kind = str(spec.get("type"))
        quantity = spec.get("quantity")
        if kind not in ("public_ipv4", "global_ipv4"):
            raise Unprocessable(f"Type {kind!r} cannot be requested from this emulator")
        if not isinstance(quantity, int) or quantity < 1 or quantity & (quantity - 1):
            raise Unprocessable("Quantity must be a power of 2")
        metro = spec.get("metro")
        facility = spec.get("facility")
        if kind == "public_ipv4":
            if metro is None and facility is None:
                raise Unprocessable("A metro or facility is required for public_ipv4")
            if metro is not None and metro not in catalog.METRO_BY_CODE:
                raise Unprocessable(f"Metro {metro!r} is not a valid metro code")
            if facility is not None:
                if facility not in catalog.METRO_OF_FACILITY:
                    raise Unprocessable(f"Facility {facility!r} is not a valid facility code")
                metro = metro or catalog.METRO_OF_FACILITY[str(facility)].code
        prefix = 32 - (quantity.bit_length() - 1)
        network = self._elastic_block(prefix)
        tags = spec.get("tags")
        customdata = spec.get("customdata")
        reservation = IpReservation(
            id=new_id(),
            kind=kind,
            network=network,
            metro=str(metro) if metro is not None and kind == "public_ipv4" else None,
            facility=str(facility) if facility is not None and kind == "public_ipv4" else None,
            tags=[str(t) for t in tags] if isinstance(tags, list) else [],
            details=str(spec.get("details", "")),
            customdata=dict(customdata) if isinstance(customdata, dict) else {},
            created=self.clock.now(),
        )
        self.project.ips[reservation.id] = reservation
        return reservation

    def _elastic_block(self, prefix: int) -> ipaddress.IPv4Network:
        size = 2 ** (32 - prefix)
        start = int(self._elastic)
        start = -(-start // size) * size  # aligned, as a CIDR block must be
        network = ipaddress.IPv4Network((start, prefix))
        if not network.subnet_of(ELASTIC_V4):
            raise Unprocessable("No addresses left in this metro")
        self._elastic = ipaddress.IPv4Address(start + size)
        return network

    def delete_ip(self, ip_id: str) -> None:
        self.reservation(ip_id)
        del self.project.ips[ip_id]

    def assign_ip(self, device_id: str, address: str) -> tuple[IpReservation, str]:
        """Assign the project's Elastic IP ``address`` (``a.b.c.d`` or ``a.b.c.d/32``) to the
        device (``createIPAssignment``); the reservation and the new assignment's id."""
        self.device(device_id)
        wanted = address.split("/", maxsplit=1)[0]
        for reservation in self.project.ips.values():
            if str(reservation.network.network_address) == wanted and (
                reservation.network.num_addresses == 1
            ):
                if any(d == device_id for d, _ in reservation.assignments.values()):
                    raise Unprocessable(f"Address {wanted} is already assigned to this device")
                assignment_id = new_id()
                reservation.assignments[assignment_id] = (device_id, self.clock.now())
                return reservation, assignment_id
        raise Unprocessable(f"Address {wanted} is not an Elastic IP of this project")

    def assignment_of(self, assignment_id: str) -> IpReservation | None:
        """The reservation an Elastic IP assignment belongs to, if ``assignment_id`` is one."""
        for reservation in self.project.ips.values():
            if assignment_id in reservation.assignments:
                return reservation
        return None

    def unassign_ip(self, assignment_id: str) -> None:
        reservation = self.assignment_of(assignment_id)
        if reservation is None:
            raise NotFound()
        del reservation.assignments[assignment_id]

    # -- BGP ----------------------------------------------------------------------------------

    def request_bgp(self, project_id: str, spec: dict[str, object]) -> None:
        project = self.find_project(project_id)
        if project.bgp is not None:
            raise Unprocessable("BGP has already been requested for this project")
        asn = spec.get("asn")
        md5 = spec.get("md5")
        project.bgp = BgpConfig(
            id=new_id(),
            asn=int(asn) if isinstance(asn, int) else 0,
            deployment_type=str(spec.get("deployment_type")),
            # An empty md5 (upstream's request when no password is set) is no password.
            md5=md5 if isinstance(md5, str) and md5 else None,
            created=self.clock.now(),
        )

    def create_session(self, device_id: str, spec: dict[str, object]) -> BgpSession:
        self.device(device_id)
        if self.project.bgp is None:
            raise Unprocessable("BGP is not enabled for this project")
        family = str(spec.get("address_family", "ipv4"))
        if any(s.family == family for s in self._sessions_of.get(device_id, {}).values()):
            # The real API's words (packethost/terraform-provider-packet#206), which upstream
            # matches to take the 422 as success (cloud-provider-equinix-metal metal/bgp.go:91).
            raise Unprocessable(f"Address family already has session with {family}")
        session = BgpSession(
            id=new_id(),
            device_id=device_id,
            family=family,
            default_route=bool(spec.get("default_route", False)),
            created=self.clock.now(),
        )
        self.project.sessions[session.id] = session
        self._sessions_of.setdefault(device_id, {})[session.id] = session
        return session

    def device_sessions(self, device_id: str) -> list[BgpSession]:
        self.device(device_id)
        return list(self._sessions_of.get(device_id, {}).values())

    def delete_session(self, session_id: str) -> None:
        session = self.session(session_id)
        del self.project.sessions[session_id]
        self._sessions_of.get(session.device_id, {}).pop(session_id, None)


def _metro_code(requested: object) -> str:
    """The metro a create lands in: a code, a metro id, the first known of a prioritised list,
    or ``any`` (the first metro)."""
    choices = requested if isinstance(requested, list) else [requested]
    for choice in choices:
        if choice == "any":
            return catalog.METROS[0].code
        for metro in catalog.METROS:
            if choice in (metro.code, metro.id):
                return metro.code
    return str(choices[0]) if choices else ""


def _blocks(
    network: ipaddress.IPv4Network | ipaddress.IPv6Network, prefix: int
) -> itertools.chain[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Consecutive blocks of ``prefix`` inside ``network``, handed out in order."""
    return itertools.chain(network.subnets(new_prefix=prefix))
