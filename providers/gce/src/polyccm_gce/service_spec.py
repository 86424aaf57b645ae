"""What a Service asks of the legacy network load balancer, and what it may not ask: the one
validation ``ensure_load_balancer`` runs before any cloud call, shared with ``polyccm
check-service`` (no SDK import here, so the offline check stays light).

:data:`KNOWN_ANNOTATIONS` is every annotation this validation reads; the check-service test walks
it, so a new one cannot be added without a case.
"""

from __future__ import annotations

from collections.abc import Sequence

from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service

INTERNAL_ANNOTATIONS = (
    "networking.gke.io/load-balancer-type",
    "cloud.google.com/load-balancer-type",
)
"""Upstream's annotations asking for the internal load balancer (value ``Internal``)."""
KNOWN_ANNOTATIONS = frozenset(INTERNAL_ANNOTATIONS)


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
    :class:`InvalidServiceSpec` for what the network load balancer cannot do."""
    for key in INTERNAL_ANNOTATIONS:
        if service.annotations.get(key, "").lower() == "internal":
            raise InvalidServiceSpec(
                f"{key}: Internal is not supported yet by polyccm's GCE provider (only the "
                "external network load balancer is); remove the annotation or use "
                "cloud-provider-gcp for internal load balancers"
            )
    if not service.ports:
        raise InvalidServiceSpec("the service has no ports")
    protocols = {port.protocol.upper() or "TCP" for port in service.ports}
    if len(protocols) > 1 or not protocols <= {"TCP", "UDP"}:
        raise InvalidServiceSpec(
            f"ports use {', '.join(sorted(protocols))}: a GCE network load balancer serves one "
            "protocol, TCP or UDP"
        )
    return protocols.pop(), sorted({str(port.port) for port in service.ports}, key=port_key)
