"""``polyccm plan`` for Equinix Metal: ensure itself, run with its writes recorded, not sent.

:class:`RecordingMetalClient` is a :class:`~polyccm_packet.api.MetalClient` over the same
``metalv1`` client whose reads (``find_*``, ``get_*``) go to Metal and whose every other call is
written down instead. :class:`MetalLoadBalancerPlanner` runs the provider's own
:meth:`~polyccm_packet.load_balancer.ElasticIpLoadBalancer.ensure_load_balancer` on it, so the
spec, the placement, the lookup by upstream's tags and the warnings are the controller's:

* ``create``: ensure reached ``requestIPReservation`` (no reservation carries the service's
  tags); the run stops there, since the new address cannot be read back;
* ``adopt``: a reservation with the three tags exists (made by upstream's CCM or by polyccm),
  or ``spec.loadBalancerIP`` names one of the project's, and ensure would send nothing;
* ``update``: ensure would send a write to an existing one (it sends none today: a reservation
  is never changed, one in another metro is kept with a warning);
* ``fail``: ensure would raise :class:`~polyccm.errors.InvalidServiceSpec`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from polyccm.cloudcalls import looks_like_read
from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Node, Service
from polyccm.ops.contract import (
    ADOPT,
    CREATE,
    FAIL,
    TAGS,
    UPDATE,
    Difference,
    LoadBalancerPlan,
    LoadBalancerPlanner,
    Problem,
)

from polyccm_packet.api import MetalClient
from polyccm_packet.load_balancer import ElasticIpLoadBalancer

RESERVE = "ips.request_ip_reservation"
ELASTIC_IP = "elastic-ip"
"""The aspect of a reservation's own differences (where, how big)."""


class PlannedCreate(Exception):
    """Ensure reached ``requestIPReservation``: the plan is ``create``."""


@dataclass(frozen=True)
class RecordedCall:
    """A write ensure would have sent: the client's operation and its arguments."""

    operation: str
    args: tuple[Any, ...]


class RecordingMetalClient(MetalClient):
    """``api``'s ``metalv1`` client and limiter, with every call that is not a read recorded
    in :attr:`calls` and never sent."""

    def __init__(self, api: MetalClient) -> None:
        super().__init__(api.config, client=api.client, limiter=api.limiter)
        self.calls: list[RecordedCall] = []

    def call(self, operation: str, *args: Any, **params: Any) -> Any:
        if looks_like_read(operation):
            return super().call(operation, *args, **params)
        self.calls.append(RecordedCall(operation, args))
        if operation == RESERVE:
            raise PlannedCreate(operation)
        return None


class MetalLoadBalancerPlanner(LoadBalancerPlanner):
    """Plans with a second :class:`ElasticIpLoadBalancer` over a :class:`RecordingMetalClient`
    (the same code and client; only the writes are held back)."""

    def __init__(self, api: MetalClient) -> None:
        self._recorder = RecordingMetalClient(api)
        self._balancer = ElasticIpLoadBalancer(self._recorder)

    def plan_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerPlan:
        name = self._balancer.get_load_balancer_name(cluster_name, service)
        self._recorder.calls.clear()
        try:
            warnings = Problem.warnings(self._balancer.spec_for(service).warnings)
        except InvalidServiceSpec as error:
            return LoadBalancerPlan(FAIL, name, problems=(Problem.error(error),))
        try:
            status = self._balancer.ensure_load_balancer(cluster_name, service, nodes)
        except InvalidServiceSpec as error:  # no place to reserve in, an address not held...
            return LoadBalancerPlan(FAIL, name, problems=(*warnings, Problem.error(error)))
        except PlannedCreate:
            parts = tuple(differences(self._recorder.calls))
            return LoadBalancerPlan(CREATE, name, parts, warnings)
        changes = tuple(differences(self._recorder.calls))
        return LoadBalancerPlan(
            UPDATE if changes else ADOPT, name, changes, Problem.warnings(status.warnings)
        )


def differences(calls: Sequence[RecordedCall]) -> list[Difference]:
    """What each recorded write would do, in the order ensure would send them."""
    found: list[Difference] = []
    for call in calls:
        if call.operation == RESERVE and call.args:
            request = _as_dict(call.args[-1])
            where = " ".join(f"{k} {request[k]}" for k in ("metro", "facility") if request.get(k))
            found.append(Difference(ELASTIC_IP, f"reserve a public IPv4 /32 in {where}"))
            found.append(Difference(TAGS, ", ".join(request.get("tags") or ())))
        else:
            found.append(Difference("metal", f"{call.operation} {', '.join(map(str, call.args))}"))
    return found


def _as_dict(request: Any) -> dict[str, Any]:
    """The body of a ``metalv1`` request model (a oneOf wrapper or the input itself)."""
    body = getattr(request, "actual_instance", None) or request
    answer: dict[str, Any] = body.to_dict() if hasattr(body, "to_dict") else dict(body)
    return answer
