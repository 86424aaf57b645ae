"""What the cloud-node controller does to a node, decided once and without I/O.

:func:`plan_node_init` turns a tainted node and the cloud's answer about its instance into a
:class:`NodeInitPlan`: the one spec write that sets the providerID and labels and removes the
uninitialised taint (guarded by the node's resourceVersion), the addresses written after it, or
why the node stays tainted. The controller applies exactly this plan and ``polyccm plan``
prints exactly this plan, so what one says and the other does cannot drift apart. The bodies
the controller sends come from here too (:meth:`NodeInitPlan.spec_patch`,
:func:`labels_patch`, :func:`addresses_patch`), for initialised nodes as well: their beta→GA
label fixes (:func:`polyccm.controllers.nodeinfo.ga_label_fixes`) and address refresh
(:func:`polyccm.controllers.nodeinfo.refreshed_addresses`) are planned by those pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polyccm.cloud import InstanceMetadata, NodeAddress
from polyccm.controllers import nodeinfo
from polyccm.errors import LeadershipLost, RetryAfter
from polyccm.objects import UNINITIALIZED_TAINT, Node

NO_ANSWER = "the cloud returned no answer for this node"


@dataclass(frozen=True)
class NodeInitPlan:
    """What initialising one tainted node comes to: either the writes (``failure`` empty,
    ``retry_after`` ``None``) or why the node stays tainted for now."""

    node: str
    resource_version: str = ""
    """The node's resourceVersion the plan was made from; the spec write is guarded by it."""
    provider_id: str = ""
    """``spec.providerID`` to set; empty when the node keeps the one the kubelet gave it."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels to add or correct (those whose value changes, nothing else)."""
    taints: tuple[Mapping[str, Any], ...] = ()
    """The node's taints once the uninitialised taint is gone."""
    addresses: tuple[NodeAddress, ...] | None = None
    """``status.addresses`` to write once the taint is off; ``None`` when they stay as they are
    (the cloud reports none, or the same ones)."""
    failure: str = ""
    """Why the node stays tainted: the FailedToInitialize Warning's message, or (with
    ``retry_after``) what the cloud said."""
    retry_after: float | None = None
    """The cloud asked to be asked again after this many seconds: the node stays tainted until
    then, and no Warning is recorded (a :class:`~polyccm.errors.RetryAfter` is no failure)."""

    @property
    def initialises(self) -> bool:
        """Whether the node is initialised (else it stays tainted)."""
        return not self.failure and self.retry_after is None

    def spec_patch(self) -> dict[str, Any]:
        """The merge patch that sets providerID and labels and removes the taint, at once."""
        spec: dict[str, Any] = {"taints": [dict(t) for t in self.taints] or None}
        if self.provider_id:
            spec["providerID"] = self.provider_id
        meta: dict[str, Any] = {"resourceVersion": self.resource_version}
        if self.labels:
            meta["labels"] = dict(self.labels)
        return {"metadata": meta, "spec": spec}


def plan_node_init(node: Node, answer: InstanceMetadata | Exception | None) -> NodeInitPlan:
    """The plan for the tainted ``node``, from the cloud's ``answer`` about its instance (its
    metadata, the error the lookup met, or ``None`` when the cloud said nothing of it).

    The node stays tainted, with a Warning, when the lookup failed, without a providerID, or
    when the kubelet's provided IP is none of the instance's addresses (or does not parse).
    Any other error in deciding (a malformed answer) is such a failure too. Labels are the
    cloud's (:func:`~polyccm.controllers.nodeinfo.labels_for`) plus the GA labels that must
    follow the node's beta ones, which the controller would otherwise correct in a second
    write right after. A :class:`~polyccm.errors.LeadershipLost` answer is raised: this process
    may no longer decide anything."""
    if answer is None:
        answer = RuntimeError(NO_ANSWER)
    if isinstance(answer, LeadershipLost):
        raise answer
    if isinstance(answer, RetryAfter):
        message = f"the cloud asks to be asked again in {answer.delay:g}s: {answer}"
        return NodeInitPlan(node.name, failure=message, retry_after=answer.delay)
    try:
        if isinstance(answer, Exception):
            raise answer
        provider_id, addresses = nodeinfo.initial_fields(node, answer)
        labels = nodeinfo.labels_for(answer, node.labels)
        labels.update(nodeinfo.ga_label_fixes({**node.labels, **labels}))
        if addresses is not None and nodeinfo.addresses_to_api(addresses) == _current(node):
            addresses = None
        return NodeInitPlan(
            node.name,
            resource_version=node.resource_version,
            provider_id="" if node.provider_id else provider_id,
            labels=labels,
            taints=tuple(nodeinfo.without_taint(node.taints, UNINITIALIZED_TAINT)),
            addresses=addresses,
        )
    except LeadershipLost:
        raise
    except Exception as error:  # noqa: BLE001 - the node stays tainted and the Warning says why
        return NodeInitPlan(node.name, failure=failure_message(error))


def failure_message(error: Exception) -> str:
    """The FailedToInitialize Warning's message for ``error``."""
    return f"failed to initialize node from the cloud provider: {error}"


def _current(node: Node) -> list[dict[str, str]]:
    return [{"type": t, "address": a} for t, a in node.addresses]


def labels_patch(labels: Mapping[str, str]) -> dict[str, Any]:
    """The merge patch that sets ``labels`` (the GA label fixes of an initialised node)."""
    return {"metadata": {"labels": dict(labels)}}


def addresses_patch(addresses: Sequence[NodeAddress]) -> dict[str, Any]:
    """The merge patch of the ``status`` subresource that writes ``addresses``."""
    return {"status": {"addresses": nodeinfo.addresses_to_api(addresses)}}
