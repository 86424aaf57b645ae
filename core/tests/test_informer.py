"""Informers against the real kube-apiserver: list, watch, bookmarks, cut watches, 410 relists.

The API server is always real. Two tests wrap the KubeApi client to break the network the way
it breaks in production (a watch answered 410 Gone after a long disconnection; connections
refused for a while); every object they see still comes from the server.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from polyccm import metrics
from polyccm.kube.api import NODES, SERVICES, ApiError, JsonObject, KubeApi, Resource
from polyccm.kube.informer import (
    LAST_APPLIED_ANNOTATION,
    Backoff,
    Informer,
    default_slim,
    intern_keys,
    object_key,
    slim_node,
)

# -- helpers ------------------------------------------------------------------------------------


class Seen:
    """Records handler calls as (kind, name, detail) and lets a test wait for them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self._cond = threading.Condition()

    def on_add(self, obj: JsonObject) -> None:
        self._record("add", obj["metadata"]["name"], _label(obj))

    def on_update(self, old: JsonObject, new: JsonObject) -> None:
        self._record("update", new["metadata"]["name"], (_label(old), _label(new)))

    def on_delete(self, obj: JsonObject) -> None:
        self._record("delete", obj["metadata"]["name"], None)

    def attach(self, informer: Informer) -> None:
        informer.add_handler(on_add=self.on_add, on_update=self.on_update, on_delete=self.on_delete)

    def _record(self, kind: str, name: str, detail: Any) -> None:
        with self._cond:
            self.calls.append((kind, name, detail))
            self._cond.notify_all()

    def wait_for(
        self, predicate: Callable[[list[tuple[str, str, Any]]], bool], timeout: float = 15
    ) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self.calls), timeout):
                raise AssertionError(f"timed out; calls so far: {self.calls}")

    def wait_for_call(self, kind: str, name: str, timeout: float = 15) -> None:
        self.wait_for(lambda calls: any(c[:2] == (kind, name) for c in calls), timeout)

    def of(self, name: str) -> list[tuple[str, str, Any]]:
        with self._cond:
            return [call for call in self.calls if call[1] == name]


def _label(obj: JsonObject) -> str | None:
    labels = obj.get("metadata", {}).get("labels") or {}
    value = labels.get("step")
    return str(value) if value is not None else None


def _wait(predicate: Callable[[], bool], timeout: float = 15, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def group() -> str:
    """A label value unique to this test, so that informers see only this test's nodes."""
    return f"g{secrets.token_hex(4)}"


def _node(name: str, group: str, **labels: str) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"polyccm-test": group, **labels},
            "annotations": {LAST_APPLIED_ANNOTATION: '{"big": "blob"}', "kept": "yes"},
        },
    }


def _set_step(api: KubeApi, name: str, step: int) -> JsonObject:
    return api.patch(NODES, name, {"metadata": {"labels": {"step": str(step)}}})


@pytest.fixture
def informers() -> Iterator[list[Informer]]:
    created: list[Informer] = []
    yield created
    for informer in created:
        informer.stop()


def _node_informer(
    api: KubeApi, group: str, informers: list[Informer], **kwargs: Any
) -> tuple[Informer, Seen]:
    kwargs.setdefault("watch_timeout", 10)
    informer = Informer(api, NODES, label_selector=f"polyccm-test={group}", **kwargs)
    seen = Seen()
    seen.attach(informer)
    informers.append(informer)
    return informer, seen


# -- pure helpers -------------------------------------------------------------------------------


def test_object_key_is_namespace_slash_name_or_just_name() -> None:
    assert object_key({"metadata": {"name": "n1"}}) == "n1"
    assert object_key({"metadata": {"name": "s", "namespace": "ns"}}) == "ns/s"


def test_default_slim_drops_managed_fields_and_last_applied_only() -> None:
    obj = {
        "metadata": {
            "name": "a",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {LAST_APPLIED_ANNOTATION: "{}", "other": "x"},
        },
        "status": {"images": [{"names": ["i"]}]},
    }
    slim = default_slim(obj)
    assert slim["metadata"] == {"name": "a", "annotations": {"other": "x"}}
    assert slim["status"] == {"images": [{"names": ["i"]}]}


def test_slim_node_also_drops_images_and_volumes() -> None:
    node = {
        "metadata": {"name": "n"},
        "status": {"images": [], "volumesInUse": [], "volumesAttached": [], "addresses": []},
    }
    assert slim_node(node)["status"] == {"addresses": []}


