"""A tiny client of the emulator's control API (``/_polyccm/...``), standard library only."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from typing import Any

CONTROL = "/_polyccm/"


class EmulatorControl:
    """Faults, rate limits, call counts, settings and reset of one emulator
    (``endpoint`` is ``http://127.0.0.1:PORT``)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint.rstrip("/")

    def _request(self, method: str, name: str, payload: object | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            f"{self.endpoint}{CONTROL}{name}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def healthy(self) -> bool:
        return bool(self._request("GET", "health").get("ok"))

    def inject(
        self,
        method: str,
        *,
        count: int = 1,
        status: int | None = 503,
        reason: str = "backendError",
        message: str = "",
        latency: float = 0.0,
        operation_error: str | None = None,
        operation_status: int = 400,
        after: int = 0,
        writes_only: bool = False,
    ) -> None:
        """Make the next ``count`` calls of ``method`` (a discovery id such as
        ``compute.routes.insert``, or ``*``; ``count`` 0 means every call) wait ``latency``
        seconds, then fail with ``status``/``reason`` (``status=None``: answer normally), or
        succeed with an operation that ends in ``operation_error``; ``after`` lets that many
        matching calls through first, ``writes_only`` matches no GET."""
        if operation_error is not None:
            status = None
        self._request(
            "POST",
            "faults",
            {
                "method": method,
                "count": count,
                "status": status,
                "reason": reason,
                "message": message,
                "latency": latency,
                "operation_error": operation_error,
                "operation_status": operation_status,
                "after": after,
                "writes_only": writes_only,
            },
        )

    def slow_down(self, method: str, seconds: float, *, count: int = 1) -> None:
        """Answer the next ``count`` calls of ``method`` after ``seconds``."""
        self.inject(method, count=count, status=None, latency=seconds)

    def faults(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request("GET", "faults")
        return result

    def clear_faults(self) -> None:
        self._request("DELETE", "faults")

    def rate_limit(self, method: str, per_second: float, *, burst: int = 1) -> None:
        """At most ``per_second`` calls of ``method`` per project (after ``burst``); more
        answer 403 ``rateLimitExceeded``."""
        self._request(
            "POST", "rate-limits", {"method": method, "per_second": per_second, "burst": burst}
        )

    def clear_rate_limits(self) -> None:
        self._request("DELETE", "rate-limits")

    def calls(self, project: str | None = None) -> Mapping[str, int]:
        """API calls per method id since the last reset (of one project, or all)."""
        result: Mapping[str, int] = self._request(
            "GET", f"calls?project={project}" if project else "calls"
        )
        return result

    def calls_by_caller(self) -> list[tuple[float, str, str]]:
        """Each call since the last reset whose User-Agent (or ``x-goog-api-client``) named
        its process: ``(unix time, the process's leader-election identity, method id)``."""
        answer: list[list[Any]] = self._request("GET", "calls?by=caller")
        return [(float(when), str(caller), str(method)) for when, caller, method in answer]

    def reset_calls(self) -> None:
        self._request("DELETE", "calls")

    def settings(self) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", "settings")
        return result

    def configure(self, **changes: Any) -> dict[str, Any]:
        """Change settings (see :class:`~polyccm_gce_emulator.settings.EmulatorSettings`),
        e.g. ``configure(pending_seconds=0, route_running_seconds=0.1)``."""
        result: dict[str, Any] = self._request("PUT", "settings", changes)
        return result

    def methods(self) -> list[dict[str, str]]:
        """The API methods served: ``{"id", "httpMethod", "path"}``."""
        result: list[dict[str, str]] = self._request("GET", "methods")
        return result

    def open_zone(self, zone: str) -> None:
        """Google opens ``zone`` (``us-central1-z``) in its existing region, in every project:
        ``zones.list`` lists it from now on."""
        self._request("POST", "zones", {"zone": zone})

    def reset(self) -> None:
        """Forget every project, fault, rate limit and counter; restore the launch settings."""
        self._request("POST", "reset")
