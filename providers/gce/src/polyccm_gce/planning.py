"""``polyccm plan`` for GCE: the ensure code itself, run with its writes recorded, not sent.

:class:`RecordingApi` is a :class:`~polyccm_gce.api.GceApi` over the same clients whose reads
(``get``, ``list``, ``aggregatedList``, operation waits) go to GCE and whose every other call is
written down instead of sent, answered by an operation already DONE. It remembers what the plan
made and deleted, so that ensure, reading a piece again, finds it as it would after the real
write (a deleted forwarding rule is not there; a planned one is). :class:`GceLoadBalancerPlanner`
runs the provider's own :meth:`~polyccm_gce.load_balancer.GceLoadBalancer.ensure_load_balancer`
on such an API: validation, names, adoption and comparison are the controller's, and the
recorded calls are exactly the writes it would make (:mod:`polyccm.ops.recording`). None means
``adopt``; a forwarding rule inserted that was not there means ``create``; anything else
``update``, each call one :class:`~polyccm.ops.contract.Difference`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from polyccm.objects import Node, Service
from polyccm.ops.contract import BACKENDS, HEALTH_CHECK, LISTENERS, Difference, LoadBalancerPlan
from polyccm.ops.recording import (
    Describer,
    RecordedCall,
    RecordingPlanner,
    WriteRecorder,
    describe_calls,
)

from polyccm_gce.api import GceApi, GceApiError, Json, method_id
from polyccm_gce.lb_metrics import L4Metrics
from polyccm_gce.load_balancer import GceLoadBalancer
from polyccm_gce.naming import last
from polyccm_gce.sdk import compute_v1

T = TypeVar("T")
FIREWALL = "firewall"
"""GCE's word for what the other clouds call security groups."""
_SCOPE_FIELDS = frozenset({"project", "region", "zone"})
RULE_INSERT, RULE_DELETE = "compute.forwardingRules.insert", "compute.forwardingRules.delete"


def _name_in(fields: Mapping[str, Any]) -> str:
    """The resource a call is about: its body's name, else its name field."""
    for key, value in fields.items():
        name = getattr(value, "name", None) if key.endswith("_resource") else None
        if isinstance(name, str) and name:
            return name
    for key, value in fields.items():
        if key not in _SCOPE_FIELDS and isinstance(value, str):
            return value
    return ""


class RecordingApi(GceApi):
    """``api``'s clients, with every call that is not a read handed to ``recorder`` (its
    discovery method id, the resource's name, the request: the SDK's fields or the REST body)
    and answered as done, and later reads of what was recorded answered as GCE would answer
    them."""

    def __init__(self, api: GceApi, recorder: WriteRecorder) -> None:
        # Not GceApi.__init__: the same clients (made on first use), session and settings.
        vars(self).update(vars(api))
        self.recorder = recorder
        self._made: dict[tuple[str, str], Any] = {}
        self._gone: set[tuple[str, str]] = set()

    def forget(self) -> None:
        """Start a new plan: nothing recorded."""
        self.recorder.clear()
        self._made.clear()
        self._gone.clear()

    def _read(self, method: str, name: str, send: Callable[[], T]) -> T:
        key = (method.split(".")[1], name)
        if key in self._gone:
            raise GceApiError(method, 404, "notFound", f"{name} (deleted by this plan)")
        if key in self._made:
            made: T = self._made[key]
            return made
        return send()

    def _write(self, method: str, name: str, request: Mapping[str, Any], body: Any) -> None:
        self.recorder.record(method, request, subject=name)
        key = (method.split(".")[1], name)
        verb = method.rsplit(".", 1)[1]
        if verb == "insert":
            self._made[key] = body
            self._gone.discard(key)
        elif verb == "delete":
            self._made.pop(key, None)
            self._gone.add(key)

    def invoke(self, rpc: Callable[..., T], **fields: Any) -> T:
        method = method_id(type(rpc.__self__), rpc.__name__)  # type: ignore[attr-defined]
        name = _name_in(fields)
        if "zone" in fields:  # an instance group has one name in every zone: kept apart
            name = f"{fields['zone']}/{name}"
        if self.recorder.is_read(method):
            return self._read(method, name, lambda: super(RecordingApi, self).invoke(rpc, **fields))
        body = next((v for k, v in fields.items() if k.endswith("_resource")), None)
        self._write(method, name, fields, body)
        return cast(
            T, compute_v1.Operation(status=compute_v1.Operation.Status.DONE, name="planned")
        )

    def rest(self, method: str, http_method: str, path: str, *, body: Any = None) -> Json:
        name = str((body or {}).get("name") or last(path))
        if self.recorder.is_read(method):
            return self._read(
                method, name, lambda: super(RecordingApi, self).rest(method, http_method, path)
            )
        self._write(method, name, dict(body or {}), body)
        return {"status": "DONE", "name": "planned"}


