"""DEBUG_ADDR's /healthz against the emulator, as a standby replica serves it."""

from __future__ import annotations

import contextlib
import os
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping

import pytest
from polyccm import cloudcalls
from polyccm_digitalocean.api import DigitalOceanApi
from polyccm_digitalocean.config import read_environment
from polyccm_digitalocean.servers import ProbeApi, health_answer, serve
from polyccm_digitalocean_emulator.testing import control


@pytest.fixture
def standby() -> Iterator[None]:
    """The fence as a standby replica has it: every fenced cloud call refused."""
    cloudcalls.FENCE.close()
    try:
        yield
    finally:
        cloudcalls.FENCE.open_always()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=20) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_debug_healthz_asks_the_api_on_a_standby_too(do: Mapping[str, str], standby: None) -> None:
    # Upstream's godoHealthChecker answers whether Account.Get succeeds (health.go:35-47@v0.1.68).
    # Upstream serves it on the leader only (cloud.go:194@v0.1.68); polyccm serves it on every
    # replica, so a standby's probe must not be refused by the leadership fence.
    api = DigitalOceanApi(read_environment(os.environ))
    with contextlib.ExitStack() as serving:
        port = serve(serving, "DEBUG_ADDR", ("127.0.0.1", 0), health_answer(ProbeApi(api.config)))
        url = f"http://127.0.0.1:{port}/healthz"

        assert _status(url) == 200
        control(do).inject("account_get", status=401)
        assert _status(url) == 500
        assert _status(f"http://127.0.0.1:{port}/metrics") == 404
    assert control(do).calls().get("account_get") == 2
