"""The CCMs the benchmark runs, each with the same knobs: polyccm, each provider's upstream Go
CCM (its peer: cloud-provider-aws, cloud-provider-gcp, digitalocean-cloud-controller-manager,
cloud-provider-equinix-metal) and the framework floor (k8s.io/cloud-provider's controllers over
its fake cloud).

Every one runs without leader election, with ``--kube-api-qps``/``--kube-api-burst``,
``--concurrent-node-syncs`` and ``--concurrent-service-syncs`` from :class:`Knobs`, the same
node-monitor period, cloud routes off, its own ServiceAccount (polyccm in-cluster, as its
Deployment runs it, :mod:`bench.incluster`; the Go CCMs with a kubeconfig), and its secure port
on a free loopback port with the health and metrics paths open (so the harness reads them
without a token). polyccm's readiness is ``/readyz``; the Go CCMs serve only ``/healthz``.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench import incluster
from bench.clouds import BenchCloud
from bench.processes import CcmProcess, Health, free_port

#: Set to a directory, polyccm runs under :mod:`bench.heap` (tracemalloc, a heap timeline and
#: snapshots at each new high in that directory).
HEAP_VARIABLE = "POLYCCM_BENCH_HEAP"

ALWAYS_ALLOWED = "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"
_METRIC_LINE = re.compile(
    r"^polyccm_cloud_api_calls_total\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.eE+-]+)$", re.M
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
FAKE_KEY = "fake-go"
#: What polyccm's image runs it with (deploy/images/Dockerfile): optimised at level 2 (no
#: docstrings, no asserts), from the level-2 byte code :func:`bench.cli.compile_bytecode` makes.
IMAGE_ENV = {"PYTHONOPTIMIZE": "2"}


@dataclass(frozen=True)
class Knobs:
    """What every CCM is given alike."""

    kube_api_qps: float = 1000.0
    kube_api_burst: int = 100
    node_workers: int = 4
    service_workers: int = 4
    node_monitor_period: float = 5.0

    def common_flags(self) -> list[str]:
        return [
            "--leader-elect=false",
            f"--kube-api-qps={self.kube_api_qps:g}",
            f"--kube-api-burst={self.kube_api_burst}",
            f"--concurrent-node-syncs={self.node_workers}",
            f"--concurrent-service-syncs={self.service_workers}",
            f"--node-monitor-period={self.node_monitor_period:g}s",
            "--configure-cloud-routes=false",
            "--bind-address=127.0.0.1",
            ALWAYS_ALLOWED,
        ]


@dataclass(frozen=True)
class Ccm:
    """One kind of CCM: how it is named in the tables, whose identity it runs as, and whether
    it calls the emulator and exposes polyccm's call metric."""

    key: str
    label: str
    identity: str
    calls_cloud: bool = True
    has_call_metric: bool = False
    binary: Path | None = None

    def start(self, cloud: BenchCloud, kubeconfig: Path, knobs: Knobs, log: Path) -> CcmProcess:
        port = free_port()
        if self.key == "polyccm":
            heap = os.environ.get(HEAP_VARIABLE)
            launcher = ["bench.heap", heap, "--"] if heap else ["polyccm.cli"]
            argv = [
                sys.executable,
                "-m",
                *launcher,
                f"--provider={cloud.name}",
                f"--secure-port={port}",
                *knobs.common_flags(),
                *cloud.polyccm_args(),
            ]
            env = {**cloud.polyccm_env(), **IMAGE_ENV}
            if incluster.available():
                argv.insert(len(launcher) + 3, f"--kubeconfig={kubeconfig}")
            else:
                scratch = kubeconfig.parent / f"mount-namespace-{port}"
                argv = incluster.wrap(argv, incluster.account_of(kubeconfig), scratch)
                env.update(incluster.service_env(incluster.server_of(kubeconfig)))
            return CcmProcess(argv, env, log, Health(port, "/readyz"))
        assert self.binary is not None
        go_flags = [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            # The local API server has no extension-apiserver-authentication ConfigMap (no
            # client-certificate front proxy); without this the Go CCMs ask for it for ever.
            "--authentication-skip-lookup=true",
            f"--secure-port={port}",
            "--webhook-secure-port=0",
            "--use-service-account-credentials=false",
            "--allocate-node-cidrs=false",
            "--v=1",
            *knobs.common_flags(),
        ]
        if is_upstream(self.key):
            argv = [str(self.binary), *cloud.go_args(), *go_flags]
            return CcmProcess(argv, cloud.go_env(), log, Health(port, "/healthz"))
        argv = [str(self.binary), "--cloud-provider=fake", *go_flags]
        return CcmProcess(argv, {}, log, Health(port, "/healthz"))


POLYCCM = Ccm("polyccm", "polyccm", "bench-polyccm", has_call_metric=True)


#: Each provider's upstream Go CCM as the tables name it (the peers of
#: :mod:`polyccm_testing.peers.builds`).
UPSTREAM_LABELS = {
    "aws": "cloud-provider-aws v1.37.1",
    "gce": "cloud-provider-gcp v36.3.8",
    "digitalocean": "digitalocean-cloud-controller-manager v0.1.68",
    "packet": "cloud-provider-equinix-metal 38d15e2",
}


def upstream_key(provider: str) -> str:
    """The key of ``provider``'s upstream CCM in the results (``aws-go``, ``gce-go``...)."""
    return f"{provider}-go"


def is_upstream(key: str) -> bool:
    """Whether a run's key is an upstream CCM's (not polyccm, the bound or the floor)."""
    return key.endswith("-go") and key != FAKE_KEY


def upstream(provider: str, binary: Path) -> Ccm:
    """``provider``'s upstream Go CCM at ``binary``, run as ``bench-<provider>-ccm``."""
    return Ccm(upstream_key(provider), UPSTREAM_LABELS[provider], f"bench-{provider}-ccm",
               binary=binary)  # fmt: skip


def fake_go(binary: Path) -> Ccm:
    return Ccm(
        FAKE_KEY, "framework floor (fake cloud)", "bench-fake-ccm", calls_cloud=False,
        binary=binary,
    )  # fmt: skip


IDENTITIES = ("bench-polyccm", *(f"bench-{p}-ccm" for p in UPSTREAM_LABELS), "bench-fake-ccm",
              "bench-bound")  # fmt: skip


def metric_calls(text: str, provider: str) -> Counter[str]:
    """``polyccm_cloud_api_calls_total`` of ``provider`` by operation, from /metrics text."""
    counts: Counter[str] = Counter()
    for match in _METRIC_LINE.finditer(text):
        labels = dict(_LABEL.findall(match.group("labels")))
        if labels.get("provider") == provider:
            counts[labels.get("operation", "")] += round(float(match.group("value")))
    return counts
