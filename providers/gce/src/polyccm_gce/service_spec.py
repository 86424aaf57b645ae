"""What a Service asks of the legacy network load balancer, and what it may not ask: the one
validation ``ensure_load_balancer`` runs before any cloud call, shared with ``polyccm
check-service`` (no SDK import here, so the offline check stays light).

:data:`KNOWN_ANNOTATIONS` is every annotation this validation refuses values of; the
check-service test walks it, so a new one cannot be added without a case.

A Service of GKE's regional-backend-service load balancer (``cloud.google.com/l4-rbs:
enabled``, or that controller's finalizers) is another controller's, as cloud-provider-gcp's
``shouldProcessNetLB`` decides: :func:`implemented_elsewhere` says why, and ensure, update and
delete raise :class:`~polyccm.errors.ImplementedElsewhere` for it, so no second load balancer
is built and nothing of the other controller's is deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

from polyccm.errors import ImplementedElsewhere, InvalidServiceSpec
from polyccm.objects import Service

from polyccm_gce.service_options import OPTION_ANNOTATIONS

INTERNAL_ANNOTATIONS = (
    "networking.gke.io/load-balancer-type",
    "cloud.google.com/load-balancer-type",
)
"""Upstream's annotations asking for the internal load balancer (value ``Internal``), built by
:mod:`polyccm_gce.internal_lb`; any other value means the external one, as upstream reads them."""
KNOWN_ANNOTATIONS: frozenset[str] = OPTION_ANNOTATIONS
RBS_ANNOTATION = "cloud.google.com/l4-rbs"
"""Upstream's opt-in to the regional-backend-service network load balancer (value ``enabled``),
built by GKE's L4 controller, not by a cloud controller manager."""
RBS_ENABLED = "enabled"
LEGACY_FINALIZER = "gke.networking.io/l4-netlb-v1"
"""The finalizer cloud-provider-gcp puts on the Services whose target-pool load balancer it
made: such a Service stays this controller's whatever else it carries."""
RBS_FINALIZERS = ("gke.networking.io/l4-netlb-v2", "gke.networking.io/l4-netlb-v3")
"""The finalizers of GKE's L4 controller on the Services it builds load balancers for."""


def implemented_elsewhere(service: Service, *, rule_backend_service: str = "") -> str | None:
    """Why another controller builds ``service``'s load balancer, or None when this one does:
    upstream's rule for a Service without ``loadBalancerClass``, with RBS not the default.
    ``rule_backend_service``: the backend service of an existing forwarding rule ``<lb>`` (an
    RBS rule; a target-pool rule has none)."""
    if LEGACY_FINALIZER in service.finalizers:
        return None
    if service.annotations.get(RBS_ANNOTATION) == RBS_ENABLED:
        return f"annotation {RBS_ANNOTATION}: {RBS_ENABLED}"
    held = [f for f in RBS_FINALIZERS if f in service.finalizers]
    if held:
        return f"finalizer {held[0]}"
    if rule_backend_service:
        return f"its forwarding rule sends to backend service {rule_backend_service}"
    return None


def check_ours(service: Service) -> None:
    """:class:`ImplementedElsewhere` when :func:`implemented_elsewhere` names a reason."""
    reason = implemented_elsewhere(service)
    if reason is not None:
        raise ImplementedElsewhere(
            f"service {service.key}: GKE's regional backend-service load balancer ({reason})"
        )


def port_key(port: str) -> tuple[int, str]:
    """Sort key of a port or ``low-high`` range: by its first number."""
    head = port.split("-", 1)[0]
    return (int(head) if head.isdigit() else 0, port)


def port_ranges(ports: Sequence[str]) -> list[str]:
    """Ports with consecutive numbers merged (``80, 81, 443`` is ``80-81, 443``), as upstream
    writes a firewall's ports."""
    spans: list[list[int]] = []
    for number in sorted({int(p) for p in ports}):
        if spans and spans[-1][1] == number - 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return [str(low) if low == high else f"{low}-{high}" for low, high in spans]


def validate_service(service: Service) -> tuple[str, list[str]]:
    """The one protocol (``TCP`` or ``UDP``) and the ports (sorted) of ``service``;
    :class:`InvalidServiceSpec` for what a GCE passthrough load balancer (network or internal)
    cannot do, :class:`ImplementedElsewhere` for an external load balancer another controller
    builds (checked in upstream's order: the scheme, the owner of an external one, then
    ports: GKE's regional backend-service controller takes external Services only)."""
    from polyccm_gce.internal_lb import is_internal  # it builds on this module

    if not is_internal(service):
        check_ours(service)
    if not service.ports:
        raise InvalidServiceSpec("the service has no ports")
    protocols = {port.protocol.upper() or "TCP" for port in service.ports}
    if len(protocols) > 1 or not protocols <= {"TCP", "UDP"}:
        raise InvalidServiceSpec(
            f"ports use {', '.join(sorted(protocols))}: a GCE network load balancer serves one "
            "protocol, TCP or UDP"
        )
    return protocols.pop(), sorted({str(port.port) for port in service.ports}, key=port_key)
