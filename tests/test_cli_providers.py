"""The installed `polyccm` command with real provider packages: a malformed cloud config is one
line naming the file and line, exit status 2, before anything connects anywhere."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def polyccm(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    command = shutil.which("polyccm")
    assert command, "the polyccm entry point is installed in the workspace environment"
    return subprocess.run(
        [command, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )


def test_a_misspelt_aws_cloud_config_key_is_warned_about_naming_file_and_line(
    tmp_path: Path,
) -> None:
    # Upstream reads cloud.conf with gcfg.FatalOnly (cloud-provider-aws v1.35.0
    # pkg/providers/v1/aws.go:539): an unknown key does not stop the start. polyccm says so.
    config = tmp_path / "cloud.conf"
    config.write_text("[Global]\nZone = us-east-1a\nRegoin = us-east-1\n")
    result = polyccm("--provider=aws", f"--cloud-config={config}", "--kubeconfig=/nonexistent")
    warning, error = result.stderr.splitlines()
    assert f"{config}:3:" in warning and "Regoin" in warning and "ignored" in warning
    assert result.returncode == 2 and str(config) not in error  # it went on past the config
    assert "Traceback" not in result.stderr


def test_a_malformed_aws_cloud_config_value_names_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "cloud.conf"
    config.write_text("[Global]\nZone = us-east-1a\nDisableSecurityGroupIngress = maybe\n")
    result = polyccm("--provider=aws", f"--cloud-config={config}", "--kubeconfig=/nonexistent")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"{config}:3:" in result.stderr and "'maybe' is not a boolean" in result.stderr
    assert "Traceback" not in result.stderr


def test_cloud_config_that_is_not_ini_is_rejected(tmp_path: Path) -> None:
    config = tmp_path / "cloud.conf"
    config.write_text("this is not a config file\n")
    result = polyccm("--provider", "aws", "--cloud-config", str(config))
    assert result.returncode == 2
    assert str(config) in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_unknown_provider_lists_the_four_installed_ones() -> None:
    result = polyccm("--provider", "nosuch")
    assert result.returncode == 2
    assert "installed providers: aws, digitalocean, gce, packet" in result.stderr


DO_TOKEN = "dop_v1_" + "ab12" * 16


@pytest.mark.parametrize("command", ["plan", "orphans"])
@pytest.mark.parametrize(
    "setting", ["DO_OVERRIDE_URL", "DEFAULT_LB_TYPE"], ids=["in-a-url", "in-another-setting"]
)
def test_an_operator_commands_error_masks_a_secret_it_echoes(command: str, setting: str) -> None:
    """The operator commands print their one line through the same redaction as the manager's
    errors and log: the token, pasted into another setting, is not echoed with that setting."""
    env = {"DO_ACCESS_TOKEN": DO_TOKEN, "REGION": "nyc3", setting: f"x{DO_TOKEN}"}
    result = polyccm(command, "--provider=digitalocean", "--kubeconfig=/nonexistent", **env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and setting in result.stderr, result.stderr
    assert DO_TOKEN not in result.stderr and "ab12ab12" not in result.stderr
