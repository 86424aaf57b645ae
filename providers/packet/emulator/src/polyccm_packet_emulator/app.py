"""The emulator's WSGI application: the Metal API under ``/metal/v1/``, the device metadata
service at ``/metadata``, and the control endpoints under ``/_polyccm/``.

An API request goes through, in order: routing (unknown paths are 404), call counting per
operation, the ``X-Auth-Token`` header (401), any injected fault for its operation (a 429
carries ``X-RateLimit-*`` and ``Retry-After`` headers), the strict OpenAPI check of the request
(404/422), and the handler. With ``validate_responses`` each answer is checked against the
document too, and one that does not match becomes a 500 naming the mismatch.

The metadata service answers ``GET /metadata`` without a token, as Metal's did from inside a
device (``metadata.platformequinix.com``, formerly ``metadata.packet.net``): the device is the
one named by the ``X-Polyccm-Device`` header (id or hostname), else the ``metadata_device``
setting, else the project's oldest device. Its body is the document's ``Metadata`` plus the
``bgp_neighbors`` the Packet CCM read.

Control endpoints (no token): ``GET /_polyccm/health``; ``GET``/``DELETE /_polyccm/calls``;
``POST``/``GET``/``DELETE /_polyccm/faults``; ``GET``/``PUT /_polyccm/settings``;
``POST /_polyccm/reset``; ``GET``/``DELETE /_polyccm/validation``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from typing import Any

from polyccm_testing.emulation import http
from polyccm_testing.emulation.callers import caller_from
from polyccm_testing.emulation.control import CONTROL, ControlEndpoints
from werkzeug.wrappers import Request, Response

from polyccm_packet_emulator import openapi, render, responses, urls
from polyccm_packet_emulator.backend import Backend, Device
from polyccm_packet_emulator.errors import (
    ApiError,
    BadRequest,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    error_for_status,
)
from polyccm_packet_emulator.faults import CallLog
from polyccm_packet_emulator.settings import EmulatorSettings
from polyccm_packet_emulator.timers import Clock

METADATA_PATH = "/metadata"
METADATA_OPERATION = "metadata"
DEVICE_HEADER = "X-Polyccm-Device"
#: The project a bare ``EmulatorApp()`` serves (``polyccm-dev`` passes a fresh one).
DEFAULT_PROJECT_ID = "8f6bd0b4-6e6a-4a7b-9a38-4b1f5ac3f7a1"
JSON_TYPE = "application/json; charset=utf-8"

log = logging.getLogger(__name__)

_READ_METHODS = frozenset({"GET", "HEAD"})
"""HTTP methods that change nothing (a fault with ``writes_only`` passes them by)."""


class EmulatorApp:
    """One emulated Metal project behind the Metal API (a WSGI callable)."""

    def __init__(
        self,
        settings: EmulatorSettings | None = None,
        *,
        clock: Clock | None = None,
        project_id: str = DEFAULT_PROJECT_ID,
    ) -> None:
        self.backend = Backend(settings or EmulatorSettings(), clock or Clock(),
                               project_id=project_id)  # fmt: skip
        self.calls = CallLog()
        self.validators = openapi.validators()
        self.mismatches: list[dict[str, str]] = []
        self._urls = urls.url_map()
        self._lock = threading.RLock()
        self.control = ControlEndpoints(
            calls=self.calls,
            mismatches=self.mismatches,
            lock=self._lock,
            settings=lambda: self.settings,
            configure=self.configure,
            reset=self.reset,
            health=lambda: {"ok": True, "project": self.backend.project_id},
        )

    @property
    def settings(self) -> EmulatorSettings:
        return self.backend.settings

    def configure(self, changes: dict[str, Any]) -> EmulatorSettings:
        with self._lock:
            self.backend.settings = self.backend.settings.updated(changes)
            return self.backend.settings

    def reset(self) -> None:
        with self._lock:
            self.backend.reset()
            self.control.forget()

    # -- WSGI ---------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        if request.path.startswith(CONTROL):
            response = self.control.respond(request)
        elif request.path.rstrip("/") == METADATA_PATH:
            response = self._metadata(request)
        else:
            response = self._api(request)
        return response(environ, start_response)

    def _api(self, request: Request) -> Response:
        checked = False
        try:
            route, path_args = self._route(request)
            checked = True  # other paths are in no document
            fault = self.calls.record(
                route.operation,
                write=request.method not in _READ_METHODS,
                caller=caller_from(request.headers),
            )
            self._authenticate(request)
            # An injected failure is what the test asked for, whether or not the document lists
            # its status for this operation (it lists no 429 or 5xx at all).
            checked = fault is None or fault.status is None
            self._suffer(fault)
            reply = self._serve(request, route, path_args)
        except ApiError as error:
            reply = self._error_reply(error)
        response = _render(reply)
        if self.settings.validate_responses and checked:
            response = self._checked(request, response)
        return response

    def _error_reply(self, error: ApiError) -> responses.Reply:
        headers: dict[str, str] = {}
        if isinstance(error, TooManyRequests):
            reset = int(self.backend.clock.now()) + 1
            headers = {"X-RateLimit-Limit": str(self.settings.rate_limit),
                       "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset),
                       "Retry-After": "1"}  # fmt: skip
        return responses.Reply(error.status, error.body(), headers)

    def _suffer(self, fault: Any) -> None:
        http.suffer(fault, error_for_status)

    def _route(self, request: Request) -> tuple[urls.Route, dict[str, str]]:
        route, args = http.match(self._urls, request, NotFound)
        assert isinstance(route, urls.Route)
        return route, args

    def _authenticate(self, request: Request) -> None:
        token = request.headers.get("X-Auth-Token", "").strip()
        expected = self.settings.token
        if not token or (expected and token != expected):
            raise Unauthorized()

    def _serve(self, request: Request, route: urls.Route, path_args: dict[str, str]) -> Any:
        self.validators.check_request(request)
        body = http.json_body(request, BadRequest)
        call = responses.Call(
            backend=self.backend,
            path=path_args,
            query={key: request.args.getlist(key) for key in request.args},
            body=body if body is not None else {},
        )
        with self._lock:
            return route.handler(call)

    def _checked(self, request: Request, response: Response) -> Response:
        mismatch = http.mismatch(self.validators, request, response)
        if mismatch is None:
            return response
        log.error("answer does not match the OpenAPI document: %s", mismatch)
        self.control.record_mismatch(mismatch)
        error = ServerError(
            f"the emulator's answer ({response.status_code}) does not match the Metal API's "
            f"OpenAPI document: {mismatch['problem']}"
        )
        return _render(responses.Reply(error.status, error.body()))

    # -- metadata service ---------------------------------------------------------------------

    def _metadata(self, request: Request) -> Response:
        fault = self.calls.record(METADATA_OPERATION)
        try:
            if request.method != "GET":
                raise NotFound()
            self._suffer(fault)
            with self._lock:
                device = self._local_device(request.headers.get(DEVICE_HEADER))
                body = render.metadata(device, self.backend.clock.now())
                call = responses.Call(backend=self.backend, path={}, query={}, body={})
                body["bgp_neighbors"] = responses.bgp_neighbors(call, device)
            reply = responses.Reply(200, body)
        except ApiError as error:
            reply = self._error_reply(error)
        return _render(reply)

    def _local_device(self, named: str | None) -> Device:
        """The device the caller is on (see the module's docstring)."""
        key = named or self.settings.metadata_device
        if key:
            return self.backend.device_by_name_or_id(key)
        devices = sorted(self.backend.project.devices.values(), key=lambda d: d.created)
        if not devices:
            raise NotFound()
        return devices[0]


def _render(reply: responses.Reply) -> Response:
    if reply.body is None:
        return Response(status=reply.status, headers=reply.headers)
    return Response(json.dumps(reply.body), status=reply.status, headers=reply.headers,
                    content_type=JSON_TYPE)  # fmt: skip
