"""Fixtures shared by the end-to-end tests: one AWS emulator (moto plus fault injection) for the
session, and a freshly reset one, with boto3 pointed at it alone, for each test that asks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import point_boto3_at, running_emulator


@pytest.fixture(scope="session")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, str]]:
    """The running emulator's environment (endpoint, fake credentials, metadata endpoint)."""
    with running_emulator(tmp_path_factory.mktemp("aws")) as env:
        yield env


@pytest.fixture
def aws(emulator: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> EmulatorControl:
    """A freshly reset emulator, and boto3 in this process pointed at it alone."""
    return point_boto3_at(
        emulator, monkeypatch.setenv, lambda name: monkeypatch.delenv(name, raising=False)
    )
