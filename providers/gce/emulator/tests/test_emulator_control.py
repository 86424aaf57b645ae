"""The control API (faults, rate limits, call counts, settings, reset) and the metadata server
of the GCE emulator, as tests and benchmarks drive them."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from polyccm_gce_emulator.metadata import HOST_LABEL, TOKEN_PREFIX
from polyccm_gce_emulator.settings import EmulatorSettings
from polyccm_gce_emulator.testing import (
    ZONE,
    ComputeApi,
    ComputeApiError,
    OperationError,
    RunningEmulator,
)


def _firewall(name: str) -> dict[str, object]:
    return {"name": name, "allowed": [{"IPProtocol": "tcp", "ports": ["80"]}]}


def test_calls_are_counted_per_method_and_project(emulator: RunningEmulator) -> None:
    api = emulator.api()
    api.create_instance("vm")
    api.get(f"zones/{ZONE}/instances")
    api.get(f"zones/{ZONE}/instances")
    ComputeApi(emulator.endpoint, "other").get("zones")
    control = emulator.control
    counts = control.calls()
    assert counts["compute.instances.insert"] == 1
    assert counts["compute.instances.list"] == 2
    assert counts["compute.zones.list"] == 1
    assert "compute.zones.list" not in control.calls(project=api.project)
    control.reset_calls()
    assert control.calls() == {}


def test_an_injected_5xx_fails_the_next_calls_then_stops(emulator: RunningEmulator) -> None:
    api = emulator.api()
    emulator.control.inject("compute.firewalls.insert", count=2, status=503)
    for _ in range(2):
        with pytest.raises(ComputeApiError) as caught:
            api.request("POST", "global/firewalls", _firewall("fw"))
        assert (caught.value.status, caught.value.reason) == (503, "backendError")
    api.do("POST", "global/firewalls", _firewall("fw"))
    assert emulator.control.faults() == []


def test_an_injected_rate_limit_error_looks_like_googles(emulator: RunningEmulator) -> None:
    api = emulator.api()
    emulator.control.inject(
        "*", status=403, reason="rateLimitExceeded", message="Rate Limit Exceeded"
    )
    with pytest.raises(ComputeApiError) as caught:
        api.get("zones")
    assert caught.value.body == {
        "error": {
            "code": 403,
            "message": "Rate Limit Exceeded",
            "errors": [
                {
                    "domain": "usageLimits",
                    "reason": "rateLimitExceeded",
                    "message": "Rate Limit Exceeded",
                }
            ],
        }
    }


def test_injected_latency_slows_the_answer(emulator: RunningEmulator) -> None:
    api = emulator.api()
    emulator.control.slow_down("compute.zones.list", 0.3)
    began = time.monotonic()
    api.get("zones")
    assert time.monotonic() - began >= 0.3
    began = time.monotonic()
    api.get("zones")
    assert time.monotonic() - began < 0.3


def test_an_injected_operation_error_ends_the_operation_without_its_effect(
    emulator: RunningEmulator,
) -> None:
    api = emulator.api()
    emulator.control.inject(
        "compute.instances.insert",
        operation_error="ZONE_RESOURCE_POOL_EXHAUSTED",
        message="The zone does not have enough resources.",
        operation_status=503,
    )
    with pytest.raises(OperationError) as failed:
        api.create_instance("vm")
    assert failed.value.codes == ["ZONE_RESOURCE_POOL_EXHAUSTED"]
    assert failed.value.operation["httpErrorStatusCode"] == 503
    with pytest.raises(ComputeApiError):
        api.get(f"zones/{ZONE}/instances/vm")
    # Nothing leaked: the same name and address space serve the next try.
    assert api.create_instance("vm")["networkInterfaces"][0]["networkIP"] == "10.128.0.2"


def test_a_rate_limit_per_method_answers_403_above_it(emulator: RunningEmulator) -> None:
    api = emulator.api()
    emulator.control.rate_limit("compute.zones.get", per_second=1, burst=2)
    api.get(f"zones/{ZONE}")
    api.get(f"zones/{ZONE}")
    with pytest.raises(ComputeApiError) as caught:
        api.get(f"zones/{ZONE}")
    assert (caught.value.status, caught.value.reason) == (403, "rateLimitExceeded")
    api.get("zones")  # other methods are not limited
    emulator.control.clear_rate_limits()
    api.get(f"zones/{ZONE}")


def test_settings_change_at_run_time_and_reset_restores_them(emulator: RunningEmulator) -> None:
    api = emulator.api()
    control = emulator.control
    control.configure(pending_seconds=0.5)
    operation = api.request("POST", "global/firewalls", _firewall("fw"))
    assert api.get(operation["selfLink"])["status"] == "PENDING"
    with pytest.raises(ValueError, match="unknown setting"):
        EmulatorSettings().updated({"pendng_seconds": 1})
    control.inject("*", count=0, status=500)
    control.reset()
    assert control.settings()["pending_seconds"] == 0.01
    assert control.faults() == [] and control.calls() == {}
    with pytest.raises(ComputeApiError) as caught:
        api.get("global/firewalls/fw")
    assert caught.value.status == 404


def test_the_control_api_lists_the_methods_served(emulator: RunningEmulator) -> None:
    methods = {item["id"]: item for item in emulator.control.methods()}
    assert methods["compute.routes.insert"] == {
        "id": "compute.routes.insert",
        "httpMethod": "POST",
        "path": "projects/{project}/global/routes",
    }


def _metadata(endpoint: str, path: str, flavor: bool = True) -> tuple[int, str, str]:
    request = urllib.request.Request(
        f"{endpoint}/computeMetadata/v1/{path}",
        headers={"Metadata-Flavor": "Google"} if flavor else {},
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.read().decode(), response.headers["Metadata-Flavor"]
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), error.headers["Metadata-Flavor"]


def test_the_metadata_server_describes_the_instance_labelled_as_host(
    emulator: RunningEmulator,
) -> None:
    api = emulator.api()
    endpoint = emulator.endpoint
    assert _metadata(endpoint, "project/project-id") == (200, api.project, "Google")
    assert _metadata(endpoint, "instance/zone")[0] == 404  # no host instance yet
    assert _metadata(endpoint, "project/project-id", flavor=False)[0] == 403
    api.create_instance("other")
    host = api.create_instance("ccm-host", labels={HOST_LABEL: "true"})
    status, zone, _ = _metadata(endpoint, "instance/zone")
    assert status == 200 and zone.startswith("projects/") and zone.endswith(f"/zones/{ZONE}")
    assert _metadata(endpoint, "instance/name")[1] == "ccm-host"
    assert _metadata(endpoint, "instance/id")[1] == host["id"]
    assert (
        _metadata(endpoint, "instance/network-interfaces/0/ip")[1]
        == (host["networkInterfaces"][0]["networkIP"])
    )
    status, token, _ = _metadata(endpoint, "instance/service-accounts/default/token")
    assert status == 200 and json.loads(token)["access_token"].startswith(TOKEN_PREFIX)
    # The token is accepted by the API.
    ComputeApi(endpoint, token=json.loads(token)["access_token"]).get("zones")
