"""One shape per role across the providers, and one shape per emulator distribution.

A newcomer who knows one provider finds the same role in the same module, under the same kind
of name, in every other: ``plugin`` (the hooks, each building through ``from_settings``),
``config``, ``provider`` (``<Cloud>Provider``), ``instances`` (``<Cloud>Instances``),
``load_balancer`` (``<Cloud>LoadBalancer``), ``routes`` (``<Cloud>Routes``, where the cloud has
routes), ``planning`` (``RecordingApi`` and ``<Cloud>LoadBalancerPlanner``), ``orphans``
(``<Cloud>Orphans``) and ``checker`` (``<Cloud>ServiceChecker``). Beside each provider, its
emulator distribution holds ``plugin`` (the emulator hook), ``server`` (``python -m``),
``app``, ``control``, ``faults``, ``testing`` and ``demo``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from types import ModuleType

import pytest
from polyccm.cloud import CloudProvider, InstancesV2, LoadBalancer, Routes
from polyccm.ops.contract import LoadBalancerPlanner, Orphans, ServiceChecker
from polyccm_testing.workspace import workspace_providers

PROVIDERS = workspace_providers()
ROLES = ("plugin", "config", "provider", "instances", "load_balancer", "planning", "orphans",
         "checker")  # fmt: skip
EMULATOR_ROLES = ("plugin", "server", "app", "control", "faults", "testing", "demo", "__main__")


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


def _defined(module: ModuleType, base: type) -> list[type]:
    """The subclasses of ``base`` that ``module`` itself defines."""
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, base)
        and value is not base
        and value.__module__ == module.__name__
    ]


def _cloud_provider(provider: str) -> type[CloudProvider]:
    (found,) = _defined(_module(f"polyccm_{provider}.provider"), CloudProvider)
    return found


@pytest.mark.parametrize("provider", PROVIDERS)
def test_each_role_has_its_module_and_its_class(provider: str) -> None:
    package = f"polyccm_{provider}"
    for role in ROLES:
        assert importlib.util.find_spec(f"{package}.{role}") is not None, role
    cloud_provider = _cloud_provider(provider)
    assert cloud_provider.__name__.endswith("Provider")
    cloud = cloud_provider.__name__.removesuffix("Provider")
    has_routes = cloud_provider.routes is not CloudProvider.routes
    assert (importlib.util.find_spec(f"{package}.routes") is not None) == has_routes

    expected = {
        "instances": (InstancesV2, f"{cloud}Instances"),
        "load_balancer": (LoadBalancer, f"{cloud}LoadBalancer"),
        "planning": (LoadBalancerPlanner, f"{cloud}LoadBalancerPlanner"),
        "orphans": (Orphans, f"{cloud}Orphans"),
        "checker": (ServiceChecker, f"{cloud}ServiceChecker"),
    }
    if has_routes:
        expected["routes"] = (Routes, f"{cloud}Routes")
    for role, (base, name) in expected.items():
        found = [c.__name__ for c in _defined(_module(f"{package}.{role}"), base)]
        assert found == [name], (role, found)
    assert inspect.isclass(getattr(_module(f"{package}.planning"), "RecordingApi", None))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_plugin_builds_the_provider_and_its_checker_from_the_settings(provider: str) -> None:
    package = f"polyccm_{provider}"
    plugin = _module(f"{package}.plugin")
    cloud_provider = _cloud_provider(provider)
    (checker,) = _defined(_module(f"{package}.checker"), ServiceChecker)

    for hook in ("polyccm_register_providers", "polyccm_build_provider",
                 "polyccm_build_service_checker"):  # fmt: skip
        assert callable(getattr(plugin, hook, None)), hook
    assert provider == plugin.PROVIDER
    # The emulator registers itself from its own distribution.
    assert not hasattr(plugin, "polyccm_register_emulators")
    for built in (cloud_provider, checker):
        assert inspect.ismethod(getattr(built, "from_settings", None)), built
        source = inspect.getsource(plugin)
        assert f"return {built.__name__}.from_settings(settings)" in source


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_emulator_distribution_beside_it_has_the_same_shape(provider: str) -> None:
    package = f"polyccm_{provider}_emulator"
    for role in EMULATOR_ROLES:
        assert importlib.util.find_spec(f"{package}.{role}") is not None, role
    plugin = _module(f"{package}.plugin")
    assert provider == plugin.PROVIDER
    assert callable(plugin.polyccm_register_emulators)
    assert callable(plugin.emulator_launch)
    assert callable(_module(f"{package}.server").main)
    assert inspect.isclass(_module(f"{package}.control").EmulatorControl)
