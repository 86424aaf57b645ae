"""Load balancing without a cloud load balancer: one /32 Elastic IP per service.

Metal has no load balancer to create. As upstream's CCM does, each ``type: LoadBalancer``
service gets a public IPv4 /32 reserved in the cluster's metro (or facility), tagged
``usage=cloud-provider-equinix-metal-auto``, ``service=<base64 sha256 of ns/name>`` and
``cluster=<UID of kube-system>`` (:mod:`polyccm_packet.identity`); that address goes into the
service's status and the cluster announces it by BGP (MetalLB or kube-vip, see
:mod:`polyccm_packet.bgp`). The reservation is always looked up by those tags before one is
requested, so a restart or a new leader finds the address a former term reserved instead of
reserving a second. The address is written back into ``spec.loadBalancerIP``, as upstream
writes it (kube-vip and upstream read it there); from then on the service names its own
reservation. A ``spec.loadBalancerIP`` that names another address (an operator's) is used as
it is and never released: only a reservation with the service's tags is. An address the
project does not hold is accepted too, with a warning (upstream tells the speakers about it).
The annotations choosing a place are then silently unused, as upstream leaves them (its
Services carry both).

Where a new address is reserved follows upstream's order: the service's annotation
``metal.equinix.com/eip-metro``, then ``metal.equinix.com/eip-facility``, then ``METAL_METRO``,
then ``METAL_FACILITY``. :func:`build_spec` reads the service before any call to Metal (it is
also what ``polyccm check-service`` runs); a reservation found outside the place asked for is
kept, with a warning, since a new one would change the service's address.

Services come in bursts (a deploy, a restart's initial sync), and each ensure or delete looks
its reservation up in the project's listing; one listing serves every lookup for
:data:`LISTING_TTL` seconds, with the reservations this process makes and releases applied to
it. Only this cluster's leader makes reservations with the cluster's tags, so a kept listing
that lacks a service's reservation is trusted (a new term reads again); a
``spec.loadBalancerIP`` the kept listing lacks (an operator's, made any time) is looked up in a
new listing.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polyccm.cloud import LoadBalancer, LoadBalancerIngress, LoadBalancerStatus
from polyccm.errors import InvalidServiceSpec
from polyccm.keptlisting import KeptListing
from polyccm.kube.api import MERGE_PATCH, SERVICES, ApiError, KubeApi
from polyccm.objects import Node, Service

from polyccm_packet import sdk
from polyccm_packet.api import MetalClient, NotFound
from polyccm_packet.identity import ClusterId

USAGE_TAG = "usage=cloud-provider-equinix-metal-auto"
#: The ``details`` of every reservation, upstream's words (constants.go ``ccmIPDescription``).
DETAILS = "Equinix Metal Kubernetes CCM auto-generated for Load Balancer"
EIP_METRO_ANNOTATION = "metal.equinix.com/eip-metro"
EIP_FACILITY_ANNOTATION = "metal.equinix.com/eip-facility"
#: Every service annotation this provider reads (upstream's names), and what it asks for.
ANNOTATIONS: Mapping[str, str] = {
    EIP_METRO_ANNOTATION: "the metro (code or id) a new Elastic IP is reserved in",
    EIP_FACILITY_ANNOTATION: "the facility a new Elastic IP is reserved in, when no metro is given",
}

Reservation = Mapping[str, Any]
#: Seconds a listing of the project's Elastic IPs answers ensures and deletes for.
LISTING_TTL = 30.0


@dataclass(frozen=True)
class Placement:
    """Where a service's new Elastic IP is reserved."""

    kind: str
    """``metro`` or ``facility`` (the reservation request's field)."""
    code: str
    """A code (``da``, ``da11``) or, for a metro, its id."""
    source: str
    """What asked for it: an annotation or a setting."""

    def __str__(self) -> str:
        return f"{self.kind} {self.code}"


@dataclass(frozen=True)
class ElasticIpSpec:
    """What ensure makes of a service before it calls Metal."""

    address: str
    """``spec.loadBalancerIP``: the address to use as it is (none: a reservation of our own)."""
    placement: Placement | None
    """Where a new reservation goes; ``None`` when nothing says (ensure refuses to reserve)."""
    warnings: tuple[str, ...] = ()


