"""Fixtures for the DigitalOcean provider tests: the emulator as a process, shared by the
session, reset for each test, with this process's environment pointing the provider's client
at it alone."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest
from polyccm_digitalocean_emulator.testing import control, running_emulator


@pytest.fixture(scope="session")
def provider_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, str]]:
    """The emulator the provider tests use: load balancers turn active at once."""
    with running_emulator(tmp_path_factory.mktemp("do-provider"), lb_active_delay=0) as env:
        yield env


@pytest.fixture
def do(provider_emulator: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> Mapping[str, str]:
    """A reset emulator; the client trusts its CA (``REQUESTS_CA_BUNDLE``) and nothing else."""
    for name in ("DO_ACCESS_TOKEN_FILE", "REGION", "DO_API_RATE_LIMIT_QPS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in provider_emulator.items():
        monkeypatch.setenv(name, value)
    control(provider_emulator).reset()
    return provider_emulator
