"""Fixtures for the AWS emulator's tests: the emulator as a subprocess, launched as the plugin
registers it for ``polyccm-dev``, reset for each test, and boto3 pointed at it alone."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import World, point_boto3_at, running_emulator


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
