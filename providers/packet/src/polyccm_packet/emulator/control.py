"""A tiny client of the emulator's control endpoints (``/_polyccm/...``), mirroring the AWS
emulator's :class:`polyccm_aws.emulator.EmulatorControl`."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from polyccm_packet.emulator.faults import Fault

CONTROL = "/_polyccm/"


class EmulatorControl:
    """Talks to the emulator at ``endpoint`` (``http://127.0.0.1:PORT``; a ``METAL_API_URL``
    with its ``/metal/v1`` path works too)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint.rstrip("/").removesuffix("/metal/v1")

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

    def inject(
        self,
        operation: str,
        *,
        count: int = 1,
        status: int | None = 503,
        latency: float = 0.0,
        message: str | None = None,
    ) -> None:
        """Make the next ``count`` calls of ``operation`` (an ``operationId``, or ``*``) wait
        ``latency`` seconds and, unless ``status`` is ``None``, fail with it (429: with the
        rate-limit headers)."""
        fault = Fault(operation, count=count, status=status, latency=latency, message=message)
        self._request("POST", "faults", asdict(fault))

    def faults(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request("GET", "faults")
        return result

    def clear_faults(self) -> None:
        self._request("DELETE", "faults")

    def calls(self) -> Mapping[str, int]:
        """Calls per ``operationId`` (and ``metadata`` for the metadata service) since the
        last reset."""
        result: Mapping[str, int] = self._request("GET", "calls")
        return result

    def reset_calls(self) -> None:
        self._request("DELETE", "calls")

    def settings(self) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", "settings")
        return result

    def configure(self, **changes: Any) -> dict[str, Any]:
        """Change settings (``device_active_delay=0.5``, ``metadata_device="node-1"``, ...)."""
        result: dict[str, Any] = self._request("PUT", "settings", changes)
        return result

    def mismatches(self) -> list[dict[str, str]]:
        """Answers that did not match the OpenAPI document (with ``validate_responses``)."""
        result: list[dict[str, str]] = self._request("GET", "validation")
        return result

    def reset(self) -> None:
        """Forget every device, reservation, BGP setting, call count, fault and mismatch (the
        project and the settings stay)."""
        self._request("POST", "reset")