def build_spec(
    service: Service, metro: str, facility: str,
    annotations: tuple[str, str] = (EIP_METRO_ANNOTATION, EIP_FACILITY_ANNOTATION),
) -> ElasticIpSpec:  # fmt: skip
    """``service``'s Elastic IP as its spec and annotations ask for it, given the configured
    ``metro`` and ``facility`` and the names of the metro and facility annotations (upstream's,
    or ``METAL_ANNOTATION_EIP_METRO``/``_FACILITY``). Raises :class:`InvalidServiceSpec` for a
    ``spec.loadBalancerIP`` that is no IPv4 address (Elastic IPs here are IPv4 /32s). A
    facility beside a metro is a warning; either beside ``spec.loadBalancerIP`` is not:
    upstream writes the address back beside them on every Service it serves
    (metal/loadbalancers.go:485-500 at 38d15e2)."""
    metro_name, facility_name = annotations
    address = service.load_balancer_ip
    if address:
        try:
            parsed: object = ipaddress.ip_address(address)
        except ValueError:
            parsed = None
        if not isinstance(parsed, ipaddress.IPv4Address):
            raise InvalidServiceSpec(
                f"spec.loadBalancerIP {address!r} is not an IPv4 address (an Elastic IP here is a "
                "public IPv4 /32)"
            )
        return ElasticIpSpec(address, None)
    metro_asked = str(service.annotations.get(metro_name) or "").strip()
    facility_asked = str(service.annotations.get(facility_name) or "").strip()
    warnings: tuple[str, ...] = ()
    if metro_asked and facility_asked:
        warnings = (
            f"annotation {facility_name} is ignored: {metro_name} is set "
            "(a metro is chosen before a facility)",
        )
    choices = (
        ("metro", metro_asked, f"annotation {metro_name}"),
        ("facility", facility_asked, f"annotation {facility_name}"),
        ("metro", metro, "METAL_METRO"),
        ("facility", facility, "METAL_FACILITY"),
    )
    placement = next((Placement(k, code, src) for k, code, src in choices if code), None)
    return ElasticIpSpec("", placement, warnings)


def no_placement(
    annotations: tuple[str, str] = (EIP_METRO_ANNOTATION, EIP_FACILITY_ANNOTATION),
) -> InvalidServiceSpec:
    """What ensure raises when it must reserve an address and nothing says where."""
    return InvalidServiceSpec(
        f"no metro or facility to reserve an Elastic IP in: annotate the service with "
        f"{annotations[0]} (or {annotations[1]}), or configure METAL_METRO "
        "(or METAL_FACILITY)"
    )


def placement_warnings(reservation: Reservation, spec: ElasticIpSpec) -> tuple[str, ...]:
    """A warning when ``reservation`` (found by its tags) is not where ``spec`` asks for a new
    one: it is kept, since another address would change the service's IP."""
    placement = spec.placement
    where = (reservation.get(placement.kind) if placement is not None else None) or {}
    if placement is None or not where:
        return ()  # nothing asked, or a reservation placed by metro holds no facility
    if placement.code.lower() in (str(where.get("code", "")).lower(), str(where.get("id", ""))):
        return ()
    return (
        f"Elastic IP {reservation.get('address')} is in {placement.kind} {where.get('code')}, "
        f"not in {placement} ({placement.source}); it is kept, as a new address would change "
        "the service's IP",
    )


def service_tag(service: Service) -> str:
    """``service=<base64 of sha256("namespace/name")>``, as upstream tags reservations."""
    digest = hashlib.sha256(f"{service.namespace}/{service.name}".encode()).digest()
    return "service=" + base64.b64encode(digest).decode()


def cluster_tag(cluster_id: str) -> str:
    return f"cluster={cluster_id}"


