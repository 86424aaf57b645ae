"""The plugin: registration, building the provider, and lazy boto3."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from polyccm import plugins
from polyccm.errors import ConfigError
from polyccm_aws.plugin import polyccm_build_provider
from polyccm_testing.opstools import run_polyccm


def test_registers_the_aws_provider() -> None:
    manager = plugins.plugin_manager()

    assert "aws" in plugins.installed_providers(manager)


def off_ec2(monkeypatch: pytest.MonkeyPatch) -> None:
    """A region and no instance metadata service: the provider asks this machine's (for its
    VPC) otherwise, and tests never reach the link-local address."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_builds_only_for_aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    off_ec2(monkeypatch)
    config = tmp_path / "cloud.conf"
    config.write_text("[Global]\nKubernetesClusterID = prod\n")

    other = polyccm_build_provider(plugins.ProviderSettings("gce", config, "kubernetes"))
    aws = polyccm_build_provider(plugins.ProviderSettings("aws", config, "kubernetes"))

    assert other is None
    assert aws is not None and aws.name == "aws"
    assert aws.instances_v2() is not None
    assert aws.load_balancer() is not None
    assert aws.routes() is not None


def test_an_unknown_key_is_warned_about_and_the_provider_still_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # cloud-provider-aws v1.35.0 pkg/providers/v1/aws.go:539: gcfg.FatalOnly, so an unknown
    # key never stops upstream's start (see test_config for gcfg's lines).
    off_ec2(monkeypatch)
    config = tmp_path / "cloud.conf"
    config.write_text("[Global]\nKubernetesClusterID = prod\nRegoin = eu-west-2\n")

    with caplog.at_level(logging.WARNING):
        aws = polyccm_build_provider(plugins.ProviderSettings("aws", config, "kubernetes"))

    assert aws is not None and aws.has_cluster_id()
    assert caplog.messages == [f"{config}:3: unknown key 'Regoin' in [Global] is ignored"]


def test_malformed_config_stops_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    config = tmp_path / "cloud.conf"
    config.write_text("[Global]\nRegion eu-west-1\n")

    with pytest.raises(ConfigError, match=rf"{config}:2: expected 'Key = value'"):
        polyccm_build_provider(plugins.ProviderSettings("aws", config, "kubernetes"))


def test_a_syntax_error_in_the_cloud_config_ends_the_start_with_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    config = tmp_path / "cloud.conf"
    config.write_text('[Global]\nRegion = eu-west-1\n[ServiceOverride "1"\n')

    result = run_polyccm(["--provider=aws", f"--cloud-config={config}"])

    assert result.status == 2
    assert result.stderr == (
        f"polyccm: error: {config}:3: malformed section header '[ServiceOverride \"1\"'\n"
    )


def test_other_providers_never_import_boto3() -> None:
    script = (
        "import sys\n"
        "from polyccm.cli import main\n"
        "try:\n"
        "    main(['--provider', 'gce', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('boto3' in sys.modules, 'polyccm_aws.plugin' in sys.modules)\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )

    assert result.stdout.strip().splitlines()[-1] == "False True"
