"""Providers are discovered through entry points; conflicts and blocking behave as documented."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from polyccm import hookspecs, plugins
from polyccm.app.options import CONTROLLER_ALIASES
from polyccm.hookspecs import hookimpl

CORE = Path(__file__).resolve().parents[1]


class _ClaimsAws:
    @hookimpl
    def polyccm_register_providers(self, registry: plugins.ProviderRegistry) -> None:
        registry.register("aws", "an impostor")


def test_installed_workspace_providers_are_found() -> None:
    found = plugins.installed_providers(plugins.plugin_manager())
    assert {"aws", "gce", "digitalocean", "packet"} <= set(found)
    assert found["aws"].plugin == "aws"


def test_two_plugins_claiming_one_name_is_a_loud_error() -> None:
    manager = plugins.plugin_manager(extra_plugins=[_ClaimsAws()])
    with pytest.raises(plugins.PluginError, match="'aws' is registered by both"):
        plugins.installed_providers(manager)


def test_blocked_plugin_is_not_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plugins.DISABLE_VARIABLE, "aws, packet")
    found = plugins.installed_providers(plugins.plugin_manager())
    assert "aws" not in found and "packet" not in found
    assert "gce" in found


def test_every_hookspec_is_documented() -> None:
    specs = [name for name in dir(hookspecs) if name.startswith("polyccm_")]
    assert specs, "no hook specifications found"
    for name in specs:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert len(doc.split()) >= 15, f"{name} needs a docstring saying when it is called"


_THIRD_PARTY_PLUGIN = '''
"""A provider from outside the monorepo."""
from polyccm.hookspecs import hookimpl

@hookimpl
def polyccm_register_providers(registry):
    registry.register("examplecloud", "an example third-party cloud")
'''


@pytest.mark.timeout(600)
def test_distribution_installed_into_a_fresh_environment_is_discovered(tmp_path: Path) -> None:
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` names itself in UV
    if uv is None:
        pytest.fail("uv is required to build the throwaway environment")
    dist = tmp_path / "polyccm-examplecloud"
    (dist / "src" / "polyccm_examplecloud").mkdir(parents=True)
    (dist / "src" / "polyccm_examplecloud" / "__init__.py").write_text("")
    (dist / "src" / "polyccm_examplecloud" / "plugin.py").write_text(_THIRD_PARTY_PLUGIN)
    (dist / "pyproject.toml").write_text(
        textwrap.dedent("""
        [project]
        name = "polyccm-examplecloud"
        version = "0.0.1"
        dependencies = ["polyccm"]
        [project.entry-points.polyccm]
        examplecloud = "polyccm_examplecloud.plugin"
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"
        [tool.hatch.build.targets.wheel]
        packages = ["src/polyccm_examplecloud"]
    """)
    )
    venv = tmp_path / "venv"
    env = {
        k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT"}
    }
    subprocess.run(
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        check=True,
        env=env,
        timeout=120,
    )
    python = venv / "bin" / "python"
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", str(python), str(CORE), str(dist)],
        check=True,
        env=env,
        timeout=540,
    )
    result = subprocess.run(
        [str(venv / "bin" / "polyccm"), "--provider", "nosuch"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert "installed providers: examplecloud" in result.stderr
    # The workspace's own providers are not in that environment: discovery is per environment.
    assert "aws" not in result.stderr


def _registry() -> plugins.ControllerRegistry:
    return plugins.ControllerRegistry("mycloud")


def _nothing(_context: object) -> None:
    return None


@pytest.mark.parametrize("name", ["-bgp", "bgp,peers", "BGP", "", "*", "bgp-"])
def test_a_controller_name_must_be_writable_in_the_controllers_flag(name: str) -> None:
    with pytest.raises(plugins.PluginError, match="lowercase letters, digits and '-'"):
        _registry().register(name, _nothing, enabled_by_default=True)


def test_a_controller_registered_twice_is_a_loud_error() -> None:
    registry = _registry()
    registry.register("bgp-peers", _nothing, enabled_by_default=False)
    with pytest.raises(plugins.PluginError, match="'bgp-peers' twice"):
        registry.register("bgp-peers", _nothing, enabled_by_default=False)


def test_rbac_rules_must_be_policy_rules() -> None:
    with pytest.raises(plugins.PluginError, match=r"use polyccm\.rbac\.PolicyRule"):
        _registry().register(
            "bgp-peers",
            _nothing,
            enabled_by_default=True,
            rbac_rules=[{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],  # type: ignore[list-item]
        )


def test_a_provider_controller_may_not_take_a_built_in_name_or_alias() -> None:
    class _Greedy:
        @hookimpl
        def polyccm_register_providers(self, registry: plugins.ProviderRegistry) -> None:
            registry.register("greedy", "takes every built-in name")

        @hookimpl
        def polyccm_register_controllers(
            self, provider: str, registry: plugins.ControllerRegistry
        ) -> None:
            for name, aliases in CONTROLLER_ALIASES.items():
                for taken in (name, *aliases):
                    with pytest.raises(plugins.PluginError, match="name of a built-in"):
                        registry.register(taken, _nothing, enabled_by_default=True)

    manager = plugins.plugin_manager(extra_plugins=[_Greedy()])
    greedy = plugins.installed_providers(manager)["greedy"]
    assert plugins.provider_controllers(manager, greedy) == {}
