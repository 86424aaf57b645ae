"""google-cloud-compute (the provider's SDK) and Google's other clients talk to the emulator:
instances made and listed through the SDK with its operations awaited, and legacy HTTP health
checks (which the SDK has no client for) reached over authorised REST and googleapiclient."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud import compute_v1
from google.oauth2.credentials import Credentials
from polyccm_gce_emulator.app import Exchange
from polyccm_gce_emulator.testing import TEST_TOKEN, ZONE, RunningEmulator, sdk_client


def test_the_sdk_creates_an_instance_waits_for_it_and_lists_it_by_filter(
    emulator: RunningEmulator, discovery: Any
) -> None:
    seen: list[Exchange] = []
    emulator.app.observers.append(seen.append)
    instances = sdk_client(compute_v1.InstancesClient, emulator.endpoint)
    project = emulator.api().project
    for name in ("vm-1", "vm-2"):
        instance = compute_v1.Instance(
            name=name,
            machine_type=f"zones/{ZONE}/machineTypes/e2-small",
            labels={"cluster": "demo"},
            network_interfaces=[
                compute_v1.NetworkInterface(
                    network="global/networks/default",
                    access_configs=[compute_v1.AccessConfig(name="External NAT")],
                )
            ],
            disks=[
                compute_v1.AttachedDisk(
                    boot=True,
                    auto_delete=True,
                    initialize_params=compute_v1.AttachedDiskInitializeParams(
                        source_image="projects/debian-cloud/global/images/family/debian-12"
                    ),
                )
            ],
        )
        operation = instances.insert(project=project, zone=ZONE, instance_resource=instance)
        operation.result(timeout=30)  # polls zoneOperations on the emulator
        assert operation.done() and not operation.error_code

    listed = list(
        instances.list(
            request=compute_v1.ListInstancesRequest(
                project=project, zone=ZONE, filter='name = "vm-2"'
            )
        )
    )
    assert [item.name for item in listed] == ["vm-2"]
    assert listed[0].status == "RUNNING"
    assert listed[0].network_interfaces[0].access_configs[0].nat_i_p
    assert listed[0].self_link.startswith(emulator.endpoint + "/compute/v1/")
    every = instances.aggregated_list(
        request=compute_v1.AggregatedListInstancesRequest(
            project=project, filter="labels.cluster = demo"
        )
    )
    names = sorted(i.name for _zone, scoped in every for i in scoped.instances)
    assert names == ["vm-1", "vm-2"]

    # What the SDK sent and got is what the discovery document describes.
    calls = {exchange.method for exchange in seen}
    assert {"compute.instances.insert", "compute.zoneOperations.get"} <= calls
    for exchange in seen:
        assert discovery.request_errors(exchange.method, exchange.request_body) == []
        assert discovery.response_errors(exchange.method, exchange.response_body) == []


def test_the_sdks_own_operation_polling_would_leave_the_emulator() -> None:
    # Why sdk_client exists: a client built with api_endpoint alone polls operations on
    # compute.googleapis.com (no call is made here; only the configured hosts are read).
    options = {"api_endpoint": "http://127.0.0.1:9"}
    credentials = Credentials(token=TEST_TOKEN)  # type: ignore[no-untyped-call]
    plain = compute_v1.RoutesClient(
        credentials=credentials, client_options=options, transport="rest"
    )
    assert "compute.googleapis.com" in plain._transport._global_operations_client._transport._host
    wired = sdk_client(compute_v1.RoutesClient, "http://127.0.0.1:9")
    assert wired._transport._global_operations_client._transport._host == "http://127.0.0.1:9"


def test_legacy_http_health_checks_are_reached_over_authorised_rest(
    emulator: RunningEmulator,
) -> None:
    from google.auth.transport.requests import AuthorizedSession

    session = AuthorizedSession(Credentials(token=TEST_TOKEN))  # type: ignore[no-untyped-call]
    base = f"{emulator.endpoint}/compute/v1/projects/{emulator.api().project}/global/"
    answer = session.post(
        base + "httpHealthChecks",
        json={"name": "k8s-demo-node", "port": 10256, "requestPath": "/healthz"},
    )
    assert answer.status_code == 200
    operation = answer.json()
    done = session.post(operation["selfLink"] + "/wait").json()
    assert done["status"] == "DONE"
    check = session.get(base + "httpHealthChecks/k8s-demo-node").json()
    assert (check["port"], check["requestPath"]) == (10256, "/healthz")


def test_legacy_http_health_checks_are_reached_with_googleapiclient(
    emulator: RunningEmulator,
) -> None:
    from googleapiclient.discovery import build

    compute = build(
        "compute",
        "v1",
        credentials=Credentials(token=TEST_TOKEN),  # type: ignore[no-untyped-call]
        static_discovery=True,
        client_options={"api_endpoint": f"{emulator.endpoint}/compute/v1/"},
        cache_discovery=False,
    )
    project = emulator.api().project
    operation = (
        compute.httpHealthChecks()
        .insert(project=project, body={"name": "k8s-demo-node", "port": 10256})
        .execute()
    )
    done = compute.globalOperations().wait(project=project, operation=operation["name"]).execute()
    assert done["status"] == "DONE"
    listed = compute.httpHealthChecks().list(project=project, filter="name eq k8s-.*").execute()
    assert [item["name"] for item in listed["items"]] == ["k8s-demo-node"]


def test_the_sdk_raises_its_own_exceptions_for_the_emulators_errors(
    emulator: RunningEmulator,
) -> None:
    # What a provider's error handling meets: a 409 insert is Conflict (upstream counts it as
    # success), a failed operation raises from result(), a rate limit is Forbidden.
    from google.api_core import exceptions

    api = emulator.api()
    api.create_instance("node-a")
    routes = sdk_client(compute_v1.RoutesClient, emulator.endpoint)

    def route(name: str, instance: str) -> compute_v1.Route:
        return compute_v1.Route(
            name=name,
            network="global/networks/default",
            dest_range="10.64.0.0/24",
            next_hop_instance=f"zones/{ZONE}/instances/{instance}",
            priority=1000,
            description="k8s-node-route",
        )

    routes.insert(project=api.project, route_resource=route("r-a", "node-a")).result(timeout=30)
    with pytest.raises(exceptions.Conflict):
        routes.insert(project=api.project, route_resource=route("r-a", "node-a"))
    failing = routes.insert(project=api.project, route_resource=route("r-b", "ghost"))
    with pytest.raises(exceptions.NotFound):
        failing.result(timeout=30)
    emulator.control.inject(
        "compute.routes.list", status=403, reason="rateLimitExceeded", message="Rate Limit Exceeded"
    )
    with pytest.raises(exceptions.Forbidden) as caught:
        list(routes.list(project=api.project))
    assert caught.value.errors[0]["reason"] == "rateLimitExceeded"
