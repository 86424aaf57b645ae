"""The node controllers on the GCE provider, against the real API server and the emulator: a
node named by its hostname is initialised with its instance's providerID, a stopped
(TERMINATED) instance's node is never tainted as shut down, and a node in a zone opened after
the start is found once it appears, as upstream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.oauth2.credentials import Credentials
from polyccm.kube.api import NODES, KubeApi
from polyccm.objects import SHUTDOWN_TAINT, UNINITIALIZED_TAINT, Node
from polyccm_gce import provider as provider_module
from polyccm_gce.config import CloudConfig
from polyccm_gce.provider import GceProvider
from polyccm_gce.zones import ManagedZones
from polyccm_gce_emulator.testing import (
    PROJECT,
    TEST_TOKEN,
    ZONE,
    ComputeApi,
    RunningEmulator,
    gce_provider,
)
from polyccm_testing.kubeobjects import make_node, stays, wait_for
from polyccm_testing.manager import RunningManager, manager_options, start_manager


@pytest.fixture
def manager(control_plane: Any, clean_nodes: None, emulator: RunningEmulator) -> Iterator[Any]:
    """Start the given controllers on a GCE provider on the emulator (fast periods)."""
    running: list[RunningManager] = []

    def start(*controllers: str, built: Any = None, **provider: Any) -> RunningManager:
        options = manager_options(
            "gce",
            control_plane.kubeconfig,
            controllers=frozenset(controllers),
            node_monitor_period=0.5,
            node_status_update_frequency=1.0,
        )
        handle = start_manager(options, built or gce_provider(emulator.endpoint, **provider))
        running.append(handle)
        return handle

    yield start
    for handle in running:
        handle.stop()


def _node(kube_api: KubeApi, name: str) -> Node:
    return Node(kube_api.get(NODES, name))


@pytest.mark.timeout(120)
def test_a_stopped_instances_not_ready_node_is_kept_and_never_tainted_shut_down(
    manager: Any, kube_api: KubeApi, api: ComputeApi, emulator: RunningEmulator
) -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce_instances.go:277-285: InstanceShutdown is
    # cloudprovider.NotImplemented, which k8s.io/cloud-provider's node lifecycle controller
    # reads as "not shut down": the node of a TERMINATED instance keeps no shutdown taint.
    api.create_instance("sleeper")
    api.stop_instance("sleeper")
    assert api.get(f"zones/{ZONE}/instances/sleeper")["status"] == "TERMINATED"
    make_node(
        kube_api,
        "sleeper",
        tainted=False,
        ready=False,
        provider_id=f"gce://{PROJECT}/{ZONE}/sleeper",
    )
    emulator.control.reset_calls()

    manager("cloud-node-lifecycle")

    wait_for(
        lambda: (
            emulator.control.calls().get("compute.instances.aggregatedList", 0)
            + emulator.control.calls().get("compute.instances.get", 0)
            >= 3
        ),
        30,
        "three monitor periods",
    )
    assert stays(lambda: not _node(kube_api, "sleeper").has_taint(SHUTDOWN_TAINT), 2.0)


@pytest.mark.timeout(120)
def test_a_node_registered_under_its_hostname_is_initialised_with_its_instance(
    manager: Any, kube_api: KubeApi, api: ComputeApi
) -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce_util.go:207-216 canonicalizeInstanceName:
    # a kubelet registered as worker-9.c.<project>.internal is instance worker-9.
    made = api.create_instance("worker-9")
    fqdn = f"worker-9.c.{PROJECT}.internal"
    make_node(kube_api, fqdn)

    manager("cloud-node")

    node = wait_for(
        lambda: (n := _node(kube_api, fqdn)) and not n.has_taint(UNINITIALIZED_TAINT) and n,
        30,
        "the node initialised",
    )
    assert node.provider_id == f"gce://{PROJECT}/{ZONE}/worker-9"
    addresses = node.raw["status"]["addresses"]
    assert {"type": "InternalIP", "address": made["networkInterfaces"][0]["networkIP"]} in (
        addresses
    )


@pytest.mark.timeout(180)
def test_a_node_in_a_zone_opened_after_the_start_is_found_once_it_appears(
    manager: Any,
    kube_api: KubeApi,
    api: ComputeApi,
    emulator: RunningEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce.go:532-534 (multizone or regional: dynamic
    # zones), :869-906 SetInformers and :934-963 updateNodeZones: a node in a zone not managed
    # yet lists the region's zones again (refreshManagedZones, :1107-1130).
    credentials: Any = Credentials(token=TEST_TOKEN)  # type: ignore[no-untyped-call]
    monkeypatch.setattr(
        provider_module, "application_default_credentials", lambda: (credentials, None)
    )
    config = CloudConfig(
        project_id=PROJECT,
        local_zone=ZONE,
        network_name="default",
        api_endpoint=f"{emulator.endpoint}/compute/v1/",
        multizone=True,
    )
    built = GceProvider.discover(config)
    assert "us-central1-z" not in built.lookup.zones
    emulator.control.open_zone("us-central1-z")
    api.create_instance("late", zone="us-central1-z")
    make_node(kube_api, "late", labels={"topology.kubernetes.io/zone": "us-central1-z"})

    manager("cloud-node", built=built)

    node = wait_for(
        lambda: (n := _node(kube_api, "late")) and not n.has_taint(UNINITIALIZED_TAINT) and n,
        60,
        "the node in the new zone initialised",
    )
    assert node.provider_id == f"gce://{PROJECT}/us-central1-z/late"
    assert "us-central1-z" in built.lookup.zones


class _Nodes:
    """The node cache's handler registration, for :meth:`ManagedZones.follow`."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def add_handler(self, **handlers: Any) -> None:
        self.handlers.update(handlers)


def _labelled(name: str, zone: str, version: str = "1") -> dict[str, Any]:
    labels = {"topology.kubernetes.io/zone": zone}
    return {"metadata": {"name": name, "labels": labels, "resourceVersion": version}}


def test_the_zones_are_listed_again_for_a_new_zone_not_for_every_node_update() -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce.go:878-885: an update whose zone is
    # unchanged is ignored; :941-947: a node in a managed zone lists nothing.
    listings: list[int] = []

    def lister() -> list[str]:
        listings.append(1)
        return ["us-central1-a", "us-central1-b"]

    zones = ManagedZones(["us-central1-a"], lister)
    nodes = _Nodes()
    zones.follow(nodes)  # type: ignore[arg-type]

    nodes.handlers["on_add"](_labelled("a", "us-central1-a"))
    assert listings == []
    nodes.handlers["on_add"](_labelled("b", "us-central1-b"))
    assert listings == [1] and "us-central1-b" in zones
    nodes.handlers["on_add"](_labelled("x", "mars-1a"))
    assert len(listings) == 2
    old, new = _labelled("x", "mars-1a"), _labelled("x", "mars-1a", "2")
    nodes.handlers["on_update"](old, new)
    assert len(listings) == 2, "a status update of a node in an unknown zone lists nothing"
    assert ManagedZones(["us-central1-a"]).dynamic is False