def test_slim_node_shares_one_copy_of_each_key_between_objects() -> None:
    one = slim_node(json.loads('{"metadata": {"name": "a"}, "status": {"conditions": []}}'))
    two = slim_node(json.loads('{"metadata": {"name": "b"}, "status": {"conditions": []}}'))
    keys_one = [next(iter(one)), next(iter(one["status"]))]
    keys_two = [next(iter(two)), next(iter(two["status"]))]
    assert all(a is b for a, b in zip(keys_one, keys_two, strict=True))
    assert intern_keys([{"k": [{"x": 1}]}]) == [{"k": [{"x": 1}]}]


def test_slim_node_drops_what_no_controller_reads_and_shares_repeated_values() -> None:
    def node(name: str) -> JsonObject:
        text = json.dumps(
            {
                "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "zone-a"}},
                "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                    "nodeInfo": {"kubeletVersion": "v1.33.0"},
                    "capacity": {"cpu": "2"},
                    "allocatable": {"cpu": "2"},
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                    "images": [{"names": ["busybox"]}],
                },
            }
        )
        return slim_node(json.loads(text))

    one, two = node("a"), node("b")

    assert set(one["status"]) == {"conditions", "addresses"}
    assert (
        one["metadata"]["labels"]["topology.kubernetes.io/zone"]
        is (two["metadata"]["labels"]["topology.kubernetes.io/zone"])
    )
    assert one["status"]["conditions"][0]["reason"] is two["status"]["conditions"][0]["reason"]
    assert one["spec"]["taints"][0]["effect"] is two["spec"]["taints"][0]["effect"]
    assert one["status"]["addresses"] == [{"type": "InternalIP", "address": "10.0.0.1"}]


def test_backoff_grows_to_its_cap_and_resets() -> None:
    backoff = Backoff(1, 8, jitter=0)
    assert [backoff.next() for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    backoff.reset()
    assert backoff.next() == 1


def test_backoff_jitter_stays_within_the_cap() -> None:
    backoff = Backoff(1, 4, jitter=1.0)
    delays = [backoff.next() for _ in range(20)]
    assert all(1 <= delay <= 4 for delay in delays)


# -- against the API server ---------------------------------------------------------------------


def test_informer_lists_existing_nodes_then_follows_adds_updates_and_deletes(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    kube_api.create(NODES, _node("n-a", group))
    kube_api.create(NODES, _node("n-b", group))
    kube_api.create(NODES, _node("other", "not-this-test"))
    informer, seen = _node_informer(kube_api, group, informers)
    assert not informer.has_synced()
    informer.start()
    assert informer.wait_for_sync(15)
    assert sorted(informer.keys()) == ["n-a", "n-b"]
    assert sorted(c[1] for c in seen.calls if c[0] == "add") == ["n-a", "n-b"]

    kube_api.create(NODES, _node("n-c", group))
    seen.wait_for_call("add", "n-c")
    _set_step(kube_api, "n-a", 1)
    seen.wait_for(lambda calls: ("update", "n-a", (None, "1")) in calls)
    kube_api.delete(NODES, "n-b")
    seen.wait_for_call("delete", "n-b")

    assert sorted(informer.keys()) == ["n-a", "n-c"]
    cached = informer.get("n-a")
    assert cached is not None
    assert cached["metadata"]["labels"]["step"] == "1"
    assert informer.get("n-b") is None
    assert informer.get("other") is None
    assert len(informer.list()) == 2


def test_cached_objects_are_slim_and_carry_kind_and_api_version(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    kube_api.create(NODES, _node("listed", group))
    informer, seen = _node_informer(kube_api, group, informers)
    informer.start()
    assert informer.wait_for_sync(15)
    kube_api.create(NODES, _node("watched", group))
    seen.wait_for_call("add", "watched")
    for name in ("listed", "watched"):
        obj = informer.get(name)
        assert obj is not None
        assert obj["kind"] == "Node" and obj["apiVersion"] == "v1"
        assert "managedFields" not in obj["metadata"]
        assert obj["metadata"]["annotations"] == {"kept": "yes"}


def test_namespaced_informer_keys_are_namespace_slash_name(
    kube_api: KubeApi, namespace: str, informers: list[Informer]
) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 80}]},
    }
    kube_api.create(SERVICES, service, namespace)
    informer = Informer(kube_api, SERVICES, namespace=namespace, watch_timeout=10)
    informers.append(informer)
    informer.start()
    assert informer.wait_for_sync(15)
    assert informer.keys() == [f"{namespace}/web"]
    assert informer.get(f"{namespace}/web") is not None


