"""The emulated compute API behaves as GCE does where a provider would notice: operations take
time, instances go through their states, errors carry Google's reasons, lists paginate and
filter, and route inserts run into the project's rate limit and quota."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from typing import Any

import pytest
from polyccm_gce_emulator import filters
from polyccm_gce_emulator.settings import EmulatorSettings
from polyccm_gce_emulator.testing import (
    REGION,
    ZONE,
    ComputeApi,
    ComputeApiError,
    OperationError,
    RunningEmulator,
    emulator_thread,
)

ZONE_PATH = f"zones/{ZONE}"


def _route(name: str, dest: str, instance: str = "node-a", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "network": "global/networks/default",
        "destRange": dest,
        "nextHopInstance": f"{ZONE_PATH}/instances/{instance}",
        "priority": 1000,
        "description": "k8s-node-route",
        **extra,
    }


def test_operations_are_pending_then_running_then_done_with_the_effect_last() -> None:
    settings = EmulatorSettings(pending_seconds=0.2, running_seconds=0.3)
    with emulator_thread(settings) as running:
        api = running.api()
        operation = api.request(
            "POST",
            f"{ZONE_PATH}/instances",
            {
                "name": "vm",
                "machineType": f"{ZONE_PATH}/machineTypes/e2-small",
                "networkInterfaces": [{}],
            },
        )
        assert operation["status"] == "PENDING"
        assert api.get(f"{ZONE_PATH}/instances/vm")["status"] == "PROVISIONING"
        time.sleep(0.3)
        assert api.get(operation["selfLink"])["status"] == "RUNNING"
        assert api.get(f"{ZONE_PATH}/instances/vm")["status"] == "STAGING"
        began = time.monotonic()
        done = api.request("POST", operation["selfLink"] + "/wait")
        assert done["status"] == "DONE" and done["progress"] == 100
        assert 0.05 < time.monotonic() - began < 0.5
        assert api.get(f"{ZONE_PATH}/instances/vm")["status"] == "RUNNING"


def test_operations_wait_answers_a_running_operation_after_its_timeout() -> None:
    settings = EmulatorSettings(pending_seconds=5, wait_timeout_seconds=0.2)
    with emulator_thread(settings) as running:
        api = running.api()
        operation = api.request(
            "POST",
            "global/firewalls",
            {"name": "fw", "allowed": [{"IPProtocol": "tcp"}]},
        )
        assert api.request("POST", operation["selfLink"] + "/wait")["status"] == "PENDING"
        # Not DONE, so not there yet.
        with pytest.raises(ComputeApiError) as caught:
            api.get("global/firewalls/fw")
        assert caught.value.reason == "notFound"


def test_instances_are_made_stopped_started_and_deleted_through_the_api(api: ComputeApi) -> None:
    instance = api.create_instance(
        "node-a", labels={"role": "node"}, tags=["k8s"], metadata={"startup": "echo hi"}
    )
    nic = instance["networkInterfaces"][0]
    assert instance["status"] == "RUNNING"
    assert instance["machineType"].endswith(f"/{ZONE_PATH}/machineTypes/e2-medium")
    assert instance["machineType"].startswith(api.endpoint + "/compute/v1/projects/")
    assert nic["networkIP"].startswith("10.128.0.")
    assert nic["subnetwork"].endswith(f"/regions/{REGION}/subnetworks/default")
    first_nat = nic["accessConfigs"][0]["natIP"]
    assert instance["labels"] == {"role": "node"} and instance["tags"]["items"] == ["k8s"]
    other = api.create_instance("node-b", external_ip=False)
    assert other["networkInterfaces"][0]["networkIP"] != nic["networkIP"]
    assert "accessConfigs" not in other["networkInterfaces"][0]

    stopping = api.request("POST", f"{ZONE_PATH}/instances/node-a/stop")
    assert api.get(f"{ZONE_PATH}/instances/node-a")["status"] == "STOPPING"
    api.wait(stopping)
    stopped = api.get(f"{ZONE_PATH}/instances/node-a")
    assert stopped["status"] == "TERMINATED"
    assert "natIP" not in stopped["networkInterfaces"][0]["accessConfigs"][0]
    assert stopped["networkInterfaces"][0]["networkIP"] == nic["networkIP"]

    api.start_instance("node-a")
    started = api.get(f"{ZONE_PATH}/instances/node-a")
    assert started["status"] == "RUNNING"
    assert started["networkInterfaces"][0]["accessConfigs"][0]["natIP"] not in ("", first_nat)

    api.delete_instance("node-a")
    with pytest.raises(ComputeApiError) as caught:
        api.get(f"{ZONE_PATH}/instances/node-a")
    assert caught.value.status == 404


def test_a_static_address_becomes_an_instances_nat_ip_and_is_in_use(api: ComputeApi) -> None:
    api.do("POST", f"regions/{REGION}/addresses", {"name": "ip"})
    address = api.get(f"regions/{REGION}/addresses/ip")["address"]
    api.do(
        "POST",
        f"{ZONE_PATH}/instances",
        {
            "name": "vm",
            "machineType": f"{ZONE_PATH}/machineTypes/e2-small",
            "networkInterfaces": [{"accessConfigs": [{"natIP": address}]}],
        },
    )
    vm = api.get(f"{ZONE_PATH}/instances/vm")
    assert vm["networkInterfaces"][0]["accessConfigs"][0]["natIP"] == address
    reserved = api.get(f"regions/{REGION}/addresses/ip")
    assert reserved["status"] == "IN_USE" and reserved["users"] == [vm["selfLink"]]
    with pytest.raises(ComputeApiError) as caught:
        api.request("DELETE", f"regions/{REGION}/addresses/ip")
    assert caught.value.reason == "resourceInUseByAnotherResource"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"name": "Bad_Name"}, "invalid"),
        ({"name": "vm", "machineType": "e2-medium"}, "invalid"),
        ({"name": "vm", "machineType": f"{ZONE_PATH}/machineTypes/x9-huge"}, "invalid"),
        (
            {"name": "vm", "machineType": f"{ZONE_PATH}/machineTypes/e2-small", "colour": 1},
            "badRequest",
        ),
    ],
)
def test_bad_instance_requests_are_refused_as_gce_refuses_them(
    api: ComputeApi, body: dict[str, Any], reason: str
) -> None:
    body.setdefault("networkInterfaces", [{}])
    with pytest.raises(ComputeApiError) as caught:
        api.request("POST", f"{ZONE_PATH}/instances", body)
    assert (caught.value.status, caught.value.reason) == (400, reason)


def test_a_stale_fingerprint_is_412_condition_not_met(api: ComputeApi) -> None:
    instance = api.create_instance("vm", labels={"a": "1"})
    api.do(
        "POST",
        f"{ZONE_PATH}/instances/vm/setLabels",
        {"labels": {"a": "2"}, "labelFingerprint": instance["labelFingerprint"]},
    )
    with pytest.raises(ComputeApiError) as caught:
        api.request(
            "POST",
            f"{ZONE_PATH}/instances/vm/setLabels",
            {"labels": {"a": "3"}, "labelFingerprint": instance["labelFingerprint"]},
        )
    assert (caught.value.status, caught.value.reason) == (412, "conditionNotMet")
    assert api.get(f"{ZONE_PATH}/instances/vm")["labels"] == {"a": "2"}


def test_a_route_insert_conflict_is_409_and_a_missing_next_hop_fails_the_operation(
    api: ComputeApi,
) -> None:
    api.create_instance("node-a")
    api.do("POST", "global/routes", _route("r-a", "10.64.0.0/24"))
    with pytest.raises(ComputeApiError) as caught:
        api.request("POST", "global/routes", _route("r-a", "10.64.0.0/24"))
    assert (caught.value.status, caught.value.reason) == (409, "alreadyExists")
    operation = api.request("POST", "global/routes", _route("r-x", "10.64.1.0/24", "ghost"))
    with pytest.raises(OperationError) as failed:
        api.wait(operation)
    assert failed.value.codes == ["RESOURCE_NOT_FOUND"]
    assert failed.value.operation["httpErrorStatusCode"] == 404
    assert [r["name"] for r in api.list_all("global/routes", filter="name eq r-.*")] == ["r-a"]


def test_a_full_subnetwork_fails_the_insert_operation_and_makes_no_instance(
    api: ComputeApi,
) -> None:
    subnet = {"name": "tiny", "network": "global/networks/default", "ipCidrRange": "10.99.0.0/29"}
    api.do("POST", f"regions/{REGION}/subnetworks", subnet)
    where = f"regions/{REGION}/subnetworks/tiny"
    for index in range(4):  # a /29 holds 8 addresses, GCE keeps four of them
        api.create_instance(f"fits-{index}", subnetwork=where)
    with pytest.raises(OperationError) as failed:
        api.create_instance("one-too-many", subnetwork=where)
    assert failed.value.codes == ["IP_SPACE_EXHAUSTED"]
    assert "one-too-many" not in {i["name"] for i in api.list_all(f"{ZONE_PATH}/instances")}


def test_route_inserts_are_slow_and_rate_limited_per_project() -> None:
    settings = EmulatorSettings(
        pending_seconds=0.0,
        running_seconds=0.0,
        route_running_seconds=0.3,
        route_inserts_per_second=2.0,
        route_insert_burst=3,
    )
    with emulator_thread(settings) as running:
        api = running.api()
        api.create_instance("node-a")
        began = time.monotonic()
        operations = [
            api.request("POST", "global/routes", _route(f"r-{i}", f"10.64.{i}.0/24"))
            for i in range(3)
        ]
        with pytest.raises(ComputeApiError) as caught:
            api.request("POST", "global/routes", _route("r-3", "10.64.3.0/24"))
        assert (caught.value.status, caught.value.reason) == (403, "rateLimitExceeded")
        assert caught.value.body["error"]["errors"][0]["domain"] == "usageLimits"
        # Another project has its own limit.
        other = ComputeApi(running.endpoint, "other-project")
        other.create_instance("node-a")
        other.do("POST", "global/routes", _route("r-0", "10.64.0.0/24"))
        for operation in operations:
            api.wait(operation)
        assert time.monotonic() - began >= 0.3
        time.sleep(0.5)
        api.do("POST", "global/routes", _route("r-3", "10.64.3.0/24"))


def test_a_full_route_quota_is_403_quota_exceeded() -> None:
    settings = EmulatorSettings(pending_seconds=0, running_seconds=0, route_running_seconds=0)
    settings.quotas["ROUTES"] = 5  # the project starts with 4 (3 subnetwork routes, 1 default)
    with emulator_thread(settings) as running:
        api = running.api()
        api.create_instance("node-a")
        api.do("POST", "global/routes", _route("r-0", "10.64.0.0/24"))
        with pytest.raises(ComputeApiError) as caught:
            api.request("POST", "global/routes", _route("r-1", "10.64.1.0/24"))
        assert (caught.value.status, caught.value.reason) == (403, "quotaExceeded")
        assert "Quota 'ROUTES' exceeded" in caught.value.body["error"]["message"]


def test_lists_paginate_with_max_results_and_page_tokens(api: ComputeApi) -> None:
    api.create_instance("node-a")
    for index in range(7):
        api.request("POST", "global/routes", _route(f"k-{index}", f"10.64.{index}.0/24"))
    time.sleep(0.2)
    pages = []
    params: dict[str, Any] = {"maxResults": 3, "filter": "name eq k-.*"}
    while True:
        page = api.get("global/routes", **params)
        pages.append([item["name"] for item in page["items"]])
        if "nextPageToken" not in page:
            break
        params["pageToken"] = page["nextPageToken"]
    assert pages == [["k-0", "k-1", "k-2"], ["k-3", "k-4", "k-5"], ["k-6"]]
    with pytest.raises(ComputeApiError) as caught:
        api.get("global/routes", maxResults=3, pageToken=params["pageToken"])
    assert caught.value.reason == "invalid"  # a token is bound to its filter
    with pytest.raises(ComputeApiError):
        api.get("global/routes", maxResults=501)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('name = "k8s-b"', ["k8s-b"]),
        ("name eq k8s-.*", ["k8s-a", "k8s-b"]),
        ('name eq "k8s-[a]"', ["k8s-a"]),
        ('description = "k8s-node-route"', ["k8s-a", "k8s-b"]),
        ('(name eq "k8s-.*") (description = "other")', []),
        (
            'name eq "k8s-.*" AND description = "k8s-node-route" AND priority = 1000',
            ["k8s-a", "k8s-b"],
        ),
        ('(name = "k8s-a") OR (name = "other-c")', ["k8s-a", "other-c"]),
        ('name eq "k8s-.*" AND name != "k8s-a"', ["k8s-b"]),
        ('NOT name eq "(k8s|default-route)-.*"', ["other-c"]),
        ('destRange = "10.64.1.0/24"', ["k8s-b"]),
    ],
)
def test_list_filters_select_what_the_api_would(
    api: ComputeApi, expression: str, expected: list[str]
) -> None:
    api.create_instance("node-a")
    api.do("POST", "global/routes", _route("k8s-a", "10.64.0.0/24"))
    api.do("POST", "global/routes", _route("k8s-b", "10.64.1.0/24"))
    api.do("POST", "global/routes", _route("other-c", "10.64.2.0/24", description="other"))
    names = [item["name"] for item in api.list_all("global/routes", filter=expression)]
    assert names == expected


def test_a_network_filter_matches_the_url_whichever_api_host_it_names(api: ComputeApi) -> None:
    api.create_instance("node-a")
    api.do("POST", "global/routes", _route("k8s-a", "10.64.0.0/24"))
    google = f"https://www.googleapis.com/compute/v1/projects/{api.project}/global/networks/default"
    mine = api.get("global/networks/default")["selfLink"]
    for url in (google, mine):
        routes = api.list_all(
            "global/routes", filter=f'(network = "{url}") (description = "k8s-node-route")'
        )
        assert [route["name"] for route in routes] == ["k8s-a"]
    assert api.list_all("global/routes", filter='network = "global/networks/default"') == []
    with pytest.raises(ComputeApiError) as caught:
        api.get("global/routes", filter="name = (")
    assert caught.value.reason == "invalid"


def test_aggregated_list_groups_instances_by_zone_and_warns_on_empty_ones(
    api: ComputeApi,
) -> None:
    api.create_instance("a")
    api.create_instance("b", zone="us-east1-b")
    listed = api.get("aggregated/instances", filter="name = b")
    assert [i["name"] for i in listed["items"]["zones/us-east1-b"]["instances"]] == ["b"]
    assert listed["items"][ZONE_PATH]["warning"]["code"] == "NO_RESULTS_ON_PAGE"
    first = api.get("aggregated/instances", maxResults=1)
    second = api.get("aggregated/instances", maxResults=1, pageToken=first["nextPageToken"])
    names = [
        item["name"]
        for page in (first, second)
        for scoped in page["items"].values()
        for item in scoped.get("instances", [])
    ]
    assert sorted(names) == ["a", "b"] and "nextPageToken" not in second


def test_fields_and_the_field_mask_header_cut_answers_to_what_is_named(
    api: ComputeApi,
) -> None:
    # Google's partial responses (the ``fields`` system parameter, or X-Goog-FieldMask): the
    # syntax clients use on aggregatedList, e.g. ``items/*/instances(name,zone,status)``.
    api.create_instance("a")
    api.create_instance("b", zone="us-east1-b")
    mask = "items/*/instances(name,networkInterfaces/accessConfigs/natIP),nextPageToken"
    listed = api.get("aggregated/instances", fields=mask, maxResults=1)
    assert set(listed) == {"items", "nextPageToken"}
    (scoped,) = [s for s in listed["items"].values() if s]
    (instance,) = scoped["instances"]
    assert instance == {
        "name": instance["name"],
        "networkInterfaces": [{"accessConfigs": [{"natIP": instance_ip(api, instance)}]}],
    }
    request = urllib.request.Request(
        f"{api.base}zones/{ZONE}/instances/a",
        headers={"Authorization": f"Bearer {api.token}", "X-Goog-FieldMask": "name,zone"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert set(json.loads(response.read())) == {"name", "zone"}
    with pytest.raises(ComputeApiError) as caught:
        api.get(f"{ZONE_PATH}/instances/a", fields="name(")
    assert (caught.value.status, caught.value.reason) == (400, "invalid")


def instance_ip(api: ComputeApi, instance: dict[str, Any]) -> str:
    zone = "us-east1-b" if instance["name"] == "b" else ZONE
    whole = api.get(f"zones/{zone}/instances/{instance['name']}")
    return str(whole["networkInterfaces"][0]["accessConfigs"][0]["natIP"])


@pytest.mark.parametrize(
    "expression",
    [
        'name eq "(node\\-1|node\\-3|web)"',
        'name = "node-*"',
        "name != node-2",
        'NOT name eq "node-.*"',
        "-name = node-1",
        "",
    ],
)
def test_a_list_filtered_on_names_answers_as_one_that_renders_every_item(
    api: ComputeApi, monkeypatch: pytest.MonkeyPatch, expression: str
) -> None:
    """The emulator tests a name-only filter on names before rendering: the same pages."""
    for name, zone in (("node-1", ZONE), ("node-2", ZONE), ("node-3", "us-east1-b"), ("web", ZONE)):
        api.create_instance(name, zone=zone)

    def pages(path: str) -> list[Any]:
        answers, params = [], {"filter": expression, "maxResults": 2}
        while True:
            answers.append(api.get(path, **params))
            if "nextPageToken" not in answers[-1]:
                return answers
            params["pageToken"] = answers[-1]["nextPageToken"]

    paths = ("aggregated/instances", f"{ZONE_PATH}/instances")
    by_name = [pages(path) for path in paths]
    parse_reading = filters.parse_reading
    monkeypatch.setattr(  # as if the filter read more than names: every item rendered
        filters, "parse_reading", lambda text: (parse_reading(text)[0], frozenset({"status"}))
    )
    assert by_name == [pages(path) for path in paths]


def test_load_balancer_parts_refuse_deletion_while_in_use(api: ComputeApi) -> None:
    region = f"regions/{REGION}"
    api.create_instance("node-a")
    api.do("POST", "global/httpHealthChecks", {"name": "hc", "port": 10256})
    api.do(
        "POST",
        f"{region}/targetPools",
        {
            "name": "pool",
            "instances": [f"{ZONE_PATH}/instances/node-a"],
            "healthChecks": ["global/httpHealthChecks/hc"],
        },
    )
    api.do(
        "POST",
        f"{region}/forwardingRules",
        {"name": "rule", "target": f"{region}/targetPools/pool", "portRange": "80"},
    )
    rule = api.get(f"{region}/forwardingRules/rule")
    assert rule["portRange"] == "80-80" and rule["IPAddress"]
    for path in (f"{region}/targetPools/pool", "global/httpHealthChecks/hc"):
        with pytest.raises(ComputeApiError) as caught:
            api.request("DELETE", path)
        assert caught.value.reason == "resourceInUseByAnotherResource"
    with pytest.raises(ComputeApiError) as caught:
        api.request(
            "POST",
            f"{region}/targetPools/pool/addHealthCheck",
            {"healthChecks": [{"healthCheck": "global/httpHealthChecks/other"}]},
        )
    assert caught.value.status == 404
    api.do("DELETE", f"{region}/forwardingRules/rule")
    api.do("DELETE", f"{region}/targetPools/pool")
    api.do("DELETE", "global/httpHealthChecks/hc")


def test_a_retried_request_id_gets_the_first_operation(api: ComputeApi) -> None:
    request_id = str(uuid.uuid4())
    body = {"name": "fw", "allowed": [{"IPProtocol": "tcp"}]}
    first = api.request("POST", f"global/firewalls?requestId={request_id}", body)
    again = api.request("POST", f"global/firewalls?requestId={request_id}", body)
    assert again["name"] == first["name"]
    with pytest.raises(ComputeApiError) as caught:
        api.request("POST", "global/firewalls", body)
    assert caught.value.status == 409


def test_calls_without_a_bearer_token_are_401(emulator: RunningEmulator) -> None:
    with pytest.raises(ComputeApiError) as caught:
        ComputeApi(emulator.endpoint, token="").get("zones")
    assert caught.value.status == 401


def test_unknown_paths_get_a_google_404(api: ComputeApi) -> None:
    with pytest.raises(ComputeApiError) as caught:
        api.get("global/backendServices")
    assert (caught.value.status, caught.value.reason) == (404, "notFound")


# Upstream's GCE CCM names pool members as "/zones/Z/instances/N" (cloud-provider-gcp v36.3.8,
# providers/gce/gce_loadbalancer_external.go:900 makeComparableHostPath; :652 for the pool's
# insert, :682 for addInstance/removeInstance); GCE resolves every partial path against the
# project and shows the full URL back.
_INSTANCE_FORMS = [
    "https://compute.googleapis.com/compute/v1/projects/{project}/zones/{zone}/instances/node-a",
    "projects/{project}/zones/{zone}/instances/node-a",
    "/zones/{zone}/instances/node-a",
    "zones/{zone}/instances/node-a",
]


@pytest.mark.parametrize("form", _INSTANCE_FORMS)
def test_target_pools_take_every_instance_reference_form_gce_takes(
    api: ComputeApi, form: str
) -> None:
    region = f"regions/{REGION}"
    node_a = api.create_instance("node-a")["selfLink"]
    node_b = api.create_instance("node-b")["selfLink"]
    member = form.format(project=api.project, zone=ZONE)
    api.do("POST", f"{region}/targetPools", {"name": "pool", "instances": [member]})
    assert api.get(f"{region}/targetPools/pool")["instances"] == [node_a]
    api.do(
        "POST", f"{region}/targetPools/pool/removeInstance", {"instances": [{"instance": member}]}
    )
    assert "instances" not in api.get(f"{region}/targetPools/pool")
    api.do("POST", f"{region}/targetPools/pool/addInstance", {"instances": [{"instance": member}]})
    api.do(
        "POST",
        f"{region}/targetPools/pool/addInstance",
        {"instances": [{"instance": member.replace("node-a", "node-b")}]},
    )
    assert api.get(f"{region}/targetPools/pool")["instances"] == [node_a, node_b]


@pytest.mark.parametrize(
    "member", [f"//zones/{ZONE}/instances/node-a", f"/zones/{ZONE}/node-a", "node-a"]
)
def test_a_malformed_pool_member_is_still_400(api: ComputeApi, member: str) -> None:
    api.create_instance("node-a")
    with pytest.raises(ComputeApiError) as caught:
        api.request(
            "POST", f"regions/{REGION}/targetPools", {"name": "pool", "instances": [member]}
        )
    assert caught.value.status == 400 and "The URL is malformed" in str(caught.value)


def test_deleting_an_address_a_forwarding_rule_uses_leaves_the_ip_on_the_rule(
    api: ComputeApi,
) -> None:
    # GCE releases the reservation and the rule keeps the IP as ephemeral; kubernetes PR #20662
    # and upstream's temporary reservation on a port edit rely on it (cloud-provider-gcp v36.3.8,
    # providers/gce/gce_loadbalancer_external.go:171-176: ensureExternalLoadBalancer's deferred
    # DeleteRegionAddress of the address it reserved for the rule's IP, rule still in place).
    region = f"regions/{REGION}"
    api.do("POST", f"{region}/targetPools", {"name": "pool"})
    api.do("POST", f"{region}/addresses", {"name": "ip"})
    address = api.get(f"{region}/addresses/ip")["address"]
    api.do(
        "POST",
        f"{region}/forwardingRules",
        {"name": "rule", "target": f"{region}/targetPools/pool", "IPAddress": address},
    )
    api.do("DELETE", f"{region}/addresses/ip")
    assert [a["name"] for a in api.get(f"{region}/addresses").get("items", [])] == []
    assert api.get(f"{region}/forwardingRules/rule")["IPAddress"] == address
    # The IP stays the rule's: a new reservation gets another one.
    api.do("POST", f"{region}/addresses", {"name": "other"})
    assert api.get(f"{region}/addresses/other")["address"] != address
    api.do("DELETE", f"{region}/forwardingRules/rule")


def test_an_in_use_message_names_an_address_not_an_addresse(api: ComputeApi) -> None:
    api.do("POST", f"regions/{REGION}/addresses", {"name": "ip"})
    address = api.get(f"regions/{REGION}/addresses/ip")["address"]
    api.do(
        "POST",
        f"{ZONE_PATH}/instances",
        {
            "name": "vm",
            "machineType": f"{ZONE_PATH}/machineTypes/e2-small",
            "networkInterfaces": [{"accessConfigs": [{"natIP": address}]}],
        },
    )
    with pytest.raises(ComputeApiError) as caught:
        api.request("DELETE", f"regions/{REGION}/addresses/ip")
    assert "The address resource" in str(caught.value)


def test_reserving_a_forwarding_rules_ephemeral_ip_promotes_it(api: ComputeApi) -> None:
    # GCE promotes an ephemeral IP a resource holds when an address is reserved with it; the
    # upstream GCE CCM does so on every sync of an existing load balancer, then re-creates the
    # rule on that address and releases it (cloud-provider-gcp v36.3.8,
    # providers/gce/gce_loadbalancer_external.go:201 ensureStaticIP with the rule's IP,
    # :1424-1441; the release at :176). Before, this was 400 and upstream's sync failed.
    region = f"regions/{REGION}"
    api.do("POST", f"{region}/targetPools", {"name": "pool"})
    api.do(
        "POST",
        f"{region}/forwardingRules",
        {"name": "rule", "target": f"{region}/targetPools/pool"},
    )
    ip = api.get(f"{region}/forwardingRules/rule")["IPAddress"]
    api.do("POST", f"{region}/addresses", {"name": "kept", "address": ip})
    promoted = api.get(f"{region}/addresses/kept")
    assert (promoted["address"], promoted["status"]) == (ip, "IN_USE")
    assert promoted["users"] == [api.get(f"{region}/forwardingRules/rule")["selfLink"]]
    found = api.get(f"{region}/addresses", filter=f"address eq {ip}")["items"]
    assert [a["name"] for a in found] == ["kept"]
    # The rule re-created on the address keeps the IP; the release leaves it on the rule.
    api.do("DELETE", f"{region}/forwardingRules/rule")
    assert api.get(f"{region}/addresses/kept")["status"] == "RESERVED"
    api.do(
        "POST",
        f"{region}/forwardingRules",
        {"name": "rule", "target": f"{region}/targetPools/pool", "IPAddress": ip},
    )
    api.do("DELETE", f"{region}/addresses/kept")
    assert api.get(f"{region}/forwardingRules/rule")["IPAddress"] == ip
    # A second reservation of the same IP while one holds it, or of an IP nobody holds, is
    # still refused.
    api.do("POST", f"{region}/addresses", {"name": "again", "address": ip})
    with pytest.raises(ComputeApiError) as caught:
        api.request("POST", f"{region}/addresses", {"name": "twice", "address": ip})
    assert caught.value.status == 400
    with pytest.raises(ComputeApiError) as caught:
        api.request("POST", f"{region}/addresses", {"name": "free", "address": "203.0.113.250"})
    assert caught.value.status == 400


def test_an_internal_rules_address_is_released_and_reserved_again_as_upstream_does(
    api: ComputeApi,
) -> None:
    # Upstream's internal load balancer reserves <lb> with the rule's IP on every sync and
    # releases it once the rule is in place (cloud-provider-gcp v36.3.8,
    # providers/gce/gce_loadbalancer_internal.go:167-183, gce_address_manager.go:99-108
    # ReleaseAddress). Before, the release was 400 resourceInUseByAnotherResource (upstream
    # logged "failed to release address reservation, possibly causing an orphan" and left
    # <lb> reserved) and the next sync's reservation of the rule's IP was 400 as well.
    region = f"regions/{REGION}"
    subnet = f"{region}/subnetworks/default"
    api.do("POST", "global/healthChecks", {"name": "hc", "type": "TCP", "tcpHealthCheck": {}})
    api.do(
        "POST",
        f"{region}/backendServices",
        {
            "name": "bs",
            "loadBalancingScheme": "INTERNAL",
            "healthChecks": ["global/healthChecks/hc"],
        },
    )
    api.do(
        "POST",
        f"{region}/addresses",
        {"name": "lb", "addressType": "INTERNAL", "subnetwork": subnet},
    )
    ip = api.get(f"{region}/addresses/lb")["address"]
    rule = {
        "name": "lb",
        "IPAddress": ip,
        "IPProtocol": "TCP",
        "ports": ["80"],
        "loadBalancingScheme": "INTERNAL",
        "backendService": f"{region}/backendServices/bs",
        "subnetwork": subnet,
    }
    api.do("POST", f"{region}/forwardingRules", rule)
    api.do("DELETE", f"{region}/addresses/lb")
    assert api.get(f"{region}/addresses").get("items", []) == []
    assert api.get(f"{region}/forwardingRules/lb")["IPAddress"] == ip
    # The next sync reserves the rule's IP again: promoted, in use by the rule.
    body = {"name": "lb", "addressType": "INTERNAL", "subnetwork": subnet, "address": ip}
    api.do("POST", f"{region}/addresses", body)
    promoted = api.get(f"{region}/addresses/lb")
    assert (promoted["address"], promoted["status"]) == (ip, "IN_USE")
    api.do("DELETE", f"{region}/addresses/lb")
    # The IP stays the rule's until the rule goes.
    api.do(
        "POST",
        f"{region}/addresses",
        {"name": "other", "addressType": "INTERNAL", "subnetwork": subnet},
    )
    assert api.get(f"{region}/addresses/other")["address"] != ip
    api.do("DELETE", f"{region}/forwardingRules/lb")
    api.do("POST", f"{region}/addresses", dict(body, name="after"))
    assert api.get(f"{region}/addresses/after")["status"] == "RESERVED"


def test_routes_list_takes_upstreams_unquoted_url_regex_filter(api: ComputeApi) -> None:
    # Upstream's route controller lists with the Go filter library's unquoted form and its own
    # API base in the network URL (cloud-provider-gcp v36.3.8, providers/gce/gce_routes.go:49:
    # filter.Regexp("name", prefix+"-.*").AndRegexp("network", g.NetworkURL())...). It was 400
    # "Invalid list filter expression" (the ':' of the URL), so upstream never made a route.
    api.create_instance("node-a")
    api.do("POST", "global/routes", _route("switch-1", "10.100.1.0/24"))
    api.do("POST", "global/routes", _route("other-1", "10.100.2.0/24"))
    network = "http://127.0.0.1:1/compute/v1/projects/{}/global/networks/default"
    found = api.get(
        "global/routes",
        filter=f"(name eq switch-.*) (network eq {network.format(api.project)}) "
        "(description eq k8s-node-route)",
    )
    assert [route["name"] for route in found["items"]] == ["switch-1"]
    elsewhere = api.get("global/routes", filter=f"(network eq {network.format(api.project)}x)")
    assert elsewhere.get("items", []) == []
