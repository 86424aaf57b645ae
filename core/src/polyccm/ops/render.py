"""How the operator commands print: readable tables by default, JSON for scripts (``-o json``).

Pure functions from the records of :mod:`polyccm.ops.plan`, :mod:`polyccm.ops.orphans`,
:mod:`polyccm.ops.check` and :mod:`polyccm.ops.contract` to text; nothing here decides
anything.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from polyccm.ops.check import Finding
from polyccm.ops.contract import CloudResource, LoadBalancerPlan, Problem
from polyccm.ops.orphans import Deletion
from polyccm.ops.plan import NodeChange, Plan, RouteChange, ServicePlan

Row = Sequence[str | Sequence[str]]
"""A table row: a cell is one string, or several lines (the row then takes several lines)."""


def table(headers: Sequence[str], rows: Sequence[Row]) -> str:
    """Columns padded to their widest cell; a multi-line cell continues on the next lines."""
    expanded: list[list[str]] = []
    for row in rows:
        cells = [[c] if isinstance(c, str) else list(c) or [""] for c in row]
        for line in range(max(len(c) for c in cells)):
            expanded.append([c[line] if line < len(c) else "" for c in cells])
    widths = [max([len(h)] + [len(r[i]) for r in expanded]) for i, h in enumerate(headers)]
    lines = [headers, *expanded]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


# -- plan ---------------------------------------------------------------------------------------


def _problem_lines(problems: Sequence[Problem]) -> list[str]:
    return [f"Warning {p.event_reason}: {p.event_message}" for p in problems]


def _node_details(change: NodeChange) -> list[str]:
    details: list[str] = []
    if change.provider_id and change.action != "delete":
        details.append(f"providerID {change.provider_id}")
    details += [f"label {k}={v}" for k, v in sorted(change.labels.items())]
    if change.addresses:
        details.append("addresses " + ", ".join(f"{t}={a}" for t, a in change.addresses))
    if change.message:
        details.append(change.message)
    return details


def _balancer_details(plan: LoadBalancerPlan) -> list[str]:
    lines = [f"{d.aspect}: {d.detail}" for d in plan.differences]
    return lines + _problem_lines(plan.problems)


def plan_table(plan: Plan) -> str:
    """The plan as a person reads it: nodes, load balancers, routes, then a summary line."""
    parts: list[str] = []
    if plan.nodes:
        rows: list[Row] = [(c.node, c.action, _node_details(c)) for c in plan.nodes]
        parts.append("NODES\n" + table(("NODE", "ACTION", "DETAILS"), rows))
    if plan.load_balancers:
        rows = [
            (s.service, s.plan.action, s.plan.name, _balancer_details(s.plan))
            for s in plan.load_balancers
        ]
        parts.append(
            "LOAD BALANCERS\n" + table(("SERVICE", "ACTION", "LOAD BALANCER", "DETAILS"), rows)
        )
    if plan.routes:
        rows = [(r.action, r.node, r.destination_cidr, r.name) for r in plan.routes]
        parts.append("ROUTES\n" + table(("ACTION", "NODE", "DESTINATION", "ROUTE"), rows))
    if plan.not_planned:
        parts.append("NOT PLANNED\n" + "\n".join(plan.not_planned))
    parts.append(_summary(plan))
    return "\n\n".join(parts) + "\n"


def _summary(plan: Plan) -> str:
    actions = Counter(s.plan.action for s in plan.load_balancers)
    balancers = ", ".join(f"{n} {a}" for a, n in sorted(actions.items())) or "none"
    verdict = "changes would be made" if plan.changes else "nothing would change"
    return (
        f"{plan.provider}, cluster {plan.cluster_name}: {len(plan.nodes)} node change(s); "
        f"load balancers: {balancers}; {len(plan.routes)} route change(s): {verdict}."
    )


def _problem_json(problem: Problem) -> dict[str, str]:
    return {
        "severity": problem.severity,
        "message": problem.message,
        "eventReason": problem.event_reason,
        "eventMessage": problem.event_message,
    }


def _node_json(change: NodeChange) -> dict[str, Any]:
    return {
        "node": change.node,
        "action": change.action,
        "providerID": change.provider_id,
        "labels": dict(change.labels),
        "addresses": [{"type": t, "address": a} for t, a in change.addresses],
        "message": change.message,
    }


def _service_json(service: ServicePlan) -> dict[str, Any]:
    plan = service.plan
    return {
        "service": service.service,
        "action": plan.action,
        "loadBalancer": plan.name,
        "differences": [{"aspect": d.aspect, "detail": d.detail} for d in plan.differences],
        "problems": [_problem_json(p) for p in plan.problems],
    }


def _route_json(route: RouteChange) -> dict[str, str]:
    return {
        "action": route.action,
        "node": route.node,
        "destinationCIDR": route.destination_cidr,
        "name": route.name,
    }


def plan_json(plan: Plan) -> str:
    """The plan for scripts."""
    document = {
        "provider": plan.provider,
        "clusterName": plan.cluster_name,
        "changes": plan.changes,
        "nodes": [_node_json(c) for c in plan.nodes],
        "loadBalancers": [_service_json(s) for s in plan.load_balancers],
        "routes": [_route_json(r) for r in plan.routes],
        "notPlanned": list(plan.not_planned),
    }
    return json.dumps(document, indent=2) + "\n"


# -- orphans ------------------------------------------------------------------------------------


def orphans_table(resources: Sequence[CloudResource]) -> str:
    if not resources:
        return "No orphaned cloud resources.\n"
    rows: list[Row] = [
        (r.kind, r.id, r.name, r.mark, r.reason)
        for r in sorted(resources, key=lambda r: (r.delete_order, r.kind, r.id))
    ]
    return table(("KIND", "ID", "NAME", "MARK", "REASON"), rows) + "\n"


def _resource_json(resource: CloudResource) -> dict[str, Any]:
    return {
        "kind": resource.kind,
        "id": resource.id,
        "name": resource.name,
        "mark": resource.mark,
        "reason": resource.reason,
        "deleteOrder": resource.delete_order,
        "details": dict(resource.details),
    }


def orphans_json(resources: Sequence[CloudResource], deletions: Sequence[Deletion] = ()) -> str:
    document: dict[str, Any] = {"orphans": [_resource_json(r) for r in resources]}
    if deletions:
        document["deletions"] = [
            {**_resource_json(d.resource), "deleted": not d.error, "error": d.error}
            for d in deletions
        ]
    return json.dumps(document, indent=2) + "\n"


def deletion_line(deletion: Deletion) -> str:
    """One line per deletion, as it happens."""
    what = f"{deletion.resource.kind} {deletion.resource.id}"
    if deletion.error:
        return f"kept {what}: {deletion.error}"
    return f"deleted {what}"


# -- check-service ------------------------------------------------------------------------------


def finding_lines(findings: Sequence[Finding]) -> str:
    """One line per problem: ``namespace/name: severity: message``."""
    return "".join(f"{f.service}: {f.problem.severity}: {f.problem.message}\n" for f in findings)
