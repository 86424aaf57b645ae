"""``polyccm rbac``: the ClusterRole an operator applies. Its core rules are exactly those of
deploy/kustomize/base/rbac.yaml, what it prints reads back as the rules it was given, and a rule
the ones before it already grant is left out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm import cli, rbac
from polyccm.cloud import CloudProvider
from polyccm.hookspecs import hookimpl
from polyccm.plugins import ProviderRegistry, ProviderSettings, plugin_manager
from polyccm.rbac import PolicyRule

RBAC_YAML = Path(__file__).resolve().parents[2] / "deploy" / "kustomize" / "base" / "rbac.yaml"


class _PlainCloud:
    """A provider with no controllers of its own."""

    @hookimpl
    def polyccm_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register("plaincloud", "no controllers of its own")

    @hookimpl
    def polyccm_build_provider(self, settings: ProviderSettings) -> CloudProvider | None:
        return CloudProvider() if settings.provider == "plaincloud" else None


def _printed(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    status = cli.main(list(argv), plugin_manager([_PlainCloud()]))
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return yaml.safe_load(captured.out)


def _deployed_cluster_role() -> Any:
    objects = list(yaml.safe_load_all(RBAC_YAML.read_text()))
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    return role


def test_printed_cluster_role_without_provider_controllers_is_the_one_in_rbac_yaml(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _printed(capsys, "rbac", "--provider=plaincloud") == _deployed_cluster_role()


def test_core_rules_are_those_of_rbac_yaml_in_order() -> None:
    assert [rule.to_api() for rule in rbac.core_rules()] == _deployed_cluster_role()["rules"]


def test_rbac_works_after_the_provider_flag_as_an_image_entry_point_writes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _printed(capsys, "--provider=plaincloud", "rbac") == _deployed_cluster_role()


def test_rbac_without_provider_is_a_one_line_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["rbac"], plugin_manager([_PlainCloud()])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rbac needs --provider" in err and "plaincloud" in err


@pytest.mark.parametrize(
    "rule",
    [
        PolicyRule(("*",), ("*",), ("*",)),
        PolicyRule(("metallb.io",), ("ipaddresspools", "bgppeers"), ("get", "list", "watch")),
        PolicyRule(("",), ("configmaps",), ("get", "update"), resource_names=("on", "1st", "a b")),
        PolicyRule(("",), ("pods/eviction",), ("create",)),
    ],
)
def test_printed_rules_read_back_as_given(rule: PolicyRule) -> None:
    text = rbac.render_cluster_role([("a provider controller", [rule])])
    assert yaml.safe_load(text)["rules"][-1] == rule.to_api()


def test_a_rule_already_granted_by_the_core_is_not_repeated() -> None:
    nodes = rbac.core_rules()[0]
    text = rbac.render_cluster_role([("needs nodes too", [nodes])])
    assert yaml.safe_load(text)["rules"] == _deployed_cluster_role()["rules"]
    assert "needs nodes too" not in text


def test_a_rule_whose_grants_the_core_already_makes_is_left_out() -> None:
    patches_nodes = PolicyRule(("",), ("nodes",), ("get", "patch"))
    text = rbac.render_cluster_role([("patches node annotations", [patches_nodes])])
    assert yaml.safe_load(text)["rules"] == _deployed_cluster_role()["rules"]
    assert "patches node annotations" not in text


def test_a_rule_granting_one_thing_more_is_printed_whole() -> None:
    updates_nodes = PolicyRule(("",), ("nodes",), ("get", "update"))
    text = rbac.render_cluster_role([("updates nodes", [updates_nodes])])
    assert yaml.safe_load(text)["rules"][-1] == updates_nodes.to_api()
    assert "# updates nodes" in text


def test_coverage_reads_wildcards_and_object_names_as_rbac_does() -> None:
    lease = (("coordination.k8s.io",), ("leases",), ("get",))
    one_lease = PolicyRule(*lease, resource_names=("cloud-controller-manager",))
    assert rbac.covered(PolicyRule(("metallb.io",), ("bgppeers",), ("delete",)),
                        [PolicyRule(("*",), ("*",), ("*",))])  # fmt: skip
    assert rbac.covered(one_lease, [PolicyRule(*lease)])
    assert rbac.covered(one_lease, [one_lease])
    assert not rbac.covered(PolicyRule(*lease), [one_lease])
    assert not rbac.covered(PolicyRule(*lease, resource_names=("a", "b")),
                            [PolicyRule(*lease, resource_names=("a",))])  # fmt: skip
    assert not rbac.covered(PolicyRule(("",), ("nodes",), ("*",)), rbac.core_rules())


def test_a_rule_given_one_string_instead_of_a_sequence_is_refused() -> None:
    with pytest.raises(TypeError, match="sequence of strings"):
        PolicyRule(("",), "configmaps", ("get",))  # type: ignore[arg-type]
