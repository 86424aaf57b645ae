"""The emulator's request validators (schema validators made once, the document's resolved
places remembered, closed bodies vouched for from the published schema) refuse exactly what
validators built by openapi-core's own factories on each call refuse, with the same error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from polyccm_digitalocean_emulator import openapi
from polyccm_digitalocean_emulator.errors import ApiError
from polyccm_testing.emulation.closed_bodies import passes_closed
from polyccm_testing.emulation.openapi import (
    ClosedBodyValidator,
    Validators,
    uncached_validators,
)
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request

DROPLET = {"name": "a", "region": "nyc3", "size": "s-1vcpu-1gb", "image": "ubuntu-24-04-x64"}
RULE = {"entry_protocol": "tcp", "entry_port": 80, "target_protocol": "tcp", "target_port": 30080}
BALANCER = {"name": "lb", "region": "nyc3", "forwarding_rules": [RULE], "droplet_ids": [1, 2]}
UUID = "00000000-0000-4000-8000-000000000000"

REQUESTS: list[tuple[str, str, Any]] = [
    ("POST", "/v2/droplets", DROPLET),
    ("POST", "/v2/droplets", {**DROPLET, "tags": ["k8s"], "vpc_uuid": UUID}),
    ("POST", "/v2/droplets", {**{k: v for k, v in DROPLET.items() if k != "name"},
                              "names": ["a", "b"]}),
    ("POST", "/v2/droplets", {**DROPLET, "nmae": "typo"}),
    ("POST", "/v2/droplets", {**DROPLET, "names": ["a"]}),
    ("POST", "/v2/droplets", {**DROPLET, "tags": "k8s"}),
    ("POST", "/v2/droplets", ["not", "an", "object"]),
    ("POST", "/v2/load_balancers", BALANCER),
    ("POST", "/v2/load_balancers", {**BALANCER, "tag": "k8s", "droplet_ids": None}),
    ("POST", "/v2/load_balancers", {**BALANCER, "forwarding_rules": [{**RULE, "tls": 1}]}),
    ("POST", "/v2/load_balancers", {**BALANCER, "health_check": {"protocol": "http",
                                                                 "prot": 1}}),
    ("POST", "/v2/load_balancers", {**BALANCER, "firewall": {"allow": ["ip:1.2.3.4"]}}),
    ("POST", "/v2/load_balancers", {**BALANCER, "sticky_sessions": {"type": 3}}),
    ("PUT", f"/v2/load_balancers/{UUID}", BALANCER),
    ("POST", f"/v2/load_balancers/{UUID}/droplets", {"droplet_ids": [1, 2]}),
    ("POST", f"/v2/load_balancers/{UUID}/droplets", {"droplet_ids": ["1"]}),
    ("POST", "/v2/tags", {"name": "k8s"}),
    ("POST", "/v2/tags/k8s/resources", {"resources": [{"resource_id": "1",
                                                      "resource_type": "droplet"}]}),
    ("POST", "/v2/tags/k8s/resources", {"resources": [{"resource_id": "1", "kind": "x"}]}),
    ("POST", "/v2/vpcs", {"name": "v", "region": "nyc3", "ip_range": "10.64.0.0/16"}),
    ("POST", "/v2/vpcs", {"name": "v", "region": "nyc3", "range": "10.64.0.0/16"}),
    ("GET", "/v2/droplets?tag_name=k8s&per_page=200", None),
    ("GET", "/v2/droplets?per_page=many", None),
]  # fmt: skip


def _request(method: str, path: str, body: Any) -> Request:
    builder = EnvironBuilder(
        path, method=method, base_url="https://127.0.0.1:8443",
        headers=[("Authorization", "Bearer dop_v1_x")],
        data=None if body is None else json.dumps(body),
        content_type="application/json" if body is not None else None,
    )  # fmt: skip
    return Request(builder.get_environ())


def _verdict(validators: Validators, request: Request) -> tuple[str, Any] | None:
    try:
        openapi.check_request(validators, request)
    except ApiError as error:
        return type(error).__name__, error.body()
    return None


@pytest.mark.parametrize(("method", "path", "body"), REQUESTS)
def test_cached_validators_refuse_as_openapi_cores_own(method: str, path: str, body: Any) -> None:
    cached, reference = openapi.validators(), uncached_validators(openapi.CLOUD)
    for _ in range(2):  # the second time from what the first one remembered
        request = _request(method, path, body)
        assert _verdict(cached, request) == _verdict(reference, _request(method, path, body))


def _body_validator(template: str, method: str) -> Any:
    request = openapi.validators().request
    spec = request.spec
    schema = (spec / "paths" / template / method / "requestBody" / "content"
              / "application/json" / "schema")  # fmt: skip
    return request.schema_validators_factory.create(spec, schema)


@pytest.mark.parametrize(("template", "body"), [("/v2/droplets", b) for b in (
    DROPLET, {**DROPLET, "tags": ["k8s"]}, {**DROPLET, "nmae": "typo"}, {**DROPLET, "names": ["a"]},
)] + [("/v2/load_balancers", b) for b in (
    BALANCER, {**BALANCER, "forwarding_rules": [{**RULE, "tls": 1}]},
    {**BALANCER, "health_check": {"protocol": "http", "prot": 1}},
)])  # fmt: skip
def test_the_quick_body_test_vouches_only_for_bodies_the_strict_reading_accepts(
    template: str, body: Any
) -> None:
    validator = _body_validator(template, "post")
    assert isinstance(validator, ClosedBodyValidator)
    published = validator._published
    schemas = openapi.CLOUD.document()["components"]["schemas"]
    strict = _verdict(uncached_validators(openapi.CLOUD), _request("POST", template, body))
    assert passes_closed(published, schemas, body, published.schema) == (strict is None)
