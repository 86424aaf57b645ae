"""The manager across leadership terms, against the real API server: each change of the Lease's
holder is recorded as upstream's ``LeaderElection`` Event, and the memory a term takes is given
back when the term ends, however many terms are lost and regained."""

from __future__ import annotations

import gc
import threading
import tracemalloc
from collections.abc import Callable
from typing import Any

from polyccm import cloudcalls
from polyccm.app.manager import ControllerManager
from polyccm.app.options import LeaderElection
from polyccm.kube.api import EVENTS, LEASES, KubeApi, load_configuration
from polyccm_testing.fake import FakeCloud
from polyccm_testing.kubeobjects import lease_holder, make_node, wait_for
from polyccm_testing.manager import RunningManager, manager_options

LEASE = "cloud-controller-manager"
FLAPS = 20
NODES = 60


def leader_election_events(kube_api: KubeApi, namespace: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = kube_api.list(EVENTS, namespace)["items"]
    return [event for event in events if event.get("reason") == "LeaderElection"]


def test_taking_and_giving_up_the_lease_are_recorded_as_upstreams_leader_election_events(
    control_plane: Any, kube_api: KubeApi, namespace: str, clean_nodes: None
) -> None:
    # client-go v0.35.4 tools/leaderelection/resourcelock/leaselock.go:99-109 (RecordEvent): a
    # Normal Event, reason "LeaderElection", message "<identity> <what>", about the Lease with
    # its metadata; leaderelection.go:270 records "became leader" once acquired and :280
    # "stopped leading" when renewing ends. cloud-provider v0.35.4 app/controllermanager.go:518
    # hands the lock the component's recorder (options/options.go:226, source
    # "cloud-controller-manager").
    options = manager_options(
        "fake",
        control_plane.kubeconfig,
        controllers=frozenset(),
        leader_election=LeaderElection(
            resource_namespace=namespace, lease_duration=4, renew_deadline=3, retry_period=1
        ),
    )
    api = KubeApi(load_configuration(options.kubeconfig), qps=0)
    running = RunningManager(ControllerManager(options, FakeCloud(), api)).start()
    identity = running.manager.identity
    try:
        wait_for(lambda: lease_holder(kube_api, namespace) == identity, 30, "the lease taken")
        became = wait_for(
            lambda: leader_election_events(kube_api, namespace), 15, "the LeaderElection event"
        )
    finally:
        running.stop()
        cloudcalls.FENCE.open_always()  # the process's fence, left closed by the lost lease

    lease = kube_api.get(LEASES, LEASE, namespace)
    (event,) = became
    assert event["type"] == "Normal"
    assert event["message"] == f"{identity} became leader"
    assert event["source"]["component"] == "cloud-controller-manager"
    regarding = event["involvedObject"]
    assert (regarding["kind"], regarding["apiVersion"]) == ("Lease", "coordination.k8s.io/v1")
    assert (regarding["namespace"], regarding["name"]) == (namespace, LEASE)
    assert regarding["uid"] == lease["metadata"]["uid"]
    # Shutting down gives the lease up; the Event saying so is written before the exit.
    messages = sorted(e["message"] for e in leader_election_events(kube_api, namespace))
    assert messages == [f"{identity} became leader", f"{identity} stopped leading"]


def _run_one_term(manager: ControllerManager, *, while_leading: Callable[[], None]) -> None:
    """One leadership term as the elector runs it: the caches sync, then the lease is lost."""
    lost = threading.Event()
    term = threading.Thread(target=manager.run_term, args=(lost,), daemon=True)
    term.start()
    wait_for(manager.ready, 30, "the term's caches to sync")
    while_leading()
    lost.set()
    term.join(timeout=30)
    assert not term.is_alive(), "the term did not end"


def _collected_size() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_memory_stays_flat_through_twenty_lost_and_regained_terms(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None
) -> None:
    # Each term caches every node anew and freezes the collector's view once synced. Frozen
    # objects are never collected by the cycle collector, and a term's informers sit in a
    # reference cycle with its controllers (informer -> handler -> controller -> informer): the
    # code before this change kept every lost term's whole cache, 20 caches after 20 flaps.
    for index in range(NODES):
        make_node(
            kube_api,
            f"flap-{index:03d}",
            labels={f"example.com/label-{n}": "x" * 40 for n in range(10)},
            annotations={f"example.com/note-{n}": "y" * 200 for n in range(10)},
        )
    # The service controller alone: it watches nodes and services, and with no Service it
    # calls no cloud and changes no node, so every term caches the same objects.
    options = manager_options("fake", control_plane.kubeconfig, controllers=frozenset({"service"}))
    api = KubeApi(load_configuration(options.kubeconfig), qps=0)
    cloud = FakeCloud()
    manager = ControllerManager(options, cloud, api)
    sizes: list[int] = []
    leading: list[int] = []
    tracemalloc.start()
    try:
        before = _collected_size()
        for _ in range(FLAPS):
            _run_one_term(manager, while_leading=lambda: leading.append(_collected_size()))
            cloud.contexts.clear()  # the fake's record of each term, not the manager's
            sizes.append(_collected_size())
    finally:
        tracemalloc.stop()
        gc.unfreeze()  # whatever the code under test left frozen
        api.close()

    a_term = leading[0] - before  # what one term's caches take while it leads
    growth = sizes[-1] - sizes[0]
    assert a_term > 100_000, f"a term took only {a_term} bytes: nothing to measure"
    assert growth < a_term / 4, (
        f"{FLAPS} terms later the process holds {growth / 1024:.0f} KiB more "
        f"(one term's caches: {a_term / 1024:.0f} KiB)"
    )
