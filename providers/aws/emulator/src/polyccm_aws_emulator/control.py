"""The emulator's control endpoints under :data:`CONTROL` (health, faults, call counts, reset;
answered by :class:`~polyccm_aws_emulator.app.FaultInjector`) and :class:`EmulatorControl`,
their client."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from polyccm_aws_emulator.faults import Fault

#: Where the control endpoints are served.
CONTROL = "/_polyccm/"


class EmulatorControl:
    """A client of the emulator's control endpoints (``endpoint`` is ``http://127.0.0.1:PORT``)."""

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

    def inject(
        self,
        action: str,
        *,
        count: int = 1,
        code: str = "RequestLimitExceeded",
        status: int | None = None,
        service: str | None = None,
        after: int = 0,
        writes_only: bool = False,
    ) -> None:
        """Make the next ``count`` calls of ``action`` fail with ``code`` (after letting
        ``after`` through; ``writes_only``: no ``Describe*``/``Get*``/``List*`` matches)."""
        fault = Fault(
            action=action,
            count=count,
            code=code,
            status=status,
            service=service,
            after=after,
            writes_only=writes_only,
        )
        self._request("POST", "faults", asdict(fault))

    def clear_faults(self) -> None:
        self._request("DELETE", "faults")

    def calls(self, *, by_service: bool = False) -> Mapping[str, int]:
        """Calls per action since the last reset."""
        result: Mapping[str, int] = self._request(
            "GET", "calls?by=service" if by_service else "calls"
        )
        return result

    def calls_by_agent(self) -> dict[str, Counter[str]]:
        """Calls per action since the last reset, per caller: the application id its
        User-Agent carries (``AWS_SDK_UA_APP_ID``), ``-`` for callers without one."""
        answer: Mapping[str, int] = self._request("GET", "calls?by=agent")
        result: dict[str, Counter[str]] = {}
        for key, count in answer.items():
            agent, action = key.rsplit(":", 1)
            result.setdefault(agent, Counter())[action] += count
        return result

    def calls_by_caller(self) -> list[tuple[float, str, str]]:
        """Each call since the last reset whose User-Agent named its ``polyccm`` process:
        ``(unix time, the process's leader-election identity, service:action)``."""
        answer: list[list[Any]] = self._request("GET", "calls?by=caller")
        return [(float(when), str(caller), str(action)) for when, caller, action in answer]

    def reset_calls(self) -> None:
        self._request("DELETE", "calls")

    def reset(self) -> None:
        """Forget every fault, counter and cloud resource."""
        self._request("POST", "reset")
