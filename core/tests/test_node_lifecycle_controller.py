"""Cloud node lifecycle controller, against the real API server and the fake cloud
(UPSTREAM.md "Cloud node lifecycle controller")."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from polyccm.errors import CapabilityNotImplemented
from polyccm.kube.api import NODES, ApiError, KubeApi
from polyccm.objects import SHUTDOWN_TAINT, Node
from polyccm_testing.fake import FakeCloud
from polyccm_testing.kubeobjects import make_node, reasons_for, set_ready, stays, wait_for


def node(api: KubeApi, name: str) -> Node | None:
    try:
        return Node(api.get(NODES, name))
    except ApiError as error:
        if error.not_found:
            return None
        raise


def test_not_ready_node_whose_instance_is_gone_is_deleted(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    gone = fake_cloud.add_instance("gone")
    make_node(kube_api, "gone", tainted=False, provider_id=gone.provider_id, ready=False)
    fake_cloud.remove_instance("gone")
    start_manager(fake_cloud)
    wait_for(lambda: node(kube_api, "gone") is None, what="node deleted")
    assert "DeletingNode" in reasons_for(kube_api, "default", "gone")


def test_ready_node_is_never_deleted_even_without_instance(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    make_node(kube_api, "ready-ghost", tainted=False, provider_id="fake://region-1/x")
    start_manager(fake_cloud)
    assert stays(lambda: node(kube_api, "ready-ghost") is not None, 2.0)
    assert fake_cloud.count("instances_exist") == 0, "ready nodes cost no cloud call"


def test_shut_down_instance_is_tainted_and_untainted_when_ready_again(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    instance = fake_cloud.add_instance("sleepy", shutdown=True)
    make_node(kube_api, "sleepy", tainted=False, provider_id=instance.provider_id, ready=False)
    start_manager(fake_cloud)
    tainted = wait_for(
        lambda: (n := node(kube_api, "sleepy")) and n.has_taint(SHUTDOWN_TAINT) and n
    )
    taint = next(t for t in tainted.taints if t["key"] == SHUTDOWN_TAINT)
    assert taint["effect"] == "NoSchedule"
    assert node(kube_api, "sleepy") is not None, "a stopped instance still exists"
    instance.shutdown = False
    set_ready(kube_api, "sleepy", True)
    wait_for(lambda: not node(kube_api, "sleepy").has_taint(SHUTDOWN_TAINT))  # type: ignore[union-attr]


def test_cloud_errors_never_delete_nodes(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    instance = fake_cloud.add_instance("flaky")
    make_node(kube_api, "flaky", tainted=False, provider_id=instance.provider_id, ready=False)
    fake_cloud.fail_always("instances_exist", RuntimeError("cloud API unavailable"))
    start_manager(fake_cloud)
    wait_for(lambda: fake_cloud.count("instances_exist") >= 2)
    assert node(kube_api, "flaky") is not None


def test_many_not_ready_nodes_cost_one_existence_call_per_period(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    for i in range(20):
        instance = fake_cloud.add_instance(f"nr-{i}")
        make_node(kube_api, f"nr-{i}", tainted=False, provider_id=instance.provider_id, ready=False)
    start_manager(fake_cloud, node_monitor_period=0.5)
    wait_for(lambda: fake_cloud.count("instances_exist") >= 2)
    exist_calls = fake_cloud.count("instances_exist")
    assert fake_cloud.count("instance_exists") == 0
    assert fake_cloud.count("instance_shutdown") == 0, "shutdown state is asked in bulk too"
    assert fake_cloud.count("instances_shutdown") <= exist_calls + 1


def test_not_ready_uninitialised_node_without_provider_id_is_kept_when_no_instance_has_its_name(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # A kubelet registered it, the cloud knows no instance by that name (yet): a lookup by
    # name that misses says nothing about the machine, so the Node is not deleted.
    make_node(kube_api, "unnamed", ready=False)
    start_manager(fake_cloud)
    wait_for(lambda: fake_cloud.count("instances_exist") >= 3, what="several monitor passes")
    assert node(kube_api, "unnamed") is not None
    assert "DeletingNode" not in reasons_for(kube_api, "default", "unnamed")


def test_a_node_registered_again_under_the_same_name_is_never_deleted(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    gone = fake_cloud.add_instance("reused")
    first = make_node(kube_api, "reused", tainted=False, provider_id=gone.provider_id, ready=False)
    fake_cloud.remove_instance("reused")
    recreated = threading.Event()

    def register_again(subjects: tuple[str, ...]) -> None:
        # While the cloud is being asked about the old node, a new machine that reuses the
        # name (AWS reuses private DNS names) registers: the old Node goes, a new one comes.
        if "reused" not in subjects or recreated.is_set():
            return
        new = fake_cloud.add_instance("reused", reported_provider_id="fake://region-1/i-new")
        kube_api.delete(NODES, "reused")
        make_node(kube_api, "reused", tainted=False, provider_id=new.provider_id)
        recreated.set()

    fake_cloud.observe("instances_exist", register_again)
    start_manager(fake_cloud)
    wait_for(recreated.is_set, what="the node registered again mid-pass")
    wait_for(
        lambda: "DeletingNode" in reasons_for(kube_api, "default", "reused"),
        what="the controller to act on its stale answer",
    )

    def the_new_node_is_there() -> bool:
        current = node(kube_api, "reused")
        return current is not None and current.uid != first["metadata"]["uid"]

    assert stays(the_new_node_is_there, 2.0), "the new node was deleted in place of the old one"


@pytest.mark.parametrize("bulk", [True, False], ids=["bulk", "one-by-one"])
def test_a_provider_that_cannot_tell_shutdown_means_not_shut_down(
    kube_api: KubeApi, start_manager: Any, caplog: pytest.LogCaptureFixture, bulk: bool
) -> None:
    cloud = FakeCloud(bulk=bulk)
    operation = "instances_shutdown" if bulk else "instance_shutdown"
    cloud.fail_always(operation, CapabilityNotImplemented("no shutdown state in this cloud"))
    instance = cloud.add_instance("quiet", shutdown=True)
    make_node(kube_api, "quiet", tainted=False, provider_id=instance.provider_id, ready=False)
    caplog.set_level(logging.WARNING, logger="polyccm")
    start_manager(cloud)
    wait_for(lambda: cloud.count(operation) >= 3, what="several monitor passes")

    current = node(kube_api, "quiet")
    assert current is not None and not current.has_taint(SHUTDOWN_TAINT)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("polyccm")] == []
