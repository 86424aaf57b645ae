"""Conformance of :class:`~polyccm.cloud.InstancesV2`: what the node controllers rely on.

Proves, against the emulator and real Node objects: a running instance exists and is not shut
down, a stopped one exists and is shut down (or, for a provider that does not tell, as GCE's
upstream, both say :class:`~polyccm.errors.CapabilityNotImplemented`), a deleted one does not
exist (and its metadata is :class:`~polyccm.errors.InstanceNotFound`); a node is found by
providerID whatever its name, and by name before it has a providerID; metadata names the
instance (providerID, type, region, zone where the cloud has zones, an InternalIP); the bulk
lookups answer as the single ones do.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest
from polyccm.cloud import INTERNAL_IP, InstanceMetadata, InstancesV2
from polyccm.errors import CapabilityNotImplemented, InstanceNotFound
from polyccm.objects import Node

from polyccm_testing.conformance.base import ConformanceBase, offered
from polyccm_testing.conformance.cloud_under_test import CloudUnderTest
from polyccm_testing.conformance.cluster import KitCluster


class InstancesConformance(ConformanceBase):
    """The InstancesV2 promises. Subclass it (or :class:`ProviderConformance`) and give a
    ``cloud`` fixture."""

    zones: ClassVar[bool] = True
    """Whether the cloud places instances in zones (metadata must then name one). Set it to
    ``False`` for a cloud without zones, such as DigitalOcean."""

    tells_shutdown: ClassVar[bool] = True
    """Whether the provider tells a stopped instance from a running one. Set it to ``False``
    for a provider that, as its upstream, raises
    :class:`~polyccm.errors.CapabilityNotImplemented` from the shutdown methods (GCE): the kit
    then checks that it does, for one node and in bulk."""

    @pytest.fixture
    def kit_instances(self, cloud: CloudUnderTest) -> InstancesV2:
        return offered(
            cloud.provider.instances_v2(), cloud.provider, "InstancesV2", "instances_v2()"
        )

    def test_instances_a_running_instance_exists_and_is_not_shut_down(
        self, kit_cluster: KitCluster, kit_instances: InstancesV2
    ) -> None:
        node = kit_cluster.add_node("running")

        for view in (node, kit_cluster.before_initialisation(node)):
            assert kit_instances.instance_exists(view), f"{_how(view)}: should exist"
            if not self.tells_shutdown:
                with pytest.raises(CapabilityNotImplemented):
                    kit_instances.instance_shutdown(view)
                continue
            assert not kit_instances.instance_shutdown(view), f"{_how(view)}: is running"

    def test_instances_a_stopped_instance_exists_and_is_shut_down(
        self, kit_cluster: KitCluster, kit_instances: InstancesV2, cloud: CloudUnderTest
    ) -> None:
        node = kit_cluster.add_node("stopped")

        cloud.stop_instance(node.name)

        for view in (node, kit_cluster.before_initialisation(node)):
            assert kit_instances.instance_exists(view), f"{_how(view)}: a stopped one exists"
            if not self.tells_shutdown:
                with pytest.raises(CapabilityNotImplemented):
                    kit_instances.instance_shutdown(view)
                continue
            assert kit_instances.instance_shutdown(view), f"{_how(view)}: should be shut down"

    def test_instances_a_deleted_instance_does_not_exist(
        self, kit_cluster: KitCluster, kit_instances: InstancesV2, cloud: CloudUnderTest
    ) -> None:
        node = kit_cluster.add_node("deleted")

        cloud.delete_instance(node.name)

        for view in (node, kit_cluster.before_initialisation(node)):
            assert not kit_instances.instance_exists(view), f"{_how(view)}: should be gone"
            with pytest.raises(InstanceNotFound):
                kit_instances.instance_metadata(view)

    def test_instances_metadata_names_the_instance(
        self, kit_cluster: KitCluster, kit_instances: InstancesV2
    ) -> None:
        node = kit_cluster.add_node("described")

        metadata = kit_instances.instance_metadata(node)
        by_name = kit_instances.instance_metadata(kit_cluster.before_initialisation(node))

        assert metadata.provider_id, "metadata gives no providerID"
        assert metadata.provider_id == node.provider_id
        assert metadata.instance_type, "metadata gives no instance type"
        assert metadata.region, "metadata gives no region"
        if self.zones:
            assert metadata.zone, "metadata gives no zone (set zones = False if the cloud has none)"
        assert any(a.type == INTERNAL_IP and a.address for a in metadata.node_addresses), (
            f"no InternalIP among {metadata.node_addresses}"
        )
        # Additional labels may depend on the labels the node already carries (the initialised
        # node has them), so only what the instance itself decides must agree.
        assert _instance_facts(by_name) == _instance_facts(metadata), (
            "a node found by name gets other metadata than by providerID"
        )

    def test_instances_a_node_is_found_by_provider_id_whatever_its_name(
        self, kit_cluster: KitCluster, kit_instances: InstancesV2
    ) -> None:
        node = kit_cluster.add_node("renamed")
        renamed = kit_cluster.add_named_node(f"other-{node.name}", node.provider_id)

        assert kit_instances.instance_exists(renamed), (
            f"{_how(renamed)}: not found by its providerID"
        )
        assert kit_instances.instance_metadata(renamed).provider_id == node.provider_id

    def test_instances_bulk_lookups_answer_as_single_ones(
        self, kit_cluster: KitCluster, kit_instances: InstancesV2, cloud: CloudUnderTest
    ) -> None:
        running = kit_cluster.add_node("bulk-running")
        fresh = kit_cluster.add_node("bulk-fresh", initialise=False)
        stopped = kit_cluster.add_node("bulk-stopped")
        deleted = kit_cluster.add_node("bulk-deleted")
        gone = kit_cluster.add_node("bulk-gone", initialise=False)
        cloud.stop_instance(stopped.name)
        cloud.delete_instance(deleted.name)
        cloud.delete_instance(gone.name)
        nodes = [running, fresh, stopped, deleted, gone]
        existing = [running, fresh, stopped]

        bulk_metadata = kit_instances.instances_metadata(nodes)
        bulk_exist = kit_instances.instances_exist(nodes)
        if self.tells_shutdown:
            bulk_shutdown = kit_instances.instances_shutdown(existing)
        else:
            with pytest.raises(CapabilityNotImplemented):
                kit_instances.instances_shutdown(existing)

        assert set(bulk_metadata) == set(bulk_exist) == {n.name for n in nodes}
        for node in nodes:
            single_exists = kit_instances.instance_exists(node)
            assert bulk_exist[node.name] == single_exists, f"exists of {_how(node)}"
            single = _metadata_or_error(kit_instances, node)
            bulk = bulk_metadata[node.name]
            if isinstance(single, InstanceNotFound):
                assert isinstance(bulk, InstanceNotFound), f"metadata of {_how(node)}: {bulk!r}"
            else:
                assert bulk == single, f"metadata of {_how(node)}"
        for node in existing if self.tells_shutdown else ():
            single_shutdown = kit_instances.instance_shutdown(node)
            assert bulk_shutdown[node.name] == single_shutdown, f"shutdown of {_how(node)}"
        assert bulk_exist == {
            running.name: True,
            fresh.name: True,
            stopped.name: True,
            deleted.name: False,
            gone.name: False,
        }
        if self.tells_shutdown:
            assert bulk_shutdown == {running.name: False, fresh.name: False, stopped.name: True}


def _instance_facts(metadata: InstanceMetadata) -> InstanceMetadata:
    return dataclasses.replace(metadata, additional_labels={})


def _metadata_or_error(instances: InstancesV2, node: Node) -> object:
    try:
        return instances.instance_metadata(node)
    except InstanceNotFound as error:
        return error


def _how(node: Node) -> str:
    how = f"providerID {node.provider_id}" if node.provider_id else "by name"
    return f"node {node.name} ({how})"
