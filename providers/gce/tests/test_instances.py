"""Instances against the emulator: metadata as upstream gives it, lookups, and what they cost."""

from __future__ import annotations

from typing import Any

import pytest
from polyccm.cloud import EXTERNAL_IP, HOSTNAME, INTERNAL_IP
from polyccm.errors import CapabilityNotImplemented, InstanceNotFound
from polyccm_gce_emulator.testing import (
    PROJECT,
    REGION,
    ZONE,
    ComputeApi,
    RunningEmulator,
    gce_provider,
    node_for,
)


@pytest.fixture
def provider(emulator: RunningEmulator) -> Any:
    return gce_provider(emulator.endpoint)


def test_metadata_has_upstreams_provider_id_type_zone_and_addresses(
    provider: Any, api: ComputeApi
) -> None:
    made = api.create_instance("worker-1", machine_type="n2-standard-4")
    nic = made["networkInterfaces"][0]

    metadata = provider.instances_v2().instance_metadata(node_for("worker-1", provider_id=False))

    assert metadata.provider_id == f"gce://{PROJECT}/{ZONE}/worker-1"
    assert metadata.instance_type == "n2-standard-4"
    assert (metadata.zone, metadata.region) == (ZONE, "us-central1")
    assert [(a.type, a.address) for a in metadata.node_addresses] == [
        (INTERNAL_IP, nic["networkIP"]),
        (EXTERNAL_IP, nic["accessConfigs"][0]["natIP"]),
        (HOSTNAME, "worker-1"),
    ]


def test_gone_is_not_found_and_a_terminated_instance_exists_its_shutdown_untold(
    provider: Any, api: ComputeApi
) -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce_instances.go:277-285: InstanceShutdown and
    # InstanceShutdownByProviderID return cloudprovider.NotImplemented, whatever the status.
    for name in ("gone", "stopped"):
        api.create_instance(name)
    api.delete_instance("gone")
    api.stop_instance("stopped")
    instances = provider.instances_v2()

    assert instances.instance_exists(node_for("gone")) is False
    with pytest.raises(InstanceNotFound):
        instances.instance_metadata(node_for("gone", provider_id=False))
    assert instances.instance_exists(node_for("stopped")) is True
    with pytest.raises(CapabilityNotImplemented):
        instances.instance_shutdown(node_for("stopped"))
    with pytest.raises(CapabilityNotImplemented):
        instances.instances_shutdown([node_for("stopped")])


def _dual_stack(api: ComputeApi, access: str) -> str:
    """A dual-stack subnetwork with ``access`` IPv6 (EXTERNAL or INTERNAL); its path."""
    api.do("POST", "global/networks", {"name": "v6", "autoCreateSubnetworks": False})
    name = f"v6-{access.lower()}"
    api.do(
        "POST",
        f"regions/{REGION}/subnetworks",
        {
            "name": name,
            "network": "global/networks/v6",
            "ipCidrRange": "10.20.0.0/24",
            "stackType": "IPV4_IPV6",
            "ipv6AccessType": access,
        },
    )
    return f"regions/{REGION}/subnetworks/{name}"


@pytest.mark.parametrize(
    ("stack_type", "access", "ipv6_first"),
    [
        ("", "EXTERNAL", False),
        ("IPV4_IPV6", "INTERNAL", False),
        ("IPV6", "EXTERNAL", True),
        ("IPV6", "INTERNAL", True),
    ],
)
def test_an_interfaces_ipv6_address_is_an_internal_ip_ordered_by_stack_type(
    emulator: RunningEmulator, api: ComputeApi, stack_type: str, access: str, ipv6_first: bool
) -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce_instances.go:287-320: per interface its
    # networkIP, each access config's natIP, then its IPv6 address (ipv6Address, else with
    # ipv6AccessType EXTERNAL the ipv6AccessConfigs' externalIpv6) as InternalIP; :96-122
    # orderAddresses puts IPv6 first only for stack-type IPV6 (gce.go:117-119).
    made = api.create_instance("dual", subnetwork=_dual_stack(api, access), ipv6=access)
    nic = made["networkInterfaces"][0]
    ipv6 = nic.get("ipv6Address") or nic["ipv6AccessConfigs"][0]["externalIpv6"]
    provider = gce_provider(emulator.endpoint, stack_type=stack_type)

    metadata = provider.instances_v2().instance_metadata(node_for("dual"))
    # The bulk lookup (asking only the fields the metadata is made of) gives the same.
    (bulk,) = provider.instances_v2().instances_metadata([node_for("dual")]).values()

    ipv4 = [(INTERNAL_IP, nic["networkIP"]), (EXTERNAL_IP, nic["accessConfigs"][0]["natIP"])]
    ips = [(INTERNAL_IP, ipv6), *ipv4] if ipv6_first else [*ipv4, (INTERNAL_IP, ipv6)]
    assert [(a.type, a.address) for a in metadata.node_addresses] == [*ips, (HOSTNAME, "dual")]
    assert ":" in ipv6
    assert bulk == metadata


