"""``polyccm plan`` for Equinix Metal: ensure itself, run with its writes recorded, not sent.

:class:`RecordingApi` is a :class:`~polyccm_packet.api.MetalClient` over the same
``metalv1`` client whose reads (``find_*``, ``get_*``) go to Metal and whose every other call is
written down instead (:mod:`polyccm.ops.recording`). :class:`MetalLoadBalancerPlanner` runs the
provider's own
:meth:`~polyccm_packet.load_balancer.MetalLoadBalancer.ensure_load_balancer` on it, so the
spec, the placement, the lookup by upstream's tags and the warnings are the controller's:

* ``create``: ensure reached ``requestIPReservation`` (no reservation carries the service's
  tags); the run stops there, since the new address cannot be read back;
* ``adopt``: the reservation with the service's three tags exists (made by upstream's CCM or by
  polyccm; ``spec.loadBalancerIP``, when set, names it) and ensure would send nothing;
* ``update``: ``spec.loadBalancerIP`` names an address without those tags (an operator's, one
  the project does not hold): ensure uses it as it is and never releases it, so it is no
  adoption of this cluster's; no write to Metal is sent either way;
* ``fail``: ensure would raise :class:`~polyccm.errors.InvalidServiceSpec`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from polyccm.objects import Node, Service
from polyccm.ops.contract import ADOPT, TAGS, UPDATE, Difference, LoadBalancerPlan
from polyccm.ops.recording import (
    RecordedCall,
    RecordingPlanner,
    WriteRecorder,
    describe_calls,
    unknown_write,
)

from polyccm_packet.api import MetalClient
from polyccm_packet.load_balancer import MetalLoadBalancer

RESERVE = "ips.request_ip_reservation"
ELASTIC_IP = "elastic-ip"
"""The aspect of a reservation's own differences (where, how big)."""


class RecordingApi(MetalClient):
    """``api``'s ``metalv1`` client and limiter, with every call that is not a read handed to
    ``recorder`` and never sent."""

    def __init__(self, api: MetalClient, recorder: WriteRecorder) -> None:
        super().__init__(api.config, client=api.client, limiter=api.limiter)
        self.recorder = recorder

    def call(self, operation: str, *args: Any, **params: Any) -> Any:
        if self.recorder.is_read(operation):
            return super().call(operation, *args, **params)
        self.recorder.record(operation, params, args=args)  # a reservation stops here
        return None


class MetalLoadBalancerPlanner(RecordingPlanner):
    """Plans with a second :class:`MetalLoadBalancer` over a :class:`RecordingApi`
    (the same code and client; only the writes are held back)."""

    def __init__(self, api: MetalClient, cluster_id: Callable[[], str]) -> None:
        recorder = WriteRecorder(creates={RESERVE})
        # ttl 0: every plan reads the project's Elastic IPs as they are now
        self._balancer = MetalLoadBalancer(
            RecordingApi(api, recorder), cluster_id=cluster_id, ttl=0
        )
        super().__init__(self._balancer, recorder)

    def plan_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerPlan:
        """The recorded plan, where "adopt" is kept for the reservation carrying this cluster's
        tags for ``service``; an address named without them is used, not adopted."""
        plan = super().plan_load_balancer(cluster_name, service, nodes)
        address = service.load_balancer_ip
        if plan.action != ADOPT or not address:
            return plan
        own = self._balancer.own(service)
        if own is not None and own.get("address") == address:
            return plan
        use = Difference(
            ELASTIC_IP,
            f"use {address} as it is (spec.loadBalancerIP): it carries no tags of this "
            "cluster's for the service, so it is never released",
        )
        return replace(plan, action=UPDATE, differences=(use,))

    def spec_warnings(self, service: Service) -> Sequence[str]:
        return self._balancer.spec_for(service).warnings

    def describe(self, calls: Sequence[RecordedCall]) -> list[Difference]:
        return describe_calls(calls, {RESERVE: _reservation})


def _reservation(call: RecordedCall) -> list[Difference]:
    """Where a reservation would be made, and its tags."""
    if not call.args:
        return unknown_write(call)
    request = _as_dict(call.args[-1])
    where = " ".join(f"{k} {request[k]}" for k in ("metro", "facility") if request.get(k))
    return [
        Difference(ELASTIC_IP, f"reserve a public IPv4 /32 in {where}"),
        Difference(TAGS, ", ".join(request.get("tags") or ())),
    ]


def _as_dict(request: Any) -> dict[str, Any]:
    """The body of a ``metalv1`` request model (a oneOf wrapper or the input itself)."""
    body = getattr(request, "actual_instance", None) or request
    answer: dict[str, Any] = body.to_dict() if hasattr(body, "to_dict") else dict(body)
    return answer
