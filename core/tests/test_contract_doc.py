"""core/CONTRACT.md keeps in step with the code, as datasette's docs test keeps its plugin hooks
documented: every hook and every public member of the provider contract has a section whose
heading gives its current signature, and every hook or contract member the document names
exists. Adding, renaming or changing the signature of one fails here until the document says so.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from polyccm import hookspecs
from polyccm.cloud import CloudProvider, InstancesV2, LoadBalancer, ProviderContext, Routes
from polyccm.ops.contract import (
    CloudResource,
    Difference,
    LoadBalancerPlan,
    LoadBalancerPlanner,
    Orphans,
    Problem,
    ServiceChecker,
)
from polyccm.plugins import (
    ControllerRegistry,
    EmulatorRegistry,
    ProviderRegistry,
    ProviderSettings,
)

CONTRACT = Path(__file__).resolve().parents[1] / "CONTRACT.md"

# Everything public on these is contract: a provider implements or reads it.
CONTRACT_CLASSES: tuple[type, ...] = (
    CloudProvider,
    InstancesV2,
    LoadBalancer,
    Routes,
    ProviderContext,
    ProviderSettings,
    LoadBalancerPlanner,
    ServiceChecker,
    Orphans,
    LoadBalancerPlan,
    Difference,
    Problem,
    CloudResource,
)
# Of the registries handed to hooks, a plugin calls only ``register``.
REGISTRIES: tuple[type, ...] = (ProviderRegistry, ControllerRegistry, EmulatorRegistry)
# ``polyccm_*`` words in the document that are not hooks.
NOT_HOOKS = {"polyccm_cloud_api_calls_total", "polyccm_testing", "polyccm_mycloud"}

_HEADING = re.compile(r"^#{2,4} `([^`]+)`\s*$", re.MULTILINE)


def _parameters(function: Callable[..., Any]) -> str:
    """``(a, b, *, c)``: the parameter names as the document writes them."""
    names: list[str] = []
    keyword_only = False
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name in ("self", "cls"):
            continue
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and not keyword_only:
            names.append("*")
            keyword_only = True
        names.append(parameter.name)
    return f"({', '.join(names)})"


def _hooks() -> list[str]:
    return [
        name
        for name, value in vars(hookspecs).items()
        if name.startswith("polyccm_") and callable(value)
    ]


def _members(cls: type) -> list[str]:
    """Public members of a contract class: dataclass fields, methods, class attributes."""
    if dataclasses.is_dataclass(cls):
        return [field.name for field in dataclasses.fields(cls)]
    return [name for name in vars(cls) if not name.startswith("_")]


def expected_headings() -> set[str]:
    headings = {f"{hook}{_parameters(getattr(hookspecs, hook))}" for hook in _hooks()}
    for cls in CONTRACT_CLASSES:
        for name in _members(cls):
            value = inspect.getattr_static(cls, name, None)  # a dataclass field may have none
            signature = _parameters(value) if inspect.isfunction(value) else ""
            headings.add(f"{cls.__name__}.{name}{signature}")
    for cls in REGISTRIES:
        headings.add(f"{cls.__name__}.register{_parameters(cls.register)}")
    return headings


def documented_headings() -> set[str]:
    return set(_HEADING.findall(CONTRACT.read_text()))


def test_every_hook_and_contract_member_has_a_section_with_its_signature() -> None:
    missing = expected_headings() - documented_headings()
    assert not missing, f"core/CONTRACT.md needs a section for each of: {sorted(missing)}"


def test_every_section_is_about_a_hook_or_member_that_exists_as_written() -> None:
    stale = documented_headings() - expected_headings()
    assert not stale, f"core/CONTRACT.md documents what the code no longer has: {sorted(stale)}"


def test_every_hook_and_member_the_document_names_exists() -> None:
    text = CONTRACT.read_text()
    classes = {cls.__name__: cls for cls in (*CONTRACT_CLASSES, *REGISTRIES)}
    pattern = re.compile(rf"\b({'|'.join(classes)})\.([A-Za-z_]\w*)")
    unknown = sorted(
        {
            f"{owner}.{member}"
            for owner, member in pattern.findall(text)
            if member not in _members(classes[owner])
            and not (classes[owner] in REGISTRIES and member == "register")
        }
    )
    assert not unknown, f"core/CONTRACT.md names members that do not exist: {unknown}"
    named_hooks = set(re.findall(r"\bpolyccm_\w+", text)) - NOT_HOOKS
    assert named_hooks <= set(_hooks()), f"not hooks: {sorted(named_hooks - set(_hooks()))}"


def test_the_call_order_names_every_start_up_hook() -> None:
    order = CONTRACT.read_text().split("## Call order", 1)[1].split("\n## ", 1)[0]
    for hook in _hooks():
        if hook != "polyccm_register_emulators":  # polyccm-dev's, not the command's
            assert hook in order, f"the call order does not say when {hook} is called"
