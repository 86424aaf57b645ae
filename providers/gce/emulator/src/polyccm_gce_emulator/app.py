"""The emulator's WSGI application: routing, the control API, and the metadata server.

One application serves three things on one loopback port:

* the compute v1 API under ``/compute/v1/projects/{project}/...`` (:mod:`.urls`): every call
  is counted per method, may meet an injected fault or a rate limit, then runs against the
  models under one lock; cloud errors are rendered in Google's format, and even an emulator bug
  answers a Google-shaped 500 rather than an HTML page;
* the control API under ``/_polyccm/`` (as the AWS emulator's): ``health``; ``calls`` (GET,
  ``?project=``; ``?by=caller``: each call whose User-Agent or ``x-goog-api-client`` named its
  process, as ``[unix time, caller, method id]``; DELETE resets); ``faults`` and
  ``rate-limits`` (GET, POST one, DELETE all);
  ``settings`` (GET, PUT changes); ``reset`` (POST: every project, fault, limit, counter and
  setting back to the start); ``methods`` (GET: the methods served); ``zones`` (POST
  ``{"zone": "us-central1-z"}``: Google opens a zone in an existing region, in every project);
* the metadata server under ``/computeMetadata/v1/`` (:mod:`.metadata`).

Observers (:attr:`ComputeEmulator.observers`) see every API exchange; the emulator's tests use
them to check each request and response against Google's discovery document.
"""

from __future__ import annotations

import copy
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from polyccm_testing.emulation.callers import caller_from
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Request, Response

from polyccm_gce_emulator import partial
from polyccm_gce_emulator.errors import (
    BadRequest,
    ComputeError,
    Injected,
    Invalid,
    MethodNotFound,
    RateLimitExceeded,
    Unauthenticated,
)
from polyccm_gce_emulator.faults import Fault, Misbehaviour, RateLimit
from polyccm_gce_emulator.metadata import PREFIX as METADATA_PREFIX
from polyccm_gce_emulator.metadata import MetadataServer, numeric_project_id
from polyccm_gce_emulator.models import ComputeBackends, ComputeProject, Operation, render
from polyccm_gce_emulator.models.operations import OperationFault
from polyccm_gce_emulator.responses import Call, WaitFor
from polyccm_gce_emulator.settings import EmulatorSettings
from polyccm_gce_emulator.urls import METHODS, ApiMethod, url_map

CONTROL = "/_polyccm/"
HEALTH_PATH = CONTROL + "health"
ROUTE_INSERT = "compute.routes.insert"

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]


@dataclass(frozen=True)
class Exchange:
    """One API call as it happened: what was asked and what was answered."""

    method: str
    """The discovery method id."""
    http_method: str
    path: str
    request_body: Any
    status: int
    response_body: Any


