"""Provider IDs and node names map to instance ids as upstream maps them."""

from __future__ import annotations

import pytest
from polyccm_aws.provider_id import (
    InvalidProviderID,
    format_provider_id,
    instance_id_from_node_name,
    instance_id_from_provider_id,
    region_from_zone,
)


@pytest.mark.parametrize(
    "provider_id",
    [
        "aws:///us-east-1a/i-0123456789abcdef0",
        "aws:////i-0123456789abcdef0",
        "aws://us-east-1a/i-0123456789abcdef0",
        "i-0123456789abcdef0",
    ],
)
def test_accepted_forms(provider_id: str) -> None:
    assert instance_id_from_provider_id(provider_id) == "i-0123456789abcdef0"


@pytest.mark.parametrize(
    "provider_id",
    ["gce://project/zone/vm", "aws:///us-east-1a/", "aws:///us-east-1a/vol-123", "", "aws://"],
)
def test_rejected_forms(provider_id: str) -> None:
    with pytest.raises(InvalidProviderID):
        instance_id_from_provider_id(provider_id)


def test_format_round_trips() -> None:
    provider_id = format_provider_id("eu-west-1c", "i-0abc")

    assert provider_id == "aws:///eu-west-1c/i-0abc"
    assert instance_id_from_provider_id(provider_id) == "i-0abc"


@pytest.mark.parametrize(
    ("name", "instance_id"),
    [
        ("i-0123456789abcdef0", "i-0123456789abcdef0"),
        ("i-0123456789abcdef0.us-west-2.compute.internal", "i-0123456789abcdef0"),
        ("ip-10-0-1-4.ec2.internal", None),
        ("worker-1", None),
    ],
)
def test_resource_based_node_names(name: str, instance_id: str | None) -> None:
    assert instance_id_from_node_name(name) == instance_id


@pytest.mark.parametrize(
    ("zone", "region"),
    [("us-east-1a", "us-east-1"), ("us-west-2-lax-1a", "us-west-2"), ("", "")],
)
def test_region_from_zone(zone: str, region: str) -> None:
    assert region_from_zone(zone) == region
