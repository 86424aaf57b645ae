"""The DigitalOcean provider end to end: ``polyccm --provider digitalocean`` as a user runs it
(the real CLI, the environment upstream's CCM reads, ``--v=10``), the real kube-apiserver and
the DigitalOcean emulator over TLS. What a user sees is asserted: nodes initialised from their
droplets, a load balancer served with its id annotation written once and no second ensure
because of it, nothing left after deletion, and the token nowhere in the log or the events."""

from __future__ import annotations

import time
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
