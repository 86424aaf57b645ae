"""Service (load balancer) controller, against the real API server and the fake cloud
(UPSTREAM.md "Service (load balancer) controller")."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from polyccm.app import manager as manager_module
from polyccm.controllers import service as service_controller
from polyccm.controllers.base import ControllerContext
from polyccm.controllers.service import EXCLUDE_LABEL, ServiceController, needs_sync
from polyccm.errors import (
    ImplementedElsewhere,
    InvalidServiceSpec,
    LeadershipLost,
    RetryAfter,
    Throttled,
)
from polyccm.kube.api import NODES, SERVICES, ApiError, KubeApi
from polyccm.objects import Service
from polyccm_testing.fake import LOAD_BALANCER_ID_ANNOTATION, FakeCloud
from polyccm_testing.kubeobjects import (
    events_for,
    make_node,
    make_service,
    reasons_for,
    set_ready,
    stays,
    wait_for,
)

FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
AUTOSCALER_TAINT = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}
HOLD = "example.com/hold"
"""A finalizer that keeps a deleted node with only a deletionTimestamp."""


def service(api: KubeApi, namespace: str, name: str) -> Service | None:
    try:
        return Service(api.get(SERVICES, name, namespace))
    except ApiError as error:
        if error.not_found:
            return None
        raise


def ingress_ip(api: KubeApi, namespace: str, name: str) -> str:
    current = service(api, namespace, name)
    ingress = (current.load_balancer_status.get("ingress") or [{}]) if current else [{}]
    return str(ingress[0].get("ip") or "")


def backends(cloud: FakeCloud, service_key: str) -> tuple[str, ...]:
    """The node names behind the load balancer of ``namespace/name`` in the fake cloud."""
    balancer = cloud.balancer_for(service_key)
    return balancer.backends if balancer else ()


def initialised_nodes(api: KubeApi, cloud: FakeCloud, *names: str) -> None:
    for name in names:
        instance = cloud.add_instance(name)
        make_node(api, name, tainted=False, provider_id=instance.provider_id)


def test_load_balancer_is_created_with_finalizer_status_and_events(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    initialised_nodes(kube_api, fake_cloud, "n1", "n2")
    make_service(kube_api, namespace, "web")
    start_manager(fake_cloud)
    ip = wait_for(lambda: ingress_ip(kube_api, namespace, "web"), what="an ingress IP")
    current = service(kube_api, namespace, "web")
    assert current is not None and FINALIZER in current.finalizers
    balancer = fake_cloud.balancer_for(f"{namespace}/web")
    assert balancer is not None and balancer.ip == ip
    assert balancer.backends == ("n1", "n2")
    assert balancer.ports == (80,)
    assert balancer.name == "a" + current.uid.replace("-", "")[:31]
    wait_for(
        lambda: (
            {"EnsuringLoadBalancer", "EnsuredLoadBalancer"}
            <= reasons_for(kube_api, namespace, "web")
        )
    )
    assert stays(lambda: fake_cloud.count("ensure_load_balancer") == 1, 1.5), (
        "one cloud ensure for a new service: our own finalizer write does not trigger another"
    )


def test_finalizer_is_on_before_the_cloud_creates_anything(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    seen: list[tuple[str, ...]] = []
    fake_cloud.observe(
        "ensure_load_balancer",
        lambda _subjects: seen.append(service(kube_api, namespace, "early").finalizers),  # type: ignore[union-attr]
    )
    make_service(kube_api, namespace, "early")
    start_manager(fake_cloud)
    wait_for(lambda: seen, what="the cloud call")
    assert FINALIZER in seen[0]


def test_deleting_the_service_deletes_the_load_balancer_then_the_finalizer(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    make_service(kube_api, namespace, "short-lived")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "short-lived"))
    kube_api.delete(SERVICES, "short-lived", namespace)
    wait_for(lambda: service(kube_api, namespace, "short-lived") is None, what="service gone")
    assert fake_cloud.balancer_for(f"{namespace}/short-lived") is None
    assert fake_cloud.count("ensure_load_balancer_deleted") == 1, "one cloud delete, not two"
    # Events are written in the background: the last may land just after the finalizer goes.
    wait_for(
        lambda: (
            {"DeletingLoadBalancer", "DeletedLoadBalancer"}
            <= reasons_for(kube_api, namespace, "short-lived")
        ),
        what="the Deleting and Deleted events",
    )


def test_failed_deletion_keeps_the_finalizer_until_the_cloud_succeeds(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    make_service(kube_api, namespace, "sticky")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "sticky"))
    fake_cloud.fail("ensure_load_balancer_deleted", RuntimeError("cloud is down"))
    kube_api.delete(SERVICES, "sticky", namespace)
    wait_for(lambda: "DeleteLoadBalancerFailed" in reasons_for(kube_api, namespace, "sticky"))
    current = service(kube_api, namespace, "sticky")
    assert current is not None and FINALIZER in current.finalizers, "no leak: finalizer kept"
    wait_for(
        lambda: service(kube_api, namespace, "sticky") is None,
        timeout=30,
        what="deletion retried after backoff",
    )
    assert fake_cloud.balancer_for(f"{namespace}/sticky") is None


def take_the_finalizer_off(api: KubeApi, namespace: str, name: str) -> Service:
    """Remove our finalizer as someone else would (a user, a script): the service is then
    deleted at once, and only the controller's memory of it leads to its load balancer."""
    api.patch(SERVICES, name, {"metadata": {"finalizers": None}}, namespace)
    current = service(api, namespace, name)
    assert current is not None and FINALIZER not in current.finalizers
    return current