def test_a_node_named_by_its_hostname_is_its_instance_cut_at_the_first_dot(
    provider: Any, api: ComputeApi
) -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce_util.go:207-216 canonicalizeInstanceName,
    # used by every lookup of gce_instances.go (:784-792 getInstanceFromProjectInZoneByName).
    api.create_instance("worker-7")
    fqdn = f"worker-7.c.{PROJECT}.internal"
    instances = provider.instances_v2()

    by_name = instances.instance_metadata(node_for(fqdn, provider_id=False))
    by_id = node_for("worker-7")
    by_id.raw["metadata"]["name"] = fqdn

    assert by_name.provider_id == f"gce://{PROJECT}/{ZONE}/worker-7"
    assert instances.instance_exists(node_for(fqdn, provider_id=False)) is True
    assert instances.instances_exist([node_for(fqdn, provider_id=False)]) == {fqdn: True}
    assert instances.instance_metadata(by_id).provider_id == by_name.provider_id


def test_an_instance_outside_the_clusters_zones_is_not_found_by_name(
    provider: Any, api: ComputeApi
) -> None:
    api.create_instance("elsewhere", zone="europe-west1-b")

    assert (
        provider.instances_v2().instance_exists(node_for("elsewhere", provider_id=False)) is False
    )


def test_a_batch_costs_one_filtered_aggregated_list(
    provider: Any, api: ComputeApi, emulator: RunningEmulator
) -> None:
    names = [f"bulk-{i}" for i in range(6)]
    for name in names:
        api.create_instance(name)
    api.create_instance("not-asked")
    nodes = [node_for(name, provider_id=i % 2 == 0) for i, name in enumerate(names)]
    nodes.append(node_for("never-made"))
    emulator.control.reset_calls()

    found = provider.instances_v2().instances_metadata(nodes)

    assert emulator.control.calls() == {"compute.instances.aggregatedList": 1}
    assert {name for name, value in found.items() if not isinstance(value, Exception)} == set(names)
    assert isinstance(found["never-made"], InstanceNotFound)


def test_a_batch_asks_only_for_the_fields_its_metadata_is_made_of(
    provider: Any, api: ComputeApi, emulator: RunningEmulator
) -> None:
    # Decoding whole instances (disks, metadata, service accounts, scheduling...) was most of
    # the CPU a batch of a hundred nodes cost; the answer now holds what metadata_of reads.
    for name in ("slim-1", "slim-2"):
        api.create_instance(name, labels={"team": "a"}, metadata={"startup-script": "x" * 500})
    answers: list[Any] = []
    emulator.app.observers.append(answers.append)

    found = provider.instances_v2().instances_metadata([node_for("slim-1"), node_for("slim-2")])
    exists = provider.instances_v2().instances_exist([node_for("slim-1", provider_id=False)])

    listed, checked = (a.response_body for a in answers)
    instances = [i for s in listed["items"].values() for i in s.get("instances", ())]
    assert {key for i in instances for key in i} == {
        "name",
        "zone",
        "machineType",
        "networkInterfaces",
    }
    assert {key for nic in instances[0]["networkInterfaces"] for key in nic} == {
        "networkIP",
        "accessConfigs",
    }
    (asked,) = [i for s in checked["items"].values() for i in s.get("instances", ())]
    assert list(asked) == ["name", "zone"]
    assert exists == {"slim-1": True}
    assert found["slim-1"].instance_type == "e2-medium"


def test_thousands_of_nodes_are_looked_up_in_requests_of_a_few_hundred(
    provider: Any, api: ComputeApi, emulator: RunningEmulator
) -> None:
    api.create_instance("many-00007")
    api.create_instance("many-04999")
    nodes = [node_for(f"many-{i:05d}") for i in range(5000)]
    emulator.control.reset_calls()

    found = provider.instances_v2().instances_exist(nodes)

    assert {name for name, exists in found.items() if exists} == {"many-00007", "many-04999"}
    assert emulator.control.calls() == {"compute.instances.aggregatedList": 10}
