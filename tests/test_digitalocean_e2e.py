"""The DigitalOcean provider end to end: ``polyccm --provider digitalocean`` as a user runs it
(the real CLI, the environment upstream's CCM reads, ``--v=10``), the real kube-apiserver and
the DigitalOcean emulator over TLS. What a user sees is asserted: nodes initialised from their
droplets, a load balancer served with its id annotation written once and no second ensure
because of it, nothing left after deletion, and the token nowhere in the log or the events."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from polyccm.kube.api import NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_digitalocean.annotations import LOAD_BALANCER_ID
from polyccm_digitalocean_emulator.demo import running_ccm
from polyccm_digitalocean_emulator.testing import DigitalOceanApi, control, running_emulator
from polyccm_testing.demo import service_gone
from polyccm_testing.emulation.testing import free_port
from polyccm_testing.kubeobjects import (
    events_for,
    ingress_ip,
    make_node,
    make_service,
    stays,
    wait_for,
)


@pytest.fixture(scope="module")
def do_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, str]]:
    with running_emulator(tmp_path_factory.mktemp("do-e2e"), lb_active_delay=0.5) as env:
        yield env


@pytest.mark.timeout(180)
def test_polyccm_initialises_droplets_serves_a_load_balancer_and_cleans_up(
    control_plane: Any,
    kube_api: KubeApi,
    namespace: str,
    clean_nodes: None,
    do_emulator: Mapping[str, str],
    tmp_path: Path,
) -> None:
    control(do_emulator).reset()
    cloud = DigitalOceanApi(do_emulator)
    droplets = cloud.create_droplets(2, prefix=f"e2e-{namespace}")
    for droplet in droplets:
        make_node(kube_api, droplet["name"])
    env = {**do_emulator, "REGION": "nyc3"}

    with running_ccm(tmp_path, env, control_plane.kubeconfig, ["--v=10"]) as log:
        for droplet in droplets:
            wait_for(lambda d=droplet: not Node(kube_api.get(NODES, d["name"])).has_taint(
                UNINITIALIZED_TAINT), 30, f"node {droplet['name']} initialised")  # fmt: skip
            node = Node(kube_api.get(NODES, droplet["name"]))
            assert node.provider_id == f"digitalocean://{droplet['id']}"
            assert node.labels["node.kubernetes.io/instance-type"] == "s-1vcpu-1gb"
            assert node.labels["topology.kubernetes.io/region"] == "nyc3"

        make_service(kube_api, namespace, "web")
        wait_for(lambda: ingress_ip(kube_api, namespace, "web"), 60, "the load balancer's IP")
        (balancer,) = cloud.ok("GET", "/v2/load_balancers")["load_balancers"]
        annotations = kube_api.get(SERVICES, "web", namespace)["metadata"]["annotations"]
        assert annotations[LOAD_BALANCER_ID] == balancer["id"]
        assert sorted(balancer["droplet_ids"]) == sorted(d["id"] for d in droplets)
        writes = {
            k: v
            for k, v in control(do_emulator).calls().items()
            if k.startswith("loadBalancers_") and not k.endswith(("_get", "_list"))
        }
        # The annotation write is not a change: no second ensure, no second write.
        assert stays(lambda: sum(r == "EnsuredLoadBalancer" for _, r, _ in
                                 events_for(kube_api, namespace, "web")) == 1, 3.0)  # fmt: skip
        assert writes == {"loadBalancers_create": 1}

        kube_api.delete(SERVICES, "web", namespace)

        wait_for(lambda: service_gone(kube_api, namespace, "web"), 30, "the service finalised")
        assert cloud.ok("GET", "/v2/load_balancers")["load_balancers"] == []
        time.sleep(0.5)
        text = log.read_text()

    token = do_emulator["DO_ACCESS_TOKEN"]
    assert token not in text, "the token is in polyccm's log"
    assert all(token not in message for _, _, message in events_for(kube_api, namespace, "web"))


def _get(url: str) -> tuple[int, str]:
    """Status and body of a plain-HTTP GET (an error status is an answer, not a failure)."""
    try:
        with urllib.request.urlopen(url, timeout=20) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


@pytest.mark.timeout(120)
def test_metrics_addr_and_debug_addr_are_served_as_upstream_serves_them(
    control_plane: Any, do_emulator: Mapping[str, str], tmp_path: Path
) -> None:
    # Upstream's deployments set METRICS_ADDR (README "Expose Prometheus Metrics"); upstream
    # serves /metrics there over plain HTTP (cloud.go:153-160,235-248@v0.1.68) and, with
    # DEBUG_ADDR, /healthz answering whether the API answers Account.Get (cloud.go:143-151,
    # 216-233 and health.go:35-47@v0.1.68).
    control(do_emulator).reset()
    metrics_port, debug_port = free_port(), free_port()
    env = {**do_emulator, "REGION": "nyc3", "METRICS_ADDR": f"127.0.0.1:{metrics_port}",
           "DEBUG_ADDR": f"127.0.0.1:{debug_port}"}  # fmt: skip

    with running_ccm(tmp_path, env, control_plane.kubeconfig) as log:
        status, body = wait_for(
            lambda: (a := _get(f"http://127.0.0.1:{metrics_port}/metrics"))[0] and a,
            30, f"/metrics on METRICS_ADDR; log: {log}")  # fmt: skip
        assert status == 200
        # polyccm's own names: the start-up region check is counted there.
        assert (
            'polyccm_cloud_api_calls_total{operation="regions.list",provider="digitalocean"}'
            in body
        )

        assert _get(f"http://127.0.0.1:{debug_port}/healthz") == (200, "")
        control(do_emulator).inject("account_get", status=401)
        status, body = _get(f"http://127.0.0.1:{debug_port}/healthz")
        assert status == 500 and body.startswith("health check failed:"), body
        assert _get(f"http://127.0.0.1:{debug_port}/healthz")[0] == 200  # the API answers again
    assert do_emulator["DO_ACCESS_TOKEN"] not in log.read_text()


@pytest.mark.timeout(60)
def test_a_taken_metrics_addr_is_one_line_and_exit_2(
    control_plane: Any, do_emulator: Mapping[str, str]
) -> None:
    # Upstream only warns (cloud.go:246-248@v0.1.68) and runs without metrics; polyccm says so
    # at start-up, as for its own secure port.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, **do_emulator, "REGION": "nyc3", "METRICS_ADDR": f"127.0.0.1:{port}"}
        result = subprocess.run(
            [sys.executable, "-m", "polyccm.cli", "--provider=digitalocean",
             f"--kubeconfig={control_plane.kubeconfig}", "--leader-elect=false",
             "--secure-port=0", "--configure-cloud-routes=false"],
            env=env, capture_output=True, text=True, timeout=50,
        )  # fmt: skip

    lines = result.stderr.splitlines()
    assert (result.returncode, len(lines)) == (2, 1), result.stderr[-2000:]
    assert lines[0].startswith("polyccm: error: METRICS_ADDR: cannot serve on 127.0.0.1:")
    assert "Traceback" not in result.stderr