def test_a_service_deleted_without_our_finalizer_has_its_load_balancer_deleted_on_retry(
    kube_api: KubeApi,
    namespace: str,
    fake_cloud: FakeCloud,
    start_manager: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Upstream keeps the service it synced in its cache and drops it only after
    # EnsureLoadBalancerDeleted succeeded (processServiceDeletion,
    # controllers/service/controller.go:903-917@v0.35.4); a failed delete is retried with
    # backoff (:302-303). Before, the pending cleanup was taken before the cloud call: once
    # the first delete failed, the retry found nothing to do and the load balancer leaked.
    monkeypatch.setattr(service_controller, "MIN_RETRY_DELAY", 0.2)  # 0.2, 0.4 s
    kept = keep_the_service_controller(monkeypatch)
    make_service(kube_api, namespace, "unguarded")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "unguarded"), what="the load balancer")
    take_the_finalizer_off(kube_api, namespace, "unguarded")
    fake_cloud.fail("ensure_load_balancer_deleted", RuntimeError("cloud is down"), times=2)
    kube_api.delete(SERVICES, "unguarded", namespace)
    assert service(kube_api, namespace, "unguarded") is None, "no finalizer: gone at once"

    wait_for(
        lambda: not fake_cloud.load_balancers,
        timeout=10,
        what="the load balancer deleted by a retry, not leaked",
    )
    assert fake_cloud.count("ensure_load_balancer_deleted") == 3, "two failed, then one more"
    assert stays(lambda: fake_cloud.count("ensure_load_balancer_deleted") == 3, 1.0), (
        "no more deletes once one succeeded"
    )
    wait_for(
        lambda: (
            {"DeleteLoadBalancerFailed", "DeletedLoadBalancer"}
            <= reasons_for(kube_api, namespace, "unguarded")
        ),
        what="the failures and the final deletion told in events",
    )
    assert not state_left(kept[0]), "nothing kept once the load balancer is deleted"


def test_a_service_recreated_before_the_old_cleanup_ran_gets_the_old_load_balancer_deleted(
    kube_api: KubeApi,
    namespace: str,
    fake_cloud: FakeCloud,
    start_manager: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Upstream: a cached service of another UID than the one now synced means it was deleted
    # and created again before its deletion was handled; its load balancer (named from the old
    # UID) is deleted before the new service is synced (processServiceCreateOrUpdate,
    # controllers/service/controller.go:328-336@v0.35.4). Before, the pending cleanup of the
    # old service was dropped when the name was found again, and its load balancer leaked.
    kept = keep_the_service_controller(monkeypatch)
    release = threading.Event()

    def hold_the_blocker(subjects: tuple[str, ...]) -> None:
        if subjects[0] == f"{namespace}/blocker":
            release.wait(30)

    fake_cloud.observe("ensure_load_balancer", hold_the_blocker)
    make_service(kube_api, namespace, "reborn")
    start_manager(fake_cloud, concurrent_service_syncs=1)
    wait_for(lambda: ingress_ip(kube_api, namespace, "reborn"), what="the first load balancer")
    old = take_the_finalizer_off(kube_api, namespace, "reborn")
    old_name = fake_cloud.get_load_balancer_name("kubernetes", old)
    assert old_name in fake_cloud.load_balancers

    try:
        make_service(kube_api, namespace, "blocker")  # the only worker is now busy with it
        wait_for(lambda: fake_cloud.count("ensure_load_balancer") == 2, what="a busy worker")
        kube_api.delete(SERVICES, "reborn", namespace)
        make_service(
            kube_api,
            namespace,
            "reborn",
            lambda s: s["spec"]["ports"][0].update(port=8443, name="https"),
        )
        new = service(kube_api, namespace, "reborn")
        assert new is not None and new.uid != old.uid
        (controller,) = kept

        def cached_uid() -> str:
            cached = controller.context.services.get(f"{namespace}/reborn")
            return Service(cached).uid if cached is not None else ""

        wait_for(
            lambda: cached_uid() == new.uid,
            what="the controller to see the new service before any worker is free",
        )
    finally:
        release.set()

    new_name = fake_cloud.get_load_balancer_name("kubernetes", new)
    wait_for(lambda: ingress_ip(kube_api, namespace, "reborn"), what="the new load balancer")
    wait_for(lambda: old_name not in fake_cloud.load_balancers, what="the old one deleted")
    assert fake_cloud.load_balancers[new_name].ports == (8443,)
    assert sorted(b.service_key for b in fake_cloud.load_balancers.values()) == [
        f"{namespace}/blocker",
        f"{namespace}/reborn",
    ], "one load balancer per service"


def test_a_finalizer_taken_off_by_someone_else_during_the_deletion_leaves_no_state(
    kube_api: KubeApi,
    namespace: str,
    fake_cloud: FakeCloud,
    start_manager: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Upstream forgets a service once its load balancer is deleted (processServiceCreateOrUpdate
    # :345-348, processServiceDeletion :903-917, controllers/service/controller.go@v0.35.4),
    # whoever removed the finalizer. Before, a removal of our finalizer that found the service
    # already gone left the record waiting for a DELETED event that had come already: one
    # record kept for good, which would also have taken the next same-named service's DELETED
    # event for ours and skipped its cleanup.
    kept = keep_the_service_controller(monkeypatch)
    make_service(kube_api, namespace, "raced")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "raced"), what="the load balancer")
    (controller,) = kept
    seen = threading.Event()
    # Handlers run in the order added: this one runs after the controller's own.
    controller.context.services.add_handler(
        on_delete=lambda obj: seen.set() if obj["metadata"]["name"] == "raced" else None
    )

    def someone_else_finishes_first(_subjects: tuple[str, ...]) -> None:
        if not seen.is_set():  # the first delete only
            kube_api.patch(SERVICES, "raced", {"metadata": {"finalizers": None}}, namespace)
            assert seen.wait(10), "the controller saw the service deleted"

    fake_cloud.observe("ensure_load_balancer_deleted", someone_else_finishes_first)
    kube_api.delete(SERVICES, "raced", namespace)
    wait_for(seen.is_set, what="the service gone during the cloud delete")
    wait_for(lambda: not fake_cloud.load_balancers, what="the load balancer deleted")
    assert not state_left(controller), "state kept for a service deleted and cleaned up"


def test_changing_type_away_from_load_balancer_cleans_up(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    make_service(kube_api, namespace, "shrink")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "shrink"))
    kube_api.patch(SERVICES, "shrink", {"spec": {"type": "ClusterIP"}}, namespace)

    def cleaned() -> bool:
        current = service(kube_api, namespace, "shrink")
        return bool(
            current and FINALIZER not in current.finalizers and not current.load_balancer_status
        )

    wait_for(cleaned, what="finalizer and status removed")
    assert fake_cloud.balancer_for(f"{namespace}/shrink") is None