def test_a_large_list_is_read_in_pages(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    for i in range(7):
        kube_api.create(NODES, _node(f"p{i}", group))
    informer, seen = _node_informer(kube_api, group, informers)
    informer.page_size = 2
    informer.start()
    assert informer.wait_for_sync(15)
    assert sorted(informer.keys()) == [f"p{i}" for i in range(7)]
    assert len([c for c in seen.calls if c[0] == "add"]) == 7


def test_bookmarks_move_the_resume_point_without_object_events(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    informer, seen = _node_informer(kube_api, group, informers, watch_timeout=5)
    informer.start()
    assert informer.wait_for_sync(15)
    listed_at = int(informer.resource_version or 0)
    bookmarks = metrics.informer_bookmarks_total.labels(informer=informer.name)
    before = bookmarks._value.get()

    # Changes the informer does not select: the server has news, but none for this watch.
    # It sends bookmarks shortly before a watch times out when its cache has moved on.
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            kube_api.create(NODES, _node(f"churn-{i}", "not-this-test"))
            kube_api.delete(NODES, f"churn-{i}")
            i += 1
            time.sleep(0.2)

    churner = threading.Thread(target=churn, daemon=True)
    churner.start()
    try:
        _wait(lambda: bookmarks._value.get() > before, timeout=30, what="a bookmark")
    finally:
        stop.set()
        churner.join()
    assert int(informer.resource_version or 0) > listed_at
    assert seen.calls == []  # a bookmark is not an object event


def test_a_cut_watch_resumes_without_missing_or_repeating_events(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    # One-second watches: the server ends the stream again and again while nodes change.
    informer, seen = _node_informer(kube_api, group, informers, watch_timeout=1)
    informer.start()
    assert informer.wait_for_sync(15)
    watches = metrics.informer_watches_total.labels(informer=informer.name)
    lists = metrics.informer_lists_total.labels(informer=informer.name)
    watches_before, lists_before = watches._value.get(), lists._value.get()

    names = [f"cut-{i}" for i in range(4)]
    for name in names:
        kube_api.create(NODES, _node(name, group))
    for step in range(1, 9):
        for name in names:
            _set_step(kube_api, name, step)
        time.sleep(0.4)
    kube_api.delete(NODES, names[0])

    seen.wait_for_call("delete", names[0], timeout=20)
    for name in names[1:]:
        seen.wait_for(lambda calls, name=name: ("update", name, ("7", "8")) in calls)
    assert watches._value.get() - watches_before >= 3, "the watch was not cut as planned"
    assert lists._value.get() == lists_before, "a resumed watch must not relist"
    for name in names:
        calls = seen.of(name)
        assert calls[0] == ("add", name, None)
        updates = [c[2] for c in calls if c[0] == "update"]
        # Every step seen, in order, exactly once.
        assert updates == [(None if s == 1 else str(s - 1), str(s)) for s in range(1, 9)]
    assert sorted(informer.keys()) == names[1:]


class _WatchInterceptor(KubeApi):
    """The real API, with :meth:`_before_watch` run as each watch is opened: it may wait, or
    raise what a broken network or a compacted etcd would."""

    def __init__(self, api: KubeApi) -> None:
        super().__init__(api.configuration, qps=0)

    def _before_watch(self, resource_version: str) -> None:
        raise NotImplementedError

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        **query: Any,
    ) -> Iterator[JsonObject]:
        self._before_watch(resource_version)
        return super().watch(
            resource,
            namespace,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            **query,
        )


class _GoneAfterGate(_WatchInterceptor):
    """One chosen watch answers 410 Gone (as after a disconnection long enough for etcd to
    compact the informer's resourceVersion), once the gate opens."""

    def __init__(self, api: KubeApi) -> None:
        super().__init__(api)
        self.gate = threading.Event()
        self.fail_next_watch = False
        self.watch_calls = 0

    def _before_watch(self, resource_version: str) -> None:
        self.watch_calls += 1
        if self.fail_next_watch:
            self.fail_next_watch = False
            self.gate.wait(30)
            raise ApiError(410, "Expired", f"too old resource version: {resource_version}")


def test_a_410_relists_and_reports_what_changed_meanwhile(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    api = _GoneAfterGate(kube_api)
    api.fail_next_watch = True
    for name in ("stays", "changes", "goes"):
        kube_api.create(NODES, _node(name, group))
    informer, seen = _node_informer(api, group, informers)
    informer.start()
    assert informer.wait_for_sync(15)
    lists = metrics.informer_lists_total.labels(informer=informer.name)
    lists_before = lists._value.get()

    # While the informer is "disconnected", the cluster moves on.
    _set_step(kube_api, "changes", 5)
    kube_api.delete(NODES, "goes")
    kube_api.create(NODES, _node("new", group))
    seen.calls.clear()
    api.gate.set()

    seen.wait_for(lambda calls: len(calls) >= 3)
    time.sleep(0.3)  # nothing else may follow
    assert sorted(seen.calls) == sorted(
        [
            ("update", "changes", (None, "5")),
            ("delete", "goes", None),
            ("add", "new", None),
        ]
    )
    assert lists._value.get() == lists_before + 1
    assert sorted(informer.keys()) == ["changes", "new", "stays"]

    # And it keeps watching after the relist.
    kube_api.create(NODES, _node("after", group))
    seen.wait_for_call("add", "after")


class _RefusedAtFirst(_WatchInterceptor):
    """A network that refuses the first ``failures`` watch connections."""

    def __init__(self, api: KubeApi, failures: int) -> None:
        super().__init__(api)
        self.failures = failures
        self.attempts: list[float] = []

    def _before_watch(self, resource_version: str) -> None:
        self.attempts.append(time.monotonic())
        if len(self.attempts) <= self.failures:
            raise ConnectionRefusedError("connection refused")


def test_watch_errors_reconnect_with_growing_backoff_and_lose_nothing(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    api = _RefusedAtFirst(kube_api, failures=4)
    informer, seen = _node_informer(api, group, informers, backoff=Backoff(0.1, 0.4, jitter=0))
    informer.start()
    assert informer.wait_for_sync(15)
    kube_api.create(NODES, _node("while-refused", group))
    seen.wait_for_call("add", "while-refused", timeout=20)
    gaps = [b - a for a, b in zip(api.attempts, api.attempts[1:5], strict=False)]
    # 0.1, 0.2, 0.4, 0.4 s: no busy loop, capped.
    assert [round(gap, 1) for gap in gaps] == [0.1, 0.2, 0.4, 0.4]


def test_resync_calls_update_with_the_same_object(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    kube_api.create(NODES, _node("r", group))
    informer, seen = _node_informer(kube_api, group, informers, resync_period=0.3)
    informer.start()
    assert informer.wait_for_sync(15)
    seen.wait_for(lambda calls: calls.count(("update", "r", (None, None))) >= 2, timeout=5)


def test_a_handler_added_after_sync_gets_the_current_objects_as_adds(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    kube_api.create(NODES, _node("early", group))
    informer, _ = _node_informer(kube_api, group, informers)
    informer.start()
    assert informer.wait_for_sync(15)
    late = Seen()
    late.attach(informer)
    assert late.calls == [("add", "early", None)]


def test_a_failing_handler_does_not_stop_the_informer_or_other_handlers(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    informer, seen = _node_informer(kube_api, group, informers)

    def broken(obj: JsonObject) -> None:
        raise RuntimeError("handler bug")

    informer.add_handler(on_add=broken)
    informer.start()
    assert informer.wait_for_sync(15)
    kube_api.create(NODES, _node("x", group))
    kube_api.create(NODES, _node("y", group))
    seen.wait_for_call("add", "y")
    assert [c[1] for c in seen.calls if c[0] == "add"] == ["x", "y"]


def test_no_handler_runs_after_stop(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    informer, seen = _node_informer(kube_api, group, informers)
    informer.start()
    assert informer.wait_for_sync(15)
    informer.stop()
    kube_api.create(NODES, _node("late", group))
    time.sleep(0.5)
    assert seen.calls == []
    assert informer.stopped


def test_stop_ends_the_open_watch_at_once(
    kube_api: KubeApi, clean_nodes: None, group: str, informers: list[Informer]
) -> None:
    informer, _seen = _node_informer(kube_api, group, informers, watch_timeout=300)
    informer.start()
    assert informer.wait_for_sync(15)
    time.sleep(0.3)  # the watch is open and idle
    informer.stop()
    watcher = informer._threads[0]
    watcher.join(timeout=3)
    assert not watcher.is_alive(), "a stopped informer must not keep its watch connection open"