class GceLoadBalancerPlanner(RecordingPlanner):
    """Plans with a copy of the provider's :class:`GceLoadBalancer` over a
    :class:`RecordingApi` (the same code, clients and instance lookup; the writes held back).
    Ensure runs to its end (a planned piece reads back as made): a forwarding rule inserted
    that was not there (not deleted first to be made again) means ``create``."""

    def __init__(self, balancer: GceLoadBalancer) -> None:
        recorder = WriteRecorder()
        self._api = RecordingApi(balancer.api, recorder)
        self._source = balancer
        super().__init__(self._copy(), recorder)

    def _copy(self) -> GceLoadBalancer:
        """The balancer as it is now (the deny-firewall flags are set on it after this planner
        is made), over the recording API."""
        planned = copy.copy(self._source)
        planned.api = self._api
        planned.insert_first = False  # a recorded insert meets no 409: every piece is read
        planned.metrics = L4Metrics(export=False)  # a plan is no ensure upstream counts
        return planned

    def plan_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerPlan:
        self._api.forget()
        self.balancer = self._copy()
        return super().plan_load_balancer(cluster_name, service, nodes)

    def describe(self, calls: Sequence[RecordedCall]) -> list[Difference]:
        return describe_calls(calls, _DESCRIBERS)

    def makes_anew(self, calls: Sequence[RecordedCall]) -> bool:
        operations = {call.operation for call in calls}
        return RULE_INSERT in operations and RULE_DELETE not in operations


# -- recorded calls as differences -------------------------------------------------------------


def _names(urls: Sequence[str]) -> str:
    """``zone/instance`` for instance URLs, the last segment for anything else."""
    shown = []
    for url in urls:
        parts = url.rstrip("/").split("/")
        shown.append("/".join(parts[-3::2]) if "instances" in parts else parts[-1])
    return ", ".join(sorted(shown)) or "none"


def _check(check: Mapping[str, Any]) -> str:
    return (
        f"HTTP :{check['port']}{check['requestPath']} every {check['checkIntervalSec']}s, "
        f"timeout {check['timeoutSec']}s, healthy after {check['healthyThreshold']}, "
        f"unhealthy after {check['unhealthyThreshold']}"
    )


def _allowed(firewall: compute_v1.Firewall) -> str:
    return "; ".join(f"{a.I_p_protocol} {','.join(a.ports)}" for a in firewall.allowed)


def _effect(firewall: compute_v1.Firewall) -> str:
    """``allow ...`` or, for the deny firewall, ``deny ...``."""
    if firewall.denied:
        denied = "; ".join(f"{d.I_p_protocol} {','.join(d.ports)}".strip() for d in firewall.denied)
        return f"deny {denied}"
    return f"allow {_allowed(firewall)}"


def _firewall_insert(name: str, request: Mapping[str, Any]) -> list[Difference]:
    body: compute_v1.Firewall = request["firewall_resource"]
    return [
        Difference(
            FIREWALL,
            f"create {name}: {_effect(body)} from {', '.join(body.source_ranges)} "
            f"to tags {', '.join(body.target_tags) or 'none'}",
        )
    ]


