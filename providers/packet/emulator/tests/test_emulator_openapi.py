"""Every request the emulator accepts and every answer it sends match Equinix Metal's OpenAPI
document, checked here with openapi-core independently of the emulator's own checks; the
operations it routes are exactly the document's; unknown body fields are refused."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from openapi_core import OpenAPI
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse
from openapi_schema_validator import OAS30Validator
from polyccm_packet_emulator import openapi as emulator_openapi
from polyccm_packet_emulator.app import EmulatorApp
from polyccm_packet_emulator.openapi import document, operations
from polyccm_packet_emulator.settings import EmulatorSettings
from polyccm_packet_emulator.testing import Answer, LocalApi
from polyccm_packet_emulator.timers import ManualClock
from polyccm_packet_emulator.urls import ROUTES

PUBLISHED = OpenAPI.from_dict(document())


class AsSentToMetal(WerkzeugOpenAPIRequest):
    @property
    def host_url(self) -> str:
        return "https://api.equinix.com/"


def validate_schema(name: str, value: Any) -> None:
    """``value`` against the document's ``components/schemas/<name>``."""
    schemas = document()["components"]["schemas"]
    OAS30Validator({**schemas[name], "components": {"schemas": schemas}}).validate(value)


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
        if kwargs.get("base", "/metal/v1") != "/metal/v1":
            return answer
        request = AsSentToMetal(self.sent)
        operation = _template(method, path.split("?", maxsplit=1)[0])
        if answer.status < 400:
            PUBLISHED.validate_request(request)
            self.succeeded.add(operation)
        documented = document()["paths"][operation[1]][method.lower()]["responses"]
        if str(answer.status) in documented:
            PUBLISHED.validate_response(request, WerkzeugOpenAPIResponse(self.last))
        else:  # injected 429s and 5xx: the document lists none, but has the Error shape
            assert answer.status in (429, 500, 502, 503, 504), answer
            validate_schema("Error", answer.body)
        self.checked += 1
        return answer


@pytest.fixture
def api() -> Iterator[CheckedApi]:
    clock = ManualClock()
    app = EmulatorApp(EmulatorSettings(device_active_delay=60, action_delay=5), clock=clock)
    app.test_clock = clock  # type: ignore[attr-defined]
    yield CheckedApi(app)


def test_the_routed_operations_are_the_documents() -> None:
    routed = {(route.method, route.template) for route in ROUTES}
    assert routed == operations()
    for route in ROUTES:
        published = document()["paths"][route.template][route.method.lower()]
        assert route.operation == published["operationId"]


