"""Instances against the emulator: metadata as upstream gives it, lookups, and what they cost."""

from __future__ import annotations

from typing import Any

import pytest
from polyccm.cloud import EXTERNAL_IP, HOSTNAME, INTERNAL_IP
from polyccm.errors import InstanceNotFound
from polyccm_gce_emulator.testing import (
    PROJECT,
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


def test_gone_is_not_found_and_terminated_is_shut_down(provider: Any, api: ComputeApi) -> None:
    for name in ("gone", "stopped"):
        api.create_instance(name)
    api.delete_instance("gone")
    api.stop_instance("stopped")
    instances = provider.instances_v2()

    assert instances.instance_exists(node_for("gone")) is False
    with pytest.raises(InstanceNotFound):
        instances.instance_metadata(node_for("gone", provider_id=False))
    assert instances.instance_exists(node_for("stopped")) is True
    assert instances.instance_shutdown(node_for("stopped")) is True


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
