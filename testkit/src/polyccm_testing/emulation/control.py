"""The emulators' control endpoints under ``/_polyccm/``: the server side
(:class:`ControlEndpoints`, mounted by an emulator's WSGI app) and its client
(:class:`EmulatorControl`, mirroring the AWS emulator's ``polyccm_aws_emulator.EmulatorControl``).

Endpoints (no token):

* ``GET /_polyccm/health``;
* ``GET /_polyccm/calls`` (calls per ``operationId`` since the last reset; ``?by=caller``: each
  call whose User-Agent named its process, as ``[unix time, caller, operationId]``,
  :mod:`polyccm_testing.emulation.callers`), ``DELETE`` resets;
* ``POST /_polyccm/faults`` with a :class:`~polyccm_testing.emulation.faults.Fault` as JSON,
  ``GET`` lists pending faults, ``DELETE`` clears them;
* ``GET``/``PUT /_polyccm/settings`` (``PUT`` takes the fields to change);
* ``POST /_polyccm/reset``: the emulator forgets its resources, call counts and faults;
* ``GET /_polyccm/validation``: the answers that did not match the document (with
  ``validate_responses``), ``DELETE`` forgets them.

A body that is not what the endpoint takes is a 400 ``{"error": ...}``, an unknown endpoint a 404.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any, ClassVar, Protocol

from werkzeug.wrappers import Request, Response

from polyccm_testing.emulation.faults import CallLog, Fault

CONTROL = "/_polyccm/"


class Settings(Protocol):
    """An emulator's settings, as the control endpoints show them."""

    def as_dict(self) -> dict[str, Any]: ...


class ControlEndpoints:
    """Answers the control endpoints of one emulator, from its call log, its list of
    mismatches (guarded by ``lock``) and callables for its settings (the current ones, and
    changing them), reset and health."""

    def __init__(
        self,
        *,
        calls: CallLog,
        mismatches: list[dict[str, str]],
        lock: threading.RLock,
        settings: Callable[[], Settings],
        configure: Callable[[dict[str, Any]], Settings],
        reset: Callable[[], None],
        health: Callable[[], dict[str, Any]] = lambda: {"ok": True},
    ) -> None:
        self.calls = calls
        self.mismatches = mismatches
        self.lock = lock
        self.settings = settings
        self.configure = configure
        self.reset = reset
        self.health = health

    def forget(self) -> None:
        """Forget call counts, pending faults and recorded mismatches (part of a reset)."""
        self.calls.clear_calls()
        self.calls.clear_faults()
        with self.lock:
            self.mismatches.clear()

    def record_mismatch(self, mismatch: dict[str, str]) -> None:
        """Keep an answer that did not match the document, for ``GET /_polyccm/validation``."""
        with self.lock:
            self.mismatches.append(mismatch)

    def respond(self, request: Request) -> Response:
        name = request.path[len(CONTROL) :].strip("/")
        try:
            answer = self._handle(request.method, name, request)
        except (ValueError, TypeError, KeyError) as error:
            return json_response(400, {"error": str(error)})
        if answer is None:
            return json_response(404, {"error": f"no {request.method} {request.path}"})
        return json_response(200, answer)

    def _handle(self, method: str, name: str, request: Request) -> object | None:
        payload = request.get_json(silent=True) if request.get_data() else None
        if name == "health":
            return self.health()
        if name == "calls":
            if method == "GET" and request.args.get("by") == "caller":
                return self.calls.callers.calls()
            if method == "GET":
                return self.calls.calls()
            if method == "DELETE":
                self.calls.clear_calls()
                return {}
        if name == "faults":
            if method == "POST":
                if not isinstance(payload, dict):
                    raise ValueError("a fault is a JSON object")
                return self.calls.add_fault(payload)
            if method == "GET":
                return self.calls.faults()
            if method == "DELETE":
                self.calls.clear_faults()
                return []
        if name == "settings":
            if method == "GET":
                return self.settings().as_dict()
            if method == "PUT":
                if not isinstance(payload, dict):
                    raise ValueError("settings are a JSON object")
                return self.configure(payload).as_dict()
        if name == "reset" and method == "POST":
            self.reset()
            return {}
        if name == "validation":
            with self.lock:
                if method == "GET":
                    return list(self.mismatches)
                if method == "DELETE":
                    self.mismatches.clear()
                    return []
        return None


def json_response(status: int, payload: object) -> Response:
    return Response(json.dumps(payload), status=status, content_type="application/json")


class EmulatorControl:
    """Talks to the control endpoints of the emulator at ``endpoint`` (``http://`` or, with
    ``context``, ``https://``)."""

    #: The fault model of the cloud (a subclass refusing statuses the cloud never answers).
    fault_type: ClassVar[type[Fault]] = Fault

    def __init__(self, endpoint: str, *, context: ssl.SSLContext | None = None) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._context = context

    def _request(self, method: str, name: str, payload: object | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            f"{self.endpoint}{CONTROL}{name}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10, context=self._context) as response:
            return json.loads(response.read() or b"null")

    def inject(
        self,
        operation: str,
        *,
        count: int = 1,
        status: int | None = 503,
        latency: float = 0.0,
        message: str | None = None,
        after: int = 0,
        writes_only: bool = False,
    ) -> None:
        """Make the next ``count`` calls of ``operation`` (an ``operationId``, or ``*``) wait
        ``latency`` seconds and, unless ``status`` is ``None``, fail with it; ``after`` lets
        that many matching calls through first; ``writes_only`` matches no GET or HEAD."""
        fault = self.fault_type(
            operation,
            count=count,
            status=status,
            latency=latency,
            message=message,
            after=after,
            writes_only=writes_only,
        )
        self._request("POST", "faults", asdict(fault))

    def faults(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request("GET", "faults")
        return result

    def clear_faults(self) -> None:
        self._request("DELETE", "faults")

    def calls(self) -> Mapping[str, int]:
        """Calls per ``operationId`` since the last reset."""
        result: Mapping[str, int] = self._request("GET", "calls")
        return result

    def calls_by_caller(self) -> list[tuple[float, str, str]]:
        """Each call since the last reset whose User-Agent named its process: ``(unix time,
        the process's leader-election identity, operationId)``, oldest first."""
        answer: list[list[Any]] = self._request("GET", "calls?by=caller")
        return [(float(when), str(caller), str(operation)) for when, caller, operation in answer]

    def reset_calls(self) -> None:
        self._request("DELETE", "calls")

    def settings(self) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", "settings")
        return result

    def configure(self, **changes: Any) -> dict[str, Any]:
        """Change settings (the emulator's settings fields, by name)."""
        result: dict[str, Any] = self._request("PUT", "settings", changes)
        return result

    def mismatches(self) -> list[dict[str, str]]:
        """Answers that did not match the OpenAPI document (with ``validate_responses``)."""
        result: list[dict[str, str]] = self._request("GET", "validation")
        return result

    def reset(self) -> None:
        """Make the emulator forget its resources, call counts, faults and mismatches."""
        self._request("POST", "reset")
