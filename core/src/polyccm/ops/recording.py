"""Planning by running ensure with its writes held back: what every provider's planner shares.

The surest way to plan without a second implementation (:mod:`polyccm.ops.contract`) is to run
the provider's own ``ensure_load_balancer`` over its API wrapper, with the reads sent and the
writes written down instead. The wrapper (the provider's: it knows its API and what stand-in
answer lets ensure go on) asks a :class:`WriteRecorder` which calls are reads and hands it the
others; :class:`RecordingPlanner` runs ensure and makes the plan from what was recorded:

* nothing recorded: ``adopt``; writes recorded: ``update``, their :class:`RecordedCall` records
  turned into :class:`~polyccm.ops.contract.Difference` records by the provider's describers
  (:func:`describe_calls`);
* ensure reached the call that makes the load balancer (one of the recorder's ``creates``: it
  raises :class:`PlannedCreate`, since nothing after it could be read back): ``create``;
* ensure raised :class:`~polyccm.errors.InvalidServiceSpec`: ``fail``.

Warnings come from the spec check before ensure (:meth:`RecordingPlanner.spec_warnings`) and
from the status ensure returns; they are the plan's problems whatever the action.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polyccm.cloud import LoadBalancer
from polyccm.cloudcalls import looks_like_read
from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Node, Service
from polyccm.ops.contract import (
    ADOPT,
    CREATE,
    FAIL,
    UPDATE,
    Difference,
    LoadBalancerPlan,
    LoadBalancerPlanner,
    Problem,
)


@dataclass(frozen=True)
class RecordedCall:
    """A write ensure would have sent: the provider's operation (as its API wrapper names it)
    and its arguments; ``subject`` is the resource it is about, when the wrapper knows it."""

    operation: str
    params: Mapping[str, Any] = field(default_factory=dict)
    args: tuple[Any, ...] = ()
    subject: str = ""

    @property
    def resource(self) -> str:
        """The operation's resource part (``targetPools`` of ``compute.targetPools.delete``,
        ``elb`` of ``elb:create_load_balancer``)."""
        parts = re.split(r"[:./]", self.operation)
        return parts[-2] if len(parts) > 1 else self.operation


class PlannedCreate(Exception):
    """Ensure reached the call that makes the load balancer: the plan is ``create``, and
    nothing after it can be planned (the new load balancer cannot be read back)."""

    def __init__(self, call: RecordedCall) -> None:
        super().__init__(call.operation)
        self.call = call


class WriteRecorder:
    """The writes of one plan. ``is_read`` tells the wrapper which calls to send (the provider's
    ``read_only_call`` rule by default); :meth:`record` takes every other one, and raises
    :class:`PlannedCreate` for the operations in ``creates``."""

    def __init__(
        self,
        *,
        is_read: Callable[[str], bool] = looks_like_read,
        creates: Collection[str] = (),
    ) -> None:
        self.is_read = is_read
        self._creates = frozenset(creates)
        self.calls: list[RecordedCall] = []

    def clear(self) -> None:
        """Start a new plan: nothing recorded."""
        self.calls.clear()

    def record(
        self,
        operation: str,
        params: Mapping[str, Any] | None = None,
        *,
        args: tuple[Any, ...] = (),
        subject: str = "",
    ) -> RecordedCall:
        """Write down a call instead of sending it."""
        call = RecordedCall(operation, dict(params or {}), args, subject)
        self.calls.append(call)
        if operation in self._creates:
            raise PlannedCreate(call)
        return call


Describer = Callable[[RecordedCall], Iterable[Difference]]
"""What one kind of recorded write would change, as a person reads it."""


def unknown_write(call: RecordedCall) -> list[Difference]:
    """A write no describer knows: its operation and what it names."""
    named = call.subject or ", ".join(map(str, call.args)) or str(dict(call.params))
    return [Difference(call.resource, f"{call.operation} {named}")]


def describe_calls(
    calls: Iterable[RecordedCall], describers: Mapping[str, Describer]
) -> list[Difference]:
    """The differences of ``calls`` in the order ensure would send them, each described by the
    describer of its operation (:func:`unknown_write` for an operation without one)."""
    return [
        difference
        for call in calls
        for difference in describers.get(call.operation, unknown_write)(call)
    ]


class RecordingPlanner(LoadBalancerPlanner):
    """Plans with ``balancer``, a provider's own load balancer whose API wrapper records its
    writes in ``recorder``: the spec building, validation, naming, adoption and comparison are
    the ones the service controller runs, and the recorded calls are exactly the writes it
    would make. A provider describes its calls (:meth:`describe`) and may say more about a
    create (:meth:`created`) or check the spec first (:meth:`spec_warnings`)."""

    def __init__(self, balancer: LoadBalancer, recorder: WriteRecorder) -> None:
        self.balancer = balancer
        self.recorder = recorder

    @abstractmethod
    def describe(self, calls: Sequence[RecordedCall]) -> list[Difference]:
        """What the recorded writes would change (usually :func:`describe_calls`)."""

    def spec_warnings(self, service: Service) -> Sequence[str]:
        """The warnings of the spec ensure builds first, found without the cloud; raise
        :class:`~polyccm.errors.InvalidServiceSpec` as ensure would. They are the problems of
        a plan whose ensure did not return (``create``, ``fail``). None by default."""
        return ()

    def ensure(self, cluster_name: str, service: Service, nodes: Sequence[Node]) -> Sequence[str]:
        """Run ensure; its warnings."""
        return self.balancer.ensure_load_balancer(cluster_name, service, nodes).warnings

    def created(
        self, service: Service, nodes: Sequence[Node], stop: PlannedCreate
    ) -> list[Difference]:
        """The parts a create would make: the writes recorded up to it by default."""
        return self.describe(self.recorder.calls)

    def makes_anew(self, calls: Sequence[RecordedCall]) -> bool:
        """Whether writes recorded by an ensure that ran to its end make the load balancer
        (for a cloud whose create does not stop the run). No by default."""
        return False

    def load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return self.balancer.get_load_balancer_name(cluster_name, service)

    def plan_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerPlan:
        name = self.load_balancer_name(cluster_name, service)
        self.recorder.clear()
        warnings: tuple[Problem, ...] = ()
        try:
            warnings = Problem.warnings(self.spec_warnings(service))
            warnings = Problem.warnings(self.ensure(cluster_name, service, nodes))
        except InvalidServiceSpec as error:
            return LoadBalancerPlan(FAIL, name, problems=(*warnings, Problem.error(error)))
        except PlannedCreate as stop:
            parts = tuple(self.created(service, nodes, stop))
            return LoadBalancerPlan(CREATE, name, parts, warnings)
        calls = self.recorder.calls
        changes = tuple(self.describe(calls))
        action = CREATE if self.makes_anew(calls) else UPDATE if changes else ADOPT
        return LoadBalancerPlan(action, name, changes, warnings)