class MetalLoadBalancer(LoadBalancer):
    """Elastic IPs of one project, one per service."""

    def __init__(
        self, api: MetalClient, *, cluster_id: Callable[[], str] | None = None,
        ttl: float = LISTING_TTL,
    ) -> None:  # fmt: skip
        self.api = api
        self.ttl = ttl
        self._cluster_id = cluster_id or ClusterId(api.config.cluster_id)
        self.kube: KubeApi | None = None
        """The term's Kubernetes API (set by the provider's ``initialize``), for the write-back
        of ``spec.loadBalancerIP``."""
        self._kept: KeptListing[Reservation] = KeptListing(self._list_reservations)
        """The project's reservations by id, with this process's changes since."""

    @property
    def cluster_id(self) -> str:
        """``cluster=`` tag's id: the ``kube-system`` UID (:mod:`polyccm_packet.identity`)."""
        return self._cluster_id()

    def tags_for(self, service: Service) -> list[str]:
        return [USAGE_TAG, service_tag(service), cluster_tag(self.cluster_id)]

    def cluster_marks(self) -> frozenset[str]:
        """The tags every reservation of this cluster's services carries (beside its
        ``service=`` tag)."""
        return frozenset({USAGE_TAG, cluster_tag(self.cluster_id)})

    def spec_for(self, service: Service) -> ElasticIpSpec:
        config = self.api.config
        return build_spec(service, config.metro, config.facility, config.eip_annotations)

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        """Upstream's name: the three tags, joined by colons."""
        return ":".join(self.tags_for(service))

    def _list_reservations(self) -> list[tuple[str, Reservation]]:
        body = self.api.call(
            "ips.find_ip_reservations", self.api.config.project_id, types=["public_ipv4"],
            per_page=1000,
        ) or {}  # fmt: skip
        return [(str(r.get("id")), r) for r in body.get("ip_addresses") or ()]

    def reservations(self) -> list[Reservation]:
        """The project's public IPv4 reservations (Elastic IPs and device blocks), listed now;
        the listing is kept for the next lookups."""
        return list(self._kept.current(0).values())

    def forget(self) -> None:
        """Drop the kept listing (a new term reads the project again)."""
        self._kept.forget()

    def _current(self) -> list[Reservation]:
        """The kept listing while it is at most :attr:`ttl` seconds old, else a new one."""
        return list(self._kept.current(self.ttl).values())

    def _keep(self, reservation: Reservation) -> None:
        self._kept.put(str(reservation.get("id")), reservation)

    def released(self, reservation_id: str) -> None:
        """Forget a reservation released (by ensure-deleted or by ``polyccm orphans``)."""
        self._kept.drop(reservation_id)

    def _own(self, service: Service) -> Reservation | None:
        """The reservation tagged for ``service`` in this cluster, if any."""
        wanted = set(self.tags_for(service))
        for reservation in self._current():
            if wanted <= set(reservation.get("tags") or ()):
                return reservation
        return None

    def _named(self, address: str) -> Reservation | None:
        """The project's reservation holding ``address`` (``spec.loadBalancerIP``), if any."""
        for listing in (self._current, self.reservations):
            for reservation in listing():
                if reservation.get("address") == address and int(reservation.get("cidr", 0)) == 32:
                    return reservation
        return None

    def foreign(self, address: str) -> str:
        """The warning for a ``spec.loadBalancerIP`` the project holds no /32 of."""
        return (
            f"spec.loadBalancerIP {address} is not an Elastic IP (/32) of project "
            f"{self.api.config.project_id}: it is announced as it is, and never released"
        )

    def own(self, service: Service) -> Reservation | None:
        """The reservation with ``service``'s tags in this cluster, if any (ensure makes or
        adopts it; only it is ever released)."""
        return self._own(service)

    @staticmethod
    def _status(reservation: Reservation, warnings: tuple[str, ...] = ()) -> LoadBalancerStatus:
        return LoadBalancerStatus(
            ingress=(LoadBalancerIngress(ip=str(reservation["address"])),), warnings=warnings
        )

    def get_load_balancer(self, cluster_name: str, service: Service) -> LoadBalancerStatus | None:
        if service.load_balancer_ip:
            found = self._named(service.load_balancer_ip)
            return self._status(found or {"address": service.load_balancer_ip})
        found = self._own(service)
        return self._status(found) if found is not None else None

    def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        spec = self.spec_for(service)
        if spec.address:
            # Used as it is, as upstream uses it (metal/loadbalancers.go:422): an address the
            # project holds no /32 of is accepted too, with a warning, and never released.
            named = self._named(spec.address)
            if named is None:
                return self._status({"address": spec.address}, (self.foreign(spec.address),))
            return self._status(named, spec.warnings)
        found = self._own(service)
        warnings = spec.warnings
        if found is None:
            found = self._reserve(service, spec)
        else:
            warnings += placement_warnings(found, spec)
        if found:  # (a plan records the request and gets nothing back)
            self._write_back(service, str(found["address"]))
        return self._status(found, warnings)

    def _write_back(self, service: Service, address: str) -> None:
        """``spec.loadBalancerIP`` set to the service's Elastic IP, as upstream sets it
        (metal/loadbalancers.go:485-500 at 38d15e2): kube-vip announces what it names, and
        upstream's CCM, switched back to, finds the address there. Only a term's provider has
        :attr:`kube` (a plan writes nothing); a service deleted meanwhile needs nothing."""
        if self.kube is None or service.load_balancer_ip == address:
            return
        try:
            self.kube.patch(
                SERVICES, service.name, {"spec": {"loadBalancerIP": address}},
                service.namespace, patch_type=MERGE_PATCH,
            )  # fmt: skip
        except ApiError as error:
            if not error.not_found:
                raise

    def _reserve(self, service: Service, spec: ElasticIpSpec) -> Reservation:
        metalv1 = sdk.metalv1()

        if spec.placement is None:
            raise no_placement(self.api.config.eip_annotations)
        config = self.api.config
        # As upstream asks: its details, and no reservation left waiting for an approval
        body = metalv1.IPReservationRequestInput(
            type="public_ipv4", quantity=1, tags=self.tags_for(service), details=DETAILS,
            fail_on_approval_required=True, **{spec.placement.kind: spec.placement.code},
        )  # fmt: skip
        reserved: Reservation = self.api.call(
            "ips.request_ip_reservation",
            config.project_id,
            metalv1.RequestIPReservationRequest(body),
        )
        if reserved:  # (a plan records the request and gets nothing back)
            self._keep(reserved)
        return reserved

    def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        """Nothing to point: every node announces the address by BGP (or kube-vip does)."""

    def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        found = self._own(service)
        if found is None:
            return
        with contextlib.suppress(NotFound):  # released meanwhile: what was wanted
            self.api.call("ips.delete_ip_address", str(found["id"]))
        self.released(str(found["id"]))
