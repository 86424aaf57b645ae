"""The emulated project behaves as Equinix Metal's: devices provision and power off and on
through the API with their addresses, lists page with ``meta``, IP reservations carry their
tags and metro and filter by type, BGP is enabled and gives each session's neighbours, the
metadata service answers for a device, and the token, faults, counts and reset work."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from polyccm_packet_emulator.app import EmulatorApp
from polyccm_packet_emulator.settings import EmulatorSettings
from polyccm_packet_emulator.testing import LocalApi
from polyccm_packet_emulator.timers import ManualClock


class Project:
    """An in-process emulator whose clock the test moves."""

    def __init__(self, **settings: Any) -> None:
        self.clock = ManualClock()
        self.app = EmulatorApp(
            EmulatorSettings(validate_responses=True, **settings), clock=self.clock
        )
        self.api = LocalApi(self.app)


@pytest.fixture
def project() -> Project:
    return Project(device_active_delay=60, action_delay=10)


def test_a_created_device_provisions_and_shows_its_addresses(project: Project) -> None:
    api = project.api
    created = api.create_devices(1, metro="sv", plan="m3.small.x86", tags=["k8s"])[0]
    states = [created["state"]]
    for _ in range(2):
        project.clock.advance(30)
        states.append(api.device(created["id"])["state"])

    assert states == ["queued", "provisioning", "active"]
    device = api.device(created["id"])
    assert (device["plan"]["slug"], device["metro"]["code"]) == ("m3.small.x86", "sv")
    assert device["facility"]["code"] == "sv15"
    kinds = {(a["address_family"], a["public"]): a for a in device["ip_addresses"]}
    assert set(kinds) == {(4, True), (4, False), (6, True)}
    assert kinds[(4, False)]["address"].startswith("10.")
    assert kinds[(4, True)]["assigned_to"]["href"] == f"/metal/v1/devices/{created['id']}"
    assert device["tags"] == ["k8s"] and device["hostname"] == "node-0"


def test_a_device_address_is_the_host_of_its_block_never_its_network(project: Project) -> None:
    # The document's BgpNeighborData (specs/equinix-metal-openapi3.yaml, customer_ip and
    # routes_in) shows a device's private address 10.32.16.1 in its /31 network 10.32.16.0:
    # in a device's /31 (/127) the network is the gateway and the address the one after it.
    api = project.api
    node = api.create_devices(1)[0]

    blocks = [(a["address_family"], a["public"], a["cidr"], a["network"], a["gateway"],
               a["address"]) for a in node["ip_addresses"]]  # fmt: skip

    assert len(blocks) == 3
    for family, _, cidr, network, gateway, address in blocks:
        assert cidr == (31 if family == 4 else 127)
        assert gateway == network
        assert ipaddress.ip_address(address) == ipaddress.ip_address(network) + 1


def test_power_actions_move_the_device_through_inactive_and_back(project: Project) -> None:
    api = project.api
    node = api.create_devices(1)[0]["id"]
    refused = api.call("POST", f"/devices/{node}/actions", {"type": "power_off"})
    project.clock.advance(60)

    api.action(node, "power_off")
    states = [api.device(node)["state"]]
    project.clock.advance(10)
    states.append(api.device(node)["state"])
    again = api.call("POST", f"/devices/{node}/actions", {"type": "power_off"})
    api.action(node, "power_on")
    states.append(api.device(node)["state"])
    project.clock.advance(10)
    states.append(api.device(node)["state"])

    assert refused.status == 422  # still provisioning
    assert states == ["powering_off", "inactive", "powering_on", "active"]
    assert (again.status, again.body) == (422, {"errors": ["Device is already powered off"]})


def test_deleted_devices_are_gone_with_their_bgp_sessions(project: Project) -> None:
    api = project.api
    node = api.create_devices(1)[0]["id"]
    api.enable_bgp()
    session = api.ok("POST", f"/devices/{node}/bgp/sessions", {"address_family": "ipv4"})

    assert api.call("DELETE", f"/devices/{node}").status == 204
    assert api.call("GET", f"/devices/{node}").status == 404
    assert api.call("GET", f"/bgp/sessions/{session['id']}").status == 404


def test_devices_of_a_project_page_with_meta_and_filter(project: Project) -> None:
    api = project.api
    api.create_devices(23, tags=["k8s"])
    api.create_devices(2, prefix="db")
    path = f"/projects/{api.project_id}/devices"

    pages = [api.ok("GET", f"{path}?tag=k8s&per_page=10&page={n}") for n in (1, 2, 3)]
    default = api.ok("GET", path)
    by_name = api.ok("GET", f"{path}?hostname=db-")

    assert [len(p["devices"]) for p in pages] == [10, 10, 3]
    assert [(p["meta"]["current_page"], p["meta"]["last_page"]) for p in pages] == [
        (1, 3), (2, 3), (3, 3)
    ]  # fmt: skip
    assert {p["meta"]["total"] for p in pages} == {23}
    assert pages[0]["meta"]["next"]["href"] == f"/metal/v1{path}?tag=k8s&page=2&per_page=10"
    assert "next" not in pages[2]["meta"] and "previous" in pages[2]["meta"]
    assert (len(default["devices"]), default["meta"]["total"]) == (10, 25)
    assert [d["hostname"] for d in by_name["devices"]] == ["db-0", "db-1"]


def test_include_expands_the_project_and_exclude_cuts_to_the_href(project: Project) -> None:
    api = project.api
    node = api.create_devices(1)[0]["id"]

    plain = api.device(node)
    included = api.ok("GET", f"/devices/{node}?include=project")
    excluded = api.ok("GET", f"/devices/{node}?exclude=facility,ip_addresses")

    assert set(plain["project"]) == {"href"}
    assert included["project"]["id"] == api.project_id
    assert set(excluded["facility"]) == {"href"} and "ip_addresses" not in excluded


def test_an_elastic_ip_is_reserved_with_its_tags_and_metro_and_released(
    project: Project,
) -> None:
    api = project.api
    api.create_devices(1)
    tags = ["usage=cloud-provider-equinix-metal-auto", "service=abc=", "cluster=c1"]
    eip = api.request_ip(metro="da", tags=tags)
    block = api.request_ip(metro="ny", quantity=4)

    assert (eip["type"], eip["cidr"], eip["public"]) == ("public_ipv4", 32, True)
    assert (eip["tags"], eip["metro"]["code"]) == (tags, "da")
    assert (block["cidr"], int(block["address"].rsplit(".", 1)[1]) % 4) == (30, 0)
    listed = api.ok("GET", f"/projects/{api.project_id}/ips?types=public_ipv4")["ip_addresses"]
    elastic = [ip for ip in listed if not ip["management"]]
    assert [ip["id"] for ip in elastic] == [eip["id"], block["id"]]
    assert len(listed) == 3  # and the device's own public block
    private = api.ok("GET", f"/projects/{api.project_id}/ips?types=private_ipv4")
    assert [ip["type"] for ip in private["ip_addresses"]] == ["private_ipv4"]
    assert api.ok("GET", f"/ips/{eip['id']}")["address"] == eip["address"]

    assert api.call("DELETE", f"/ips/{eip['id']}").status == 204
    assert api.call("GET", f"/ips/{eip['id']}").status == 404
    owned = next(ip for ip in listed if ip["management"])
    assert api.call("DELETE", f"/ips/{owned['id']}").status == 403


def test_bgp_is_enabled_then_sessions_give_neighbours(project: Project) -> None:
    api = project.api
    node = api.create_devices(1)[0]
    project.clock.advance(60)
    bgp_path = f"/projects/{api.project_id}/bgp-config"

    before = api.ok("GET", bgp_path)
    refused = api.call("POST", f"/devices/{node['id']}/bgp/sessions", {"address_family": "ipv4"})
    api.enable_bgp(65000, md5="Secret123pass")
    session = api.ok("POST", f"/devices/{node['id']}/bgp/sessions", {"address_family": "ipv4"})
    duplicate = api.call("POST", f"/devices/{node['id']}/bgp/sessions",
                         {"address_family": "ipv4"})  # fmt: skip
    config = api.ok("GET", bgp_path)
    neighbours = api.ok("GET", f"/devices/{node['id']}/bgp/neighbors")["bgp_neighbors"]

    assert before == {}
    assert refused.status == 422 and duplicate.status == 422
    # The real API's words for a second session of one family (quoted in
    # packethost/terraform-provider-packet#206); upstream's ensureNodeBGPEnabled takes a 422
    # as success only when it says "already has session" (cloud-provider-equinix-metal
    # 38d15e2 metal/bgp.go:91).
    assert duplicate.body == {"errors": ["Address family already has session with ipv4"]}
    assert (config["asn"], config["status"], config["md5"]) == (65000, "enabled", "Secret123pass")
    assert session["status"] == "up"
    private = next(a for a in node["ip_addresses"] if not a["public"])
    assert neighbours == [{
        "address_family": 4, "customer_as": 65000, "customer_ip": private["address"],
        "md5_enabled": True, "md5_password": "Secret123pass", "multihop": True,
        "peer_as": 65530, "peer_ips": ["169.254.255.1", "169.254.255.2"],
        "routes_in": [{"route": f"{private['network']}/31", "exact": False}], "routes_out": [],
    }]  # fmt: skip
    assert api.ok("GET", f"/devices/{node['id']}/bgp/sessions")["bgp_sessions"] == [session]
    api.ok("DELETE", f"/bgp/sessions/{session['id']}")
    assert api.ok("GET", f"/devices/{node['id']}/bgp/neighbors")["bgp_neighbors"] == []


def test_the_metadata_service_answers_for_the_device_the_caller_is_on(project: Project) -> None:
    api = project.api
    first, second = api.create_devices(2, metro="am")

    def metadata(**headers: str) -> Any:
        return api.call("GET", "", token=None, headers=headers, base="/metadata")

    assert metadata().body["id"] == first["id"]  # the oldest device by default
    assert metadata(**{"X-Polyccm-Device": "node-1"}).body["id"] == second["id"]
    project.app.configure({"metadata_device": second["id"]})
    answer = metadata().body
    assert (answer["hostname"], answer["facility"], answer["metro"]) == ("node-1", "am6", "am")
    assert answer["bgp_neighbors"] == []
    assert metadata(**{"X-Polyccm-Device": "nowhere"}).status == 404
    assert project.app.calls.calls() == {"createDevice": 2, "metadata": 4}


def test_the_api_key_is_required_and_checked(project: Project) -> None:
    api = project.api
    project.app.configure({"token": "right"})

    missing = api.call("GET", "/locations/metros", token=None)
    wrong = api.call("GET", "/locations/metros", token="wrong")
    right = api.call("GET", "/locations/metros", token="right")

    assert (missing.status, missing.body) == (401, {"errors": ["Invalid authentication token"]})
    assert (wrong.status, right.status) == (401, 200)
    assert api.call("GET", f"/projects/{'0' * 8}-0000-4000-8000-{'0' * 12}",
                    token="right").status == 404  # fmt: skip


def test_faults_counts_and_reset(project: Project) -> None:
    api = project.api
    project.app.calls.add_fault({"operation": "findProjectDevices", "status": 429, "count": 2})
    path = f"/projects/{api.project_id}/devices"
    api.create_devices(1)

    answers = [api.call("GET", path) for _ in range(3)]

    assert [a.status for a in answers] == [429, 429, 200]
    assert answers[0].headers["x-ratelimit-remaining"] == "0"
    assert answers[0].body == {"errors": ["Too Many Requests"]}
    assert project.app.calls.calls() == {"createDevice": 1, "findProjectDevices": 3}
    assert project.app.mismatches == []  # every answer matched the document
    project.app.reset()
    assert project.app.calls.calls() == {}
    assert api.ok("GET", path)["meta"]["total"] == 0
    assert api.ok("GET", f"/projects/{api.project_id}")["id"] == api.project_id


def test_the_call_log_names_the_process_its_user_agent_names(project: Project) -> None:
    """``calls?by=caller``: which ``polyccm`` process made each call, from the request's
    User-Agent (``polyccm-identity/<identity>``, polyccm.useragent); calls naming none (this
    test's own) are not listed."""
    api = project.api
    path = f"/projects/{api.project_id}/devices"
    agent = "polyccm/0.1.0 polyccm-identity/host_1234 metal-python/0.0.1"
    api.call("GET", path, headers={"User-Agent": agent})
    api.call("GET", path)

    (call,) = project.app.calls.callers.calls()
    assert call[1:] == ("host_1234", "findProjectDevices")
    project.app.reset()
    assert project.app.calls.callers.calls() == []
