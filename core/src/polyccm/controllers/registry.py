"""The registry a provider's own controllers join through ``polyccm_register_controllers``.

It lives with the controllers, not with the plugin discovery in :mod:`polyccm.plugins`: what it
collects are controller constructors, and :mod:`polyccm.controllers` hands it to plugin authors
beside the rest of the controller kit without importing anything above the controllers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from polyccm.controllers.base import Controller, ControllerContext
from polyccm.rbac import PolicyRule
from polyccm.registries import PluginError

ControllerConstructor = Callable[[ControllerContext], Controller | None]
"""Makes a provider controller for one leadership term, or returns ``None`` when it has nothing
to do with this provider's configuration (it is then logged as not started)."""

_CONTROLLER_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


@dataclass(frozen=True)
class ControllerInfo:
    """A controller a provider registered, and who registered it."""

    name: str
    """Its name in ``--controllers`` (and the name of its thread and work-queue metrics)."""
    constructor: ControllerConstructor
    enabled_by_default: bool
    """Whether ``--controllers=*`` (the default) includes it."""
    rbac_rules: tuple[PolicyRule, ...]
    """API permissions it needs beyond the core's (``polyccm rbac`` prints them)."""
    plugin: str


class ControllerRegistry:
    """Collects the chosen provider's controllers from ``polyccm_register_controllers``."""

    def __init__(self, provider: str, *, reserved: Iterable[str] = ()) -> None:
        self.provider = provider
        self._reserved = frozenset(reserved)
        self._controllers: dict[str, ControllerInfo] = {}
        self.current_plugin = "?"

    def register(
        self,
        name: str,
        constructor: ControllerConstructor,
        *,
        enabled_by_default: bool,
        rbac_rules: Sequence[PolicyRule] = (),
    ) -> None:
        """Register controller ``name``, made by ``constructor(context)`` at the start of each
        leadership term. A name that is not a lowercase DNS label, that a built-in controller
        (or its upstream alias) already has, or that is registered twice is a
        :class:`PluginError`."""
        where = f"provider {self.provider!r} (plugin {self.current_plugin!r})"
        if not _CONTROLLER_NAME.fullmatch(name):
            raise PluginError(
                f"{where} registers controller {name!r}: a controller name is lowercase "
                "letters, digits and '-' (it is written in --controllers)"
            )
        if name in self._reserved:
            raise PluginError(
                f"{where} registers controller {name!r}, the name of a built-in controller; "
                "choose another name"
            )
        if name in self._controllers:
            raise PluginError(f"{where} registers controller {name!r} twice")
        if not callable(constructor):
            raise PluginError(f"{where}: the constructor of controller {name!r} is not callable")
        rules = tuple(rbac_rules)
        for rule in rules:
            if not isinstance(rule, PolicyRule):
                raise PluginError(
                    f"{where}: controller {name!r} gives {rule!r} as an RBAC rule; "
                    "use polyccm.rbac.PolicyRule"
                )
        self._controllers[name] = ControllerInfo(
            name, constructor, bool(enabled_by_default), rules, self.current_plugin
        )

    @property
    def controllers(self) -> Mapping[str, ControllerInfo]:
        return dict(self._controllers)