def test_services_with_a_load_balancer_class_are_left_alone(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    make_service(
        kube_api,
        namespace,
        "classy",
        lambda s: s["spec"].update(loadBalancerClass="example.com/other"),
    )
    make_service(kube_api, namespace, "plain")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "plain"))
    current = service(kube_api, namespace, "classy")
    assert current is not None and FINALIZER not in current.finalizers
    assert fake_cloud.balancer_for(f"{namespace}/classy") is None


def test_implemented_elsewhere_still_manages_the_finalizer(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.fail_always("ensure_load_balancer", ImplementedElsewhere("nlb-ip"))
    fake_cloud.fail_always("ensure_load_balancer_deleted", ImplementedElsewhere("nlb-ip"))
    make_service(kube_api, namespace, "elsewhere")
    start_manager(fake_cloud)
    wait_for(lambda: FINALIZER in (service(kube_api, namespace, "elsewhere").finalizers))  # type: ignore[union-attr]
    assert stays(lambda: not ingress_ip(kube_api, namespace, "elsewhere"), 1.0)
    assert "SyncLoadBalancerFailed" not in reasons_for(kube_api, namespace, "elsewhere")
    kube_api.delete(SERVICES, "elsewhere", namespace)
    wait_for(lambda: service(kube_api, namespace, "elsewhere") is None)


def test_a_rejected_service_warns_and_does_not_block_others(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.fail(
        "ensure_load_balancer", InvalidServiceSpec("port 70000/UDP is not supported"), times=1
    )
    make_service(kube_api, namespace, "bad")
    start_manager(fake_cloud)
    wait_for(lambda: "SyncLoadBalancerFailed" in reasons_for(kube_api, namespace, "bad"))
    message = next(
        m for _t, r, m in events_for(kube_api, namespace, "bad") if r == "SyncLoadBalancerFailed"
    )
    assert "port 70000/UDP is not supported" in message
    make_service(kube_api, namespace, "good")
    wait_for(lambda: ingress_ip(kube_api, namespace, "good"), what="the other service served")
    # Retried with backoff (5s first): once the cloud accepts it, it is served too.
    wait_for(lambda: ingress_ip(kube_api, namespace, "bad"), timeout=30)


def test_retry_after_requeues_after_the_given_delay(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.fail("ensure_load_balancer", RetryAfter("still provisioning", 1.0), times=2)
    make_service(kube_api, namespace, "slow")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "slow"), timeout=15)
    assert fake_cloud.count("ensure_load_balancer") == 3


def test_a_throttled_sync_is_a_warning_and_requeues_after_the_clouds_delay(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # Upstream re-queues a RetryError after its delay (k8s.io/cloud-provider
    # controllers/service/controller.go:297-300@v0.36.2) and records every failed sync as a
    # Warning (:342), so a user sees why the load balancer is late.
    throttle = Throttled("rate limit exceeded (429)", 1.0)
    fake_cloud.fail("ensure_load_balancer", throttle, times=2)
    make_service(kube_api, namespace, "throttled")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "throttled"), timeout=15)
    assert fake_cloud.count("ensure_load_balancer") == 3  # 1 s apart, not 5 s then 10 s
    wait_for(
        lambda: any(
            t == "Warning" and "throttled by the cloud, retrying in 1s" in m
            for t, _r, m in events_for(kube_api, namespace, "throttled")
        ),
        what="a Warning naming the throttling",
    )


