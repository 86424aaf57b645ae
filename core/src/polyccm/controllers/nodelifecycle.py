"""The cloud-node-lifecycle controller: deletes nodes whose instance is gone, taints shut-down ones.

Every ``--node-monitor-period`` it looks at the cached nodes. A Ready node loses the
``node.cloudprovider.kubernetes.io/shutdown`` taint. For the not-Ready ones it asks the cloud in
bulk (one ``instances_exist`` and one ``instances_shutdown`` call) which instances still exist
and which are shut down: a node whose instance no longer exists is deleted (events
``DeletingNode`` / ``DeletingNodeFailed``); one whose instance exists but is shut down gets the
shutdown taint (``NoSchedule``). A stopped instance exists. A provider that cannot tell
whether an instance is shut down (``CapabilityNotImplemented``, for one node or the whole bulk
call) means "not shut down", as upstream reads ``NotImplemented``: no taint, no warning. Ready
nodes cost no cloud call at all, so a healthy cluster makes none.

Deletion is guarded twice (cloud-provider-aws #285, #384 are what happens otherwise):

* only a node that has a providerID, or was initialised (no
  ``node.cloudprovider.kubernetes.io/uninitialized`` taint), is ever deleted. A node that has
  neither was only looked up by name, and a miss then says nothing about the machine the kubelet
  runs on (a name not resolvable yet, a cloud whose names differ);
* the delete carries a ``preconditions.uid``: a node deleted and registered again under the same
  name while the cloud was answering (instance names and private DNS names are reused) has a new
  UID, and the API server refuses to delete it (409).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from polyccm.cloud import InstancesV2
from polyccm.controllers import nodeinfo
from polyccm.controllers.base import Controller, ControllerContext, run_periodically
from polyccm.errors import CapabilityNotImplemented, InstanceNotFound, LeadershipLost
from polyccm.kube.api import MERGE_PATCH, NODES, ApiError
from polyccm.objects import SHUTDOWN_TAINT, UNINITIALIZED_TAINT, Node

log = logging.getLogger(__name__)

SHUTDOWN_TAINT_SPEC: dict[str, Any] = {"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}


def may_delete(node: Node) -> bool:
    """Whether a missing instance may cost ``node`` its Node object: only when the node has a
    providerID or was initialised."""
    return bool(node.provider_id) or not node.has_taint(UNINITIALIZED_TAINT)


DELETE = "delete"
"""The node's instance no longer exists: the Node is deleted."""
TAINT = "taint-shutdown"
"""The instance is shut down: the node gets the shutdown taint."""
UNTAINT = "untaint-shutdown"
"""The node is Ready again: the shutdown taint comes off."""


def lifecycle_actions(nodes: Sequence[Node], instances: InstancesV2) -> Iterator[tuple[Node, str]]:
    """What one pass does to ``nodes``, as ``(node, DELETE | TAINT | UNTAINT)`` for each node
    that needs it, in the order it is done: Ready nodes first (no cloud call), then those whose
    instance is gone (one bulk ``instances_exist``), then the shut-down ones (one bulk
    ``instances_shutdown``). Failed lookups are logged and leave their node alone;
    ``LeadershipLost`` propagates. ``polyccm plan`` reads this too, so what it shows is what
    the controller does."""
    not_ready: list[Node] = []
    for node in nodes:
        if node.ready:
            if node.has_taint(SHUTDOWN_TAINT):
                yield node, UNTAINT
            continue
        not_ready.append(node)
    if not not_ready:
        return
    existence = instances.instances_exist(not_ready)
    existing: list[Node] = []
    for node in not_ready:
        exists = existence.get(node.name)
        if isinstance(exists, LeadershipLost):
            raise exists
        if isinstance(exists, Exception):
            log.warning("cloud-node-lifecycle: does %s exist? %s", node.name, exists)
        elif exists is False:
            if may_delete(node):
                yield node, DELETE
            else:
                log.info(
                    "cloud-node-lifecycle: %s: no instance found by name, but the node has "
                    "no providerID and is not initialised: kept",
                    node.name,
                )
        elif exists is True:
            existing.append(node)
    if not existing:
        return
    try:
        shutdown = instances.instances_shutdown(existing)
    except CapabilityNotImplemented:
        return  # the provider cannot tell: none is shut down
    for node in existing:
        state = shutdown.get(node.name)
        if isinstance(state, LeadershipLost):
            raise state
        if isinstance(state, (InstanceNotFound, CapabilityNotImplemented)):
            continue
        if isinstance(state, Exception):
            log.warning("cloud-node-lifecycle: is %s shut down? %s", node.name, state)
        elif state and not node.has_taint(SHUTDOWN_TAINT):
            yield node, TAINT


class CloudNodeLifecycleController(Controller):
    """Watches node readiness against the cloud's view of the instances."""

    name = "cloud-node-lifecycle"

    def __init__(self, context: ControllerContext, instances: InstancesV2) -> None:
        self.context = context
        self.instances = instances

    def run(self, stop: threading.Event) -> None:
        period = self.context.options.node_monitor_period
        run_periodically(self.name, "monitoring", self.monitor_nodes, period, stop)

    def monitor_nodes(self) -> None:
        """One pass over every cached node. An API error on one node never skips the others."""
        nodes = [Node(raw) for raw in self.context.nodes.list()]
        for node, action in lifecycle_actions(nodes, self.instances):
            if action == UNTAINT:
                self._set_taints(node, nodeinfo.without_taint(node.taints, SHUTDOWN_TAINT))
            elif action == DELETE:
                self._delete(node)
            elif action == TAINT:
                self._set_taints(node, [*map(dict, node.taints), SHUTDOWN_TAINT_SPEC])

    def _delete(self, node: Node) -> None:
        recorder = self.context.recorder
        log.info("cloud-node-lifecycle: deleting node %s: its instance no longer exists", node.name)
        recorder.event(
            node.raw,
            "Normal",
            "DeletingNode",
            f"Deleting node {node.name} because it does not exist in the cloud provider",
        )
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": node.uid},
        }
        try:
            self.context.api.delete(NODES, node.name, body=options)
        except ApiError as error:
            if error.not_found:
                return
            if error.conflict:
                # The UID precondition failed: this name now belongs to a new node.
                log.info(
                    "cloud-node-lifecycle: %s was registered again (new UID); not deleted",
                    node.name,
                )
                return
            self._delete_failed(node, error)
        except Exception as error:  # noqa: BLE001 - retried on the next pass
            self._delete_failed(node, error)

    def _delete_failed(self, node: Node, error: Exception) -> None:
        log.warning("cloud-node-lifecycle: deleting %s failed: %s", node.name, error)
        self.context.recorder.event(
            node.raw,
            "Warning",
            "DeletingNodeFailed",
            f"Error deleting node {node.name}: {error}",
        )

    def _set_taints(self, node: Node, taints: list[dict[str, Any]]) -> None:
        body = {
            "metadata": {"resourceVersion": node.resource_version},
            "spec": {"taints": taints or None},
        }
        try:
            self.context.api.patch(NODES, node.name, body, patch_type=MERGE_PATCH)
        except ApiError as error:
            if not (error.not_found or error.conflict):  # a conflict is retried next period
                log.warning("cloud-node-lifecycle: taints of %s: %s", node.name, error)
        except Exception as error:  # noqa: BLE001 - retried on the next pass
            log.warning("cloud-node-lifecycle: taints of %s: %s", node.name, error)
