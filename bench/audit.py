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
#: Megabytes of audit log before the API server rotates it: more than any run writes.
NEVER_ROTATE_MB = 1_000_000


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
        # 0 is not "never": the API server's log writer then rotates at 100 MB, which a full
        # run passes, and a run spanning the rotation would count nothing.
        f"--audit-log-maxsize={NEVER_ROTATE_MB}",
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
        stat = path.stat() if path.exists() else None
        self.offset = stat.st_size if stat else 0
        self.inode = stat.st_ino if stat else None

    @property
    def rotated(self) -> bool:
        """Whether the file at the path is no longer the one opened (the log was rotated):
        the requests made since are then not all there to count."""
        if self.inode is None or not self.path.exists():
            return False
        return self.path.stat().st_ino != self.inode

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
