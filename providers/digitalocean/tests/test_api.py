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
from polyccm_digitalocean.api import RateLimited, TokenBucket
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


def test_the_provider_sends_its_requests_without_loading_a_generated_sdk(
    do: Mapping[str, str],
) -> None:
    # pydo (DigitalOcean's generated SDK) cost the process about 200 MiB for eleven operations.
    probe = (
        "import os, sys\n"
        "from polyccm_digitalocean_emulator.testing import provider_for\n"
        "provider_for(dict(os.environ)).api.call('droplets.list')\n"
        "print(sorted(m for m in ('pydo', 'azure') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **do},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )

    assert done.stdout.strip() == "[]"
