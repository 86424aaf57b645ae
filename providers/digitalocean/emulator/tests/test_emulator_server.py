"""The emulator as a process: pydo drives it over verified TLS with the token (as the provider
will), the control endpoints answer on the same port, and ``polyccm-dev up --cloud
digitalocean`` starts it and writes the variables that reach it."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from polyccm_digitalocean_emulator.control import EmulatorControl
from polyccm_digitalocean_emulator.plugin import EMULATOR_TOKEN
from polyccm_digitalocean_emulator.testing import DigitalOceanApi, control, running_emulator
from polyccm_testing.devenv.state import read_env


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, str]]:
    with running_emulator(tmp_path_factory.mktemp("do")) as env:
        yield env


@pytest.fixture
def do_env(emulator: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> Mapping[str, str]:
    """A reset emulator, and this process's environment pointing at it (CA bundle included)."""
    for name, value in emulator.items():
        monkeypatch.setenv(name, value)
    control(emulator).reset()
    return emulator


def _pydo(env: Mapping[str, str], **kwargs: Any) -> Any:
    import pydo

    return pydo.Client(env["DO_ACCESS_TOKEN"], endpoint=env["DO_OVERRIDE_URL"], **kwargs)


def test_pydo_creates_lists_by_page_and_sees_a_load_balancer_become_active(
    do_env: Mapping[str, str],
) -> None:
    client = _pydo(do_env)
    created = client.droplets.create(body={"name": "node-0", "region": "nyc3",
                                           "size": "s-1vcpu-1gb", "image": "ubuntu-24-04-x64",
                                           "tags": ["k8s"]})  # fmt: skip
    assert created["droplet"]["status"] == "new"
    DigitalOceanApi(do_env).create_droplets(24, prefix="worker", tags=["k8s"])

    names, page, pages = [], 1, 0
    while True:
        answer = client.droplets.list(tag_name="k8s", per_page=10, page=page)
        names += [droplet["name"] for droplet in answer["droplets"]]
        pages += 1
        following = answer["links"]["pages"].get("next")
        if following is None:
            break
        page = int(parse_qs(urlparse(following).query)["page"][0])
    assert (len(names), pages, answer["meta"]["total"]) == (25, 3, 25)

    lb = client.load_balancers.create(body={
        "name": "a1b2c3", "region": "nyc3", "droplet_ids": [created["droplet"]["id"]],
        "forwarding_rules": [{"entry_protocol": "tcp", "entry_port": 80,
                              "target_protocol": "tcp", "target_port": 30080}],
    })["load_balancer"]  # fmt: skip
    assert (lb["status"], lb["ip"]) == ("new", "")
    deadline = time.monotonic() + 10
    while lb["status"] == "new" and time.monotonic() < deadline:
        time.sleep(0.1)
        lb = client.load_balancers.get(lb_id=lb["id"])["load_balancer"]
    assert lb["status"] == "active" and lb["ip"]

    missing = client.droplets.get(droplet_id=1)  # pydo returns, not raises, a 404 body
    assert missing["id"] == "not_found"
    assert control(do_env).mismatches() == []  # every answer matched the document
    calls = control(do_env).calls()
    assert calls["droplets_list"] == 3 and calls["loadBalancers_create"] == 1


def test_pydo_refuses_the_emulator_without_its_ca_and_over_plain_http(
    do_env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.core.exceptions import ServiceRequestError

    monkeypatch.delenv("REQUESTS_CA_BUNDLE")
    with pytest.raises(ServiceRequestError, match="CERTIFICATE_VERIFY_FAILED"):
        _pydo(do_env, retry_total=0).account.get()
    plain = do_env["DO_OVERRIDE_URL"].replace("https://", "http://")
    with pytest.raises(ServiceRequestError, match="non-TLS"):
        _pydo({**do_env, "DO_OVERRIDE_URL": plain}, retry_total=0).account.get()
    assert control(do_env).calls() == {}  # the token never reached the emulator


def test_the_control_endpoints_answer_over_plain_http_on_the_same_port(
    do_env: Mapping[str, str],
) -> None:
    plain = do_env["DO_OVERRIDE_URL"].replace("https://", "http://")
    with urllib.request.urlopen(plain + "/_polyccm/health", timeout=5) as response:
        assert response.status == 200
    over_http = EmulatorControl(plain)
    over_http.inject("account_get", status=502)
    api = DigitalOceanApi(do_env)
    assert api.call("GET", "/v2/account").status == 502
    assert over_http.calls() == {"account_get": 1}
    over_http.configure(lb_active_delay=0.1)
    assert control(do_env).settings()["lb_active_delay"] == 0.1


def test_only_the_launch_token_is_accepted(do_env: Mapping[str, str]) -> None:
    assert DigitalOceanApi(do_env).call("GET", "/v2/account").status == 200
    wrong = DigitalOceanApi({**do_env, "DO_ACCESS_TOKEN": "dop_v1_guess"})
    assert wrong.call("GET", "/v2/account").status == 401
    assert do_env["DO_ACCESS_TOKEN"] == EMULATOR_TOKEN


@pytest.mark.controlplane
def test_polyccm_dev_up_starts_the_emulator_and_writes_how_to_reach_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = str(Path(sys.executable).parent / "polyccm-dev")
    state_dir = tmp_path / "dev"
    up = subprocess.run(
        [dev, "up", "--state-dir", str(state_dir), "--cloud", "digitalocean"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        env = read_env(state_dir / "env")
        assert env["DO_OVERRIDE_URL"].startswith("https://127.0.0.1:")
        assert env["DO_ACCESS_TOKEN"] == EMULATOR_TOKEN
        assert env["REQUESTS_CA_BUNDLE"] == str(state_dir.resolve() / "pki" / "ca.crt")
        # The control plane's CA vouches for the emulator: sourcing DIR/env is all pydo needs.
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        account = _pydo(env).account.get()
        assert account["account"]["status"] == "active"
    finally:
        subprocess.run([dev, "down", "--state-dir", str(state_dir)], timeout=60, check=False)
