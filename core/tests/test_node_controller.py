"""Cloud node controller, against the real API server and the fake cloud (UPSTREAM.md
"Cloud node controller")."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
import urllib3
from polyccm import cloudcalls
from polyccm.cloud import NodeAddress
from polyccm.controllers import nodeinfo
from polyccm.kube.api import NODES, STRATEGIC_MERGE_PATCH, KubeApi
from polyccm.metrics import REGISTRY
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_testing.fake import FakeCloud
from polyccm_testing.kubeobjects import make_node, reasons_for, set_ready, stays, wait_for


def node(api: KubeApi, name: str) -> Node:
    return Node(api.get(NODES, name))


def initialised(api: KubeApi, name: str) -> Node | None:
    current = node(api, name)
    return None if current.has_taint(UNINITIALIZED_TAINT) else current


def with_addresses(api: KubeApi, name: str) -> Node | None:
    """The node once initialised and its cloud addresses written (they follow the taint)."""
    current = initialised(api, name)
    return current if current and any(t == "InternalIP" for t, _ in current.addresses) else None


def test_tainted_node_is_initialised_with_provider_id_labels_and_addresses(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.add_instance(
        "worker-1",
        instance_type="m.large",
        zone="zone-b",
        region="region-9",
        additional_labels={
            "fake.example.com/rack": "r7",
            "kubernetes.io/forbidden": "x",
            "sub.k8s.io/forbidden": "y",
            "team": "cloud-value",
        },
    )
    make_node(kube_api, "worker-1", labels={"team": "node-value"})
    start_manager(fake_cloud)

    done = wait_for(lambda: with_addresses(kube_api, "worker-1"), what="initialisation")
    assert done.provider_id == "fake://region-9/worker-1"
    labels = done.labels
    assert labels["node.kubernetes.io/instance-type"] == "m.large"
    assert labels["beta.kubernetes.io/instance-type"] == "m.large"
    assert labels["topology.kubernetes.io/zone"] == "zone-b"
    assert labels["failure-domain.beta.kubernetes.io/zone"] == "zone-b"
    assert labels["topology.kubernetes.io/region"] == "region-9"
    assert labels["failure-domain.beta.kubernetes.io/region"] == "region-9"
    assert labels["fake.example.com/rack"] == "r7"
    assert "kubernetes.io/forbidden" not in labels
    assert "sub.k8s.io/forbidden" not in labels
    assert labels["team"] == "node-value", "an existing label must not be overwritten"
    assert ("InternalIP", "10.0.0.10") in done.addresses
    assert ("ExternalIP", "203.0.113.10") in done.addresses
    wait_for(lambda: "Synced" in reasons_for(kube_api, "default", "worker-1"), what="Synced")


def test_existing_provider_id_is_never_changed(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    instance = fake_cloud.add_instance("worker-2")
    make_node(kube_api, "worker-2", provider_id=instance.provider_id)
    start_manager(fake_cloud)
    done = wait_for(lambda: initialised(kube_api, "worker-2"))
    assert done.provider_id == instance.provider_id


def test_node_without_instance_stays_tainted_with_a_warning_and_others_proceed(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.add_instance("good")
    make_node(kube_api, "ghost")
    make_node(kube_api, "good")
    start_manager(fake_cloud)
    wait_for(lambda: initialised(kube_api, "good"), what="the good node")
    wait_for(
        lambda: "FailedToInitialize" in reasons_for(kube_api, "default", "ghost"),
        what="a warning on the ghost node",
    )
    assert node(kube_api, "ghost").has_taint(UNINITIALIZED_TAINT)
    assert not node(kube_api, "ghost").provider_id


def test_malformed_provider_id_warns_and_keeps_the_taint(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.add_instance("odd")
    make_node(kube_api, "odd", provider_id="not-a-provider-id")
    start_manager(fake_cloud)
    wait_for(lambda: "FailedToInitialize" in reasons_for(kube_api, "default", "odd"))
    assert stays(lambda: node(kube_api, "odd").has_taint(UNINITIALIZED_TAINT), 1.5)
    # Backoff, not a busy loop: a handful of lookups in a few seconds, not hundreds.
    assert fake_cloud.count("instances_metadata") < 10


def test_provided_node_ip_must_belong_to_the_instance(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.add_instance("ip-bad")
    fake_cloud.add_instance(
        "ip-good",
        addresses=(
            NodeAddress("InternalIP", "10.1.0.5"),
            NodeAddress("InternalIP", "10.1.0.6"),
            NodeAddress("ExternalIP", "198.51.100.6"),
        ),
    )
    annotation = "alpha.kubernetes.io/provided-node-ip"
    make_node(kube_api, "ip-bad", annotations={annotation: "10.9.9.9"})
    make_node(
        kube_api,
        "ip-good",
        annotations={annotation: "10.1.0.6"},
        addresses=(("Hostname", "ip-good.local"),),
    )
    start_manager(fake_cloud)

    good = wait_for(lambda: with_addresses(kube_api, "ip-good"))
    # The provided IP is the node's only InternalIP, the cloud's secondary one is dropped
    # (kubernetes #61921; cloud-provider v0.35.4 node/helpers/address.go:60-93); the other
    # types stay, and the kubelet's hostname is kept. Every rule: test_nodeip.py.
    assert good.addresses == (
        ("InternalIP", "10.1.0.6"),
        ("ExternalIP", "198.51.100.6"),
        ("Hostname", "ip-good.local"),
    )
    wait_for(lambda: "FailedToInitialize" in reasons_for(kube_api, "default", "ip-bad"))
    assert node(kube_api, "ip-bad").has_taint(UNINITIALIZED_TAINT)


def test_many_nodes_are_initialised_with_few_cloud_calls(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    count = 60
    for i in range(count):
        fake_cloud.add_instance(f"bulk-{i:03d}")
        make_node(kube_api, f"bulk-{i:03d}")
    start_manager(fake_cloud)
    wait_for(
        lambda: all(initialised(kube_api, f"bulk-{i:03d}") for i in range(count)),
        timeout=60,
        what="every node initialised",
    )
    assert fake_cloud.count("instance_metadata") == 0
    assert fake_cloud.count("instances_metadata") <= 3, fake_cloud.counts()


def test_initialised_node_gets_ga_labels_copied_from_beta_labels(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # The beta label is the source of truth: a missing GA label is added and one that differs
    # is corrected (cloud-provider v0.35.4 controllers/node/node_controller.go:60-89, the
    # labelReconcileInfo table with ensureSecondaryExists, and 324-344, reconcileNodeLabels).
    make_node(
        kube_api,
        "old-node",
        tainted=False,
        provider_id="fake://region-1/old-node",
        labels={
            "failure-domain.beta.kubernetes.io/zone": "z1",
            "beta.kubernetes.io/instance-type": "t1",
            "failure-domain.beta.kubernetes.io/region": "r1",
            "topology.kubernetes.io/region": "r-stale",
        },
    )
    start_manager(fake_cloud)
    labels = wait_for(
        lambda: (
            node(kube_api, "old-node").labels.get("topology.kubernetes.io/region") == "r1"
            and node(kube_api, "old-node").labels
        ),
        what="the differing GA region label corrected",
    )
    assert labels["topology.kubernetes.io/zone"] == "z1"
    assert labels["node.kubernetes.io/instance-type"] == "t1"
    assert fake_cloud.count("instance_metadata") == 0, "label reconciliation needs no cloud call"


def test_addresses_are_refreshed_only_when_the_cloud_changes_them(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    instance = fake_cloud.add_instance("moving")
    make_node(kube_api, "moving")
    start_manager(fake_cloud, node_status_update_frequency=0.5)
    first = wait_for(lambda: with_addresses(kube_api, "moving"))
    version = first.resource_version
    assert stays(lambda: node(kube_api, "moving").resource_version == version, 1.5), (
        "unchanged addresses must not be re-written"
    )
    instance.addresses = (NodeAddress("InternalIP", "10.0.7.7"),)
    wait_for(lambda: ("InternalIP", "10.0.7.7") in node(kube_api, "moving").addresses)


def test_addresses_change_is_written_at_start_without_waiting_a_period(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # Upstream runs UpdateNodeStatus with wait.Until, whose first pass is immediate
    # (cloud-provider v0.35.4 controllers/node/node_controller.go:193-197).
    moved = (NodeAddress("InternalIP", "10.0.8.8"),)
    instance = fake_cloud.add_instance("rebooted", addresses=moved)
    make_node(
        kube_api,
        "rebooted",
        tainted=False,
        provider_id=instance.provider_id,
        addresses=(("InternalIP", "10.0.1.1"),),
    )
    start_manager(fake_cloud, node_status_update_frequency=3600.0)
    wait_for(
        lambda: node(kube_api, "rebooted").addresses == (("InternalIP", "10.0.8.8"),),
        what="the new address, an hour before the first period ends",
    )


def test_status_workers_ask_the_cloud_about_their_slices_side_by_side(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # Upstream spreads the nodes over --concurrent-node-status-updates workers
    # (workqueue.ParallelizeUntil in cloud-provider v0.36.2 controllers/node/
    # node_controller.go:295; v0.35.4 :292 uses --concurrent-node-syncs). Here each worker
    # asks about its slice in one bulk call: three workers, three calls in flight at once.
    names = [f"steady-{i}" for i in range(6)]
    for name in names:
        instance = fake_cloud.add_instance(name)
        make_node(
            kube_api,
            name,
            tainted=False,
            provider_id=instance.provider_id,
            addresses=tuple((a.type, a.address) for a in instance.addresses),
        )
    all_in_flight = threading.Barrier(3, timeout=10)
    slices: list[tuple[str, ...]] = []

    def meet(subjects: tuple[str, ...]) -> None:
        slices.append(subjects)
        all_in_flight.wait()  # broken unless three lookups are in flight together

    fake_cloud.observe("instances_metadata", meet)
    start_manager(fake_cloud, concurrent_node_status_updates=3, node_status_update_frequency=3600.0)
    wait_for(lambda: len(slices) >= 3, what="the first pass's three bulk lookups")
    assert not all_in_flight.broken, "the three slices were asked about one after the other"
    assert len(slices) == 3 and all(len(piece) == 2 for piece in slices), slices
    assert sorted(name for piece in slices for name in piece) == names


def test_readiness_does_not_matter_for_initialisation(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.add_instance("late")
    make_node(kube_api, "late", ready=False)
    start_manager(fake_cloud)
    wait_for(lambda: initialised(kube_api, "late"))
    set_ready(kube_api, "late", True)


def test_a_conflicting_write_is_retried_with_the_fresh_node(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.add_instance("busy")
    make_node(kube_api, "busy")
    bumped: list[bool] = []

    def change_node_during_cloud_call(_subjects: tuple[str, ...]) -> None:
        if not bumped:  # a kubelet writes the node while the controller asks the cloud
            kube_api.patch(NODES, "busy", {"metadata": {"labels": {"kubelet": "was-here"}}})
            bumped.append(True)

    fake_cloud.observe("instances_metadata", change_node_during_cloud_call)
    start_manager(fake_cloud)
    done = wait_for(lambda: initialised(kube_api, "busy"))
    assert done.labels["kubelet"] == "was-here", "the concurrent change survives"
    assert done.labels["topology.kubernetes.io/zone"] == "zone-a"
    assert "FailedToInitialize" not in reasons_for(kube_api, "default", "busy")


def test_a_node_deleted_mid_reconcile_is_not_an_error(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.add_instance("fleeting")
    fake_cloud.add_instance("staying")
    make_node(kube_api, "fleeting")
    fake_cloud.observe(
        "instances_metadata",
        lambda subjects: "fleeting" in subjects and kube_api.delete(NODES, "fleeting"),
    )
    start_manager(fake_cloud)
    wait_for(lambda: fake_cloud.count("instances_metadata") >= 1)
    make_node(kube_api, "staying")
    wait_for(lambda: initialised(kube_api, "staying"), what="the controller still works")
    assert "FailedToInitialize" not in reasons_for(kube_api, "default", "fleeting")


def test_taint_is_never_removed_without_a_provider_id(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.add_instance("anonymous", reported_provider_id="")
    make_node(kube_api, "anonymous")
    start_manager(fake_cloud)
    wait_for(lambda: "FailedToInitialize" in reasons_for(kube_api, "default", "anonymous"))
    assert node(kube_api, "anonymous").has_taint(UNINITIALIZED_TAINT)


def test_initialisation_delays_are_measured(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    def observed(name: str) -> float:
        value = REGISTRY.get_sample_value(f"node_controller_{name}_count")
        return value or 0.0

    before = observed("cloud_provider_taint_removal_delay_seconds")
    before_sync = observed("initial_node_sync_delay_seconds")
    fake_cloud.add_instance("measured")
    make_node(kube_api, "measured")
    start_manager(fake_cloud)
    wait_for(lambda: initialised(kube_api, "measured"))
    assert observed("cloud_provider_taint_removal_delay_seconds") == before + 1
    assert observed("initial_node_sync_delay_seconds") == before_sync + 1


BETA_TYPE = "beta.kubernetes.io/instance-type"
GA_TYPE = "node.kubernetes.io/instance-type"


def arrange_burst(api: KubeApi, cloud: FakeCloud, count: int = 5) -> list[str]:
    """An initialised node lacking its GA labels, then ``count`` new nodes: the cloud-node
    worker gets them all in one batch and handles the initialised one first."""
    make_node(
        api,
        "veteran",
        tainted=False,
        provider_id="fake://region-1/veteran",
        labels={BETA_TYPE: "m"},
    )
    names = [f"burst-{i}" for i in range(count)]
    for name in names:
        cloud.add_instance(name)
        make_node(api, name)
    return names


def test_a_connection_error_on_one_node_never_stops_the_others(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = arrange_burst(kube_api, fake_cloud)
    failures = [urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError())]
    patch = KubeApi.patch

    def restarting_server(self: KubeApi, resource: Any, name: str, *args: Any, **kw: Any) -> Any:
        # The API server restarts just as the worker writes the veteran's labels.
        if (
            name == "veteran"
            and failures
            and threading.current_thread().name.startswith("cloud-node-worker")
        ):
            raise failures.pop()
        return patch(self, resource, name, *args, **kw)

    monkeypatch.setattr(KubeApi, "patch", restarting_server)
    start_manager(fake_cloud)
    wait_for(
        lambda: all(initialised(kube_api, n) for n in names), what="every new node initialised"
    )
    wait_for(lambda: GA_TYPE in node(kube_api, "veteran").labels, what="the failed write retried")
    assert not failures


def test_a_batch_that_fails_as_a_whole_loses_none_of_its_nodes(
    kube_api: KubeApi,
    fake_cloud: FakeCloud,
    start_manager: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = arrange_burst(kube_api, fake_cloud)
    bugs = [RuntimeError("an unforeseen bug")]
    ga_label_fixes = nodeinfo.ga_label_fixes

    def buggy(labels: Any) -> Any:
        if bugs:
            raise bugs.pop()
        return ga_label_fixes(labels)

    monkeypatch.setattr(nodeinfo, "ga_label_fixes", buggy)
    start_manager(fake_cloud)
    wait_for(lambda: all(initialised(kube_api, n) for n in names), what="every node of the batch")
    wait_for(lambda: GA_TYPE in node(kube_api, "veteran").labels)
    assert not bugs
    failure = next(r for r in caplog.records if "batch of" in r.getMessage())
    assert failure.exc_info, "the failure is logged with its traceback"


def test_lost_leadership_is_no_failure_to_initialise(
    kube_api: KubeApi,
    fake_cloud: FakeCloud,
    start_manager: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    start_manager(fake_cloud)
    fake_cloud.add_instance("orphaned")
    cloudcalls.FENCE.close()  # as when the lease is lost: every cloud call is refused
    try:
        make_node(kube_api, "orphaned")
        wait_for(
            lambda: (
                any("left to the next leader" in r.getMessage() for r in caplog.records)
                or any("leadership lost" in r.getMessage() for r in caplog.records)
            ),
            what="the worker to meet the closed fence",
        )
        assert stays(lambda: node(kube_api, "orphaned").has_taint(UNINITIALIZED_TAINT), 1.0)
    finally:
        cloudcalls.FENCE.open_always()
    assert "FailedToInitialize" not in reasons_for(kube_api, "default", "orphaned")
    assert not [
        r for r in caplog.records if r.levelno >= logging.WARNING and "orphaned" in r.getMessage()
    ]


def network_condition(api: KubeApi, name: str) -> tuple[str, str] | None:
    for condition in node(api, name).raw["status"].get("conditions") or ():
        if condition["type"] == "NetworkUnavailable":
            return condition["status"], condition["reason"]
    return None


def test_a_new_node_gets_no_network_condition_from_this_controller(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # Routes are managed (--cluster-cidr, the route controller running), but the node gets no
    # pod CIDR, as with a CNI that allocates addresses itself: it must not be left
    # NetworkUnavailable=True for good. Upstream set that condition only on GCE and removed it
    # (kubernetes c11e2ae, cloud-provider 133934d "Remove setting NoRouteCreated condition").
    fake_cloud.add_instance("cni-ipam")
    make_node(kube_api, "cni-ipam")
    start_manager(fake_cloud)
    wait_for(lambda: initialised(kube_api, "cni-ipam"), what="initialisation")
    assert stays(lambda: network_condition(kube_api, "cni-ipam") is None, 1.5)


def test_a_network_condition_the_node_already_has_is_kept(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.add_instance("cni-managed")
    make_node(kube_api, "cni-managed")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    kube_api.patch(  # as a CNI such as Calico reports its own network
        NODES,
        "cni-managed",
        {
            "status": {
                "conditions": [
                    {
                        "type": "NetworkUnavailable",
                        "status": "False",
                        "reason": "CalicoIsUp",
                        "message": "Calico is running on this node",
                        "lastTransitionTime": now,
                        "lastHeartbeatTime": now,
                    }
                ]
            }
        },
        subresource="status",
        patch_type=STRATEGIC_MERGE_PATCH,
    )
    start_manager(fake_cloud)
    wait_for(lambda: initialised(kube_api, "cni-managed"), what="initialisation")
    assert stays(lambda: network_condition(kube_api, "cni-managed") == ("False", "CalicoIsUp"), 1.5)
