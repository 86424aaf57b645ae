"""The compute API client: every request counted and fenced, retries, and no token in logs."""

from __future__ import annotations

import pytest
from google.oauth2.credentials import Credentials
from polyccm import cloudcalls, logredact
from polyccm.errors import LeadershipLost
from polyccm_gce.api import GceApi, GceApiError
from polyccm_gce.testing import PROJECT, RunningEmulator


def client(emulator: RunningEmulator, token: str = "polyccm-test-token") -> GceApi:
    credentials = Credentials(token=token)  # type: ignore[no-untyped-call]
    return GceApi(PROJECT, f"{emulator.endpoint}/compute/v1/", credentials, backoff=0.01)


def test_every_attempt_is_counted_under_its_method(emulator: RunningEmulator) -> None:
    emulator.control.inject("compute.zones.list", count=2, status=503)
    before = cloudcalls.calls_made("gce", "compute.zones.list")

    client(emulator).list_all("compute.zones.list", "zones")

    assert cloudcalls.calls_made("gce", "compute.zones.list") - before == 3
    assert emulator.control.calls()["compute.zones.list"] == 3


def test_a_persistent_rate_limit_names_itself_after_the_retries(emulator: RunningEmulator) -> None:
    emulator.control.inject("compute.zones.list", count=0, status=403, reason="rateLimitExceeded")

    with pytest.raises(
        GceApiError, match=r"after 4 attempts \(rate limited\): 403 rateLimitExceeded"
    ):
        client(emulator).list_all("compute.zones.list", "zones")


def test_no_request_leaves_once_leadership_is_lost(emulator: RunningEmulator) -> None:
    cloudcalls.FENCE.close()
    try:
        with pytest.raises(LeadershipLost):
            client(emulator).list_all("compute.zones.list", "zones")
    finally:
        cloudcalls.FENCE.open_always()

    assert emulator.control.calls() == {}


def test_the_access_token_is_masked_in_log_lines(emulator: RunningEmulator) -> None:
    token = "gce-test-access-token-4f9a1c"
    assert token in logredact.redact(f"an error quoting {token}")

    client(emulator, token).get("compute.zones.get", "zones/us-central1-a")

    assert token not in logredact.redact(f"an error quoting {token}")


def test_a_slow_operation_is_awaited_in_short_polls(emulator: RunningEmulator) -> None:
    emulator.control.configure(route_running_seconds=0.8)
    api = client(emulator)
    api.poll_timeout = 0.2
    body = {
        "name": "slow",
        "network": "global/networks/default",
        "destRange": "10.99.0.0/24",
        "nextHopGateway": "global/gateways/default-internet-gateway",
        "priority": 1000,
    }

    done = api.mutate("compute.routes.insert", "POST", "global/routes", body)

    assert done["status"] == "DONE"
    assert emulator.control.calls()["compute.globalOperations.wait"] >= 3
