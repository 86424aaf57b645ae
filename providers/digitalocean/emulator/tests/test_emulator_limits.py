"""The API budget DigitalOcean enforces (5,000 an hour, 250 a minute, per token, both
configurable) with its headers on every answer, and the control endpoints: call counts per
operation, injected faults (status, latency) and reset."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from polyccm_digitalocean_emulator.app import EmulatorApp
from polyccm_digitalocean_emulator.settings import EmulatorSettings
from polyccm_digitalocean_emulator.testing import LocalApi
from polyccm_digitalocean_emulator.timers import ManualClock


class Account:
    def __init__(self, **settings: Any) -> None:
        self.clock = ManualClock()
        self.app = EmulatorApp(EmulatorSettings(**settings), clock=self.clock)
        self.api = LocalApi(self.app)

    def control(self, method: str, name: str, payload: object | None = None) -> Any:
        response = self.api.client.open(
            f"/_polyccm/{name}", method=method, json=payload, base_url="http://127.0.0.1:8443"
        )
        assert response.status_code == 200, response.get_data()
        return json.loads(response.get_data())


@pytest.fixture
def account() -> Account:
    return Account()


def test_every_answer_carries_the_rate_limit_headers(account: Account) -> None:
    ok = account.api.call("GET", "/v2/account")
    missing = account.api.call("GET", "/v2/droplets/1")
    unauthorised = account.api.call("GET", "/v2/account", token=None)

    for answer in (ok, missing, unauthorised):
        assert answer.headers["ratelimit-limit"] == "5000"
    assert ok.headers["ratelimit-remaining"] == "4999"
    assert missing.headers["ratelimit-remaining"] == "4998"
    assert int(ok.headers["ratelimit-reset"]) == int(account.clock.now()) + 3600


def test_the_minute_budget_runs_out_at_250_and_comes_back(account: Account) -> None:
    statuses = [account.api.call("GET", "/v2/regions").status for _ in range(251)]
    assert statuses.count(200) == 250 and statuses[-1] == 429
    throttled = account.api.call("GET", "/v2/regions")
    assert throttled.body == {"id": "too_many_requests", "message": "API Rate limit exceeded."}
    assert throttled.headers["ratelimit-remaining"] == "4750"  # refused calls are not counted

    account.clock.advance(61)
    assert account.api.call("GET", "/v2/regions").status == 200


def test_the_hour_budget_runs_out_and_each_token_has_its_own() -> None:
    account = Account(rate_limit_per_hour=20, rate_limit_per_minute=20)
    for _ in range(2):
        for _ in range(10):
            assert account.api.call("GET", "/v2/sizes").status == 200
        account.clock.advance(61)
    over = account.api.call("GET", "/v2/sizes")
    assert (over.status, over.headers["ratelimit-remaining"]) == (429, "0")
    assert account.api.call("GET", "/v2/sizes", token="dop_v1_another").status == 200
    account.clock.advance(3600)
    assert account.api.call("GET", "/v2/sizes").status == 200


def test_budgets_are_configurable_at_run_time(account: Account) -> None:
    settings = account.control("PUT", "settings", {"rate_limit_per_minute": 2})
    assert settings["rate_limit_per_minute"] == 2
    statuses = [account.api.call("GET", "/v2/account").status for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_calls_are_counted_per_operation(account: Account) -> None:
    account.api.create_droplets(12)
    account.api.ok("GET", "/v2/droplets")
    account.api.call("GET", "/v2/droplets/1")

    assert account.control("GET", "calls") == {
        "droplets_create": 2,
        "droplets_list": 1,
        "droplets_get": 1,
    }
    account.control("DELETE", "calls")
    assert account.control("GET", "calls") == {}


def test_injected_faults_fail_the_next_calls_of_one_operation(account: Account) -> None:
    account.control("POST", "faults", {"operation": "droplets_list", "count": 2, "status": 503})

    answers = [account.api.call("GET", "/v2/droplets") for _ in range(3)]
    other = account.api.call("GET", "/v2/regions")

    assert [a.status for a in answers] == [503, 503, 200]
    assert answers[0].body["id"] == "service_unavailable"
    assert "ratelimit-remaining" in answers[0].headers
    assert other.status == 200
    assert account.control("GET", "faults") == []


def test_an_injected_429_looks_like_a_throttle_and_any_operation_can_be_hit(
    account: Account,
) -> None:
    account.control("POST", "faults", {"operation": "*", "status": 429})
    throttled = account.api.call("GET", "/v2/sizes")
    assert (throttled.status, throttled.body["id"]) == (429, "too_many_requests")
    assert throttled.headers["ratelimit-limit"] == "5000"
    assert account.api.call("GET", "/v2/sizes").status == 200


def test_injected_latency_delays_a_call_that_then_succeeds(account: Account) -> None:
    account.control("POST", "faults", {"operation": "account_get", "status": None,
                                       "latency": 0.3})  # fmt: skip
    started = time.monotonic()
    answer = account.api.call("GET", "/v2/account")
    assert answer.status == 200 and time.monotonic() - started >= 0.3


def test_faults_for_statuses_digitalocean_never_sends_are_refused(account: Account) -> None:
    response = account.api.client.post(
        "/_polyccm/faults", json={"operation": "*", "status": 418}, base_url="http://x"
    )
    assert response.status_code == 400


def test_reset_forgets_resources_counts_faults_and_budgets(account: Account) -> None:
    account.control("PUT", "settings", {"rate_limit_per_minute": 5, "lb_active_delay": 0.5})
    account.api.create_droplets(2)
    account.control("POST", "faults", {"operation": "droplets_get", "count": 5})
    for _ in range(4):
        account.api.call("GET", "/v2/account")

    account.control("POST", "reset")

    assert account.api.ok("GET", "/v2/droplets")["droplets"] == []
    assert account.control("GET", "faults") == []
    assert account.control("GET", "calls") == {"droplets_list": 1}
    assert account.api.call("GET", "/v2/account").headers["ratelimit-remaining"] == "4998"
    assert account.control("GET", "settings")["lb_active_delay"] == 0.5  # settings stay


def test_unknown_settings_are_refused(account: Account) -> None:
    response = account.api.client.put(
        "/_polyccm/settings", json={"lb_delay": 1}, base_url="http://x"
    )
    assert response.status_code == 400
    assert "unknown setting" in response.get_json()["error"]
