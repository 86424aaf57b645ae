"""Flag values in the upstream Go forms parse to the values a user means."""

from __future__ import annotations

import argparse

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


@pytest.mark.parametrize("text", ["", "5", "5x", "m5", "1h 30m", "1.2.3s", "s"])
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
