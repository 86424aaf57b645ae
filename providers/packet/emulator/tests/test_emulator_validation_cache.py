"""The emulator's validators, which make each schema validator and parameter reader once,
remember the document's resolved places and vouch for closed bodies from the published schema,
judge every request and answer exactly as validators built by openapi-core's own factories on
each call do: the same refusals with the same messages, the same mismatches."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openapi_core.exceptions import OpenAPIError
from polyccm_packet_emulator.app import EmulatorApp
from polyccm_packet_emulator.errors import ApiError
from polyccm_packet_emulator.openapi import CLOUD
from polyccm_packet_emulator.settings import EmulatorSettings
from polyccm_packet_emulator.testing import LocalApi
from polyccm_packet_emulator.timers import ManualClock
from polyccm_testing.emulation.closed_bodies import passes_closed
from polyccm_testing.emulation.openapi import (
    ClosedBodyValidator,
    Validators,
    uncached_validators,
)
from polyccm_testing.emulation.testing import Answer
from werkzeug.wrappers import Response

UUID = "00000000-0000-4000-8000-000000000000"


def _verdict(validators: Validators, request: Any) -> tuple[str, Any] | None:
    try:
        validators.check_request(request)
    except ApiError as error:  # the cloud's error: compare its kind and its body
        return type(error).__name__, error.body()
    return None


class ComparingApi(LocalApi):
    """Each exchange judged by the emulator's validators and by uncached ones, twice each (the
    second time from what the first one remembered); the answer tampered with too."""

    def __init__(self, app: EmulatorApp) -> None:
        super().__init__(app)
        self.reference = uncached_validators(CLOUD)
        self.compared = 0
        self.refused = 0
        self.mismatched = 0

    def call(self, method: str, path: str, body: object | None = None, **kwargs: Any) -> Answer:
        answer = super().call(method, path, body, **kwargs)
        if kwargs.get("base", "/metal/v1") != "/metal/v1":
            return answer
        cached = self.app.validators
        for _ in range(2):
            verdict = _verdict(cached, self.sent)
            assert verdict == _verdict(self.reference, self.sent), (method, path, body)
            self.refused += verdict is not None
            responses = [self.last]
            if isinstance(answer.body, dict):
                # The answer broken in two ways: a field of the wrong type, a required one gone.
                first = next(iter(answer.body))
                responses.append(_with_body(self.last, {**answer.body, first: 12.5}))
                responses.append(_with_body(self.last, {k: v for k, v in answer.body.items()
                                                        if k != first}))  # fmt: skip
            for response in responses:
                problem = cached.response_problem(self.sent, response)
                assert problem == self.reference.response_problem(self.sent, response)
                self.mismatched += problem is not None
            self.compared += 1
        return answer


def _with_body(response: Any, body: dict[str, Any]) -> Response:
    return Response(json.dumps(body), status=response.status_code,
                    content_type="application/json")  # fmt: skip


def test_cached_validators_judge_as_openapi_cores_own() -> None:
    clock = ManualClock()
    app = EmulatorApp(EmulatorSettings(device_active_delay=60, action_delay=5), clock=clock)
    api = ComparingApi(app)
    project = api.project_id
    devices = f"/projects/{project}/devices"
    spec = {"metro": "da", "plan": "c3.small.x86", "operating_system": "ubuntu_24_04"}
    node = api.ok("POST", f"{devices}?include=project", {"hostname": "a", "tags": ["k8s"], **spec})
    api.create_devices(2, tags=["k8s"])
    api.ok("GET", f"{devices}?per_page=2&page=2&include=project,plan&exclude=ip_addresses")
    clock.advance(60)
    api.ok("GET", f"/devices/{node['id']}")
    api.ok("POST", f"/devices/{node['id']}/actions", {"type": "power_off"})
    eip = api.request_ip(metro="da", tags=["usage=x"])
    api.ok("GET", f"/projects/{project}/ips?types=public_ipv4&types=private_ipv4")
    api.enable_bgp(65000, md5="Secret123pass")
    api.ok("GET", f"/projects/{project}/bgp-config")
    api.ok("POST", f"/devices/{node['id']}/bgp/sessions", {"address_family": "ipv4"})
    api.ok("GET", f"/devices/{node['id']}/bgp/neighbors")
    api.ok("DELETE", f"/ips/{eip['id']}")
    # Refused: a malformed path id, a bad query value, a missing or non-JSON body, unknown and
    # mistyped fields at each depth, a body matching neither or both of a oneOf's branches.
    api.call("GET", "/devices/not-a-uuid")
    api.call("GET", f"{devices}?per_page=many")
    api.call("POST", devices)
    api.call("POST", devices, "not an object")
    api.call("POST", devices, {"hostnme": "typo", **spec})
    api.call("POST", devices, {**spec, "tags": "k8s"})
    api.call("POST", devices, {**spec, "ip_addresses": [{"address_family": "four"}]})
    api.call("POST", devices, {**spec, "ip_addresses": [{"address_family": 4, "color": 1}]})
    api.call("POST", devices, {"plan": "c3.small.x86", "operating_system": "ubuntu_24_04"})
    api.call("POST", devices, {**spec, "facility": ["da11"]})
    api.call("POST", f"/projects/{project}/ips", {"type": "public_ipv4", "quantity": "one"})
    api.call("POST", f"/devices/{UUID}/bgp/sessions", {"address_family": 4})
    api.call("GET", f"/devices/{UUID}", token=None)

    assert api.compared == 2 * 26
    assert api.refused == 2 * 13  # every request after the tour (no token: the document's
    # security requirement)
    assert api.mismatched >= 2 * 20  # nearly every tampered answer is caught


def test_the_quick_body_test_vouches_only_for_bodies_the_strict_reading_accepts() -> None:
    """:func:`passes_closed` says yes to a plain ``createDevice`` body (so the quick path is
    taken) and no to each body the strict reading refuses, at every depth."""
    app = EmulatorApp()
    body_validator = app.validators.request.schema_validators_factory.create(
        app.validators.request.spec,
        app.validators.request.spec / "paths" / "/projects/{id}/devices" / "post"
        / "requestBody" / "content" / "application/json" / "schema",
    )  # fmt: skip
    assert isinstance(body_validator, ClosedBodyValidator)
    spec = {"metro": "da", "plan": "c3.small.x86", "operating_system": "ubuntu_24_04"}
    accepted = [
        spec,
        {**spec, "hostname": "a", "tags": ["k8s"], "customdata": {"any": {"thing": 1}}},
        {**spec, "ip_addresses": [{"address_family": 4, "public": False}]},
    ]
    refused = [
        {"facility": ["da11"], "plan": "c3.small.x86", "operating_system": "ubuntu_24_04"},
        {**spec, "hostnme": "typo"},
        {**spec, "ip_addresses": [{"address_family": 4, "color": 1}]},
        {**spec, "tags": "k8s"},
        {"plan": "c3.small.x86", "operating_system": "ubuntu_24_04"},
        {**spec, "facility": ["da11"], "extra": True},
        "not an object",
    ]
    published = body_validator._published
    schemas = CLOUD.document()["components"]["schemas"]
    contents = published.schema
    for body in accepted:
        assert passes_closed(published, schemas, body, contents), body
        body_validator.validate(body)
    for body in refused:
        assert not passes_closed(published, schemas, body, contents), body
        with pytest.raises(OpenAPIError):
            body_validator.validate(body)
