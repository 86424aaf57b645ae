"""``polyccm orphans``: cloud resources with this cluster's marks that nothing accounts for.

Finding is the provider's (:meth:`~polyccm.ops.contract.Orphans.find_orphans`, read-only);
this module orders what it found and, with ``--delete``, deletes it in dependency order (what
uses another resource first), one resource at a time, reporting each. A resource that is
"still in use" (:class:`~polyccm.errors.RetryAfter`: a security group whose load balancer's
interfaces are being released) is tried again after the delay it names, for up to
:data:`PATIENCE` seconds; any other failure keeps the resource and goes on with the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from polyccm.errors import CloudError, LeadershipLost, RetryAfter
from polyccm.objects import Node, Service
from polyccm.ops.contract import CloudResource, Orphans

PATIENCE = 120.0
"""Seconds a resource "still in use" is retried before it counts as failed."""


def unclaimed_reason(
    name: str, made_for: str, services: Iterable[Service], name_of: Callable[[Service], str]
) -> str:
    """Why no Service accounts for load balancer ``name``, made for Service ``made_for``
    (``namespace/name``, as its marks say): that Service no longer exists, was created again
    (``name_of``, the provider's name for a Service's load balancer, gives another name: it
    comes from the UID), or no longer wants a load balancer. ``services``: every Service of
    the cluster. For a provider's ``CloudResource.reason``."""
    if not made_for:
        return "made for no known service"
    current = next((s for s in services if s.key == made_for), None)
    if current is None:
        return f"service {made_for} no longer exists"
    if name_of(current) != name:
        return f"service {made_for} was created again (its uid is now {current.uid})"
    return f"service {made_for} no longer wants a load balancer"


def find(
    orphans: Orphans, cluster_name: str, services: Sequence[Service], nodes: Sequence[Node]
) -> list[CloudResource]:
    """The provider's orphans, in deletion order."""
    found = orphans.find_orphans(cluster_name, services, nodes)
    return sorted(found, key=lambda r: (r.delete_order, r.kind, r.id))


@dataclass(frozen=True)
class Deletion:
    """What became of one resource: deleted (``error`` empty) or kept, and why."""

    resource: CloudResource
    error: str = ""


def delete_all(
    orphans: Orphans,
    cluster_name: str,
    resources: Sequence[CloudResource],
    *,
    report: Callable[[Deletion], None] = lambda _d: None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[Deletion]:
    """Delete ``resources`` in ascending ``delete_order``; ``report`` each outcome as it
    comes. A failed deletion never stops the others."""
    outcomes: list[Deletion] = []
    for resource in sorted(resources, key=lambda r: (r.delete_order, r.kind, r.id)):
        outcome = _delete_one(orphans, cluster_name, resource, sleep=sleep, clock=clock)
        outcomes.append(outcome)
        report(outcome)
    return outcomes


def _delete_one(
    orphans: Orphans,
    cluster_name: str,
    resource: CloudResource,
    *,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> Deletion:
    deadline = clock() + PATIENCE
    while True:
        try:
            orphans.delete_orphan(cluster_name, resource)
        except RetryAfter as error:
            if clock() + error.delay > deadline:
                return Deletion(resource, f"{error} (gave up after {PATIENCE:.0f} s)")
            sleep(error.delay)
        except LeadershipLost:
            raise
        except CloudError as error:
            return Deletion(resource, str(error) or type(error).__name__)
        else:
            return Deletion(resource)
