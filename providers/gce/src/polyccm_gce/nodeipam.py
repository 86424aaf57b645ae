"""The ``nodeipam`` controller: cloud-provider-gcp's CloudAllocator
(pkg/controller/nodeipam/ipam/cloud_cidr_allocator.go@4e24531) for VPC-native clusters.

GCE allocates each node's pod range (the instance's alias IP range, given at
``instances.insert``); this controller only copies it to the Node. A node is queued when it is
added, and on update while it has no pod CIDR, its ``NetworkUnavailable`` condition is not
``False`` or it carries the ``node.kubernetes.io/network-unavailable`` taint (:168-190). Its sync
(:398-604) reads the instance by providerID (one ``instances.get``), takes the default
interface (``nic0``, else the first): IPv4 is its first alias range, IPv6 the /112 at the start
of its IPv6 address (gce_instances.go:619-633), ordered by the stack
:mod:`polyccm_gce.nodeipam_settings` read from ``--service-cluster-ip-range``; then patches
``spec.podCIDR``/``podCIDRs`` when they differ and sets ``NetworkUnavailable`` to ``False``
(reason ``RouteCreated``), so no route is needed. An instance with no range gets a Normal event
``CIDRNotAvailable`` on the Node (source ``cidrAllocator``, as upstream's
RecordNodeStatusChange) and no CIDR; a failed sync is retried with backoff (250 ms to 15 s)
20 times, then dropped until the node changes (:366-394).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from datetime import UTC, datetime
from typing import Any

from polyccm.controllers import (
    NODES,
    STRATEGIC_MERGE_PATCH,
    Controller,
    ControllerContext,
    EventRecorder,
    JsonObject,
    Node,
    RateLimitingQueue,
    run_workers,
)
from polyccm.errors import InstanceNotFound, LeadershipLost, RetryAfter

from polyccm_gce.api import GceApiError
from polyccm_gce.nodeipam_settings import CONTROLLER, NodeIpamSettings, Stack
from polyccm_gce.provider import GceProvider

log = logging.getLogger(__name__)

NETWORK_UNAVAILABLE = "NetworkUnavailable"
NETWORK_UNAVAILABLE_TAINT = "node.kubernetes.io/network-unavailable"
EVENT_SOURCE = "cidrAllocator"
#: Retries of a failing node before it is dropped (cidr_allocator.go:77-78 updateMaxRetries).
MAX_RETRIES = 20
#: Workers syncing nodes at once (upstream runs 30, cidr_allocator.go:62-63).
WORKERS = 8


class NoRange(Exception):
    """The node's instance gives no pod CIDR (of the cluster's families)."""


def ipv6_range(nic: Any) -> str:
    """The interface's pod IPv6 range: the /112 its IPv6 address starts (its internal
    ``ipv6Address``, else an EXTERNAL interface's access config), or ``""``."""
    address = str(getattr(nic, "ipv6_address", "") or "")
    if not address and getattr(nic, "ipv6_access_type", "") == "EXTERNAL":
        for config in getattr(nic, "ipv6_access_configs", ()):
            address = str(config.external_ipv6 or "")
    if not address:
        return ""
    return str(ipaddress.IPv6Network(f"{address}/112", strict=False))


def pod_cidrs(instance: Any, stack: Stack) -> list[str]:
    """The pod CIDRs of ``instance`` for the cluster's ``stack`` (cloud_cidr_allocator.go:
    418-473): :class:`NoRange` when it has none to give."""
    nics = list(instance.network_interfaces)
    if not nics or (len(nics) == 1 and not nics[0].alias_ip_ranges and not ipv6_range(nics[0])):
        raise NoRange("has no ranges from which CIDRs can be allocated")
    nic = next((n for n in nics if n.name == "nic0"), nics[0])
    ipv4 = str(nic.alias_ip_ranges[0].ip_cidr_range) if nic.alias_ip_ranges else ""
    ipv6 = ipv6_range(nic)
    chosen = {
        Stack.IPV4: [ipv4] if ipv4 else [],
        Stack.IPV4_IPV6: [ipv4, ipv6] if ipv4 and ipv6 else [],
        Stack.IPV6_IPV4: [ipv6, ipv4] if ipv4 and ipv6 else [],
        Stack.IPV6: [ipv6] if ipv6 else [],
    }[stack]
    if not chosen:
        raise NoRange(
            "has no ranges from which CIDRs can be allocated for the cluster stack family "
            f"{stack.value}"
        )
    return chosen


def needs_sync(raw: JsonObject) -> bool:
    """Whether an updated node is queued (cloud_cidr_allocator.go:170-188)."""
    node = Node(raw)
    if not node.pod_cidrs:
        return True
    condition = _condition(raw)
    return (
        condition is None
        or condition.get("status") != "False"
        or any(
            t.get("key") == NETWORK_UNAVAILABLE_TAINT and t.get("effect") == "NoSchedule"
            for t in node.taints
        )
    )


