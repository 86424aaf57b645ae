"""Load balancing without a cloud load balancer: one /32 Elastic IP per service.

Metal has no load balancer to create. As upstream's CCM does, each ``type: LoadBalancer``
service gets a public IPv4 /32 reserved in the cluster's metro (or facility), tagged
``usage=cloud-provider-equinix-metal-auto``, ``service=<base64 sha256 of ns/name>`` and
``cluster=<id>``; that address goes into the service's status and the cluster announces it by
BGP (MetalLB or kube-vip, see :mod:`polyccm_packet.bgp`). The reservation is always looked up
by those tags before one is requested, so a restart or a new leader finds the address a former
term reserved instead of reserving a second. A ``spec.loadBalancerIP`` that names an address the
project already reserved is used as it is and never released: it belongs to the operator.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from polyccm.cloud import LoadBalancer, LoadBalancerIngress, LoadBalancerStatus
from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Node, Service

from polyccm_packet.api import MetalClient, NotFound

USAGE_TAG = "usage=cloud-provider-equinix-metal-auto"
#: Annotation naming the reservation backing the service (what an operator greps the API for).
RESERVATION_ANNOTATION = "metal.equinix.com/ip-reservation-id"

Reservation = Mapping[str, Any]


def service_tag(service: Service) -> str:
    """``service=<base64 of sha256("namespace/name")>``, as upstream tags reservations."""
    digest = hashlib.sha256(f"{service.namespace}/{service.name}".encode()).digest()
    return "service=" + base64.b64encode(digest).decode()


def cluster_tag(cluster_id: str) -> str:
    return f"cluster={cluster_id}"


class ElasticIpLoadBalancer(LoadBalancer):
    """Elastic IPs of one project, one per service."""

    def __init__(self, api: MetalClient) -> None:
        self.api = api

    @property
    def cluster_id(self) -> str:
        return self.api.config.cluster_id

    def tags_for(self, service: Service) -> list[str]:
        return [USAGE_TAG, service_tag(service), cluster_tag(self.cluster_id)]

    def reservations(self) -> list[Reservation]:
        """The project's public IPv4 reservations (Elastic IPs and device blocks)."""
        body = self.api.call(
            "ips.find_ip_reservations", self.api.config.project_id, types=["public_ipv4"],
            per_page=1000,
        ) or {}  # fmt: skip
        return list(body.get("ip_addresses") or ())

    def _own(self, service: Service) -> Reservation | None:
        """The reservation tagged for ``service`` in this cluster, if any."""
        wanted = set(self.tags_for(service))
        for reservation in self.reservations():
            if wanted <= set(reservation.get("tags") or ()):
                return reservation
        return None

    def _named(self, service: Service) -> Reservation:
        """The project's reservation holding ``spec.loadBalancerIP``."""
        address = service.load_balancer_ip
        for reservation in self.reservations():
            if reservation.get("address") == address and int(reservation.get("cidr", 0)) == 32:
                return reservation
        raise InvalidServiceSpec(
            f"spec.loadBalancerIP {address} is not an Elastic IP (/32) reserved in project "
            f"{self.api.config.project_id}"
        )

    @staticmethod
    def _status(reservation: Reservation) -> LoadBalancerStatus:
        return LoadBalancerStatus(
            ingress=(LoadBalancerIngress(ip=str(reservation["address"])),),
            service_annotations={RESERVATION_ANNOTATION: str(reservation["id"])},
        )

    def get_load_balancer(self, cluster_name: str, service: Service) -> LoadBalancerStatus | None:
        if service.load_balancer_ip:
            try:
                return self._status(self._named(service))
            except InvalidServiceSpec:
                return None
        found = self._own(service)
        return self._status(found) if found is not None else None

    def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        if service.load_balancer_ip:
            return self._status(self._named(service))
        found = self._own(service)
        if found is None:
            found = self._reserve(service)
        return self._status(found)

    def _reserve(self, service: Service) -> Reservation:
        from equinix.services import metalv1

        config = self.api.config
        placement = {"metro": config.metro} if config.metro else {"facility": config.facility}
        body = metalv1.IPReservationRequestInput(
            type="public_ipv4", quantity=1, tags=self.tags_for(service),
            details=f"{service.namespace}/{service.name}", **placement,
        )  # fmt: skip
        reserved: Reservation = self.api.call(
            "ips.request_ip_reservation",
            config.project_id,
            metalv1.RequestIPReservationRequest(body),
        )
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
