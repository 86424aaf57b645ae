"""``polyccm plan`` for DigitalOcean: the provider's own ensure, run with its writes written
down instead of sent.

:class:`RecordingApi` is a :class:`~polyccm_digitalocean.api.DigitalOceanApi` over the same
client and limiter whose reads (``load_balancers.get``/``list``, ``certificates.list``) go to
DigitalOcean and whose every other call is recorded (:mod:`polyccm.ops.recording`) and answered
with a stand-in. :class:`DigitalOceanLoadBalancerPlanner` runs
:meth:`~polyccm_digitalocean.load_balancer.DigitalOceanLoadBalancer.ensure_load_balancer` on such
an API, so the annotation checks, the naming, the lookup by id annotation then by name (an
upstream-made ``a<uid>`` load balancer is found exactly as ensure finds it) and the comparison of
:func:`~polyccm_digitalocean.load_balancer.differences` are the controller's. No write recorded
means ``adopt``; the ``PUT`` ensure would send means ``update``, one
:class:`~polyccm.ops.contract.Difference` per changed part; a ``POST`` means ``create``, with
the parts the request asks for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from polyccm.errors import InvalidServiceSpec, RetryAfter
from polyccm.objects import Node, Service
from polyccm.ops.contract import (
    ATTRIBUTES,
    BACKENDS,
    HEALTH_CHECK,
    LISTENERS,
    Difference,
)
from polyccm.ops.recording import (
    PlannedCreate,
    RecordedCall,
    RecordingPlanner,
    WriteRecorder,
    describe_calls,
)

from polyccm_digitalocean.annotations import disowned
from polyccm_digitalocean.api import DigitalOceanApi, RateLimited
from polyccm_digitalocean.load_balancer import (
    Balancer,
    DigitalOceanLoadBalancer,
    differences,
    rule_key,
)

#: The aspect of a load balancer's own allow/deny rules.
FIREWALL = "firewall"
CREATE_CALL, UPDATE_CALL = "load_balancers.create", "load_balancers.update"


class RecordingApi(DigitalOceanApi):
    """``api``'s client and limiter; reads are sent, every other call is handed to ``recorder``
    and answered by a stand-in. The load balancers read are kept by id in :attr:`seen`, so
    that a recorded update can be compared with what it would change."""

    def __init__(self, api: DigitalOceanApi, recorder: WriteRecorder) -> None:
        super().__init__(api.config, client=api.client, limiter=api.limiter)
        self.recorder = recorder
        self.seen: dict[str, Balancer] = {}

    def call(self, operation: str, **params: Any) -> Any:
        if self.recorder.is_read(operation):
            answer = super().call(operation, **params)
            if operation.startswith("load_balancers."):
                found = answer.get("load_balancers") or [answer.get("load_balancer") or {}]
                self.seen.update((str(b["id"]), b) for b in found if b.get("id"))
            return answer
        self.recorder.record(operation, params)  # a create stops here
        if operation == UPDATE_CALL:
            return {"load_balancer": self.seen[str(params["lb_id"])]}
        return {}


class DigitalOceanLoadBalancerPlanner(RecordingPlanner):
    """Plans with a second :class:`DigitalOceanLoadBalancer` over a :class:`RecordingApi`. Its
    spec is the balancer's own: of the configured default type (``DEFAULT_LB_TYPE``) for a
    load balancer to make, of its own type for one that exists."""

    def __init__(self, api: DigitalOceanApi, *, region: str, vpc_id: str = "") -> None:
        recorder = WriteRecorder(creates={CREATE_CALL})
        self._api = RecordingApi(api, recorder)
        # Every plan reads the account afresh: no listing kept from an earlier plan.
        self._balancer = DigitalOceanLoadBalancer(
            self._api, region=region, vpc_id=vpc_id, name_listing_age=0.0
        )
        super().__init__(self._balancer, recorder)

    def load_balancer_name(self, cluster_name: str, service: Service) -> str:
        try:
            return self._balancer._spec(service).name  # the name annotation's, or the default
        except InvalidServiceSpec:
            return super().load_balancer_name(cluster_name, service)

    def spec_warnings(self, service: Service) -> Sequence[str]:
        if disowned(service):  # never read further, as ensure
            return ()
        return self._balancer._spec(service).warnings

    def ensure(self, cluster_name: str, service: Service, nodes: Sequence[Node]) -> Sequence[str]:
        try:
            return super().ensure(cluster_name, service, nodes)
        except RateLimited:
            raise
        except RetryAfter as waiting:  # it exists but is not active yet: the controller waits
            # The warnings of the spec ensure used: of the type the load balancer has.
            existing = self._balancer._find(service, self._balancer._spec(service))
            return (*self._balancer._spec(service, existing).warnings, str(waiting))

    def created(
        self, service: Service, nodes: Sequence[Node], stop: PlannedCreate
    ) -> list[Difference]:
        return list(created_parts(stop.call.params["body"]))

    def describe(self, calls: Sequence[RecordedCall]) -> list[Difference]:
        return describe_calls(calls, {UPDATE_CALL: lambda call: _updated(call, self._api.seen)})


# -- requests as differences ---------------------------------------------------------------------


def _rule_text(rule: Mapping[str, Any]) -> str:
    text = (
        f"{rule['entry_protocol']}:{rule['entry_port']} -> "
        f"{rule['target_protocol']}:{rule['target_port']}"
    )
    if rule.get("tls_passthrough"):
        return text + " (tls passthrough)"
    if rule.get("certificate_id"):
        return text + f" with certificate {rule['certificate_id']}"
    return text


def _health_text(check: Mapping[str, Any]) -> str:
    return f"{check['protocol']}:{check['port']}{check.get('path', '')}"


def created_parts(body: Mapping[str, Any]) -> Iterator[Difference]:
    """What a create with ``body`` would make."""
    kind = f"{body['type']} {body['network']}"
    yield Difference("load-balancer", f"create {kind} {body['name']} in {body['region']}")
    for rule in body["forwarding_rules"]:
        yield Difference(LISTENERS, f"add {_rule_text(rule)}")
    yield Difference(HEALTH_CHECK, _health_text(body["health_check"]))
    if body["droplet_ids"]:
        yield Difference(BACKENDS, "droplets " + ", ".join(map(str, body["droplet_ids"])))
    for kind in ("allow", "deny"):
        if body["firewall"][kind]:
            yield Difference(FIREWALL, f"{kind} {', '.join(body['firewall'][kind])}")


def _updated(call: RecordedCall, seen: Mapping[str, Balancer]) -> Iterator[Difference]:
    """What an update would change on the load balancer as it was read."""
    body, current = call.params["body"], seen[str(call.params["lb_id"])]
    for key in differences(body, current):
        yield from _changed(key, body[key], current.get(key))


def _changed(key: str, want: Any, have: Any) -> Iterator[Difference]:
    """One difference per change of field ``key`` from ``have`` (DigitalOcean's) to ``want``."""
    if key == "forwarding_rules":
        wanted = {rule_key(r): r for r in want}
        had = {rule_key(r): r for r in have or ()}
        for gone in sorted(set(had) - set(wanted)):
            yield Difference(LISTENERS, f"remove {_rule_text(had[gone])}")
        for new in sorted(set(wanted) - set(had)):
            yield Difference(LISTENERS, f"add {_rule_text(wanted[new])}")
    elif key == "droplet_ids":
        for droplet in sorted(set(have or ()) - set(want)):
            yield Difference(BACKENDS, f"remove droplet {droplet}")
        for droplet in sorted(set(want) - set(have or ())):
            yield Difference(BACKENDS, f"add droplet {droplet}")
    elif key in ("health_check", "sticky_sessions"):
        have = have or {}
        changes = ", ".join(
            f"{field} {have.get(field)!r} -> {value!r}"
            for field, value in want.items()
            if have.get(field) != value
        )
        if key == "health_check":
            yield Difference(HEALTH_CHECK, changes)
        else:
            yield Difference(ATTRIBUTES, f"sticky_sessions: {changes}")
    elif key == "firewall":
        have = have or {}
        for kind, rules in want.items():
            if sorted(have.get(kind) or ()) != sorted(rules):
                yield Difference(FIREWALL, f"{kind} {have.get(kind) or []} -> {rules}")
    else:
        yield Difference(ATTRIBUTES, f"{key} {have!r} -> {want!r}")
