"""Devices as nodes: providerID forms, plan/metro/facility, addresses, shutdown, bulk paging."""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest
from polyccm.cloud import EXTERNAL_IP, HOSTNAME, INTERNAL_IP
from polyccm.errors import CloudError, InstanceNotFound
from polyccm.objects import Node
from polyccm_packet import listing
from polyccm_packet.instances import ForeignProviderId
from polyccm_packet_emulator.testing import MetalApi, control, provider_for


def node(name: str, provider_id: str = "") -> Node:
    return Node({"metadata": {"name": name}, "spec": {"providerID": provider_id}})


def test_metadata_names_plan_metro_facility_and_addresses(metal: Mapping[str, str]) -> None:
    api = MetalApi(metal)
    (created,) = api.create_devices(1, plan="m3.large.x86")
    device = api.device(created["id"])
    public = next(ip["address"] for ip in device["ip_addresses"]
                  if ip["public"] and ip["address_family"] == 4)  # fmt: skip
    private = next(ip["address"] for ip in device["ip_addresses"] if not ip["public"])

    found = provider_for(metal).instances_v2().instance_metadata(node("node-0"))

    assert found.provider_id == f"equinixmetal://{created['id']}"
    # no zone: devices.go:73-96@38d15e2 leaves z empty (v3.8.0 dropped the facility zone,
    # commit 4073567), so no topology.kubernetes.io/zone label; the metro is the region
    assert (found.instance_type, found.region, found.zone) == ("m3.large.x86", "da", "")
    # upstream's order: the hostname first, then the device's IPv4 addresses as it lists them
    # (metal/devices.go:99-135@38d15e2)
    assert [(a.type, a.address) for a in found.node_addresses] == [
        (HOSTNAME, "node-0"), (EXTERNAL_IP, public), (INTERNAL_IP, private)
    ]  # fmt: skip


def test_a_device_without_a_public_ipv4_address_is_an_error_as_upstream(
    metal: Mapping[str, str],
) -> None:
    # devices.go:99-143@38d15e2 (nodeAddresses): no private IPv4 (nor provided node IP) is
    # "could not get at least one private ip", no public IPv4 "... public ip": the node is not
    # initialised and the node controller says why. Metal makes a private-only device when
    # ip_addresses asks for no public IPv4.
    api = MetalApi(metal)
    private_only = [{"address_family": 4, "public": False}]
    (created,) = api.create_devices(1, prefix="private", ip_addresses=private_only)
    (other,) = api.create_devices(1, prefix="public")
    instances = provider_for(metal).instances_v2()

    with pytest.raises(CloudError, match="could not get at least one public IPv4 address"):
        instances.instance_metadata(node("private-0", f"equinixmetal://{created['id']}"))
    many = instances.instances_metadata(
        [node("private-0"), node("public-0"), node("nowhere-0"), node("nowhere-1")]
    )
    assert isinstance(many["private-0"], CloudError) and "public IPv4" in str(many["private-0"])
    assert not isinstance(many["public-0"], Exception)
    assert many["public-0"].provider_id == f"equinixmetal://{other['id']}"


@pytest.mark.parametrize("form", ["equinixmetal://{}", "packet://{}", "{}", "equinixmetal:///{}"])
def test_every_provider_id_form_finds_the_device(metal: Mapping[str, str], form: str) -> None:
    (created,) = MetalApi(metal).create_devices(1)

    found = (
        provider_for(metal)
        .instances_v2()
        .instance_metadata(node("renamed", form.format(created["id"])))
    )

    assert found.provider_id == f"equinixmetal://{created['id']}"


def test_a_powered_off_device_is_shut_down_and_a_deleted_one_is_gone(
    metal: Mapping[str, str],
) -> None:
    api = MetalApi(metal)
    off, gone = api.create_devices(2)
    api.action(off["id"], "power_off")
    api.ok("DELETE", f"/devices/{gone['id']}")
    instances = provider_for(metal).instances_v2()

    assert instances.instance_shutdown(node("node-0", f"equinixmetal://{off['id']}"))
    assert not instances.instance_exists(node("node-1", f"equinixmetal://{gone['id']}"))
    with pytest.raises(InstanceNotFound):
        instances.instance_metadata(node("node-1", f"equinixmetal://{gone['id']}"))


def test_bulk_lookups_share_one_listing_and_look_again_for_a_device_it_lacks(
    metal: Mapping[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "DEVICE_PAGE_SIZE", 100)
    api = MetalApi(metal)
    created = api.create_devices(150)
    instances = provider_for(metal).instances_v2()
    control(metal).reset_calls()

    first = instances.instances_metadata([node(d["hostname"]) for d in created[:100]]
                                         + [node("nowhere")])  # fmt: skip
    second = instances.instances_metadata([node(d["hostname"]) for d in created[100:]])

    assert control(metal).calls() == {"findProjectDevices": 2}  # one listing, 100 a page
    found = {**first, **second}
    assert {found[d["hostname"]].provider_id for d in created} == {  # type: ignore[union-attr]
        f"equinixmetal://{d['id']}" for d in created
    }
    assert isinstance(found["nowhere"], InstanceNotFound)

    time.sleep(listing.CURRENT)  # the listing kept is no longer current
    (late,) = api.create_devices(1, prefix="late")
    control(metal).reset_calls()
    third = instances.instances_metadata([node(d["hostname"]) for d in created[:2]]
                                         + [node("late-0")])  # fmt: skip

    assert control(metal).calls() == {"findProjectDevices": 2}  # listed again for late-0
    assert third["late-0"].provider_id == f"equinixmetal://{late['id']}"  # type: ignore[union-attr]


def test_another_clouds_provider_id_is_an_error_and_never_a_deleted_instance(
    metal: Mapping[str, str],
) -> None:
    # Upstream's deviceIDFromProviderID refuses another scheme (metal/devices.go:192-213
    # @38d15e2) and InstanceExists returns that error (devices.go:40-51), so the node-lifecycle
    # controller keeps the node; "not found" would delete it.
    devices = MetalApi(metal).create_devices(2)
    instances = provider_for(metal).instances_v2()
    foreign = node("elsewhere", "aws:///us-east-1a/i-0123456789")
    ours = [node(d["hostname"], f"equinixmetal://{d['id']}") for d in devices]

    with pytest.raises(ForeignProviderId, match="aws:///us-east-1a/i-0123456789"):
        instances.instance_exists(foreign)
    found = instances.instances_exist([*ours, foreign])

    assert [found[n.name] for n in ours] == [True, True]
    assert isinstance(found["elsewhere"], ForeignProviderId)


def test_any_device_id_is_asked_for_as_upstream_asks(metal: Mapping[str, str]) -> None:
    # Upstream takes any non-empty id after the scheme, or a bare one (metal/devices.go:192-213
    # @38d15e2), and asks Metal: a 404 is a device gone. polyccm answered "no instance" for
    # anything not shaped like a UUID without asking.
    calls = control(metal)
    calls.reset_calls()

    exists = provider_for(metal).instances_v2().instance_exists(node("old", "packet://dev-42"))

    assert exists is False
    assert calls.calls().get("findDeviceById") == 1