def test_status_only_changes_do_not_resync(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    make_service(kube_api, namespace, "quiet")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "quiet"))
    calls = fake_cloud.count("ensure_load_balancer")
    kube_api.patch(SERVICES, "quiet", {"metadata": {"labels": {"unrelated": "x"}}}, namespace)
    assert stays(lambda: fake_cloud.count("ensure_load_balancer") == calls, 1.5)
    kube_api.patch(SERVICES, "quiet", {"metadata": {"annotations": {"a": "b"}}}, namespace)
    wait_for(lambda: fake_cloud.count("ensure_load_balancer") > calls, what="annotation resync")


def test_backends_follow_node_changes_but_not_readiness(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    initialised_nodes(kube_api, fake_cloud, "b1", "b2")
    make_service(kube_api, namespace, "follow")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "follow"))

    assert backends(fake_cloud, f"{namespace}/follow") == ("b1", "b2")
    initialised_nodes(kube_api, fake_cloud, "b3")
    wait_for(
        lambda: backends(fake_cloud, f"{namespace}/follow") == ("b1", "b2", "b3"),
        what="new node added",
    )
    wait_for(lambda: "UpdatedLoadBalancer" in reasons_for(kube_api, namespace, "follow"))

    # Upstream syncs on a change of what the exclude label says
    # (controllers/service/controller.go:702@v0.35.4, nodeIncludedPredicate :1014-1024).
    kube_api.patch(NODES, "b1", {"metadata": {"labels": {EXCLUDE_LABEL: "true"}}})
    wait_for(
        lambda: backends(fake_cloud, f"{namespace}/follow") == ("b2", "b3"),
        what="excluded node removed",
    )

    # Readiness is neither a trigger nor a filter: nodeReadyPredicate is only in
    # allNodePredicates (controller.go:995-999@v0.35.4), which only the tests use; the
    # backends are chosen with stableNodeSetPredicates (:1001-1010, :442).
    updates = fake_cloud.count("update_load_balancer")
    set_ready(kube_api, "b3", False)
    assert stays(lambda: fake_cloud.count("update_load_balancer") == updates, 1.5), (
        "readiness is not a filter: no update"
    )
    # A deleted node starts a sync (controller.go:182-184@v0.35.4).
    kube_api.delete(NODES, "b3")
    wait_for(lambda: backends(fake_cloud, f"{namespace}/follow") == ("b2",), what="deleted node")


def test_a_node_being_drained_keeps_its_traffic_until_another_change_syncs(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # Upstream starts a node sync on an update only for the exclude label or the providerID
    # (shouldSyncUpdatedNode, controllers/service/controller.go:693-711@v0.35.4): neither the
    # cluster autoscaler's taint nor a deletionTimestamp cut the node's connections. Those
    # nodes leave at the next sync started otherwise, by stableNodeSetPredicates
    # (:1001-1010, the comment at :1004-1008).
    initialised_nodes(kube_api, fake_cloud, "d1", "d2", "d3")
    make_service(kube_api, namespace, "drain")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "drain"))
    key = f"{namespace}/drain"
    assert backends(fake_cloud, key) == ("d1", "d2", "d3")
    updates = fake_cloud.count("update_load_balancer")

    kube_api.patch(NODES, "d1", {"spec": {"taints": [AUTOSCALER_TAINT]}})
    kube_api.patch(NODES, "d2", {"metadata": {"finalizers": [HOLD]}})
    kube_api.delete(NODES, "d2")  # held by its finalizer: only a deletionTimestamp
    assert stays(
        lambda: (
            backends(fake_cloud, key) == ("d1", "d2", "d3")
            and fake_cloud.count("update_load_balancer") == updates
        ),
        2.0,
    ), "a tainted or terminating node kept its traffic"

    initialised_nodes(kube_api, fake_cloud, "d4")
    wait_for(
        lambda: backends(fake_cloud, key) == ("d3", "d4"),
        what="the next sync to leave out the tainted and the terminating node",
    )
    kube_api.patch(NODES, "d2", {"metadata": {"finalizers": None}})


def test_a_burst_of_new_nodes_updates_each_load_balancer_a_few_times_not_once_per_node(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from polyccm.controllers.service import NODE_SYNC_INTERVAL

    initialised_nodes(kube_api, fake_cloud, "burst-0")
    make_service(kube_api, namespace, "burst")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "burst"))
    names = [f"burst-{i}" for i in range(1, 61)]
    updates = fake_cloud.count("update_load_balancer")

    began = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: initialised_nodes(kube_api, fake_cloud, name), names))
    elapsed = time.monotonic() - began
    wait_for(
        lambda: len(backends(fake_cloud, f"{namespace}/burst")) == 61,
        timeout=30,
        what="every new node a backend",
    )

    # One sync per interval at most while the burst lasts, and the one that completes it.
    assert fake_cloud.count("update_load_balancer") - updates <= elapsed / NODE_SYNC_INTERVAL + 2


