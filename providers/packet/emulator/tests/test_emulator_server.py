"""The emulator as a process: the Metal client library (``equinix``'s ``metalv1``) reaches it
through a configured base URL with the API key, the control endpoints and the metadata service
answer on the same port, and ``polyccm-dev up --cloud packet`` starts it and writes the
variables (and upstream's JSON config) that reach it."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from polyccm_packet_emulator.plugin import CLOUD_CONFIG_FILE, EMULATOR_API_KEY
from polyccm_packet_emulator.testing import MetalApi, control, running_emulator
from polyccm_testing.devenv.state import read_env


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, str]]:
    with running_emulator(tmp_path_factory.mktemp("metal")) as env:
        yield env


@pytest.fixture
def metal_env(emulator: Mapping[str, str]) -> Mapping[str, str]:
    control(emulator).reset()
    return emulator


def _metal(env: Mapping[str, str]) -> Any:
    """A ``metalv1.ApiClient`` on the configured base URL with the API key."""
    from equinix.services import metalv1

    configuration = metalv1.Configuration(host=env["METAL_API_URL"])
    configuration.api_key["x_auth_token"] = env["METAL_API_KEY"]
    return metalv1.ApiClient(configuration)


def test_the_metal_client_lists_devices_by_page_and_reserves_an_elastic_ip(
    metal_env: Mapping[str, str],
) -> None:
    from equinix.services import metalv1

    MetalApi(metal_env).create_devices(5, tags=["k8s"])
    project = metal_env["METAL_PROJECT_ID"]
    with _metal(metal_env) as client:
        devices = metalv1.DevicesApi(client)
        hostnames, page = [], 1
        while True:
            answer = devices.find_project_devices(project, per_page=2, page=page,
                                                  include=["project"])  # fmt: skip
            hostnames += [device.hostname for device in answer.devices]
            if page == answer.meta.last_page:
                break
            page += 1
        ips = metalv1.IPAddressesApi(client)
        tags = ["usage=cloud-provider-equinix-metal-auto", "cluster=c1"]
        request = metalv1.IPReservationRequestInput(
            type="public_ipv4", quantity=1, metro=metal_env["METAL_METRO"], tags=tags
        )
        reserved = ips.request_ip_reservation(
            project, metalv1.RequestIPReservationRequest(request)
        ).actual_instance
        listed = ips.find_ip_reservations(project, types=["public_ipv4"]).ip_addresses
        missing = None
        try:
            devices.find_device_by_id("00000000-0000-4000-8000-000000000000")
        except metalv1.ApiException as error:
            missing = error

    assert (hostnames, answer.meta.total) == ([f"node-{n}" for n in range(5)], 5)
    assert answer.devices[0].project.id == project
    assert (reserved.cidr, reserved.tags, reserved.metro.code) == (32, tags, "da")
    assert reserved.id in [item.actual_instance.id for item in listed]
    assert missing is not None and missing.status == 404
    assert json.loads(missing.body) == {"errors": ["Not found"]}
    assert control(metal_env).mismatches() == []  # every answer matched the document
    calls = control(metal_env).calls()
    assert calls["findProjectDevices"] == 3 and calls["requestIPReservation"] == 1


def test_the_metal_client_powers_a_device_off_and_reads_its_bgp_neighbours(
    metal_env: Mapping[str, str],
) -> None:
    from equinix.services import metalv1

    node = MetalApi(metal_env).create_devices(1)[0]["id"]
    with _metal(metal_env) as client:
        devices = metalv1.DevicesApi(client)
        metalv1.BGPApi(client).request_bgp_config(
            metal_env["METAL_PROJECT_ID"],
            metalv1.BgpConfigRequestInput(asn=65000, deployment_type="local"),
        )
        devices.create_bgp_session(node, metalv1.BGPSessionInput(address_family="ipv4"))
        neighbours = devices.get_bgp_neighbor_data(node).bgp_neighbors
        devices.perform_action(node, metalv1.DeviceActionInput(type="power_off"))
        state = devices.find_device_by_id(node).state

    assert (neighbours[0].customer_as, neighbours[0].peer_as) == (65000, 65530)
    assert state == "inactive"


def test_a_wrong_key_is_refused_and_a_429_reaches_the_client_with_retry_after(
    metal_env: Mapping[str, str],
) -> None:
    from equinix.services import metalv1

    wrong_key = _metal({**metal_env, "METAL_API_KEY": "guess"})
    with wrong_key as client, pytest.raises(metalv1.ApiException) as refused:
        metalv1.MetrosApi(client).find_metros()
    control(metal_env).inject("findMetros", status=429)
    with _metal(metal_env) as client:
        # urllib3 under the client honours Retry-After on a 429: one throttle is retried.
        metros = metalv1.MetrosApi(client).find_metros().metros
        client.configuration.retries = 0
        client.rest_client = metalv1.rest.RESTClientObject(client.configuration)
        control(metal_env).inject("findMetros", status=429)
        with pytest.raises(metalv1.ApiException) as throttled:
            metalv1.MetrosApi(client).find_metros()

    assert refused.value.status == 401
    assert throttled.value.status == 429
    assert throttled.value.headers["Retry-After"] == "1"
    assert json.loads(throttled.value.body) == {"errors": ["Too Many Requests"]}
    assert metal_env["METAL_METRO"] in [metro.code for metro in metros]
    assert control(metal_env).calls()["findMetros"] == 4
    assert metal_env["METAL_API_KEY"] == EMULATOR_API_KEY


def test_the_metadata_service_answers_on_the_same_port(metal_env: Mapping[str, str]) -> None:
    node = MetalApi(metal_env).create_devices(1, metro="sv")[0]
    with urllib.request.urlopen(metal_env["METAL_METADATA_URL"] + "/metadata") as response:
        metadata = json.loads(response.read())
    assert (metadata["id"], metadata["facility"], metadata["metro"]) == (node["id"], "sv15", "sv")


@pytest.mark.controlplane
def test_polyccm_dev_up_starts_the_emulator_and_writes_how_to_reach_it(tmp_path: Path) -> None:
    dev = str(Path(sys.executable).parent / "polyccm-dev")
    state_dir = tmp_path / "dev"
    up = subprocess.run(
        [dev, "up", "--state-dir", str(state_dir), "--cloud", "packet"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        env = read_env(state_dir / "env")
        assert env["METAL_API_URL"].startswith("http://127.0.0.1:")
        assert env["METAL_API_URL"].endswith("/metal/v1")
        assert env["METAL_API_KEY"] == env["PACKET_AUTH_TOKEN"] == EMULATOR_API_KEY
        assert env["METAL_METRO"] == env["METAL_METRO_NAME"] == "da"
        config = json.loads((state_dir / CLOUD_CONFIG_FILE).read_text())
        assert config == {"apiKey": EMULATOR_API_KEY, "projectId": env["METAL_PROJECT_ID"],
                          "metro": "da", "base-url": env["METAL_API_URL"]}  # fmt: skip
        # The project was made at start: the client reaches it with what DIR/env says.
        from equinix.services import metalv1

        with _metal(env) as client:
            found = metalv1.ProjectsApi(client).find_project_by_id(env["METAL_PROJECT_ID"])
        assert found.id == env["METAL_PROJECT_ID"]
        with urllib.request.urlopen(env["METAL_METADATA_URL"] + "/_polyccm/health") as response:
            assert response.status == 200
    finally:
        subprocess.run([dev, "down", "--state-dir", str(state_dir)], timeout=60, check=False)