def test_every_operation_answers_as_the_document_says(api: CheckedApi) -> None:
    """A tour through every operation: each request and each answer is checked against the
    document, and together they cover every operation the emulator routes."""
    project = api.project_id
    api.ok("GET", f"/projects/{project}")
    metros = api.ok("GET", "/locations/metros")["metros"]
    api.ok("GET", f"/locations/metros/{metros[0]['id']}")
    node = api.ok("POST", f"/projects/{project}/devices?include=project",
                  {"hostname": "node-a", "metro": "da", "plan": "c3.small.x86",
                   "operating_system": "ubuntu_24_04", "tags": ["k8s"],
                   "customdata": {"role": "worker"}})  # fmt: skip
    api.create_devices(3, tags=["k8s"])
    api.ok("GET", f"/projects/{project}/devices?per_page=2&page=2&include=project")
    api.ok("GET", f"/projects/{project}/devices?hostname=node-a&exclude=ip_addresses")
    api.app.test_clock.advance(60)  # type: ignore[attr-defined]
    api.ok("GET", f"/devices/{node['id']}")
    api.ok("GET", f"/devices/{node['id']}/metadata")
    api.ok("POST", f"/devices/{node['id']}/actions", {"type": "power_off"})
    eip = api.request_ip(metro="da", tags=["usage=cloud-provider-equinix-metal-auto"])
    api.ok("GET", f"/projects/{project}/ips?types=public_ipv4&types=private_ipv4")
    api.ok("GET", f"/ips/{eip['id']}")
    api.ok("GET", f"/ips/{node['ip_addresses'][0]['id']}")  # an assignment
    assigned = api.ok("POST", f"/devices/{node['id']}/ips", {"address": eip["address"]})
    api.ok("GET", f"/projects/{project}/ips?include=assignments")
    api.ok("GET", f"/ips/{assigned['id']}")
    api.ok("DELETE", f"/ips/{assigned['id']}")  # the Elastic IP unassigned
    api.ok("GET", f"/projects/{project}/bgp-config")  # {} before BGP is enabled
    api.enable_bgp(65000, md5="Secret123pass")
    api.ok("GET", f"/projects/{project}/bgp-config")
    session = api.ok("POST", f"/devices/{node['id']}/bgp/sessions", {"address_family": "ipv4"})
    api.ok("GET", f"/devices/{node['id']}/bgp/sessions")
    api.ok("GET", f"/bgp/sessions/{session['id']}")
    api.ok("GET", f"/devices/{node['id']}/bgp/neighbors")
    api.ok("DELETE", f"/bgp/sessions/{session['id']}")
    api.ok("DELETE", f"/ips/{eip['id']}")
    api.ok("DELETE", f"/devices/{node['id']}")

    assert api.succeeded == {(route.method, route.template) for route in ROUTES}


def test_error_answers_match_the_document(api: CheckedApi) -> None:
    """401, 404, 422 and injected 429/5xx answers are the API's ``{"errors": [...]}`` bodies the
    document describes."""
    project = api.project_id
    answers = [
        api.call("GET", f"/projects/{project}/devices", token=None),
        api.call("GET", "/devices/00000000-0000-4000-8000-000000000000"),
        api.call("GET", "/devices/not-a-uuid"),
        api.call("POST", f"/projects/{project}/devices",
                 {"metro": "da", "plan": "nope", "operating_system": "ubuntu_24_04"}),
        api.call("POST", f"/projects/{project}/ips", {"type": "public_ipv4", "quantity": 3,
                                                      "metro": "da"}),
    ]  # fmt: skip
    api.app.calls.add_fault({"operation": "findMetros", "status": 429})
    api.app.calls.add_fault({"operation": "findProjectById", "status": 503})
    answers += [api.call("GET", "/locations/metros"), api.call("GET", f"/projects/{project}")]

    assert [a.status for a in answers] == [401, 404, 404, 422, 422, 429, 503]
    assert answers[5].headers["retry-after"] == "1"
    assert answers[5].headers["x-ratelimit-remaining"] == "0"
    assert all(isinstance(a.body["errors"][0], str) for a in answers)
    assert api.checked == len(answers)


UNKNOWN_FIELDS = [
    ("devices", {"metro": "da", "plan": "c3.small.x86", "operating_system": "ubuntu_24_04",
                 "hostnme": "typo"}, "hostnme"),
    ("ips", {"type": "public_ipv4", "quantity": 1, "metro": "da", "tag": ["x"]}, "tag"),
    ("bgp-configs", {"asn": 65000, "deployment_type": "local", "password": "x"}, "password"),
]  # fmt: skip


@pytest.mark.parametrize(("collection", "body", "unknown"), UNKNOWN_FIELDS)
def test_unknown_body_fields_are_refused_naming_them(
    api: CheckedApi, collection: str, body: dict[str, Any], unknown: str
) -> None:
    answer = api.call("POST", f"/projects/{api.project_id}/{collection}", body)

    assert answer.status == 422
    assert unknown in answer.body["errors"][0]
    # The published document leaves these objects open: only the strict reading catches it.
    PUBLISHED.validate_request(AsSentToMetal(api.sent))


