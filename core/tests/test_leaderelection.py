"""Leader election on a real coordination.k8s.io/v1 Lease: one leader, hand-over on release,
take-over after a leader vanishes, and controllers told to stop when leadership ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from polyccm import metrics
from polyccm.cloudcalls import Fence
from polyccm.errors import LeadershipLost
from polyccm.events import EventRecorder
from polyccm.kube.api import EVENTS, LEASES, KubeApi
from polyccm.leaderelection import LeaderElector, micro_time

LEASE = "cloud-controller-manager"
TIMINGS = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}


@dataclass
class Candidate:
    """One elector running :meth:`LeaderElector.run` on its own thread, with a log of what
    its callbacks saw."""

    elector: LeaderElector
    stop: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    stopped_leading: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event | None = None
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.elector.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def shutdown(self, timeout: float = 10) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout)
            assert not self.thread.is_alive(), "run() did not return after stop"


class _Partitionable(KubeApi):
    """The real API server behind a network that can be cut."""

    def __init__(self, api: KubeApi) -> None:
        super().__init__(api.configuration, qps=0)
        self.partitioned = False

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if self.partitioned:
            raise ConnectionError("network unreachable")
        return super().request(method, path, **kwargs)


class _Hanging(KubeApi):
    """The real API server behind a connection that can hang: once ``hung``, every request
    waits for its whole timeout and then fails, as a read from a frozen peer does."""

    def __init__(self, api: KubeApi) -> None:
        super().__init__(api.configuration, qps=0)
        self.hung = False
        self.longest_wait = 0.0

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if self.hung:
            timeout = float(kwargs.get("timeout", 30.0))
            self.longest_wait = max(self.longest_wait, timeout)
            time.sleep(timeout)
            raise TimeoutError("read timed out")
        return super().request(method, path, **kwargs)


@pytest.fixture
def candidates(kube_api: KubeApi, namespace: str) -> Iterator[Callable[..., Candidate]]:
    made: list[Candidate] = []

    def make(
        identity: str,
        *,
        api: KubeApi | None = None,
        leading: Callable[[threading.Event], None] | None = None,
        fence: Fence | None = None,
        recorder: EventRecorder | None = None,
    ) -> Candidate:
        holder: list[Candidate] = []

        def on_started(lost: threading.Event) -> None:
            holder[0].lost = lost
            holder[0].started.set()
            if leading is not None:
                leading(lost)
            else:
                lost.wait()  # controllers run until the term ends

        elector = LeaderElector(
            api or kube_api,
            lock_name=LEASE,
            lock_namespace=namespace,
            identity=identity,
            on_started_leading=on_started,
            on_stopped_leading=lambda: holder[0].stopped_leading.set(),  # noqa: PLW0108 - holder is filled after
            fence=fence,
            recorder=recorder,
            **TIMINGS,
        )
        candidate = Candidate(elector)
        holder.append(candidate)
        made.append(candidate)
        return candidate

    yield make
    for candidate in made:
        candidate.shutdown()


def _lease(kube_api: KubeApi, namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = kube_api.get(LEASES, LEASE, namespace).get("spec") or {}
    return spec


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - started


def test_settings_are_checked_like_client_go() -> None:
    api = KubeApi.__new__(KubeApi)
    common: dict[str, Any] = {
        "lock_name": "l",
        "lock_namespace": "n",
        "identity": "me",
        "on_started_leading": lambda lost: None,
        "on_stopped_leading": lambda: None,
    }
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderElector(api, lease_duration=10, renew_deadline=10, **common)
    with pytest.raises(ValueError, match="renew_deadline"):
        LeaderElector(api, renew_deadline=2, retry_period=2, **common)
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(api, **{**common, "identity": ""})


def test_micro_time_is_rfc3339_utc_with_microseconds() -> None:
    value = micro_time()
    assert len(value) == len("2026-01-02T15:04:05.000000Z")
    assert value.endswith("Z") and value[10] == "T"


def test_one_of_two_candidates_leads_and_holds_the_lease(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    a, b = candidates("a"), candidates("b")
    a.start()
    b.start()
    _wait(lambda: a.elector.is_leader() or b.elector.is_leader(), 10, "a leader")
    time.sleep(2 * TIMINGS["retry_period"] + 0.2)  # a few renewals
    leaders = [c for c in (a, b) if c.elector.is_leader()]
    assert len(leaders) == 1
    leader = leaders[0]
    assert leader.started.is_set()
    spec = _lease(kube_api, namespace)
    assert spec["holderIdentity"] == leader.elector.identity
    assert spec["leaseDurationSeconds"] == 3
    assert spec["acquireTime"] <= spec["renewTime"]
    status = metrics.REGISTRY.get_sample_value("leader_election_master_status", {"name": LEASE})
    assert status is not None


def test_the_leader_keeps_renewing(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    a = candidates("a")
    a.start()
    _wait(a.elector.is_leader, 10, "a to lead")
    first = _lease(kube_api, namespace)["renewTime"]
    time.sleep(TIMINGS["lease_duration"])
    spec = _lease(kube_api, namespace)
    assert spec["renewTime"] > first
    assert spec["holderIdentity"] == "a"
    assert a.elector.healthy()


def test_stopping_the_leader_releases_the_lease_and_the_other_takes_over_at_once(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    a = candidates("a")
    a.start()
    _wait(a.elector.is_leader, 10, "a to lead")
    b = candidates("b")
    b.start()
    time.sleep(1)
    assert not b.elector.is_leader()

    a.shutdown()
    assert a.lost is not None and a.lost.is_set()
    assert a.stopped_leading.is_set()
    assert not a.elector.is_leader()
    # Released: no need to wait for lease_duration.
    takeover = _wait(b.elector.is_leader, 10, "b to lead")
    assert takeover < TIMINGS["lease_duration"]
    spec = _lease(kube_api, namespace)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] >= 1


def test_a_released_lease_has_no_holder(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    a = candidates("a")
    a.start()
    _wait(a.elector.is_leader, 10, "a to lead")
    a.shutdown()
    assert _lease(kube_api, namespace).get("holderIdentity") is None


def test_stop_lets_the_controllers_finish_before_releasing(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    timeline: list[str] = []

    def controllers(lost: threading.Event) -> None:
        lost.wait()
        time.sleep(0.5)  # finishing the item in hand
        holder = _lease(kube_api, namespace).get("holderIdentity")
        timeline.append(f"finished while holder={holder}")

    a = candidates("a", leading=controllers)
    a.start()
    _wait(a.elector.is_leader, 10, "a to lead")
    a.shutdown()
    assert timeline == ["finished while holder=a"]
    assert _lease(kube_api, namespace).get("holderIdentity") is None


def test_a_vanished_leader_is_replaced_after_the_lease_expires_and_stops_itself(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    a_api = _Partitionable(kube_api)
    a = candidates("a", api=a_api)
    a.start()
    _wait(a.elector.is_leader, 10, "a to lead")
    b = candidates("b")
    b.start()
    time.sleep(1)

    a_api.partitioned = True
    cut = time.monotonic()
    # a cannot renew: after renew_deadline it tells its controllers to stop.
    _wait(a.stopped_leading.is_set, 10, "a to give up")
    assert a.lost is not None and a.lost.is_set()
    assert time.monotonic() - cut >= TIMINGS["renew_deadline"] - TIMINGS["retry_period"]
    assert not a.elector.is_leader()
    # b waits for the lease to expire by its own clock, then takes it.
    _wait(b.elector.is_leader, 15, "b to lead")
    assert time.monotonic() - cut >= TIMINGS["lease_duration"] - TIMINGS["retry_period"]
    assert _lease(kube_api, namespace)["holderIdentity"] == "b"
    # a stopped leading before b started: never two leaders.
    assert a.stopped_leading.is_set()


def test_a_failing_leading_callback_gives_leadership_up(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    def broken(lost: threading.Event) -> None:
        raise RuntimeError("controllers failed to start")

    a = candidates("a", leading=broken)
    a.start()
    _wait(a.stopped_leading.is_set, 10, "a to give up")
    assert not a.elector.is_leader()
    assert _lease(kube_api, namespace).get("holderIdentity") is None


def test_stop_while_campaigning_returns_without_callbacks(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    a, b = candidates("a"), candidates("b")
    a.start()
    _wait(a.elector.is_leader, 10, "a to lead")
    b.start()
    time.sleep(0.5)
    b.shutdown()
    assert not b.started.is_set()
    assert not b.stopped_leading.is_set()
    assert _lease(kube_api, namespace)["holderIdentity"] == "a"


def test_a_restarted_leader_with_the_same_identity_resumes_at_once(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    a_api = _Partitionable(kube_api)
    first = candidates("same", api=a_api)
    first.start()
    _wait(first.elector.is_leader, 10, "the first run to lead")
    a_api.partitioned = True  # the process dies without releasing
    second = candidates("same")
    second.start()
    assert _wait(second.elector.is_leader, 10, "the second run to lead") < 2


def test_a_hung_connection_ends_leadership_and_cloud_calls_at_the_renew_deadline(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    fence = Fence()
    fence.close()
    hanging = _Hanging(kube_api)
    a = candidates("a", api=hanging, fence=fence)
    a.start()
    _wait(a.elector.is_leader, 10, "a to lead")
    assert fence.allowed(), "the leader may call the cloud"
    hanging.hung = True
    cut = time.monotonic()
    _wait(lambda: not fence.allowed(), 10, "the fence to close")
    closed_after = time.monotonic() - cut
    with pytest.raises(LeadershipLost):
        fence.check()
    _wait(a.stopped_leading.is_set, 10, "a to give up")
    gave_up_after = time.monotonic() - cut
    assert a.lost is not None and a.lost.is_set()
    # Counted from the last renewal that went through, never later, however long requests hang.
    assert closed_after <= TIMINGS["renew_deadline"] + 0.1
    assert gave_up_after <= TIMINGS["renew_deadline"] + 0.5
    assert hanging.longest_wait <= TIMINGS["renew_deadline"] / 2, "requests bounded"


def test_a_term_that_ends_on_its_own_gives_the_lease_up(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    fence = Fence()
    a = candidates("a", leading=lambda lost: None, fence=fence)  # e.g. caches never synced
    a.start()
    _wait(a.stopped_leading.is_set, 10, "a to give the term up")
    assert not a.elector.is_leader()
    assert _lease(kube_api, namespace).get("holderIdentity") is None, "lease released"
    assert not fence.allowed(), "no cloud call once the term is over"


def test_a_hand_over_is_told_by_leader_election_events_on_the_lease(
    kube_api: KubeApi, namespace: str, candidates: Callable[..., Candidate]
) -> None:
    # client-go v0.35.4 tools/leaderelection/leaderelection.go:270 and :280 record "became
    # leader" and "stopped leading" through resourcelock/leaselock.go:99-109 (RecordEvent):
    # Normal, reason LeaderElection, "<identity> <what>", about the Lease.
    recorder = EventRecorder(kube_api, retry_delay=0.1)
    recorder.start()
    try:
        a = candidates("a", recorder=recorder)
        a.start()
        _wait(a.elector.is_leader, 10, "a to lead")
        b = candidates("b", recorder=recorder)
        b.start()
        a.shutdown()
        _wait(b.elector.is_leader, 10, "b to lead")
    finally:
        recorder.stop()
    events = [
        event
        for event in kube_api.list(EVENTS, namespace)["items"]
        if event["reason"] == "LeaderElection"
    ]
    assert sorted(event["message"] for event in events) == [
        "a became leader",
        "a stopped leading",
        "b became leader",
    ]
    lease_uid = kube_api.get(LEASES, LEASE, namespace)["metadata"]["uid"]
    for event in events:
        assert event["type"] == "Normal"
        assert event["involvedObject"]["kind"] == "Lease"
        assert event["involvedObject"]["uid"] == lease_uid
