"""The compute API client on google-cloud-compute's typed clients: every request counted and
fenced (retries, pages and operation polls included), retries, and no token in logs."""

from __future__ import annotations

import pytest
from google.cloud import compute_v1
from google.oauth2.credentials import Credentials
from polyccm import cloudcalls, logredact
from polyccm.errors import LeadershipLost
from polyccm_gce.api import GceApi, GceApiError
from polyccm_gce_emulator.testing import PROJECT, RunningEmulator


def client(emulator: RunningEmulator, token: str = "polyccm-test-token") -> GceApi:
    credentials = Credentials(token=token)  # type: ignore[no-untyped-call]
    return GceApi(PROJECT, f"{emulator.endpoint}/compute/v1/", credentials, backoff=0.01)


def slow_route(name: str) -> compute_v1.Route:
    return compute_v1.Route(
        name=name,
        network="global/networks/default",
        dest_range="10.99.0.0/24",
        next_hop_gateway="global/gateways/default-internet-gateway",
        priority=1000,
    )


def test_every_attempt_is_counted_under_its_method(emulator: RunningEmulator) -> None:
    emulator.control.inject("compute.zones.list", count=2, status=503)
    before = cloudcalls.calls_made("gce", "compute.zones.list")
    api = client(emulator)

    api.items(api.client(compute_v1.ZonesClient).list)

    assert cloudcalls.calls_made("gce", "compute.zones.list") - before == 3
    assert emulator.control.calls()["compute.zones.list"] == 3


def test_a_persistent_rate_limit_names_itself_after_the_retries(emulator: RunningEmulator) -> None:
    emulator.control.inject("compute.zones.list", count=0, status=403, reason="rateLimitExceeded")
    api = client(emulator)

    with pytest.raises(
        GceApiError, match=r"after 4 attempts \(rate limited\): 403 rateLimitExceeded"
    ):
        api.items(api.client(compute_v1.ZonesClient).list)


def test_no_request_leaves_once_leadership_is_lost(emulator: RunningEmulator) -> None:
    api = client(emulator)
    zones = api.client(compute_v1.ZonesClient)
    cloudcalls.FENCE.close()
    try:
        with pytest.raises(LeadershipLost):
            api.items(zones.list)
        with pytest.raises(LeadershipLost):
            api.rest("compute.httpHealthChecks.list", "GET", "global/httpHealthChecks")
    finally:
        cloudcalls.FENCE.open_always()

    assert emulator.control.calls() == {}


def test_the_access_token_is_masked_in_log_lines(emulator: RunningEmulator) -> None:
    token = "gce-test-access-token-4f9a1c"
    assert token in logredact.redact(f"an error quoting {token}")
    api = client(emulator, token)

    api.invoke(api.client(compute_v1.ZonesClient).get, project=PROJECT, zone="us-central1-a")

    assert token not in logredact.redact(f"an error quoting {token}")


def test_a_slow_operation_is_awaited_in_short_polls(emulator: RunningEmulator) -> None:
    emulator.control.configure(route_running_seconds=0.8)
    api = client(emulator)
    api.poll_timeout = 0.2

    done = api.run(
        api.client(compute_v1.RoutesClient).insert_unary, route_resource=slow_route("slow")
    )

    assert done.status == compute_v1.Operation.Status.DONE
    assert emulator.control.calls()["compute.globalOperations.wait"] >= 3


def test_the_sdks_own_operation_polling_reaches_the_configured_endpoint(
    emulator: RunningEmulator,
) -> None:
    """ExtendedOperation.result() would poll compute.googleapis.com with the SDK's defaults."""
    emulator.control.configure(route_running_seconds=0.3)
    api = client(emulator)
    before = cloudcalls.calls_made("gce", "compute.globalOperations.get")

    operation = api.client(compute_v1.RoutesClient).insert(
        project=PROJECT, route_resource=slow_route("polled")
    )
    operation.result(timeout=10)

    polls = emulator.control.calls().get("compute.globalOperations.get", 0)
    assert polls >= 1
    assert cloudcalls.calls_made("gce", "compute.globalOperations.get") - before == polls


def test_legacy_http_health_checks_go_over_rest_with_the_same_errors(
    emulator: RunningEmulator,
) -> None:
    emulator.control.inject("compute.httpHealthChecks.get", count=1, status=503)
    api = client(emulator)

    with pytest.raises(
        GceApiError, match=r"httpHealthChecks.get failed after 2 attempts: 404 notFound"
    ):
        api.rest("compute.httpHealthChecks.get", "GET", "global/httpHealthChecks/none")

    assert emulator.control.calls()["compute.httpHealthChecks.get"] == 2
