"""Operations: what every mutation returns, PENDING, then RUNNING, then DONE.

An operation's effect (the resource going live, an instance reaching RUNNING, a route
disappearing) is applied when it turns DONE, so a client that does not wait sees the old state,
as on GCE. A failure raised by the effect, or injected through the control API, ends the
operation DONE with ``error`` set (and ``httpErrorStatusCode``), not as an HTTP error.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from polyccm_gce_emulator.errors import HTTP_ERROR_MESSAGES, OperationFailure
from polyccm_gce_emulator.models.common import Link, new_id, timestamp


@dataclass(frozen=True)
class OperationFault:
    """An injected failure for the next operation: Google's operation error code and status."""

    code: str
    message: str
    http_status: int = 400


def _operation_name(now: float) -> str:
    # GCE's shape: operation-<epoch ms>-<hex>-<hex>-<hex>.
    token = uuid.uuid4().hex
    return f"operation-{int(now * 1000)}-{token[:13]}-{token[13:21]}-{token[21:29]}"


@dataclass(eq=False)
class Operation:
    """One operation; ``body`` is what the API shows (links still as paths)."""

    project: str
    scope: str
    body: dict[str, Any]
    pending_until: float
    done_at: float
    on_start: Callable[[], None] | None = None
    on_done: Callable[[], None] | None = None
    on_fail: Callable[[], None] | None = None
    fault: OperationFault | None = None
    phase: str = "PENDING"
    finished: list[Callable[[], None]] = field(default_factory=list)

    @classmethod
    def begin(
        cls,
        *,
        project: str,
        scope: str,
        operation_type: str,
        target: str,
        target_id: str,
        now: float,
        pending_seconds: float,
        running_seconds: float,
        on_start: Callable[[], None] | None,
        on_done: Callable[[], None] | None,
        on_fail: Callable[[], None] | None,
        fault: OperationFault | None,
    ) -> Operation:
        name = _operation_name(now)
        body: dict[str, Any] = {
            "kind": "compute#operation",
            "id": new_id(),
            "name": name,
            "operationType": operation_type,
            "targetLink": Link(target),
            "status": "PENDING",
            "user": f"polyccm-emulator@{project}.iam.gserviceaccount.com",
            "progress": 0,
            "insertTime": timestamp(now),
            "selfLink": Link(f"projects/{project}/{scope}/operations/{name}"),
        }
        if target_id:
            body["targetId"] = target_id
        if scope.startswith("zones/"):
            body["zone"] = Link(f"projects/{project}/{scope}")
        elif scope.startswith("regions/"):
            body["region"] = Link(f"projects/{project}/{scope}")
        return cls(
            project=project,
            scope=scope,
            body=body,
            pending_until=now + pending_seconds,
            done_at=now + pending_seconds + running_seconds,
            on_start=on_start,
            on_done=on_done,
            on_fail=on_fail,
            fault=fault,
        )

    @property
    def name(self) -> str:
        return str(self.body["name"])

    @property
    def done(self) -> bool:
        return self.phase == "DONE"

    def next_step_at(self) -> float:
        if self.phase == "PENDING":
            return self.pending_until
        if self.phase == "RUNNING":
            return self.done_at
        return float("inf")

    def step(self, at: float) -> None:
        """PENDING -> RUNNING, or RUNNING -> DONE (applying the effect or the failure)."""
        if self.phase == "PENDING":
            self.phase = "RUNNING"
            self.body.update(status="RUNNING", startTime=timestamp(at), progress=0)
            if self.on_start is not None and self.fault is None:
                self.on_start()
            return
        if self.phase != "RUNNING":
            return
        failure: OperationFailure | None = None
        if self.fault is not None:
            failure = OperationFailure(self.fault.code, self.fault.message, self.fault.http_status)
        else:
            try:
                if self.on_done is not None:
                    self.on_done()
            except OperationFailure as error:
                failure = error
        if failure is not None:
            if self.on_fail is not None:
                self.on_fail()
            self.body.update(
                error={"errors": [{"code": failure.code, "message": failure.message}]},
                httpErrorStatusCode=failure.http_status,
                httpErrorMessage=HTTP_ERROR_MESSAGES.get(failure.http_status, "ERROR"),
            )
        self.phase = "DONE"
        self.body.update(status="DONE", endTime=timestamp(at), progress=100)
        for callback in self.finished:
            callback()
