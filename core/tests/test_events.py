"""Events: written to the real API server, counted instead of repeated, never raising.

The correlator's rules (de-duplication window, combining similar messages, spam filter) are
also checked on their own with a fake clock, since their time scales are minutes."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from polyccm import metrics
from polyccm.events import (
    AGGREGATE_PREFIX,
    NORMAL,
    WARNING,
    EventCorrelator,
    EventRecorder,
    involved_object,
)
from polyccm.kube.api import EVENTS, NODES, SERVICES, JsonObject, KubeApi
from polyccm.kube.config import Configuration

# -- against the API server ---------------------------------------------------------------------


@pytest.fixture
def recorder(kube_api: KubeApi) -> Iterator[EventRecorder]:
    rec = EventRecorder(kube_api, host="test-host")
    rec.start()
    yield rec
    rec.stop()


def _service(kube_api: KubeApi, namespace: str, name: str = "web") -> JsonObject:
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }
    return kube_api.create(SERVICES, body, namespace)


def _events_for(kube_api: KubeApi, namespace: str, name: str) -> list[JsonObject]:
    answer = kube_api.list(EVENTS, namespace, fieldSelector=f"involvedObject.name={name}")
    items: list[JsonObject] = answer.get("items") or []
    return items


def _wait_events(
    kube_api: KubeApi, namespace: str, name: str, predicate: Any, timeout: float = 15
) -> list[JsonObject]:
    deadline = time.monotonic() + timeout
    while True:
        events = _events_for(kube_api, namespace, name)
        if predicate(events):
            return events
        if time.monotonic() > deadline:
            raise AssertionError(f"events for {name}: {events}")
        time.sleep(0.05)


def test_an_event_is_written_in_the_objects_namespace_with_a_full_reference(
    kube_api: KubeApi, namespace: str, recorder: EventRecorder
) -> None:
    service = _service(kube_api, namespace)
    recorder.event(service, NORMAL, "EnsuringLoadBalancer", "Ensuring load balancer")
    (event,) = _wait_events(kube_api, namespace, "web", lambda events: len(events) == 1)
    assert event["type"] == "Normal"
    assert event["reason"] == "EnsuringLoadBalancer"
    assert event["message"] == "Ensuring load balancer"
    assert event["count"] == 1
    assert event["source"] == {"component": "cloud-controller-manager", "host": "test-host"}
    assert event["reportingComponent"] == "cloud-controller-manager"
    assert event["involvedObject"] == {
        "kind": "Service",
        "apiVersion": "v1",
        "name": "web",
        "namespace": namespace,
        "uid": service["metadata"]["uid"],
        "resourceVersion": service["metadata"]["resourceVersion"],
    }


def test_repeated_identical_events_raise_the_count_of_one_event(
    kube_api: KubeApi, namespace: str, recorder: EventRecorder
) -> None:
    service = _service(kube_api, namespace)
    for _ in range(3):
        recorder.event(service, WARNING, "SyncLoadBalancerFailed", "quota exceeded")
        time.sleep(1.1)  # timestamps have one-second resolution
    (event,) = _wait_events(
        kube_api, namespace, "web", lambda events: events and events[0]["count"] == 3
    )
    assert event["lastTimestamp"] > event["firstTimestamp"]
    assert event["message"] == "quota exceeded"


def test_different_messages_make_different_events(
    kube_api: KubeApi, namespace: str, recorder: EventRecorder
) -> None:
    service = _service(kube_api, namespace)
    recorder.event(service, WARNING, "SyncLoadBalancerFailed", "first problem")
    recorder.event(service, WARNING, "SyncLoadBalancerFailed", "second problem")
    recorder.event(service, NORMAL, "EnsuredLoadBalancer", "Ensured load balancer")
    events = _wait_events(kube_api, namespace, "web", lambda events: len(events) == 3)
    assert sorted(e["message"] for e in events) == [
        "Ensured load balancer",
        "first problem",
        "second problem",
    ]


def test_node_events_go_to_the_default_namespace(
    kube_api: KubeApi, clean_nodes: None, recorder: EventRecorder
) -> None:
    name = f"node-{secrets.token_hex(4)}"
    node = kube_api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    recorder.event(node, NORMAL, "Synced", "Node synced successfully")
    try:
        (event,) = _wait_events(kube_api, "default", name, lambda events: len(events) == 1)
        assert event["involvedObject"]["kind"] == "Node"
        assert "namespace" not in event["involvedObject"]
        assert event["involvedObject"]["uid"] == node["metadata"]["uid"]
    finally:
        for event in _events_for(kube_api, "default", name):
            kube_api.delete(EVENTS, event["metadata"]["name"], "default")


def test_stop_flushes_queued_events(kube_api: KubeApi, namespace: str) -> None:
    service = _service(kube_api, namespace)
    rec = EventRecorder(kube_api)
    rec.start()
    for i in range(5):
        rec.event(service, NORMAL, "UpdatedLoadBalancer", f"update {i}")
    rec.stop()
    assert len(_events_for(kube_api, namespace, "web")) == 5


class _SlowApi(KubeApi):
    """The real API client, each write held 0.2 s, counting how many are under way at once."""

    def __init__(self, real: KubeApi) -> None:
        self.__dict__.update(real.__dict__)
        self._lock = threading.Lock()
        self.under_way = 0
        self.most_at_once = 0

    def create(self, *args: Any, **kwargs: Any) -> JsonObject:
        with self._lock:
            self.under_way += 1
            self.most_at_once = max(self.most_at_once, self.under_way)
        try:
            time.sleep(0.2)
            return super().create(*args, **kwargs)
        finally:
            with self._lock:
                self.under_way -= 1


def test_events_of_different_objects_are_written_side_by_side(
    kube_api: KubeApi, namespace: str
) -> None:
    slow = _SlowApi(kube_api)
    services = [_service(kube_api, namespace, f"web-{i}") for i in range(8)]
    rec = EventRecorder(slow)
    rec.start()
    for service in services:
        rec.event(service, NORMAL, "EnsuringLoadBalancer", "Ensuring load balancer")
    rec.event(services[0], NORMAL, "EnsuringLoadBalancer", "Ensuring load balancer")
    rec.stop()
    assert slow.most_at_once > 1  # one writer would have written them one by one
    for service in services:
        assert len(_events_for(kube_api, namespace, service["metadata"]["name"])) == 1
    # The repeat of the first was patched onto its Event, after that Event was created.
    (first,) = _events_for(kube_api, namespace, "web-0")
    assert first["count"] == 2


def test_an_unreachable_api_server_never_reaches_the_caller() -> None:
    configuration = Configuration()
    configuration.host = "http://127.0.0.1:9"  # discard port: nothing listens
    rec = EventRecorder(KubeApi(configuration), write_attempts=2, retry_delay=0.01)
    rec.start()
    dropped = metrics.events_dropped_total._value.get()
    started = time.monotonic()
    rec.event({"metadata": {"name": "x", "namespace": "y"}}, WARNING, "Broken", "msg")
    assert time.monotonic() - started < 0.1  # queued, not written in the caller's thread
    rec.stop()
    assert metrics.events_dropped_total._value.get() == dropped + 1


def test_a_full_queue_drops_instead_of_blocking() -> None:
    rec = EventRecorder(KubeApi.__new__(KubeApi), queue_size=2)  # never started
    dropped = metrics.events_dropped_total._value.get()
    for i in range(5):
        rec.event({"metadata": {"name": "x"}}, NORMAL, "R", f"m{i}")
    assert metrics.events_dropped_total._value.get() == dropped + 3


def test_garbage_input_never_raises() -> None:
    rec = EventRecorder(KubeApi.__new__(KubeApi))
    rec.event({"metadata": None}, NORMAL, "R", "m")
    rec.event({}, NORMAL, "R", "m")


# -- the correlator on its own ------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _event(message: str = "m", reason: str = "R", name: str = "svc") -> JsonObject:
    return {
        "metadata": {"name": f"{name}.{secrets.token_hex(4)}", "namespace": "ns"},
        "involvedObject": involved_object(
            {"kind": "Service", "apiVersion": "v1", "metadata": {"name": name, "uid": "u1"}}
        ),
        "type": "Warning",
        "reason": reason,
        "message": message,
        "source": {"component": "ccm"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }


def test_identical_events_within_ten_minutes_patch_the_first() -> None:
    clock = _Clock()
    correlator = EventCorrelator(clock=clock)
    first = correlator.correlate(_event())
    assert first is not None and not first.patch
    clock.now += 599
    second = correlator.correlate(_event())
    assert second is not None and second.patch
    assert second.event["metadata"]["name"] == first.event["metadata"]["name"]
    assert second.event["count"] == 2
    clock.now += 601
    third = correlator.correlate(_event())
    assert third is not None and not third.patch


def test_the_tenth_different_message_is_combined() -> None:
    correlator = EventCorrelator(clock=_Clock(), burst=100)
    results = [correlator.correlate(_event(f"error {i}")) for i in range(12)]
    assert all(r is not None for r in results)
    assert [r.patch for r in results if r] == [False] * 10 + [True, True]
    combined = [r for r in results if r][9:]
    assert combined[0].event["message"] == AGGREGATE_PREFIX + "error 9"
    assert combined[2].event["message"] == AGGREGATE_PREFIX + "error 11"
    assert combined[2].event["count"] == 3
    # Another reason is not combined with these.
    other = correlator.correlate(_event("error 0", reason="Other"))
    assert other is not None and other.event["message"] == "error 0"


def test_the_spam_filter_allows_a_burst_then_one_event_per_five_minutes() -> None:
    clock = _Clock()
    correlator = EventCorrelator(clock=clock)
    allowed = [correlator.correlate(_event(f"e{i % 3}")) is not None for i in range(30)]
    assert allowed == [True] * 25 + [False] * 5
    clock.now += 300
    assert correlator.correlate(_event("e0")) is not None
    assert correlator.correlate(_event("e0")) is None
    # Other objects have their own budget.
    assert correlator.correlate(_event("e0", name="other")) is not None
