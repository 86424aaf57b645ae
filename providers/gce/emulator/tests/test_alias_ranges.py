"""Alias IP ranges and subnetwork secondary ranges as GCE checks them: an alias comes from the
named secondary range (or the primary one), a netmask alone takes the next free block, a
range held by another interface or outside its source is refused, and updateNetworkInterface
wants the interface's current fingerprint."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from polyccm_gce_emulator.testing import REGION, ZONE, ComputeApi, ComputeApiError, emulator_thread

SUBNET = f"regions/{REGION}/subnetworks/nodes"


@pytest.fixture
def api() -> Iterator[ComputeApi]:
    with emulator_thread() as running:
        compute = running.api()
        compute.do("POST", "global/networks", {"name": "vpc", "autoCreateSubnetworks": False})
        pods = {"rangeName": "pods", "ipCidrRange": "10.64.0.0/22"}
        compute.do("POST", f"regions/{REGION}/subnetworks", {
            "name": "nodes", "network": "global/networks/vpc", "ipCidrRange": "10.0.0.0/24",
            "secondaryIpRanges": [pods]})  # fmt: skip
        yield compute


def _refused(call: object) -> str:
    with pytest.raises(ComputeApiError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.status == 400
    return str(caught.value)


def _aliases(instance: dict[str, object]) -> object:
    return instance["networkInterfaces"][0].get("aliasIpRanges")  # type: ignore[index]


def test_aliases_come_from_their_range_next_free_block_first(api: ComputeApi) -> None:
    pods = [{"ipCidrRange": "/24", "subnetworkRangeName": "pods"}]
    first = api.create_instance("a", subnetwork=SUBNET, alias_ip_ranges=pods)
    second = api.create_instance("b", subnetwork=SUBNET, alias_ip_ranges=pods)
    primary = api.create_instance(
        "c", subnetwork=SUBNET, alias_ip_ranges=[{"ipCidrRange": "10.0.0.128/28"}]
    )

    assert _aliases(first) == [{"ipCidrRange": "10.64.0.0/24", "subnetworkRangeName": "pods"}]
    assert _aliases(second) == [{"ipCidrRange": "10.64.1.0/24", "subnetworkRangeName": "pods"}]
    assert _aliases(primary) == [{"ipCidrRange": "10.0.0.128/28"}]


def test_taken_outside_or_unnamed_ranges_are_refused(api: ComputeApi) -> None:
    api.create_instance("a", subnetwork=SUBNET, alias_ip_ranges=[
        {"ipCidrRange": "10.64.2.0/24", "subnetworkRangeName": "pods"}])  # fmt: skip

    taken = _refused(lambda: api.create_instance("b", subnetwork=SUBNET, alias_ip_ranges=[
        {"ipCidrRange": "10.64.2.0/25", "subnetworkRangeName": "pods"}]))  # fmt: skip
    outside = _refused(lambda: api.create_instance("b", subnetwork=SUBNET, alias_ip_ranges=[
        {"ipCidrRange": "10.65.0.0/24", "subnetworkRangeName": "pods"}]))  # fmt: skip
    unnamed = _refused(lambda: api.create_instance("b", subnetwork=SUBNET, alias_ip_ranges=[
        {"ipCidrRange": "/24", "subnetworkRangeName": "services"}]))  # fmt: skip

    assert "already in use" in taken
    assert "not within the subnetwork range 10.64.0.0/22" in outside
    assert "no secondary range of that name" in unnamed
    assert [i["name"] for i in api.list_all(f"zones/{ZONE}/instances")] == ["a"]


def test_update_network_interface_replaces_aliases_with_the_current_fingerprint(
    api: ComputeApi,
) -> None:
    made = api.create_instance("a", subnetwork=SUBNET)
    nic = made["networkInterfaces"][0]
    path = f"zones/{ZONE}/instances/a/updateNetworkInterface?networkInterface=nic0"
    body = {"fingerprint": nic["fingerprint"],
            "aliasIpRanges": [{"ipCidrRange": "/26", "subnetworkRangeName": "pods"}]}  # fmt: skip

    api.do("PATCH", path, body)

    after = api.get(f"zones/{ZONE}/instances/a")
    assert _aliases(after) == [{"ipCidrRange": "10.64.0.0/26", "subnetworkRangeName": "pods"}]
    with pytest.raises(ComputeApiError) as stale:
        api.do("PATCH", path, body)
    assert stale.value.status == 412
