"""``polyccm plan`` for DigitalOcean: the provider's own ensure, run with its writes written
down instead of sent.

:class:`RecordingApi` is a :class:`~polyccm_digitalocean.api.DigitalOceanApi` over the same pydo
client and limiter whose reads (``load_balancers.get``/``list``, ``certificates.list``) go to
DigitalOcean and whose every other call is recorded and answered with a stand-in.
:class:`DigitalOceanLoadBalancerPlanner` runs
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
from dataclasses import dataclass
from typing import Any

from polyccm.cloudcalls import looks_like_read
from polyccm.errors import InvalidServiceSpec, RetryAfter
from polyccm.objects import Node, Service
from polyccm.ops.contract import (
    ADOPT,
    ATTRIBUTES,
    BACKENDS,
    CREATE,
    FAIL,
    HEALTH_CHECK,
    LISTENERS,
    UPDATE,
    WARNING,
    Difference,
    LoadBalancerPlan,
    LoadBalancerPlanner,
    Problem,
)

from polyccm_digitalocean.annotations import service_spec
from polyccm_digitalocean.api import DigitalOceanApi, RateLimited
from polyccm_digitalocean.load_balancer import (
    Balancer,
    DigitalOceanLoadBalancer,
    differences,
    rule_key,
)

#: The aspect of a load balancer's own allow/deny rules.
FIREWALL = "firewall"


class PlannedCreate(Exception):
    """Ensure reached ``load_balancers.create``: the plan is ``create`` (nothing after it could
    be read back)."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        super().__init__(str(body.get("name", "")))
        self.body = body


@dataclass(frozen=True)
class RecordedCall:
    """A write ensure would have sent."""

    operation: str
    params: Mapping[str, Any]


class RecordingApi(DigitalOceanApi):
    """``api``'s client and limiter; reads are sent, every other call is recorded in
    :attr:`calls` and answered by a stand-in. The load balancers read are kept by id in
    :attr:`seen`, so that a recorded update can be compared with what it would change."""

    def __init__(self, api: DigitalOceanApi) -> None:
        super().__init__(api.config, client=api.client, limiter=api.limiter)
        self.calls: list[RecordedCall] = []
        self.seen: dict[str, Balancer] = {}

    def call(self, operation: str, **params: Any) -> Any:
        if looks_like_read(operation):
            answer = super().call(operation, **params)
            if operation.startswith("load_balancers."):
                found = answer.get("load_balancers") or [answer.get("load_balancer") or {}]
                self.seen.update((str(b["id"]), b) for b in found if b.get("id"))
            return answer
        self.calls.append(RecordedCall(operation, params))
        if operation == "load_balancers.create":
            raise PlannedCreate(params["body"])
        if operation == "load_balancers.update":
            return {"load_balancer": self.seen[str(params["lb_id"])]}
        return {}


class DigitalOceanLoadBalancerPlanner(LoadBalancerPlanner):
    """Plans with a second :class:`DigitalOceanLoadBalancer` over a :class:`RecordingApi`."""

    def __init__(self, api: DigitalOceanApi, *, region: str, vpc_id: str = "") -> None:
        self._api = RecordingApi(api)
        self._balancer = DigitalOceanLoadBalancer(self._api, region=region, vpc_id=vpc_id)

    def plan_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerPlan:
        self._api.calls.clear()
        name = self._balancer.get_load_balancer_name(cluster_name, service)
        try:
            spec = service_spec(service)
            name = spec.name
            status = self._balancer.ensure_load_balancer(cluster_name, service, nodes)
            problems = Problem.warnings(status.warnings)
        except InvalidServiceSpec as error:
            return LoadBalancerPlan(FAIL, name, problems=(Problem.error(error),))
        except PlannedCreate as created:
            parts = tuple(created_parts(created.body))
            return LoadBalancerPlan(CREATE, name, parts, Problem.warnings(spec.warnings))
        except RateLimited:
            raise
        except RetryAfter as waiting:  # it exists but is not active yet: the controller waits
            problems = (*Problem.warnings(spec.warnings), Problem(WARNING, str(waiting)))
        changes = tuple(
            change for call in self._api.calls for change in _recorded(call, self._api.seen)
        )
        return LoadBalancerPlan(UPDATE if changes else ADOPT, name, changes, problems)


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


def _recorded(call: RecordedCall, seen: Mapping[str, Balancer]) -> Iterator[Difference]:
    if call.operation != "load_balancers.update":
        yield Difference("load-balancer", call.operation)
        return
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
