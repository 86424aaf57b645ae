"""The one door to the API: every request counted and fenced, 429 turned into RetryAfter until
the budget resets, the client-side limiter, and the token never in a log line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

import pytest
from polyccm import cloudcalls, logredact
from polyccm.errors import LeadershipLost, RetryAfter
from polyccm_digitalocean.api import DigitalOceanApiError, RateLimited, TokenBucket
from polyccm_digitalocean.config import read_environment
from polyccm_digitalocean_emulator.testing import control, provider_for


def test_every_request_is_counted_under_its_operation(do: Mapping[str, str]) -> None:
    provider = provider_for(do)
    before = cloudcalls.calls_made("digitalocean", "droplets.list")

    provider.api.call("droplets.list")

    assert cloudcalls.calls_made("digitalocean", "droplets.list") == before + 1


def test_no_request_leaves_once_leadership_is_lost(do: Mapping[str, str]) -> None:
    provider = provider_for(do)
    control(do).reset_calls()
    cloudcalls.FENCE.close()
    try:
        with pytest.raises(LeadershipLost):
            provider.api.call("droplets.list")
    finally:
        cloudcalls.FENCE.open_always()

    assert dict(control(do).calls()) == {}


def test_a_429_is_retried_after_the_reset_time_not_at_once(do: Mapping[str, str]) -> None:
    provider = provider_for(do)
    control(do).inject("droplets_list", status=429)
    control(do).reset_calls()

    with pytest.raises(RetryAfter) as raised:
        provider.api.call("droplets.list")

    assert isinstance(raised.value, RateLimited) and raised.value.delay >= 1
    assert dict(control(do).calls()) == {"droplets_list": 1}, "the 429 was resent"


def test_the_limiter_spaces_requests_beyond_the_burst() -> None:
    now = [0.0]
    bucket = TokenBucket(2.0, 2, clock=lambda: now[0])

    waits = [bucket.reserve() for _ in range(4)]

    assert waits == [0.0, 0.0, 0.5, 1.0]


def test_the_token_read_from_the_environment_is_masked_in_every_log_line(
    do: Mapping[str, str],
) -> None:
    token = do["DO_ACCESS_TOKEN"]
    logredact.forget_secrets()

    config = read_environment(do)

    assert token not in repr(config)
    for line in (f"token {token}", f"Authorization: Bearer {token}", f"url?t={token}&x=1"):
        assert token not in logredact.redact(line), line


def test_the_provider_sends_its_requests_through_pydo_imported_at_the_first_call(
    do: Mapping[str, str],
) -> None:
    # The design card names pydo as the DigitalOcean SDK (issue 29): the provider is built
    # without it (the plugin and check-service never load it) and the first call loads it.
    probe = (
        "import os, sys\n"
        "from polyccm_digitalocean.api import DigitalOceanApi\n"
        "from polyccm_digitalocean.config import read_environment\n"
        "api = DigitalOceanApi(read_environment(dict(os.environ)))\n"
        "print('pydo' in sys.modules)\n"
        "api.call('droplets.list')\n"
        "print(type(api.client).__module__.split('.')[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **do},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )

    assert done.stdout.split() == ["False", "pydo"]


def test_a_503_of_a_read_is_retried_by_pydo_and_each_attempt_is_counted(
    do: Mapping[str, str],
) -> None:
    provider = provider_for(do)
    control(do).inject("droplets_list", status=503)
    control(do).reset_calls()
    before = cloudcalls.calls_made("digitalocean", "droplets.list")

    droplets = provider.api.call("droplets.list")

    assert "droplets" in droplets
    assert dict(control(do).calls()) == {"droplets_list": 2}
    assert cloudcalls.calls_made("digitalocean", "droplets.list") == before + 2


def test_a_503_of_a_create_is_not_resent(do: Mapping[str, str]) -> None:
    # A create answered 503 may have been made: resending it could make a second load balancer.
    provider = provider_for(do)
    control(do).inject("loadBalancers_create", status=503)
    control(do).reset_calls()

    with pytest.raises(DigitalOceanApiError) as raised:
        provider.api.call("load_balancers.create", body={"name": "x", "region": "nyc3"})

    assert raised.value.status == 503
    assert dict(control(do).calls()) == {"loadBalancers_create": 1}
