"""Droplets as nodes: what a node gets (providerID, size, region, addresses), 404 as gone, and
bulk lookups that list droplets 200 a page instead of asking droplet by droplet."""

from __future__ import annotations

from collections.abc import Mapping

from polyccm.cloud import EXTERNAL_IP, HOSTNAME, INTERNAL_IP, NodeAddress
from polyccm.objects import Node
from polyccm_digitalocean_emulator.testing import DigitalOceanApi, control, provider_for


def node(name: str, provider_id: str = "") -> Node:
    return Node({"metadata": {"name": name}, "spec": {"providerID": provider_id}})


def test_metadata_names_size_region_and_every_address(do: Mapping[str, str]) -> None:
    api = DigitalOceanApi(do)
    (created,) = api.create_droplets(1, ipv6=True, size="s-2vcpu-4gb")
    droplet = api.droplet(created["id"])
    v4 = {n["type"]: n["ip_address"] for n in droplet["networks"]["v4"]}

    metadata = provider_for(do).instances_v2().instance_metadata(node(droplet["name"]))

    assert metadata.provider_id == f"digitalocean://{droplet['id']}"
    assert metadata.instance_type == "s-2vcpu-4gb"
    assert metadata.region == "nyc3" and metadata.zone == ""
    assert metadata.node_addresses == (
        NodeAddress(HOSTNAME, droplet["name"]),
        NodeAddress(INTERNAL_IP, v4["private"]),
        NodeAddress(EXTERNAL_IP, v4["public"]),
        NodeAddress(EXTERNAL_IP, droplet["networks"]["v6"][0]["ip_address"]),
    )


def test_a_deleted_droplet_does_not_exist(do: Mapping[str, str]) -> None:
    api = DigitalOceanApi(do)
    (droplet,) = api.create_droplets(1)
    api.delete_droplet(droplet["id"])

    assert (
        not provider_for(do)
        .instances_v2()
        .instance_exists(node("gone", f"digitalocean://{droplet['id']}"))
    )


def test_bulk_lookups_cost_a_request_per_200_droplets(do: Mapping[str, str]) -> None:
    api = DigitalOceanApi(do)
    droplets = api.create_droplets(250)
    nodes = [node(d["name"], f"digitalocean://{d['id']}") for d in droplets]
    instances = provider_for(do).instances_v2()
    control(do).reset_calls()

    metadata = instances.instances_metadata(nodes)
    exist = instances.instances_exist(nodes)

    assert len(metadata) == len(exist) == 250 and all(exist.values())
    assert dict(control(do).calls()) == {"droplets_list": 4}, "two pages per lookup"


def test_batches_of_registering_nodes_share_one_listing_until_a_droplet_is_missing(
    do: Mapping[str, str],
) -> None:
    api = DigitalOceanApi(do)
    first, second = api.create_droplets(3, prefix="a"), api.create_droplets(3, prefix="b")
    instances = provider_for(do).instances_v2()
    control(do).reset_calls()

    instances.instances_metadata([node(d["name"]) for d in first])
    instances.instances_metadata([node(d["name"]) for d in second])
    assert dict(control(do).calls()) == {"droplets_list": 1}

    (late,) = api.create_droplets(1, prefix="late")
    found = instances.instances_metadata([node(d["name"]) for d in (*first, late)])
    assert not any(isinstance(value, Exception) for value in found.values())
    assert control(do).calls()["droplets_list"] == 2
    instances.instances_exist([node(d["name"]) for d in second])
    assert control(do).calls()["droplets_list"] == 3, "existence is always read afresh"
