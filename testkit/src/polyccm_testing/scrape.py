"""A running ``polyccm`` process's /metrics, scraped over its secure port as Prometheus
scrapes it, and read back as samples."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from polyccm_testing.devenv.processes import free_ports
from polyccm_testing.kubeobjects import wait_for
from polyccm_testing.secureport import secure_get

OPEN_PATHS = "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"
"""/metrics answered without a token, as the probes are (a scrape test needs no reviewer)."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def samples(text: str) -> list[Sample]:
    """Every sample of a /metrics answer."""
    return [
        Sample(s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def value(found: Sequence[Sample], name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples whose labels include ``labels``; ``None`` when none."""
    matching = [
        s.value
        for s in found
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(matching) if matching else None


@dataclass
class Running:
    """A polyccm process serving its secure port on ``port``."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def scrape(self) -> str:
        assert self.process.poll() is None, self.log.read_text()[-3000:]
        reply = secure_get(self.port, "/metrics")
        assert reply.status == 200, reply.body
        return reply.body


@contextmanager
def running_polyccm(command: Sequence[str], env: Mapping[str, str], log: Path) -> Iterator[Running]:
    """``command`` (``polyccm --provider=...`` and its flags) with a free secure port on
    127.0.0.1 whose /metrics needs no token; stopped with SIGTERM at the end."""
    (port,) = free_ports(1)
    args = [*command, "--bind-address=127.0.0.1", f"--secure-port={port}", OPEN_PATHS]
    with log.open("w") as output:
        process = subprocess.Popen(args, env=dict(env), stdout=output, stderr=subprocess.STDOUT)
        running = Running(process, port, log)
        try:
            wait_for(
                lambda: process.poll() is None and secure_get(port, "/healthz").status == 200,
                timeout=60,
                what=f"polyccm's /healthz (log: {log})",
            )
            yield running
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
