"""Flag values in the upstream Go forms parse to the values a user means."""

from __future__ import annotations

import argparse
import math
import threading

import pytest
from polyccm import flagtypes


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("0", 0.0),
        ("2m30.5s", 150.5),
        ("1h0m0s", 3600.0),
    ],
)
def test_go_durations_parse_to_seconds(text: str, seconds: float) -> None:
    assert flagtypes.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "5", "5x", "m5", "1h 30m", "1.2.3s", "s", ".s", "\u0663\u0660s"]
)  # Arabic-Indic 30
def test_malformed_durations_are_rejected_naming_the_value(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="invalid duration"):
        flagtypes.parse_duration(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("false", False), ("1", True), ("0", False), ("T", True), ("FALSE", False)],
)
def test_booleans_follow_go_strconv(text: str, value: bool) -> None:
    assert flagtypes.parse_bool(text) is value


def test_bad_boolean_names_the_value() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="'yes'"):
        flagtypes.parse_bool("yes")


def test_cluster_cidrs_accept_dual_stack_and_normalise() -> None:
    assert flagtypes.cidr_list("10.244.1.0/16, fd00::/48") == ("10.244.0.0/16", "fd00::/48")


def test_bad_cidr_is_named() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"'10\.0\.0\.300/8'"):
        flagtypes.cidr_list("10.0.0.300/8")


def test_zero_period_is_refused() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="greater than zero"):
        flagtypes.positive_duration("0s")


@pytest.mark.parametrize(
    "text",
    [
        "99999999999999999999h",
        "2562048h",
        "2562047h47m16.854775808s",
        "9223372036854775808ns",
        "106751d",  # no such unit either way
        "9" * 5000 + "s",
        "-2562047h47m16.854775809s",
        "2562047h47m16s1s",
    ],
)
def test_durations_longer_than_gos_are_invalid(text: str) -> None:
    # Go's time.Duration is an int64 of nanoseconds; time.ParseDuration (go1.26
    # src/time/format.go:1702-1727) answers "invalid duration" past 1<<63-1 (and, for a
    # negative one, past -1<<63), as pflag's DurationVar then does for the flag.
    with pytest.raises(argparse.ArgumentTypeError, match="invalid duration"):
        flagtypes.parse_duration(text)


@pytest.mark.parametrize(
    ("text", "sign"),
    [
        ("2562047h47m16.854775807s", 1),
        ("9223372036854775807ns", 1),
        ("-2562047h47m16.854775808s", -1),
    ],
)
def test_the_longest_go_durations_are_periods_a_python_wait_accepts(text: str, sign: int) -> None:
    seconds = flagtypes.parse_duration(text)
    assert sign * seconds > 9.2e9  # 292 years
    # A free lock takes at once: this only checks that the timeout is one Python accepts
    # (a longer one raises OverflowError, which would end the controller's thread).
    lock = threading.Lock()
    assert lock.acquire(timeout=abs(seconds))
    lock.release()


def test_go_float32_reads_inf_and_nan_and_refuses_what_overflows() -> None:
    # strconv.ParseFloat(s, 32) takes "inf", "+Inf", "infinity" and "NaN" as numbers and
    # answers ErrRange (which pflag refuses) for a finite value beyond float32.
    assert flagtypes.float32("inf") == math.inf
    assert flagtypes.float32("-Infinity") == -math.inf
    assert math.isnan(flagtypes.float32("NaN"))
    for text in ("1e309", "-1e39", "3.5e38"):
        with pytest.raises(argparse.ArgumentTypeError, match="out of range"):
            flagtypes.float32(text)


@pytest.mark.parametrize(
    "text",
    [
        "https://10.0.0.1:6443",
        "10.0.0.1:6443",
        "http://[::1]:8080",
        "https://lb.example/prefix",
        "",
    ],
)
def test_api_server_urls_as_client_go_takes_them(text: str) -> None:
    assert flagtypes.server_url(text) == text
