"""The pieces of delegated auth that need no API server: reading the bearer token and the
always-allowed paths as upstream reads them, and the bounded, expiring cache of review answers.
The reviews themselves are tested against the real API server in test_secure_port."""

from __future__ import annotations

import argparse

import pytest
from polyccm.serving.delegated import (
    ExpiringCache,
    bearer_token,
    parse_always_allow_paths,
    path_always_allowed,
)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("bearer abc", "abc"),
        ("  Bearer abc  ", "abc"),
        ("Bearer abc extra", "abc"),
        ("Bearer  abc", None),  # upstream: an empty token (two spaces) is no token
        ("Bearer", None),
        ("Basic dXNlcjpwYXNz", None),
        ("", None),
        (None, None),
    ],
)
def test_the_bearer_token_is_read_as_upstream_reads_it(
    header: str | None, token: str | None
) -> None:
    assert bearer_token(header) == token


def test_always_allowed_paths_are_exact_or_a_trailing_star_prefix() -> None:
    allowed = parse_always_allow_paths("/healthz, /debug/*,/")
    assert allowed == ("/healthz", "/debug/*", "/")
    assert path_always_allowed("/healthz", allowed)
    assert not path_always_allowed("/healthz/ping", allowed)
    assert path_always_allowed("/debug/pprof", allowed)
    assert path_always_allowed("/", allowed)
    assert not path_always_allowed("/metrics", allowed)
    assert parse_always_allow_paths("") == ()


@pytest.mark.parametrize("text", ["healthz", "/a*/b", "/healthz,*"])
def test_malformed_always_allowed_paths_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_always_allow_paths(text)


def test_the_cache_is_bounded_and_forgets_the_least_recently_used() -> None:
    now = [0.0]
    cache: ExpiringCache[str] = ExpiringCache(size=2, clock=lambda: now[0])
    cache.put("a", "A", 10)
    cache.put("b", "B", 10)
    assert cache.get("a") == "A"  # now "b" is the least recently used
    cache.put("c", "C", 10)
    assert len(cache) == 2
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("A", None, "C")


def test_cached_answers_expire_and_a_zero_ttl_caches_nothing() -> None:
    now = [0.0]
    cache: ExpiringCache[str] = ExpiringCache(clock=lambda: now[0])
    cache.put("allowed", "yes", 10)
    cache.put("uncached", "no", 0)
    now[0] = 9.9
    assert cache.get("allowed") == "yes"
    assert cache.get("uncached") is None
    now[0] = 10.0
    assert cache.get("allowed") is None
    assert len(cache) == 0
