"""Counting each client's kube-apiserver requests from the API server's own audit log.

The policy records, at the Metadata level, only the requests of the benchmark's identities
(:func:`bench.cluster.username`), once each (the RequestReceived stage is left out); every
other user, the harness's admin included, is not logged. :class:`AuditLog` reads what was
appended since it was opened and counts one user's requests, and among them the writes, in each
time window.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def policy(users: Iterable[str]) -> str:
    """An audit policy (YAML) that logs ``users``' requests and nobody else's."""
    document = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": sorted(users)}, {"level": "None"}],
    }
    return yaml.safe_dump(document)


def apiserver_args(directory: Path, users: Iterable[str]) -> tuple[list[str], Path]:
    """kube-apiserver flags that write the audit log of ``users`` in ``directory``, and the
    log's path."""
    directory.mkdir(parents=True, exist_ok=True)
    policy_file = directory / "audit-policy.yaml"
    policy_file.write_text(policy(users))
    log = directory / "audit.log"
    return [
        f"--audit-policy-file={policy_file}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",
    ], log


@dataclass(frozen=True)
class Requests:
    """One user's requests in a window: all of them, the writes, and the writes by kind
    (``patch nodes/status``)."""

    total: int = 0
    writes: int = 0
    kinds: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Window:
    """A named span of wall-clock time (seconds since the epoch)."""

    name: str
    start: float
    end: float


class AuditLog:
    """The audit log from the size it had when this was made."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def count(self, user: str, windows: Sequence[Window]) -> dict[str, Requests]:
        """``user``'s requests in each window (by the time each was received); one request in
        none of the windows counts in ``"other"``."""
        seen: set[str] = set()
        names = [w.name for w in windows] + ["other"]
        totals: dict[str, Counter[str]] = {name: Counter() for name in names}
        kinds: dict[str, Counter[str]] = {name: Counter() for name in names}
        for event in self._events():
            user_info = event.get("user") or {}
            if user_info.get("username") != user:
                continue
            audit_id = str(event.get("auditID"))
            if audit_id in seen:
                continue
            seen.add(audit_id)
            when = _seconds(str(event.get("requestReceivedTimestamp", "")))
            name = next((w.name for w in windows if w.start <= when < w.end), "other")
            totals[name]["total"] += 1
            if event.get("verb") in WRITE_VERBS:
                totals[name]["writes"] += 1
                kinds[name][_kind(event)] += 1
        return {
            name: Requests(totals[name]["total"], totals[name]["writes"], dict(kinds[name]))
            for name in names
        }

    def _events(self) -> Iterable[Mapping[str, Any]]:
        if not self.path.exists():
            return
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            for line in handle:
                if not line.strip():
                    continue
                try:
                    yield json.loads(line)
                except ValueError:
                    continue


def _kind(event: Mapping[str, Any]) -> str:
    """``verb resource[/subresource]`` of an audit event."""
    target = event.get("objectRef") or {}
    resource = str(target.get("resource", "?"))
    if target.get("subresource"):
        resource += f"/{target['subresource']}"
    return f"{event.get('verb')} {resource}"


def _seconds(timestamp: str) -> float:
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