def _condition(raw: JsonObject) -> JsonObject | None:
    for condition in (raw.get("status") or {}).get("conditions") or ():
        if condition.get("type") == NETWORK_UNAVAILABLE:
            return dict(condition)
    return None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeIpamController(Controller):
    """Copies each node's alias IP range to its ``spec.podCIDRs``."""

    name = CONTROLLER

    def __init__(
        self, context: ControllerContext, provider: GceProvider, settings: NodeIpamSettings
    ) -> None:
        self.context = context
        self.provider = provider
        self.settings = settings
        self.queue = RateLimitingQueue(self.name, base_delay=0.25, max_delay=15.0)
        self.recorder = EventRecorder(context.api, component=EVENT_SOURCE)

    @classmethod
    def for_term(cls, context: ControllerContext) -> NodeIpamController | None:
        """The controller when the provider is GCE's and node IPAM was asked for."""
        provider = context.provider
        settings = provider.nodeipam if isinstance(provider, GceProvider) else None
        if settings is None:
            log.info(
                "%s: --allocate-node-cidrs is false: no pod CIDRs are allocated (upstream "
                "would not start at all)",
                CONTROLLER,
            )
            return None
        assert isinstance(provider, GceProvider)
        return cls(context, provider, settings)

    def run(self, stop: threading.Event) -> None:
        log.info("%s: using the cloud CIDR allocator (stack %s)", self.name,
                 self.settings.stack.value)  # fmt: skip
        self.recorder.start()
        self.context.nodes.add_handler(
            on_add=lambda raw: self.queue.add(Node(raw).name),
            on_update=lambda old, raw: self.queue.add(Node(raw).name) if needs_sync(raw) else None,
        )
        try:
            run_workers(name=self.name, queue=self.queue, workers=WORKERS, stop=stop,
                        process=self._process)  # fmt: skip
        finally:
            self.recorder.stop()

    def _process(self, queue: RateLimitingQueue) -> bool:
        key = queue.get(timeout=1.0)
        if key is None:
            return not queue.shutting_down
        try:
            self.sync(key)
        except LeadershipLost:
            raise
        except Exception as error:  # noqa: BLE001 - every failure is retried, as upstream's
            if isinstance(error, RetryAfter):
                queue.add_after(key, error.delay)
            elif queue.num_requeues(key) < MAX_RETRIES:
                log.warning("%s: %s: %s; retrying", self.name, key, error)
                queue.add_rate_limited(key)
            else:
                log.error("%s: %s: %s; retried %d times, dropped until the node changes",
                          self.name, key, error, MAX_RETRIES)  # fmt: skip
                queue.forget(key)
        else:
            queue.forget(key)
        finally:
            queue.done(key)
        return True

    def _event(self, raw: JsonObject, reason: str) -> None:
        """A Normal event on the node, as upstream's RecordNodeStatusChange
        (pkg/util/controller_utils.go:30-42@4e24531)."""
        node = Node(raw)
        reference = {"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": node.name, "uid": node.uid}}  # fmt: skip
        self.recorder.event(
            reference, "Normal", reason, f"Node {node.name} status is now: {reason}"
        )

    def sync(self, name: str) -> None:
        """Give node ``name`` its instance's pod CIDRs and ``NetworkUnavailable=False``."""
        raw = self.context.nodes.get(name)
        if raw is None:
            return
        node = Node(raw)
        if not node.provider_id:
            raise ValueError(f"node {name} doesn't have providerID")
        try:
            instance = self.provider.lookup.one(node)
            cidrs = pod_cidrs(instance, self.settings.stack)
        except NoRange as error:
            self._event(raw, "CIDRNotAvailable")
            raise ValueError(f"failed to allocate cidr: Node {name} {error}") from None
        except (InstanceNotFound, GceApiError) as error:
            self._event(raw, "CIDRNotAvailable")
            raise ValueError(f"failed to get instance from provider: {error}") from None
        if list(node.pod_cidrs) != cidrs:
            try:
                self.context.api.patch(
                    NODES, name, {"spec": {"podCIDR": cidrs[0], "podCIDRs": cidrs}},
                    patch_type=STRATEGIC_MERGE_PATCH,
                )  # fmt: skip
            except Exception:
                self._event(raw, "CIDRAssignmentFailed")
                raise
            log.info("%s: set the pod CIDRs of %s to %s", self.name, name, ",".join(cidrs))
        self._set_network_available(raw)

    def _set_network_available(self, raw: JsonObject) -> None:
        """``NetworkUnavailable`` False/RouteCreated (cloud_cidr_allocator.go:556-575; its
        transition time kept when the condition exists)."""
        condition = _condition(raw) or {"type": NETWORK_UNAVAILABLE, "lastTransitionTime": _now()}
        wanted = {**condition, "status": "False", "reason": "RouteCreated",
                  "message": "NodeController create implicit route"}  # fmt: skip
        if wanted == _condition(raw):
            return
        wanted["lastHeartbeatTime"] = _now()
        self.context.api.patch(
            NODES, Node(raw).name, {"status": {"conditions": [wanted]}},
            subresource="status", patch_type=STRATEGIC_MERGE_PATCH,
        )  # fmt: skip