def test_a_node_change_updates_the_load_balancers_several_at_a_time(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    initialised_nodes(kube_api, fake_cloud, "p1")
    names = [f"par-{i}" for i in range(4)]
    for name in names:
        make_service(kube_api, namespace, name)
    start_manager(fake_cloud, concurrent_service_syncs=4)
    wait_for(lambda: all(ingress_ip(kube_api, namespace, n) for n in names), timeout=30)
    started: list[float] = []
    fake_cloud.slow("update_load_balancer", 1.0)
    fake_cloud.observe("update_load_balancer", lambda _s: started.append(time.monotonic()))

    initialised_nodes(kube_api, fake_cloud, "p2")
    wait_for(
        lambda: all(backends(fake_cloud, f"{namespace}/{n}") == ("p1", "p2") for n in names),
        timeout=30,
        what="the new node behind every load balancer",
    )

    # Four updates of a second each: together, not one after the other (as upstream).
    assert len(started) == 4 and max(started) - min(started) < 1.0


def test_a_failed_backend_update_is_retried_by_a_full_ensure_with_growing_delays(
    kube_api: KubeApi,
    namespace: str,
    fake_cloud: FakeCloud,
    start_manager: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Upstream remembers the nodes before the update (controllers/service/controller.go:751-756
    # @v0.35.4); a failed update makes the node worker queue the service
    # (:761-765, :276-278), whose full ensure (:441-458) backs off per service on each failure
    # (:302-303, rate limiter :120-123, 5 s doubling to 300 s: :59-60).
    monkeypatch.setattr(service_controller, "MIN_RETRY_DELAY", 0.2)  # 0.2, 0.4, 0.8 s
    initialised_nodes(kube_api, fake_cloud, "u1")
    make_service(kube_api, namespace, "retry")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "retry"))
    key = f"{namespace}/retry"
    ensures: list[float] = []
    fake_cloud.observe("ensure_load_balancer", lambda _s: ensures.append(time.monotonic()))
    fake_cloud.fail("update_load_balancer", RuntimeError("throttled"))
    fake_cloud.fail("ensure_load_balancer", RuntimeError("throttled"), times=3)

    initialised_nodes(kube_api, fake_cloud, "u2")
    wait_for(lambda: "UpdateLoadBalancerFailed" in reasons_for(kube_api, namespace, "retry"))
    wait_for(
        lambda: backends(fake_cloud, key) == ("u1", "u2"),
        timeout=10,
        what="the new node added by a later ensure, not after the next node change",
    )
    assert len(ensures) == 4, "three failed ensures, then one that succeeded"
    gaps = [later - earlier for earlier, later in itertools.pairwise(ensures)]
    assert all(gap >= least for gap, least in zip(gaps, (0.2, 0.4, 0.8), strict=True)), (
        f"each retry waits twice as long as the one before: {gaps}"
    )
    assert fake_cloud.count("update_load_balancer") == 1, "retried by ensures, not updates"


def test_a_failed_update_of_a_load_balancer_that_is_gone_is_no_failure(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # Upstream reports a failed update only when GetLoadBalancer says the load balancer still
    # exists; otherwise the update counts as done: no event, no retry
    # (controllers/service/controller.go:851-858@v0.35.4).
    initialised_nodes(kube_api, fake_cloud, "g1")
    make_service(kube_api, namespace, "gone")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "gone"))
    balancer = fake_cloud.balancer_for(f"{namespace}/gone")
    assert balancer is not None
    del fake_cloud.load_balancers[balancer.name]  # deleted in the cloud's console
    fake_cloud.fail_always("update_load_balancer", RuntimeError("load balancer not found"))
    ensures = fake_cloud.count("ensure_load_balancer")

    initialised_nodes(kube_api, fake_cloud, "g2")
    wait_for(lambda: fake_cloud.count("update_load_balancer") == 1, what="the backend update")
    assert stays(
        lambda: "UpdateLoadBalancerFailed" not in reasons_for(kube_api, namespace, "gone"), 1.5
    ), "a failed update of a load balancer that no longer exists was reported"
    assert fake_cloud.count("ensure_load_balancer") == ensures, "and it was not retried"
    assert fake_cloud.count("get_load_balancer") >= 1


def test_a_new_node_joins_the_backends_once_it_has_a_provider_id(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # A providerID change starts a node sync (controllers/service/controller.go:705-708
    # @v0.35.4) and is part of what is compared (nodesSufficientlyEqual, :770-796).
    initialised_nodes(kube_api, fake_cloud, "old")
    make_service(kube_api, namespace, "grow")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "grow"))
    fake_cloud.add_instance("fresh")
    make_node(kube_api, "fresh")  # as a kubelet registers it: tainted, no providerID yet

    wait_for(
        lambda: backends(fake_cloud, f"{namespace}/grow") == ("fresh", "old"),
        what="the initialised node added",
    )


