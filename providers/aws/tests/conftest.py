"""Fixtures for the AWS provider tests: the emulator as a subprocess, and a small AWS world.

The emulator (moto plus fault injection) is started once per session on a free loopback port,
with exactly the command line and environment the plugin registers for ``polyccm-dev``. Every
test that uses ``aws`` gets a reset emulator and an environment that points boto3 at it only
(no profile, no config file, and the instance metadata service the emulator serves), so
nothing can reach a real cloud.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from polyccm_aws.config import CloudConfig
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import (
    CLUSTER,
    World,
    point_boto3_at,
    running_emulator,
)


@pytest.fixture(scope="session")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, str]]:
    """The running emulator's environment (endpoint and fake credentials)."""
    with running_emulator(tmp_path_factory.mktemp("aws-emulator")) as env:
        yield env


@pytest.fixture
def aws(emulator: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> EmulatorControl:
    """A freshly reset emulator, and boto3 pointed at it alone."""
    return point_boto3_at(
        emulator, monkeypatch.setenv, lambda name: monkeypatch.delenv(name, raising=False)
    )


@pytest.fixture
def world(aws: EmulatorControl) -> World:
    return World()


@pytest.fixture
def cloud_config(tmp_path: Path) -> Path:
    """A cloud config naming the test cluster, for the ``polyccm`` command."""
    path = tmp_path / "cloud.conf"
    path.write_text(f"[Global]\nKubernetesClusterID = {CLUSTER}\n")
    return path


@pytest.fixture
def provider(aws: EmulatorControl) -> AwsProvider:
    """The AWS provider against the emulator; instance cache off so tests see changes at once."""
    return AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=0.0, max_attempts=3)
