"""The API permissions polyccm needs: the core's rules, and the ClusterRole a provider's own
controllers extend.

:data:`CORE_RULES` are the rules of the ClusterRole in ``deploy/kustomize/base/rbac.yaml`` (a
test keeps the two identical). A provider controller declares what it needs beyond them as
:class:`PolicyRule` values when it registers (see
:meth:`polyccm.plugins.ControllerRegistry.register`); ``polyccm rbac --provider NAME`` prints
:func:`render_cluster_role` of both, the ClusterRole of the provider's overlay
(``deploy/kustomize/overlays/NAME``, whose added rules a test keeps equal to it).
Importing this module costs nothing: provider plugin modules use it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

CLUSTER_ROLE_NAME = "polyccm:cloud-controller-manager"
"""Not upstream's ``system:cloud-controller-manager``: polyccm's RBAC must survive an upstream
CCM's uninstall, and installing polyccm must not rewrite upstream's (deploy/kustomize/base)."""
LABELS = {
    "app.kubernetes.io/name": "polyccm",
    "app.kubernetes.io/component": "cloud-controller-manager",
}


@dataclass(frozen=True)
class PolicyRule:
    """One rule of a ClusterRole (``rbac.authorization.k8s.io/v1`` PolicyRule)."""

    api_groups: tuple[str, ...]
    """API groups, ``""`` for the core group (nodes, services, configmaps, ...)."""
    resources: tuple[str, ...]
    """Resources, with their subresource where needed (``nodes/status``)."""
    verbs: tuple[str, ...]
    """``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``, ..."""
    resource_names: tuple[str, ...] = ()
    """Limit the rule to these object names (not possible for ``create``, ``list``, ``watch``)."""

    def __post_init__(self) -> None:
        # Tuples, whatever sequence was given: rules are compared and hashed.
        for name in ("api_groups", "resources", "verbs", "resource_names"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"PolicyRule.{name} takes a sequence of strings, not {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not self.resources or not self.verbs:
            raise ValueError("a PolicyRule needs at least one resource and one verb")

    def allows(self, group: str, resource: str, verb: str, name: str | None = None) -> bool:
        """Whether this rule grants ``verb`` on ``resource`` of ``group`` (on the object
        ``name``, or on any object when ``name`` is ``None``), ``*`` read as RBAC reads it."""
        return (
            _matches(self.api_groups, group)
            and _matches(self.resources, resource)
            and _matches(self.verbs, verb)
            and (not self.resource_names or name in self.resource_names)
        )

    def to_api(self) -> dict[str, list[str]]:
        """The Kubernetes API form of the rule."""
        api = {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }
        if self.resource_names:
            api["resourceNames"] = list(self.resource_names)
        return api


def _matches(values: tuple[str, ...], value: str) -> bool:
    return value in values or "*" in values


def covered(rule: PolicyRule, granted: Iterable[PolicyRule]) -> bool:
    """Whether the ``granted`` rules together already allow everything ``rule`` allows."""
    pool = list(granted)
    names: tuple[str | None, ...] = rule.resource_names or (None,)
    return all(
        any(other.allows(group, resource, verb, name) for other in pool)
        for group in rule.api_groups
        for resource in rule.resources
        for verb in rule.verbs
        for name in names
    )


CORE_RULES: tuple[tuple[str, PolicyRule], ...] = (
    (
        "Node informer (list, watch); cloud-node sets providerID, labels and removes the\n"
        "uninitialized taint (patch), re-reading the node when that write conflicts (get);\n"
        "cloud-node-lifecycle sets or clears the shutdown taint (patch) and deletes nodes whose\n"
        "instance is gone (delete).",
        PolicyRule(("",), ("nodes",), ("get", "list", "watch", "patch", "delete")),
    ),
    (
        "cloud-node refreshes node addresses; route sets the NetworkUnavailable condition.",
        PolicyRule(("",), ("nodes/status",), ("patch",)),
    ),
    (
        "Service informer (list, watch); service adds and removes its finalizer (patch), and\n"
        "re-reads the service when that write conflicts with another change (get).",
        PolicyRule(("",), ("services",), ("get", "list", "watch", "patch")),
    ),
    (
        "service writes status.loadBalancer.",
        PolicyRule(("",), ("services/status",), ("patch",)),
    ),
    (
        "The event recorder creates events, and patches the count of repeated ones, in the\n"
        "namespace of the object (default for nodes).",
        PolicyRule(("",), ("events",), ("create", "patch")),
    ),
)
"""The ClusterRole rules of every polyccm, each with the comment saying which calls need it."""


def core_rules() -> list[PolicyRule]:
    """The rules every polyccm needs, whatever the provider."""
    return [rule for _why, rule in CORE_RULES]


def render_cluster_role(
    extra: Iterable[tuple[str, Sequence[PolicyRule]]] = (), *, header: str = ""
) -> str:
    """The ClusterRole as a YAML manifest: the core's rules, then each ``(why, rules)`` of
    ``extra`` under its comment. A rule whose every grant the rules before it already make is
    left out (a controller that patches nodes adds nothing to the core's rules)."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [
        "apiVersion: rbac.authorization.k8s.io/v1",
        "kind: ClusterRole",
        "metadata:",
        f"  name: {_scalar(CLUSTER_ROLE_NAME)}",
        "  labels:",
        *(f"    {_scalar(key)}: {_scalar(value)}" for key, value in LABELS.items()),
        "rules:",
    ]
    granted: list[PolicyRule] = []
    for why, rules in [*((why, [rule]) for why, rule in CORE_RULES), *extra]:
        fresh = [rule for rule in rules if not covered(rule, granted)]
        if not fresh:
            continue
        lines += [f"  # {line}" for line in why.splitlines()]
        for rule in fresh:
            granted.append(rule)
            first = True
            for key, values in rule.to_api().items():
                lines.append(f"  {'- ' if first else '  '}{key}: {_flow(values)}")
                first = False
    return "\n".join(lines) + "\n"


# YAML 1.1 reads these plain words (in any case) as booleans or null: they are quoted.
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9._/-]*(:[A-Za-z0-9._/-]+)*")


def _scalar(value: str) -> str:
    """``value`` as a YAML scalar: plain where that reads back as the same string."""
    if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    return json.dumps(value)  # a JSON string is a YAML double-quoted scalar


def _flow(values: Sequence[str]) -> str:
    return "[" + ", ".join(_scalar(v) for v in values) + "]"