class ComputeEmulator:
    """The WSGI application (``settings``: how it behaves until changed or reset)."""

    def __init__(
        self, settings: EmulatorSettings | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.launch_settings = settings or EmulatorSettings()
        self.clock = clock
        self.backends = ComputeBackends(copy.deepcopy(self.launch_settings), clock)
        self.misbehaviour = Misbehaviour()
        self.metadata = MetadataServer(self.backends, lambda: self.backends.settings.project)
        self.observers: list[Callable[[Exchange], None]] = []
        self._url_map = url_map()
        self._request_ids: dict[tuple[str, str], Operation] = {}

    @property
    def settings(self) -> EmulatorSettings:
        return self.backends.settings

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request = Request(environ)
        path = request.path
        if path.startswith(CONTROL):
            response = self._control(request)
        elif path == "/" or path.startswith(METADATA_PREFIX):
            response = self.metadata(request)
        else:
            response = self._api(request)
        return response(environ, start_response)

    # -- the compute API -------------------------------------------------------------------

    def _api(self, request: Request) -> Response:
        try:
            method, params = self._url_map.bind_to_environ(request.environ).match()
        except HTTPException:
            error = MethodNotFound(
                f"The requested URL {request.path} was not found on this server."
            )
            return _json(error.status, error.body())
        assert isinstance(method, ApiMethod)
        body: Any = None
        try:
            mask = partial.parse(
                request.args.get("fields") or request.headers.get("X-Goog-FieldMask", "")
            )
        except ComputeError as error:
            return _json(error.status, error.body())
        status, payload = self._answer(request, method, dict(params))
        if status < 400:
            payload = partial.select(payload, mask)
        observers = list(self.observers)
        if observers and request.get_data():  # parsed again only for them (the tests)
            try:
                body = json.loads(request.get_data())
            except ValueError:
                body = None
        for observer in observers:
            observer(Exchange(method.id, method.http_method, request.path, body, status, payload))
        return _json(status, payload)

    def _answer(
        self, request: Request, method: ApiMethod, params: dict[str, str]
    ) -> tuple[int, Any]:
        project_id = params["project"]
        self.misbehaviour.count(project_id, method.id, caller_from(request.headers))
        try:
            return self._serve(request, method, params, project_id)
        except ComputeError as error:
            return error.status, error.body()
        except Exception:
            log.exception("the GCE emulator failed on %s %s", request.method, request.path)
            internal = Injected(500, "backendError", "Internal error. Please try again.")
            return 500, internal.body()

    def _serve(
        self, request: Request, method: ApiMethod, params: dict[str, str], project_id: str
    ) -> tuple[int, Any]:
        settings = self.settings
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if settings.require_auth and (scheme != "Bearer" or not token.strip()):
            raise Unauthenticated()
        # A write changes something: not a GET, nor the POST that waits for an operation.
        write = method.http_method != "GET" and not method.id.endswith(".wait")
        fault = self.misbehaviour.take_fault(method.id, write=write)
        if fault is not None and fault.latency:
            time.sleep(fault.latency)
        if fault is not None and fault.status is not None:
            raise Injected(
                fault.status,
                fault.reason,
                fault.message or f"Injected by the polyccm emulator ({method.id}).",
            )
        default_limit = None
        if method.id == ROUTE_INSERT:
            default_limit = RateLimit(
                ROUTE_INSERT, settings.route_inserts_per_second, settings.route_insert_burst
            )
        if not self.misbehaviour.admit(project_id, method.id, self.clock(), default_limit):
            raise RateLimitExceeded()
        body = _body(request)
        base = request.host_url + "compute/v1/"
        request_id = request.args.get("requestId", "")
        with self.backends.lock:
            project = self.backends.project(self._project_name(project_id))
            project.advance()
            if request_id:
                _check_uuid(request_id)
                earlier = self._request_ids.get((project_id, request_id))
                if earlier is not None:
                    # GCE's idempotency: a retried request gets the first one's operation.
                    return 200, render(earlier.body, base)
            if fault is not None and fault.operation_error:
                project.operation_fault = OperationFault(
                    fault.operation_error,
                    fault.message or f"Injected by the polyccm emulator ({method.id}).",
                    fault.operation_status,
                )
            try:
                call = Call(project, params, dict(request.args), body, base)
                answer = method.handler(call)
            finally:
                project.operation_fault = None
            if isinstance(answer, Operation):
                if request_id:
                    self._request_ids[(project_id, request_id)] = answer
                # Under the lock: another request's advance() may be finishing it.
                return 200, render(answer.body, base)
        if isinstance(answer, WaitFor):
            return 200, self._wait(project, answer.operation, base)
        return 200, answer

    def _wait(self, project: ComputeProject, operation: Operation, base: str) -> Any:
        """``operations.wait``: block (without the lock) until the operation is DONE or the
        wait timeout passes, then answer with it as it is."""
        deadline = self.clock() + self.settings.wait_timeout_seconds
        while True:
            with self.backends.lock:
                project.advance()
                now = self.clock()
                if operation.done or now >= deadline:
                    return render(operation.body, base)
                wake = min(operation.next_step_at(), deadline)
            time.sleep(min(max(wake - now, 0.001), 1.0))

    def _project_name(self, project_id: str) -> str:
        """The project a request names: as GCE, a project's number stands for it (the
        metadata server's ``numeric-project-id``) for the projects there are."""
        if not project_id.isdigit():
            return project_id
        names = [p.project for p in self.backends.projects()] + [self.settings.project]
        for name in names:
            if numeric_project_id(name) == project_id:
                return name
        return project_id

    # -- the control API -------------------------------------------------------------------

    def _control(self, request: Request) -> Response:
        name = request.path[len(CONTROL) :].strip("/")
        try:
            answer = self._handle_control(request.method, name, request)
        except (ValueError, TypeError, KeyError) as error:
            return _json(400, {"error": str(error)})
        if answer is None:
            return _json(404, {"error": f"no {request.method} {request.path}"})
        return _json(200, answer)

    def _handle_control(self, method: str, name: str, request: Request) -> Any:
        if name == "health":
            return {"ok": True}
        if name == "methods" and method == "GET":
            return [{"id": m.id, "httpMethod": m.http_method, "path": m.path} for m in METHODS]
        if name == "calls" and method == "GET" and request.args.get("by") == "caller":
            return self.misbehaviour.callers.calls()
        if name == "calls" and method == "GET":
            return self.misbehaviour.call_counts(request.args.get("project"))
        if name == "calls" and method == "DELETE":
            self.misbehaviour.clear_calls()
            return {}
        if name == "faults" and method == "POST":
            self.misbehaviour.add_fault(Fault.from_json(_control_body(request)))
            return self.misbehaviour.describe()["faults"]
        if name == "faults" and method == "GET":
            return self.misbehaviour.describe()["faults"]
        if name == "faults" and method == "DELETE":
            self.misbehaviour.clear_faults()
            return []
        if name == "rate-limits" and method == "POST":
            self.misbehaviour.set_limit(RateLimit(**_control_body(request)))
            return self.misbehaviour.describe()["rate_limits"]
        if name == "rate-limits" and method == "GET":
            return self.misbehaviour.describe()["rate_limits"]
        if name == "rate-limits" and method == "DELETE":
            self.misbehaviour.clear_limits()
            return []
        if name == "settings" and method == "GET":
            return self.settings.to_json()
        if name == "settings" and method in ("PUT", "PATCH", "POST"):
            with self.backends.lock:
                self.backends.configure(self.settings.updated(_control_body(request)))
            return self.settings.to_json()
        if name == "zones" and method == "POST":
            zone = str(_control_body(request)["zone"])
            with self.backends.lock:
                for project in self.backends.projects():
                    project.open_zone(zone)
            return {"zone": zone}
        if name == "reset" and method == "POST":
            with self.backends.lock:
                self.backends.reset(copy.deepcopy(self.launch_settings))
                self._request_ids.clear()
            self.misbehaviour.reset()
            return {}
        return None


def _body(request: Request) -> dict[str, Any] | None:
    data = request.get_data()
    if not data:
        return None
    try:
        body = json.loads(data)
    except ValueError as error:
        raise BadRequest(f"Invalid JSON payload received. {error}") from None
    if not isinstance(body, dict):
        raise BadRequest("Invalid JSON payload received. Expected an object.")
    return body


def _check_uuid(value: str) -> None:
    try:
        uuid.UUID(value)
    except ValueError:
        raise Invalid(
            f"Invalid value for field 'requestId': '{value}'. The request id must be a UUID."
        ) from None


def _control_body(request: Request) -> dict[str, Any]:
    data = json.loads(request.get_data() or b"{}")
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data


def _json(status: int, payload: Any) -> Response:
    return Response(
        json.dumps(payload), status=status, content_type="application/json; charset=UTF-8"
    )


__all__ = ["CONTROL", "HEALTH_PATH", "ComputeEmulator", "Exchange"]