def _firewall_patch(name: str, request: Mapping[str, Any]) -> list[Difference]:
    """One difference per field the patch sets (ensure sends only those that change); a patch
    of none of them is still named, so the plan is never ``adopt`` while ensure would write."""
    body: compute_v1.Firewall = request["firewall_resource"]
    found = []
    if body.source_ranges:
        found.append(Difference(FIREWALL, f"{name}: sources {', '.join(body.source_ranges)}"))
    if body.destination_ranges:
        found.append(
            Difference(FIREWALL, f"{name}: destination {', '.join(body.destination_ranges)}")
        )
    if body.allowed or body.denied:
        found.append(Difference(FIREWALL, f"{name}: {_effect(body)}"))
    if body.priority:
        found.append(Difference(FIREWALL, f"{name}: priority {body.priority}"))
    if body.target_tags:
        found.append(Difference(FIREWALL, f"{name}: target tags {', '.join(body.target_tags)}"))
    if body.description:
        found.append(Difference(FIREWALL, f"{name}: description {body.description}"))
    return found or [Difference(FIREWALL, f"patch {name}")]


def _pool_insert(name: str, request: Mapping[str, Any]) -> list[Difference]:
    body: compute_v1.TargetPool = request["target_pool_resource"]
    return [
        Difference(
            BACKENDS,
            f"create target pool {name} (session affinity {body.session_affinity}) with "
            f"{_names(body.instances)}",
        ),
        Difference(HEALTH_CHECK, f"target pool {name} uses {_names(body.health_checks)}"),
    ]


def _pool_change(
    aspect: str, verb: str, listed: str, field_name: str
) -> Callable[[str, Mapping[str, Any]], list[Difference]]:
    """A target pool's add/remove of instances or health checks: ``listed`` items of the
    request, each naming a URL in ``field_name``."""

    def describe(name: str, request: Mapping[str, Any]) -> list[Difference]:
        change = next(v for k, v in request.items() if k.endswith("_request_resource"))
        urls = [getattr(item, field_name) for item in getattr(change, listed)]
        return [Difference(aspect, f"target pool {name}: {verb} {_names(urls)}")]

    return describe


def _rule_insert(name: str, request: Mapping[str, Any]) -> list[Difference]:
    body: compute_v1.ForwardingRule = request["forwarding_rule_resource"]
    address = f" on {body.I_p_address}" if body.I_p_address else ""
    return [
        Difference(
            LISTENERS,
            f"create forwarding rule {name}: {body.I_p_protocol} {body.port_range}{address}",
        )
    ]


def _one(aspect: str, text: str) -> Callable[[str, Mapping[str, Any]], list[Difference]]:
    return lambda name, _request: [Difference(aspect, text.format(name=name))]


NamedDescriber = Callable[[str, Mapping[str, Any]], list[Difference]]


def _by_name(describe: NamedDescriber) -> Describer:
    return lambda call: describe(call.subject, call.params)


_BY_METHOD: dict[str, NamedDescriber] = {
    "compute.httpHealthChecks.insert": lambda name, body: [
        Difference(HEALTH_CHECK, f"create {name}: {_check(body)}")
    ],
    "compute.httpHealthChecks.patch": lambda name, body: [
        Difference(HEALTH_CHECK, f"set {name} to {_check(body)}")
    ],
    "compute.firewalls.insert": _firewall_insert,
    "compute.firewalls.patch": _firewall_patch,
    "compute.targetPools.insert": _pool_insert,
    "compute.targetPools.delete": _one(BACKENDS, "delete target pool {name} to make it again"),
    "compute.targetPools.addInstance": _pool_change(BACKENDS, "add", "instances", "instance"),
    "compute.targetPools.removeInstance": _pool_change(BACKENDS, "remove", "instances", "instance"),
    "compute.targetPools.addHealthCheck": _pool_change(
        HEALTH_CHECK, "use", "health_checks", "health_check"
    ),
    "compute.targetPools.removeHealthCheck": _pool_change(
        HEALTH_CHECK, "stop using", "health_checks", "health_check"
    ),
    "compute.addresses.insert": lambda name, request: [
        Difference(
            LISTENERS,
            f"hold {request['address_resource'].address} as static address {name} while the "
            "forwarding rule is made again",
        )
    ],
    "compute.addresses.delete": _one(LISTENERS, "release static address {name}"),
    RULE_INSERT: _rule_insert,
    RULE_DELETE: _one(LISTENERS, "delete forwarding rule {name} to make it again"),
}
_DESCRIBERS: dict[str, Describer] = {
    method: _by_name(describe) for method, describe in _BY_METHOD.items()
}