def test_the_metadata_service_answers_the_documents_metadata_with_bgp_neighbours(
    api: CheckedApi,
) -> None:
    """``/metadata`` is no operation of the API, so its body is checked against the document's
    ``Metadata`` and ``BgpNeighborData`` schemas directly."""
    node = api.create_devices(1)[0]
    api.enable_bgp(65000)
    api.ok("POST", f"/devices/{node['id']}/bgp/sessions", {"address_family": "ipv4"})

    answer = api.call("GET", "", token=None, base="/metadata")

    validate_schema("Metadata", answer.body)
    validate_schema("BgpNeighborData", answer.body["bgp_neighbors"][0])
    assert answer.body["id"] == node["id"]


# Upstream (cloud-provider-equinix-metal 38d15e2, metal/bgp.go:59-63) asks for BGP with
# `Md5: &b.bgpPass`; equinix-sdk-go v0.61.0's BgpConfigRequestInput.Md5 is a *string with
# `json:"md5,omitempty"`, which keeps a pointer to "", so a cluster without METAL_BGP_PASS sends
# `"md5": ""`. The published pattern refuses "" (before: 422 "md5: '' does not match ..."); the
# emulator's overlay takes it as no password (openapi.OVERLAY), and still refuses a weak one.
def test_an_empty_md5_asks_for_bgp_without_a_password(api: CheckedApi) -> None:
    node = api.create_devices(1)[0]
    path = f"/projects/{api.project_id}/bgp-configs"
    weak = api.call("POST", path, {"asn": 65000, "deployment_type": "local", "md5": "short"})
    answer = api.call("POST", path, {"asn": 65000, "deployment_type": "local", "md5": "",
                                     "use_case": "kubernetes-load-balancer"})  # fmt: skip
    api.ok("POST", f"/devices/{node['id']}/bgp/sessions", {"address_family": "ipv4"})
    neighbour = api.ok("GET", f"/devices/{node['id']}/bgp/neighbors")["bgp_neighbors"][0]

    assert weak.status == 422
    assert answer.status == 204, answer.body
    assert neighbour["md5_enabled"] is False
    assert "md5_password" not in neighbour


# Upstream's getNodePrivateNetwork (38d15e2, metal/loadbalancers.go:632-650) reads a device with
# include "ip_addresses.parent_block,parent_block" and refuses an address without its parent
# block's network and cidr ("no network information provided for private address"); the
# document's IPAssignment has `parent_block: ParentBlock` (equinix-sdk-go v0.61.0
# model_ip_assignment.go:36, `json:"parent_block,omitempty"`). Before, no address had one.
def test_include_parent_block_shows_each_device_address_block(api: CheckedApi) -> None:
    node = api.create_devices(1)[0]
    included = api.ok(
        "GET", f"/devices/{node['id']}?include=ip_addresses.parent_block,parent_block"
    )
    plain = api.ok("GET", f"/devices/{node['id']}")
    private = next(a for a in included["ip_addresses"] if not a["public"])
    block = api.ok("GET", private["parent_block"]["href"].removeprefix("/metal/v1"))
    own = api.ok("GET", f"/ips/{private['id']}?include=parent_block")

    assert private["parent_block"] == {
        "href": private["parent_block"]["href"], "network": private["network"],
        "cidr": private["cidr"], "netmask": private["netmask"],
    }  # fmt: skip
    assert (block["network"], block["cidr"]) == (private["network"], private["cidr"])
    assert own["parent_block"] == private["parent_block"]
    assert all(set(a["parent_block"]) == {"href"} for a in plain["ip_addresses"])


def test_every_overlay_entry_cites_the_sdk_field_it_loosens() -> None:
    published = emulator_openapi.emulation.load_document(emulator_openapi.DOCUMENT)
    for field in emulator_openapi.OVERLAY:
        properties = published["components"]["schemas"][field.schema]["properties"]
        assert (field.name in properties) == field.widens
        assert f'`json:"{field.name},omitempty"`' in field.cites