def test_no_backend_nodes_is_a_warning_but_the_load_balancer_is_still_made(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    make_service(kube_api, namespace, "lonely")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "lonely"))
    assert "UnAvailableLoadBalancer" in reasons_for(kube_api, namespace, "lonely")
    initialised_nodes(kube_api, fake_cloud, "company")
    wait_for(lambda: "UpdatedLoadBalancer" in reasons_for(kube_api, namespace, "lonely"))


def test_a_concurrent_write_does_not_delay_the_finalizer_removal(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    make_service(kube_api, namespace, "contended")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "contended"))
    fake_cloud.observe(  # someone writes the service while its load balancer is being deleted
        "ensure_load_balancer_deleted",
        lambda _s: kube_api.patch(
            SERVICES, "contended", {"metadata": {"labels": {"touched": "yes"}}}, namespace
        ),
    )
    kube_api.delete(SERVICES, "contended", namespace)
    wait_for(
        lambda: service(kube_api, namespace, "contended") is None,
        timeout=4,
        what="deletion finished without a backoff round",
    )
    assert fake_cloud.count("ensure_load_balancer_deleted") == 1


def test_provider_warnings_become_warning_events_and_the_load_balancer_is_served(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    warning = 'annotation example/lb-type: value "classic-ish" means nothing; a classic LB is used'
    fake_cloud.warn(f"{namespace}/warned", warning)
    make_service(kube_api, namespace, "warned")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "warned"), what="an ingress IP")
    wait_for(lambda: "LoadBalancerWarning" in reasons_for(kube_api, namespace, "warned"))
    found = [
        (kind, message)
        for kind, reason, message in events_for(kube_api, namespace, "warned")
        if reason == "LoadBalancerWarning"
    ]
    assert found == [("Warning", warning)]
    assert "SyncLoadBalancerFailed" not in reasons_for(kube_api, namespace, "warned")


def test_a_load_balancer_whose_ensure_fails_after_a_restart_still_gets_new_nodes(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    initialised_nodes(kube_api, fake_cloud, "kept")
    make_service(kube_api, namespace, "adopted")
    first = start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "adopted"), what="the load balancer")
    first.stop()
    # A new process (or an upstream CCM's load balancer being adopted) whose ensure is refused,
    # e.g. an annotation value it cannot read: the existing load balancer keeps working.
    fake_cloud.fail_always("ensure_load_balancer", InvalidServiceSpec("bad annotation value"))
    start_manager(fake_cloud)
    wait_for(lambda: "SyncLoadBalancerFailed" in reasons_for(kube_api, namespace, "adopted"))
    initialised_nodes(kube_api, fake_cloud, "joined")

    wait_for(
        lambda: backends(fake_cloud, f"{namespace}/adopted") == ("joined", "kept"),
        what="the new node added to the backends",
    )


