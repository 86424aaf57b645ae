"""``polyccm orphans`` for Equinix Metal: Elastic IPs reserved for services that are gone.

An Elastic IP belongs to this cluster when it carries both ``usage=cloud-provider-equinix-metal-
auto`` and ``cluster=<id>`` (the ``kube-system`` UID, or ``METAL_CLUSTER_ID``) and
names a service by a ``service=`` tag, as upstream's CCM and polyccm tag them. It is accounted
for while a Service of the cluster whose tag it carries still claims a load balancer (wants
one, or holds the cleanup finalizer); otherwise it is an orphan: its address is reserved (and
billed) with nothing announcing it. A reservation without these tags (an operator's address,
another cluster's) is never listed, nor ever deleted: deletion reads the reservation again and
refuses one whose tags changed. Metal has nothing else a service or node leaves behind
(BGP sessions go with their device).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from polyccm.errors import CloudError
from polyccm.objects import Node, Service
from polyccm.ops.contract import CloudResource, Orphans, claims_load_balancer

from polyccm_packet.api import NotFound
from polyccm_packet.load_balancer import MetalLoadBalancer, Reservation, service_tag

KIND = "elastic-ip"
SERVICE_TAG_PREFIX = "service="


class MetalOrphans(Orphans):
    """The project's Elastic IPs tagged for this cluster that no Service accounts for."""

    def __init__(self, balancer: MetalLoadBalancer) -> None:
        self.balancer = balancer

    def _service_tags(self, reservation: Reservation) -> list[str]:
        """The reservation's ``service=`` tags when it carries this cluster's marks, else none."""
        tags = set(reservation.get("tags") or ())
        if not self.balancer.cluster_marks() <= tags:
            return []
        return sorted(t for t in tags if t.startswith(SERVICE_TAG_PREFIX))

    def _mark(self) -> str:
        return "tags " + ", ".join(sorted(self.balancer.cluster_marks()))

    def find_orphans(
        self, cluster_name: str, services: Sequence[Service], nodes: Sequence[Node]
    ) -> list[CloudResource]:
        by_tag = {service_tag(s): s for s in services}
        found: list[CloudResource] = []
        for reservation in self.balancer.reservations():
            tags = self._service_tags(reservation)
            if not tags:
                continue
            owners = [by_tag[t] for t in tags if t in by_tag]
            if any(claims_load_balancer(s) for s in owners):
                continue
            if owners:
                reason = f"service {owners[0].key} no longer wants a load balancer"
            else:
                reason = f"no Service of the cluster has its tag {tags[0]}"
                reserved_for = str(reservation.get("details") or "")
                if reserved_for.count("/") == 1:  # polyccm wrote namespace/name there once
                    reason += f" (reserved for {reserved_for})"
            address = f"{reservation.get('address')}/{reservation.get('cidr')}"
            metro = (reservation.get("metro") or {}).get("code", "")
            found.append(
                CloudResource(
                    kind=KIND,
                    id=str(reservation["id"]),
                    mark=self._mark(),
                    reason=reason,
                    name=address,
                    details={"address": address, "metro": str(metro), "service-tag": tags[0]},
                )
            )
        return found

    def delete_orphan(self, cluster_name: str, resource: CloudResource) -> None:
        api = self.balancer.api
        try:
            current = api.call("ips.find_ip_address_by_id", resource.id)
        except NotFound:
            return  # released meanwhile: what was wanted
        if resource.details.get("service-tag") not in self._service_tags(current or {}):
            raise CloudError(
                f"Elastic IP {resource.name or resource.id} no longer carries this cluster's "
                f"tags ({self._mark()}, {resource.details.get('service-tag')}): kept"
            )
        with contextlib.suppress(NotFound):
            api.call("ips.delete_ip_address", resource.id)
        self.balancer.released(resource.id)
