"""The emulator's WSGI application: DigitalOcean's API under ``/v2/`` and the control
endpoints under ``/_polyccm/``.

An API request goes through, in order: routing (unknown paths are 404 ``not_found``), call
counting per operation, TLS (the API answers only over https, as DigitalOcean does), the
bearer token (401), the token's rate budget (429), any injected fault for its operation, the
strict OpenAPI check of the request (400/404/422), and the handler; every answer carries the
rate-limit headers. With ``validate_responses`` each answer is checked against the document too.

Control endpoints (no token, http or https):

* ``GET /_polyccm/health``;
* ``GET /_polyccm/calls`` (calls per ``operationId`` since the last reset), ``DELETE`` resets;
* ``POST /_polyccm/faults`` with a :class:`~polyccm_digitalocean_emulator.faults.Fault` as
  JSON, ``GET`` lists pending faults, ``DELETE`` clears them;
* ``GET``/``PUT /_polyccm/settings`` (:class:`~polyccm_digitalocean_emulator.settings.
  EmulatorSettings`; ``PUT`` takes the fields to change);
* ``POST /_polyccm/reset``: every resource, call count, fault and rate budget forgotten;
* ``GET /_polyccm/validation``: the answers that did not match the document (with
  ``validate_responses``), ``DELETE`` forgets them.

and, over plain http like DigitalOcean's link-local one, the droplet metadata service's
``GET /metadata/v1/region`` (the region a provider without ``REGION`` asks for).
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterable
from typing import Any

from polyccm_testing.emulation import http
from polyccm_testing.emulation.callers import caller_from
from polyccm_testing.emulation.control import CONTROL, ControlEndpoints
from werkzeug.wrappers import Request, Response

from polyccm_digitalocean_emulator import openapi
from polyccm_digitalocean_emulator.backend import Backend
from polyccm_digitalocean_emulator.errors import (
    ApiError,
    BadRequest,
    NotFound,
    ServerError,
    Unauthorized,
    error_for_status,
)
from polyccm_digitalocean_emulator.faults import CallLog
from polyccm_digitalocean_emulator.ratelimit import Budget, RateLimiter, RateLimitExceeded
from polyccm_digitalocean_emulator.responses import Call, Reply
from polyccm_digitalocean_emulator.settings import EmulatorSettings
from polyccm_digitalocean_emulator.timers import Clock
from polyccm_digitalocean_emulator.urls import Route, url_map

#: The droplet metadata service (``http://169.254.169.254/metadata/v1/`` on DigitalOcean),
#: describing a droplet polyccm would run on: plain text, no token.
METADATA = "/metadata/v1/"
METADATA_REGION = "nyc3"
HEALTH_PATH = CONTROL + "health"
JSON_TYPE = "application/json; charset=utf-8"

log = logging.getLogger(__name__)

_READ_METHODS = frozenset({"GET", "HEAD"})
"""HTTP methods that change nothing (a fault with ``writes_only`` passes them by)."""


class EmulatorApp:
    """One emulated account behind DigitalOcean's HTTP API (a WSGI callable)."""

    def __init__(
        self, settings: EmulatorSettings | None = None, *, clock: Clock | None = None
    ) -> None:
        self.backend = Backend(settings, clock)
        self.calls = CallLog()
        self.limiter = RateLimiter(
            self.backend.clock,
            per_hour=self.backend.settings.rate_limit_per_hour,
            per_minute=self.backend.settings.rate_limit_per_minute,
        )
        self.validators = openapi.validators()
        self.mismatches: list[dict[str, str]] = []
        self._urls = url_map()
        self._lock = threading.RLock()
        self.control = ControlEndpoints(
            calls=self.calls,
            mismatches=self.mismatches,
            lock=self._lock,
            settings=lambda: self.settings,
            configure=self.configure,
            reset=self.reset,
        )

    @property
    def settings(self) -> EmulatorSettings:
        return self.backend.settings

    def configure(self, changes: dict[str, Any]) -> EmulatorSettings:
        with self._lock:
            settings = self.backend.settings.updated(changes)
            self.backend.settings = settings
            self.limiter.per_hour = settings.rate_limit_per_hour
            self.limiter.per_minute = settings.rate_limit_per_minute
            return settings

    def reset(self) -> None:
        with self._lock:
            self.backend.reset()
            self.limiter.reset()
            self.control.forget()

    # -- WSGI ---------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        if request.path.startswith(CONTROL):
            response = self.control.respond(request)
        elif request.path.startswith(METADATA):
            response = self._metadata(request)
        else:
            response = self._api(request)
        return response(environ, start_response)

    def _api(self, request: Request) -> Response:
        budget = self.limiter.peek(None)
        routed = False
        try:
            route, path_args = self._route(request)
            routed = True
            fault = self.calls.record(
                route.operation,
                write=request.method not in _READ_METHODS,
                caller=caller_from(request.headers),
            )
            if request.scheme != "https":
                raise BadRequest("The API is served over https only.")
            token = self._token(request)
            with self._lock:
                self._throttle()
                budget = self.limiter.spend(token)
            http.suffer(fault, error_for_status)
            reply = self._serve(request, route, path_args)
        except RateLimitExceeded as error:
            budget = error.budget
            reply = Reply(error.status, error.body())
        except ApiError as error:
            reply = Reply(error.status, error.body())
        response = _render(reply, budget)
        if self.settings.validate_responses and routed:  # others are in no document
            response = self._checked(request, response)
        return response

    def _throttle(self) -> None:
        """Answer 429 while the settings' ``throttled_until`` is ahead: no budget left until
        then (the request is not counted against the budget)."""
        until = self.settings.throttled_until
        if self.limiter.clock.now() < until:
            limit = self.limiter.per_hour
            raise RateLimitExceeded(Budget(limit=limit, remaining=0, reset=math.ceil(until)))

    def _route(self, request: Request) -> tuple[Route, dict[str, str]]:
        route, args = http.match(self._urls, request, NotFound)
        assert isinstance(route, Route)
        return route, args

    def _token(self, request: Request) -> str:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        expected = self.settings.token
        if scheme.lower() != "bearer" or not token or (expected and token != expected):
            raise Unauthorized()
        return token

    def _serve(self, request: Request, route: Route, path_args: dict[str, str]) -> Reply:
        openapi.check_request(self.validators, request)
        body = http.json_body(request, BadRequest)
        base_url = request.host_url.rstrip("/")
        call = Call(
            backend=self.backend,
            path=path_args,
            query={key: request.args[key] for key in request.args},
            body=body if body is not None else {},
            base_url=base_url,
            url=base_url + request.path,
        )
        with self._lock:
            self.backend.tick()
            return route.handler(call)

    def _checked(self, request: Request, response: Response) -> Response:
        mismatch = openapi.response_mismatch(self.validators, request, response)
        if mismatch is None:
            return response
        log.error("answer does not match the OpenAPI document: %s", mismatch)
        self.control.record_mismatch(mismatch)
        error = ServerError(
            f"the emulator's answer ({response.status_code}) does not match DigitalOcean's "
            f"OpenAPI document: {mismatch['problem']}"
        )
        return _render(Reply(error.status, error.body()), self.limiter.peek(None))

    def _metadata(self, request: Request) -> Response:
        if request.path[len(METADATA) :].strip("/") == "region":
            return Response(METADATA_REGION, content_type="text/plain")
        return Response("not found", status=404, content_type="text/plain")


def _render(reply: Reply, budget: Budget) -> Response:
    headers = {**budget.headers(), **reply.headers}
    if reply.body is None:
        return Response(status=reply.status, headers=headers)
    return Response(
        json.dumps(reply.body), status=reply.status, headers=headers, content_type=JSON_TYPE
    )