def test_the_node_sync_waits_for_the_worker_that_holds_the_service(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    initialised_nodes(kube_api, fake_cloud, "c1")
    make_service(kube_api, namespace, "busy")
    start_manager(fake_cloud)
    wait_for(lambda: ingress_ip(kube_api, namespace, "busy"), what="the load balancer")
    ensure_seconds = 2.0
    started: list[float] = []
    updates: list[float] = []
    fake_cloud.slow("ensure_load_balancer", ensure_seconds)
    fake_cloud.observe("ensure_load_balancer", lambda _s: started.append(time.monotonic()))
    fake_cloud.observe("update_load_balancer", lambda _s: updates.append(time.monotonic()))
    kube_api.patch(SERVICES, "busy", {"metadata": {"annotations": {"resync": "1"}}}, namespace)
    wait_for(lambda: started, what="a slow ensure to begin")
    initialised_nodes(kube_api, fake_cloud, "c2")  # the node sync now wants the service too

    wait_for(
        lambda: backends(fake_cloud, f"{namespace}/busy") == ("c1", "c2"),
        timeout=20,
        what="the new node added",
    )
    assert updates, "the new node was added by the node sync"
    assert all(at >= started[0] + ensure_seconds for at in updates), (
        "the load balancer was updated while a worker was still ensuring it"
    )


def test_lost_leadership_during_an_ensure_is_no_failure_on_the_service(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.fail("ensure_load_balancer", LeadershipLost("not the leader: cloud call refused"))
    make_service(kube_api, namespace, "handed-over")
    start_manager(fake_cloud)
    wait_for(lambda: fake_cloud.count("ensure_load_balancer") >= 1, what="the first ensure")
    assert stays(
        lambda: "SyncLoadBalancerFailed" not in reasons_for(kube_api, namespace, "handed-over"),
        2.0,
    ), "an ensure cut short by lost leadership is left to the next leader, not reported"


def keep_the_service_controller(monkeypatch: pytest.MonkeyPatch) -> list[ServiceController]:
    """The service controllers the next manager makes, as they are made (to look at their
    cache and at what they remember)."""
    made: list[ServiceController] = []

    def service_controller_kept(context: ControllerContext) -> ServiceController:
        balancer = context.provider.load_balancer()
        assert balancer is not None
        made.append(ServiceController(context, balancer))
        return made[-1]

    monkeypatch.setitem(manager_module.CONTROLLERS, "service", service_controller_kept)
    return made


def state_left(controller: ServiceController, timeout: float = 10.0) -> frozenset[str]:
    """The services the controller still holds state for once its last work is done (it may
    finish the last deletions a moment after the API server)."""
    deadline = time.monotonic() + timeout
    while (left := controller.tracked_services()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_services_created_and_deleted_leave_no_state_in_the_controller(
    kube_api: KubeApi,
    namespace: str,
    fake_cloud: FakeCloud,
    start_manager: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Upstream keeps a service's state from its first sync until its load balancer is deleted
    # (processServiceCreateOrUpdate: getOrCreate, then delete after deleteLoadBalancer,
    # controllers/service/controller.go:328-348@v0.35.4) or its deletion is handled
    # (processServiceDeletion, :903-917). A long-running controller must not grow with the
    # services that came and went: 200 of them, by the three ways a service goes. (Before one
    # record per service, a per-service lock stayed for each service changed to ClusterIP or
    # deleted before its first sync: 116 of these 200.)
    made = keep_the_service_controller(monkeypatch)
    workers = 4
    release = threading.Event()

    def hold_blockers(subjects: tuple[str, ...]) -> None:
        if subjects[0].startswith(f"{namespace}/blocker-"):
            release.wait(30)

    fake_cloud.observe("ensure_load_balancer", hold_blockers)
    initialised_nodes(kube_api, fake_cloud, "keep-1")
    start_manager(fake_cloud, concurrent_service_syncs=workers)
    (controller,) = made
    pool = ThreadPoolExecutor(8)

    def create(names: list[str]) -> None:
        list(pool.map(lambda name: make_service(kube_api, namespace, name), names))

    def delete(names: list[str]) -> None:
        list(pool.map(lambda name: kube_api.delete(SERVICES, name, namespace), names))

    def all_served(names: list[str]) -> bool:
        return all(ingress_ip(kube_api, namespace, n) for n in names)

    def all_gone(names: list[str]) -> bool:
        return all(service(kube_api, namespace, n) is None for n in names)

    # 40 deleted before any worker got to them: every worker is busy with a blocker.
    blockers = [f"blocker-{i}" for i in range(workers)]
    create(blockers)
    wait_for(lambda: fake_cloud.count("ensure_load_balancer") == workers, what="busy workers")
    fleeting = [f"fleeting-{i}" for i in range(40)]
    create(fleeting)
    wait_for(lambda: len(controller.queue) == len(fleeting), what="the new services queued")
    delete(fleeting)
    wait_for(
        lambda: all(controller.context.services.get(f"{namespace}/{n}") is None for n in fleeting),
        what="their deletion seen before any worker was free",
    )
    release.set()
    # 80 served then deleted; 76 served, changed to ClusterIP (their load balancer deleted),
    # then deleted.
    deleted = [f"deleted-{i}" for i in range(80)]
    demoted = [f"demoted-{i}" for i in range(76)]
    create(deleted + demoted)
    wait_for(lambda: all_served(blockers + deleted + demoted), timeout=60, what="all served")
    list(
        pool.map(
            lambda name: kube_api.patch(SERVICES, name, {"spec": {"type": "ClusterIP"}}, namespace),
            demoted,
        )
    )
    wait_for(
        lambda: all(FINALIZER not in service(kube_api, namespace, n).finalizers for n in demoted),  # type: ignore[union-attr]
        timeout=60,
        what="the demoted services' load balancers deleted",
    )
    delete(blockers + deleted + demoted)
    wait_for(lambda: all_gone(blockers + deleted + demoted), timeout=60, what="all deleted")
    assert not fake_cloud.load_balancers

    left = state_left(controller)
    assert not left, f"state kept for {len(left)} of 200 deleted services, e.g. {sorted(left)[:3]}"

    # The same names again: each is a new service, ensured from scratch, then gone again.
    again = [deleted[0], demoted[0], fleeting[0]]
    create(again)
    wait_for(lambda: all_served(again), what="the re-created services served")
    for name in again:
        current = service(kube_api, namespace, name)
        balancer = fake_cloud.balancer_for(f"{namespace}/{name}")
        assert current is not None and balancer is not None
        assert FINALIZER in current.finalizers
        assert balancer.name == "a" + current.uid.replace("-", "")[:31], "a new load balancer"
    assert controller.tracked_services() == {f"{namespace}/{n}" for n in again}
    delete(again)
    wait_for(lambda: all_gone(again), what="the re-created services deleted")
    assert not state_left(controller), "state kept for the re-created services once deleted"
    pool.shutdown()


# -- annotations the provider asks for (LoadBalancerStatus.service_annotations) ---------------


def lb_id(api: KubeApi, namespace: str, name: str) -> str:
    current = service(api, namespace, name)
    return current.annotations.get(LOAD_BALANCER_ID_ANNOTATION, "") if current else ""


def test_provider_annotations_are_written_once_and_cost_no_second_ensure(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    make_service(kube_api, namespace, "tagged")
    start_manager(fake_cloud)
    written = wait_for(lambda: lb_id(kube_api, namespace, "tagged"), what="the provider's id")
    balancer = fake_cloud.balancer_for(f"{namespace}/tagged")
    assert balancer is not None and written == balancer.name
    wait_for(lambda: ingress_ip(kube_api, namespace, "tagged"), what="an ingress IP")
    assert stays(lambda: fake_cloud.count("ensure_load_balancer") == 1, 1.5), (
        "our own annotation write must not trigger another ensure"
    )

    # A change that does need an ensure: the provider answers the same annotation, which the
    # service already has, so nothing is written.
    kube_api.patch(SERVICES, "tagged", {"metadata": {"annotations": {"a": "b"}}}, namespace)
    version = service(kube_api, namespace, "tagged").resource_version  # type: ignore[union-attr]
    wait_for(lambda: fake_cloud.count("ensure_load_balancer") == 2, what="the second ensure")
    assert stays(
        lambda: service(kube_api, namespace, "tagged").resource_version == version,  # type: ignore[union-attr]
        1.5,
    ), "annotations the service already has are not written again"
    assert fake_cloud.count("ensure_load_balancer") == 2


def test_a_write_during_the_ensure_neither_loses_the_annotations_nor_is_overwritten(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    def someone_writes(_subjects: tuple[str, ...]) -> None:
        # The service changes while the cloud works: our write, guarded by the version we
        # read, conflicts and is retried at once on the fresh service.
        kube_api.patch(SERVICES, "busy", {"metadata": {"labels": {"team": "x"}}}, namespace)

    fake_cloud.observe("ensure_load_balancer", someone_writes)
    make_service(kube_api, namespace, "busy")
    start_manager(fake_cloud)
    wait_for(lambda: lb_id(kube_api, namespace, "busy"), timeout=4, what="no backoff round")
    current = service(kube_api, namespace, "busy")
    assert current is not None and current.raw["metadata"]["labels"] == {"team": "x"}
    assert "SyncLoadBalancerFailed" not in reasons_for(kube_api, namespace, "busy")
    assert stays(lambda: fake_cloud.count("ensure_load_balancer") == 1, 1.0)


def test_an_annotation_the_user_removes_is_written_back(
    kube_api: KubeApi, namespace: str, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    make_service(kube_api, namespace, "restored")
    start_manager(fake_cloud)
    first = wait_for(lambda: lb_id(kube_api, namespace, "restored"))
    kube_api.patch(
        SERVICES,
        "restored",
        {"metadata": {"annotations": {LOAD_BALANCER_ID_ANNOTATION: None}}},
        namespace,
    )
    wait_for(lambda: fake_cloud.count("ensure_load_balancer") == 2, what="a resync")
    assert wait_for(lambda: lb_id(kube_api, namespace, "restored")) == first


def test_only_our_own_annotation_write_is_no_reason_to_sync() -> None:
    def svc(annotations: dict[str, str]) -> Service:
        return Service(
            {
                "metadata": {"name": "s", "namespace": "n", "uid": "u", "annotations": annotations},
                "spec": {"type": "LoadBalancer"},
            }
        )

    ours = {"cloud/id": "lb-1"}
    bare, tagged = svc({}), svc({"cloud/id": "lb-1"})
    assert not needs_sync(bare, tagged, written=ours), "our write"
    assert needs_sync(bare, tagged), "someone else's write of the same annotation"
    assert needs_sync(tagged, bare, written=ours), "removed by a user"
    assert needs_sync(tagged, svc({"cloud/id": "lb-2"}), written=ours), "changed by a user"
    assert needs_sync(bare, svc({"cloud/id": "lb-1", "x": "y"}), written=ours), "and another"


def test_services_ensured_across_node_changes_that_move_no_backend_share_one_backend_record(
    kube_api: KubeApi,
    namespace: str,
    fake_cloud: FakeCloud,
    start_manager: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each service remembers the backends its load balancer was given (upstream keeps the
    # node list per service too: controllers/service/controller.go nodeSyncService at
    # v0.35.4), by what they were built from (name and providerID). A node change that moves
    # no backend (an annotation, as Equinix Metal's BGP peers are written while a burst of
    # Services is served) must not make each service keep a copy of its own: with 500
    # services over 5,000 nodes those copies were some 300 MiB (Metal's 586 MiB peak).
    made = keep_the_service_controller(monkeypatch)
    initialised_nodes(kube_api, fake_cloud, *(f"share-{i}" for i in range(20)))
    start_manager(fake_cloud)
    (controller,) = made
    names = [f"web-{i}" for i in range(4)]
    for i, name in enumerate(names):
        make_service(kube_api, namespace, name)
        wait_for(lambda n=name: ingress_ip(kube_api, namespace, n), what=f"{name} served")
        kube_api.patch(
            NODES, f"share-{i}", {"metadata": {"annotations": {"example.com/beat": str(i)}}}
        )
        wait_for(
            lambda i=i: (
                (controller.context.nodes.get(f"share-{i}") or {})
                .get("metadata", {})
                .get("annotations", {})
                .get("example.com/beat")
                == str(i)
            ),
            what="the annotation in the cache",
        )
    with controller._lock:
        given = {id(controller._records[f"{namespace}/{n}"].applied) for n in names}
    assert len(given) == 1, f"{len(given)} copies of one backend set kept for {len(names)} services"
