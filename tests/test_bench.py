"""The benchmark harness cannot rot: ``python -m bench --quick`` for AWS without the Go peers,
on its own control plane and emulator, produces sane figures (every node initialised, every
Service served and deleted, polyccm's call metric equal to the emulator's count, memory and
requests measured) and writes its table and chart. polyccm runs in-cluster, as its Deployment
runs it (deploy/kustomize/base), its ServiceAccount mounted in a mount namespace of its own:
the host's ``/var/run/secrets`` is left as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(420)
def test_quick_benchmark_measures_polyccm_and_the_bound(tmp_path: Path) -> None:
    host_before = _host_secrets()
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--providers", "aws", "--no-peers",
         "--quiet", "5", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    assert "nodes initialised" in completed.stdout, "progress is printed while it runs"

    sys.path.insert(0, str(ROOT))
    try:
        from bench.report import load
    finally:
        sys.path.remove(str(ROOT))
    result = load(tmp_path / "aws.json")
    (scale,) = result.scales
    assert (scale.scale.nodes, scale.scale.services) == (100, 10)
    (polyccm,) = scale.runs
    assert polyccm.key == "polyccm"
    assert polyccm.ready_seconds is not None and polyccm.ready_seconds > 0
    for name in ("nodes", "services", "churn", "delete"):
        assert polyccm.phases[name].seconds is not None, f"{name} finished"
        assert scale.bound is not None
    assert sum(polyccm.phases["services"].calls.values()) > 0, "load balancers cost calls"
    assert polyccm.metric_calls, "polyccm's metric was scraped"
    assert polyccm.mismatches == [], "polyccm_cloud_api_calls_total agrees with the emulator"
    assert polyccm.requests > polyccm.writes > 200, "two writes per node at least (audit log)"
    assert polyccm.peak_rss_mib is not None and 30 < polyccm.peak_rss_mib < 2048
    # As the pod: no --kubeconfig, the ServiceAccount's token at its mount point (seen in the
    # process's own mount namespace), and the audit log above counted its requests as its
    # ServiceAccount's (bench-polyccm).
    assert polyccm.connection == "in-cluster"
    assert any(s.startswith("polyccm in-cluster as its Deployment runs it")
               for s in result.settings), result.settings  # fmt: skip
    assert _host_secrets() == host_before, "the host's /var/run/secrets is untouched"
    bound = scale.bound
    assert bound is not None
    assert all(bound.phases[n].seconds is not None for n in ("nodes", "services", "delete"))

    table = (tmp_path / "aws.md").read_text()
    assert "| 100 tainted nodes initialised |" in table
    assert "agree" in table and "MISMATCH" not in table
    assert (tmp_path / "aws.png").read_bytes().startswith(b"\x89PNG")


def _host_secrets() -> object:
    sys.path.insert(0, str(ROOT))
    try:
        from bench.incluster import host_state
    finally:
        sys.path.remove(str(ROOT))
    return host_state()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_polyccm_loads_a_service_account_mounted_for_it_alone(tmp_path: Path, host: str) -> None:
    """The benchmark's in-cluster mount: polyccm's own loader (``load_in_cluster``) finds the
    token and CA at /var/run/secrets/kubernetes.io/serviceaccount and the loopback API server
    (IPv4 or IPv6) in KUBERNETES_SERVICE_HOST/PORT; nothing is mounted or made on the host."""
    sys.path.insert(0, str(ROOT))
    try:
        from bench import incluster
    finally:
        sys.path.remove(str(ROOT))
    if incluster.available():
        pytest.skip(f"no private mount namespace here: {incluster.available()}")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    account = incluster.write_account(tmp_path, "bench-polyccm", "a-token", ca)
    before = incluster.host_state()
    program = (
        "from polyccm.kube.config import load_in_cluster\n"
        "c = load_in_cluster()\n"
        "print(c.host, c.authorization(), c.ssl_ca_cert, sep='|')\n"
    )
    argv = incluster.wrap([sys.executable, "-c", program], account, tmp_path / "scratch")
    env = {**incluster.service_env(f"https://[{host}]:6443" if ":" in host else
                                   f"https://{host}:6443")}  # fmt: skip
    completed = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True,
                               timeout=60)  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    shown = f"[{host}]" if ":" in host else host
    assert completed.stdout.strip().split("|") == [
        f"https://{shown}:6443",
        "Bearer a-token",
        "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
    ]
    assert incluster.host_state() == before


@pytest.mark.timeout(420)
def test_each_providers_polyccm_serves_nodes_and_a_load_balancer_run_as_its_image_runs_it(
    tmp_path: Path,
) -> None:
    """polyccm of every provider, as a process optimised as its image runs it
    (``PYTHONOPTIMIZE=2``: no docstrings, no asserts, deploy/images/Dockerfile), initialises
    nodes and serves, then releases, a LoadBalancer Service: the benchmark's scenario at its
    smallest (5 nodes, 1 Service), without peers."""
    providers = ["aws", "gce", "digitalocean", "packet"]
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--providers", ",".join(providers),
         "--scales", "5/1", "--no-peers", "--quiet", "1", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]

    sys.path.insert(0, str(ROOT))
    try:
        from bench.report import load
    finally:
        sys.path.remove(str(ROOT))
    for provider in providers:
        result = load(tmp_path / f"{provider}.json")
        assert any(s.startswith("polyccm as its image runs it: PYTHONOPTIMIZE=2,")
                   for s in result.settings), result.settings  # fmt: skip
        (scale,) = result.scales
        (polyccm,) = scale.runs
        for name in ("start", "nodes", "services", "delete"):
            assert polyccm.phases[name].seconds is not None, f"{provider}: {name} finished"
        assert sum(polyccm.phases["services"].calls.values()) > 0, provider
        assert polyccm.mismatches == [], provider
