"""Every request the emulator accepts and every answer it sends match DigitalOcean's OpenAPI
document, checked here with openapi-core independently of the emulator's own checks; the
operations it routes are exactly the document's; unknown body fields are refused."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from openapi_core import OpenAPI
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse
from polyccm_digitalocean_emulator import openapi as emulator_openapi
from polyccm_digitalocean_emulator.app import EmulatorApp
from polyccm_digitalocean_emulator.openapi import document, operations
from polyccm_digitalocean_emulator.settings import EmulatorSettings
from polyccm_digitalocean_emulator.testing import Answer, LocalApi
from polyccm_digitalocean_emulator.timers import ManualClock
from polyccm_digitalocean_emulator.urls import ROUTES

PUBLISHED = OpenAPI.from_dict(document())


class AsSentToDigitalOcean(WerkzeugOpenAPIRequest):
    @property
    def host_url(self) -> str:
        return "https://api.digitalocean.com/"


def _template(method: str, path: str) -> tuple[str, str]:
    """The document operation a concrete request is for (most literal segments wins)."""
    best: tuple[int, str] | None = None
    for verb, template in operations():
        pattern = "^" + re.sub(r"\{[^/}]+\}", "[^/]+", template) + "$"
        if verb == method and re.match(pattern, path):
            literal = len(re.sub(r"\{[^/}]+\}", "", template))
            if best is None or literal > best[0]:
                best = (literal, template)
    assert best is not None, f"{method} {path} is no operation of the document"
    return method, best[1]


class CheckedApi(LocalApi):
    """Checks each exchange against the published document; records which operations answered
    with success."""

    def __init__(self, app: EmulatorApp) -> None:
        super().__init__(app)
        self.succeeded: set[tuple[str, str]] = set()
        self.checked = 0

    def call(self, method: str, path: str, body: object | None = None, **kwargs: Any) -> Answer:
        answer = super().call(method, path, body, **kwargs)
        request = AsSentToDigitalOcean(self.sent)
        if answer.status < 400:
            PUBLISHED.validate_request(request)
            self.succeeded.add(_template(method, path.split("?", maxsplit=1)[0]))
        PUBLISHED.validate_response(request, WerkzeugOpenAPIResponse(self.last))
        self.checked += 1
        return answer


@pytest.fixture
def api() -> Iterator[CheckedApi]:
    settings = EmulatorSettings(lb_active_delay=5)
    clock = ManualClock()
    app = EmulatorApp(settings, clock=clock)
    app.test_clock = clock  # type: ignore[attr-defined]
    yield CheckedApi(app)


def test_the_routed_operations_are_the_documents() -> None:
    routed = {(route.method, route.template) for route in ROUTES}
    assert routed == operations()
    for route in ROUTES:
        published = document()["paths"][route.template][route.method.lower()]
        assert route.operation == published["operationId"]


def _cert_body(name: str) -> dict[str, Any]:
    return {"name": name, "type": "custom", "private_key": "-----BEGIN PRIVATE KEY-----",
            "leaf_certificate": "-----BEGIN CERTIFICATE-----"}  # fmt: skip


def _lb_body(droplet_ids: list[int], **extra: Any) -> dict[str, Any]:
    return {
        "name": "web",
        "region": "nyc3",
        "forwarding_rules": [
            {"entry_protocol": "http", "entry_port": 80,
             "target_protocol": "http", "target_port": 30080},
        ],
        "health_check": {"protocol": "http", "port": 10256, "path": "/healthz"},
        "droplet_ids": droplet_ids,
        **extra,
    }  # fmt: skip


def test_every_operation_answers_as_the_document_says(api: CheckedApi) -> None:
    """A tour through every operation: each request and each answer is checked against the
    document, and together they cover every operation the emulator routes."""
    api.ok("GET", "/v2/account")
    api.ok("GET", "/v2/regions")
    api.ok("GET", "/v2/sizes?per_page=3&page=2")
    vpc = api.ok("POST", "/v2/vpcs", {"name": "cluster", "region": "nyc3"})["vpc"]
    api.ok("GET", "/v2/vpcs")
    api.ok("GET", f"/v2/vpcs/{vpc['id']}")
    single = api.ok("POST", "/v2/droplets", {"name": "node-a", "region": "nyc3",
                    "size": "s-1vcpu-1gb", "image": "ubuntu-24-04-x64", "tags": ["k8s"],
                    "vpc_uuid": vpc["id"], "ipv6": True})  # fmt: skip
    node = single["droplet"]["id"]
    others = api.create_droplets(3, prefix="node", tags=["k8s"])
    api.ok("GET", "/v2/droplets?tag_name=k8s&per_page=2&page=2")
    api.ok("GET", "/v2/droplets?name=node-a")
    api.ok("GET", f"/v2/droplets/{node}")
    api.app.test_clock.advance(1)  # type: ignore[attr-defined]
    action = api.action(node, "power_off")
    api.ok("GET", f"/v2/droplets/{node}/actions/{action['id']}")
    api.ok("GET", f"/v2/actions/{action['id']}")
    api.ok("GET", f"/v2/droplets/{node}/actions")
    api.ok("POST", "/v2/tags", {"name": "frontend"})
    api.ok("GET", "/v2/tags")
    resources = {"resources": [{"resource_id": str(node), "resource_type": "droplet"}]}
    api.ok("POST", "/v2/tags/frontend/resources", resources)
    api.ok("GET", "/v2/tags/frontend")
    api.ok("DELETE", "/v2/tags/frontend/resources", resources)
    api.ok("DELETE", "/v2/tags/frontend")
    certificate = api.ok("POST", "/v2/certificates", _cert_body("web-cert"))["certificate"]
    api.ok("GET", "/v2/certificates?name=web-cert")
    api.ok("GET", f"/v2/certificates/{certificate['id']}")
    lb = api.ok("POST", "/v2/load_balancers", _lb_body([others[0]["id"]]))["load_balancer"]
    api.ok("GET", "/v2/load_balancers")
    api.app.test_clock.advance(5)  # type: ignore[attr-defined]
    api.ok("GET", f"/v2/load_balancers/{lb['id']}")
    https = {"entry_protocol": "https", "entry_port": 443, "target_protocol": "http",
             "target_port": 30080, "certificate_id": certificate["id"]}  # fmt: skip
    api.ok("PUT", f"/v2/load_balancers/{lb['id']}",
           _lb_body([others[0]["id"]], sticky_sessions={"type": "cookies",
                    "cookie_name": "s", "cookie_ttl_seconds": 60}))  # fmt: skip
    api.ok("POST", f"/v2/load_balancers/{lb['id']}/droplets", {"droplet_ids": [others[1]["id"]]})
    api.ok("DELETE", f"/v2/load_balancers/{lb['id']}/droplets", {"droplet_ids": [others[1]["id"]]})
    api.ok("POST", f"/v2/load_balancers/{lb['id']}/forwarding_rules", {"forwarding_rules": [https]})
    api.ok("DELETE", f"/v2/load_balancers/{lb['id']}/forwarding_rules",
           {"forwarding_rules": [https]})  # fmt: skip
    api.ok("DELETE", f"/v2/load_balancers/{lb['id']}")
    api.ok("DELETE", f"/v2/certificates/{certificate['id']}")
    rules = {"inbound_rules": [{"protocol": "tcp", "ports": "30000-32767",
                                "sources": {"addresses": ["0.0.0.0/0"]}}]}  # fmt: skip
    firewall = api.ok("POST", "/v2/firewalls", {"name": "k8s-nodes", "tags": ["k8s"], **rules})
    firewall_id = firewall["firewall"]["id"]
    api.ok("GET", "/v2/firewalls")
    api.ok("GET", f"/v2/firewalls/{firewall_id}")
    api.ok("PUT", f"/v2/firewalls/{firewall_id}", {"name": "k8s-nodes", "droplet_ids": [node],
                                                    **rules})  # fmt: skip
    api.ok("DELETE", f"/v2/firewalls/{firewall_id}")
    api.ok("DELETE", f"/v2/droplets/{node}")
    api.ok("DELETE", "/v2/droplets?tag_name=k8s")
    api.ok("DELETE", f"/v2/vpcs/{vpc['id']}")

    assert api.succeeded == {(route.method, route.template) for route in ROUTES}


def test_error_answers_match_the_document(api: CheckedApi) -> None:
    """401, 404, 422, 429 and injected 5xx answers are DigitalOcean error bodies the document
    describes, with the rate-limit headers."""
    statuses = [
        api.call("GET", "/v2/droplets", token=None).status,
        api.call("GET", "/v2/droplets/12345").status,
        api.call("GET", "/v2/load_balancers/no-such-lb").status,
        api.call("POST", "/v2/droplets", {"name": "x", "size": "nope", "image": "x"}).status,
        api.call("POST", "/v2/load_balancers", _lb_body([], region="mars")).status,
    ]
    api.app.calls.add_fault({"operation": "sizes_list", "status": 500})
    api.app.calls.add_fault({"operation": "regions_list", "status": 503})
    statuses += [api.call("GET", "/v2/sizes").status, api.call("GET", "/v2/regions").status]
    api.app.configure({"rate_limit_per_minute": 8})  # 6 spent above
    statuses += [api.call("GET", "/v2/account").status for _ in range(3)]
    assert statuses == [401, 404, 404, 422, 422, 500, 503, 200, 200, 429]
    assert api.checked == len(statuses)


UNKNOWN_FIELDS = [
    ("/v2/droplets", {"name": "a", "region": "nyc3", "size": "s-1vcpu-1gb",
                      "image": "ubuntu-24-04-x64", "backup": True}, "backup"),
    ("/v2/load_balancers", _lb_body([], algorithm_name="x"), "algorithm_name"),
    ("/v2/load_balancers", _lb_body([], health_check={"protocol": "http", "port": 1,
                                                      "paht": "/"}), "paht"),
    ("/v2/tags", {"name": "k8s", "color": "red"}, "color"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "unknown"), UNKNOWN_FIELDS)
def test_unknown_body_fields_are_refused_as_the_real_api_refuses_them(
    api: CheckedApi, path: str, body: dict[str, Any], unknown: str
) -> None:
    answer = api.call("POST", path, body)

    assert answer.status == 422
    assert answer.body["id"] == "unprocessable_entity"
    assert unknown in answer.body["message"]
    # The published document leaves its objects open, so only the strict reading catches it.
    PUBLISHED.validate_request(AsSentToDigitalOcean(api.sent))


def test_the_documents_own_request_examples_are_accepted(api: CheckedApi) -> None:
    """The strict reading only adds the unknown-field rule: DigitalOcean's own examples of
    droplet, load balancer, tag and VPC requests still pass it."""
    components = document()["components"]["examples"]
    accepted = []
    for template, item in document()["paths"].items():
        operation = item.get("post")
        if operation is None or "{" in template:
            continue
        media = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
        for example in media.get("examples", {}).values():
            value = components[example["$ref"].rsplit("/", 1)[1]]["value"]
            answer = api.call("POST", template, value)
            assert answer.status != 422 or "Unevaluated" not in answer.body["message"], (
                template,
                answer.body,
            )
            accepted.append(template)
    assert {"/v2/droplets", "/v2/load_balancers"} <= set(accepted)


def test_checking_every_request_keeps_the_emulator_fast(api: CheckedApi) -> None:
    """The document is parsed and the validators built once per process: a hundred checked
    creates and pages of 200 take well under a few seconds of CPU (CPU, not wall time: the
    emulator answers in this process, and other work on the machine does not count)."""
    started = time.process_time()
    for _ in range(10):
        api.create_droplets(10)
        api.ok("GET", "/v2/droplets?per_page=200")
    assert time.process_time() - started < 10


def _droplet_ids_schemas(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        properties = node.get("properties")
        if isinstance(properties, dict) and "droplet_ids" in properties:
            yield properties["droplet_ids"]
        for value in node.values():
            yield from _droplet_ids_schemas(value)
    elif isinstance(node, list):
        for value in node:
            yield from _droplet_ids_schemas(value)


def test_droplet_ids_are_arrays_of_integers_with_no_other_rule_in_the_document() -> None:
    """What checking a long ``droplet_ids`` by its first id rests on."""
    schemas = list(_droplet_ids_schemas(document()))
    assert len(schemas) >= 4
    for schema in schemas:
        rules = set(schema) - {"description", "example", "nullable"}
        assert rules == {"type", "items"} and schema["type"] == "array", schema
        assert schema["items"] == {"type": "integer"}, schema


def _answers(bodies: list[tuple[str, str, Any]], whole: bool) -> list[tuple[int, Any]]:
    """Status and error body (or droplet ids) of each request on a fresh account of 40
    droplets; ``whole``: every ``droplet_ids`` checked whole."""
    app = EmulatorApp(EmulatorSettings(lb_active_delay=5), clock=ManualClock())
    local = LocalApi(app)
    local.create_droplets(40)
    with pytest.MonkeyPatch.context() as patch:
        if whole:
            patch.setattr(emulator_openapi, "CHECKED_DROPLET_IDS", 10**9)
        answers = []
        for method, path, body in bodies:
            answer = local.call(method, path, body)
            kept = answer.body if answer.status >= 400 else answer.status
            if answer.status < 300 and isinstance(answer.body, dict):
                kept = answer.body.get("load_balancer", {}).get("droplet_ids")
            answers.append((answer.status, kept))
    return answers


def test_a_long_droplet_ids_is_answered_as_when_checked_whole() -> None:
    ids = list(range(463_000_001, 463_000_041))
    rule = {"entry_protocol": "tcp", "entry_port": 80, "target_protocol": "tcp",
            "target_port": 30080}  # fmt: skip
    lb = {"name": "a", "region": "nyc3", "forwarding_rules": [rule]}
    bodies = [
        ("POST", "/v2/load_balancers", {**lb, "droplet_ids": ids}),
        ("POST", "/v2/load_balancers", {**lb, "droplet_ids": [*ids, "463000001"]}),
        ("POST", "/v2/load_balancers", {**lb, "droplet_ids": [*ids, True]}),
        ("POST", "/v2/load_balancers", {**lb, "droplet_ids": [*ids, 1.5]}),
        ("POST", "/v2/load_balancers", {**lb, "droplet_ids": [*ids, None]}),
        ("POST", "/v2/load_balancers", {**lb, "droplet_ids": ids, "tag": "k8s"}),
        ("POST", "/v2/load_balancers", {**lb, "droplet_ids": ids, "algorithm_name": "x"}),
        ("POST", "/v2/load_balancers", {**lb, "droplet_ids": [*ids, 1]}),
        ("POST", "/v2/load_balancers", {"droplet_ids": ids, "region": "nyc3"}),
        ("POST", "/v2/load_balancers/nope/droplets", {"droplet_ids": ids}),
        ("POST", "/v2/load_balancers/nope/droplets", {"droplet_ids": [*ids, "x"]}),
        ("DELETE", "/v2/load_balancers/nope/droplets", {"droplet_ids": ids, "more": 1}),
        ("POST", "/v2/firewalls", {"name": "f", "droplet_ids": ids, "inbound_rules": []}),
    ]
    assert _answers(bodies, whole=False) == _answers(bodies, whole=True)


# godo v1.243.0 load_balancers.go:190, HealthCheck.ProxyProtocol *bool
# `json:"proxy_protocol,omitempty"`: sent by upstream's CCM (digitalocean-cloud-controller-manager
# v0.1.68, run on the emulator: /work/shared/UPSTREAM_PEERS.md) and taken by DigitalOcean; the
# published document lacks it, so the emulator's overlay (openapi.OVERLAY) names it. Before
# the overlay both calls were a 422: "Unevaluated properties are not allowed ('proxy_protocol'
# was unexpected)".
def test_a_health_check_proxy_protocol_is_taken_on_create_and_update(api: CheckedApi) -> None:
    body = _lb_body([])
    body["health_check"]["proxy_protocol"] = True
    created = api.call("POST", "/v2/load_balancers", body)
    assert created.status == 202, created.body
    lb_id = created.body["load_balancer"]["id"]
    read = api.call("GET", f"/v2/load_balancers/{lb_id}")
    assert read.body["load_balancer"]["health_check"]["proxy_protocol"] is True

    body["health_check"]["proxy_protocol"] = False
    updated = api.call("PUT", f"/v2/load_balancers/{lb_id}", body)
    assert updated.status == 200, updated.body
    read = api.call("GET", f"/v2/load_balancers/{lb_id}")
    assert read.body["load_balancer"]["health_check"]["proxy_protocol"] is False


def test_the_overlay_leaves_other_unknown_fields_refused(api: CheckedApi) -> None:
    body = _lb_body([])
    body["health_check"]["proxy_protocol"] = True
    body["health_check"]["proxy_protocl"] = True
    answer = api.call("POST", "/v2/load_balancers", body)

    assert answer.status == 422
    assert "proxy_protocl" in answer.body["message"]


def test_every_overlay_entry_cites_the_sdk_field_and_is_missing_from_the_document() -> None:
    published = emulator_openapi.emulation.load_document(emulator_openapi.DOCUMENT)
    for field in emulator_openapi.OVERLAY:
        properties = published["components"]["schemas"][field.schema]["properties"]
        # A widened field is in the document (with fewer values); a new one is not.
        assert (field.name in properties) == field.widens
        assert re.search(rf'`json:"{field.name}(,omitempty)?"`', field.cites), field.cites
