"""polyccm.ops.recording, the shared part of planning with ensure's own code: a toy provider
whose ensure writes through an API wrapper plans create, adopt, update and fail from what its
writes would have been, and nothing reaches its cloud."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from polyccm.cloud import LoadBalancer, LoadBalancerStatus, default_load_balancer_name
from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Node, Service
from polyccm.ops.contract import ADOPT, BACKENDS, CREATE, FAIL, UPDATE, Difference, Problem
from polyccm.ops.recording import (
    RecordedCall,
    RecordingPlanner,
    WriteRecorder,
    describe_calls,
)


class ToyApi:
    """A cloud of load balancers (name -> backends); ``call`` is every request."""

    def __init__(self) -> None:
        self.balancers: dict[str, list[str]] = {}
        self.sent: list[str] = []

    def call(self, operation: str, **params: Any) -> Any:
        self.sent.append(operation)
        if operation == "lb.get":
            return self.balancers.get(params["name"])
        self.balancers[params["name"]] = list(params["backends"])
        return None


class RecordingToyApi(ToyApi):
    """The toy cloud's wrapper, as a provider writes one: reads go through, writes are recorded."""

    def __init__(self, api: ToyApi, recorder: WriteRecorder) -> None:
        self.api, self.recorder = api, recorder

    def call(self, operation: str, **params: Any) -> Any:
        if self.recorder.is_read(operation):
            return self.api.call(operation, **params)
        self.recorder.record(operation, params, subject=params["name"])
        return None


class ToyBalancer(LoadBalancer):
    def __init__(self, api: ToyApi) -> None:
        self.api = api

    def get_load_balancer(self, cluster_name: str, service: Service) -> LoadBalancerStatus | None:
        return None

    def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        if service.annotations.get("toy/refuse"):
            raise InvalidServiceSpec("toy/refuse: refused")
        name = self.get_load_balancer_name(cluster_name, service)
        wanted = sorted(n.name for n in nodes)
        have = self.api.call("lb.get", name=name)
        if have is None:
            self.api.call("lb.create", name=name, backends=wanted)
        elif have != wanted:
            self.api.call("lb.set_backends", name=name, backends=wanted)
        return LoadBalancerStatus(warnings=("toy warning",))

    def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None: ...

    def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None: ...


class ToyPlanner(RecordingPlanner):
    def describe(self, calls: Sequence[RecordedCall]) -> list[Difference]:
        return describe_calls(
            calls,
            {"lb.set_backends": lambda c: [Difference(BACKENDS, ", ".join(c.params["backends"]))]},
        )


def _service(**annotations: str) -> Service:
    metadata = {
        "name": "web",
        "namespace": "default",
        "uid": "1b2c3d4e-0000-0000-0000-000000000000",
    }
    return Service({"metadata": {**metadata, "annotations": annotations}, "spec": {}})


def _nodes(*names: str) -> list[Node]:
    return [Node({"metadata": {"name": name}}) for name in names]


def test_a_recorded_ensure_plans_create_adopt_update_and_fail_without_writing() -> None:
    cloud = ToyApi()
    recorder = WriteRecorder(creates={"lb.create"})
    planner = ToyPlanner(ToyBalancer(RecordingToyApi(cloud, recorder)), recorder)
    service = _service()
    name = default_load_balancer_name(service)

    created = planner.plan_load_balancer("c", service, _nodes("n1"))
    cloud.balancers[name] = ["n1"]
    adopted = planner.plan_load_balancer("c", service, _nodes("n1"))
    updated = planner.plan_load_balancer("c", service, _nodes("n1", "n2"))
    failed = planner.plan_load_balancer("c", _service(**{"toy/refuse": "1"}), _nodes("n1"))

    assert (created.action, created.name) == (CREATE, name)
    assert created.differences == (Difference("lb", f"lb.create {name}"),)  # no describer
    assert (adopted.action, adopted.differences) == (ADOPT, ())
    assert adopted.problems == (Problem("warning", "toy warning"),)
    assert (updated.action, updated.differences) == (UPDATE, (Difference(BACKENDS, "n1, n2"),))
    assert (failed.action, failed.problems) == (FAIL, (Problem("error", "toy/refuse: refused"),))
    assert set(cloud.sent) == {"lb.get"} and cloud.balancers == {name: ["n1"]}
