"""Fixtures for the Equinix Metal provider tests: the emulator as a process, shared by the
session and reset for each test, with this process's environment pointing at it alone."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest
from polyccm_packet_emulator.testing import control, running_emulator

_VARIABLES = ("METAL_FACILITY", "METAL_LOAD_BALANCER", "METAL_LOCAL_ASN", "METAL_BGP_PASS",
              "METAL_CLUSTER_ID", "METAL_FACILITY_NAME")  # fmt: skip


@pytest.fixture(scope="session")
def provider_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, str]]:
    with running_emulator(tmp_path_factory.mktemp("metal-provider")) as env:
        yield env


@pytest.fixture
def metal(
    provider_emulator: Mapping[str, str], monkeypatch: pytest.MonkeyPatch
) -> Mapping[str, str]:
    """A reset emulator and an environment naming it (and no other Metal setting)."""
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in provider_emulator.items():
        monkeypatch.setenv(name, value)
    control(provider_emulator).reset()
    return provider_emulator
