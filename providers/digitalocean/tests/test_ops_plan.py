"""``polyccm plan --provider digitalocean`` against the real kube-apiserver and the emulator:
load balancers upstream's CCM made (its ``a<uid>`` names, its request, its id annotation or
not) are adopted as they are, and what ensure would change is listed change by change, with
no write to DigitalOcean (the emulator's call records) nor to the cluster (a read-only
ServiceAccount)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from polyccm.cloud import default_load_balancer_name
from polyccm.controllers import nodeinfo
from polyccm.kube.api import NODES, SERVICES, KubeApi
from polyccm.objects import LOAD_BALANCER_FINALIZER, Node, Service
from polyccm_digitalocean import annotations as ann
from polyccm_digitalocean import provider as do_provider
from polyccm_digitalocean.config import DigitalOceanConfig
from polyccm_digitalocean_emulator.testing import (
    TEST_REGION,
    DigitalOceanApi,
    control,
    provider_for,
    upstream_load_balancer,
)
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.kubeobjects import make_node, make_service
from polyccm_testing.opstools import (
    CommandResult,
    plans_by_service,
    read_only_kubeconfig,
    run_command,
)

READS = ("_get", "_list")


@pytest.fixture
def cloud(do: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> DigitalOceanApi:
    """The emulator, reached by ``polyccm`` through the environment upstream's CCM reads."""
    monkeypatch.setenv("REGION", TEST_REGION)
    return DigitalOceanApi(do)


def writes(do: Mapping[str, str]) -> dict[str, int]:
    """Calls so far of every operation that is not a read."""
    return {op: n for op, n in control(do).calls().items() if not op.endswith(READS)}


def plan(kubeconfig: Path) -> CommandResult:
    result = run_command("plan", "digitalocean", kubeconfig, "-o", "json")
    assert result.stdout, result
    return result


def cluster_nodes(do: Mapping[str, str], kube_api: KubeApi, count: int) -> list[Node]:
    """``count`` droplets, registered as nodes that cloud-node already initialised."""
    provider = provider_for(do)
    nodes = []
    for droplet in DigitalOceanApi(do).create_droplets(count, prefix="plan"):
        bare = Node({"metadata": {"name": droplet["name"]}, "spec": {}})
        metadata = provider.instances_v2().instance_metadata(bare)
        provider_id, addresses = nodeinfo.initial_fields(bare, metadata)
        make_node(kube_api, droplet["name"], tainted=False, provider_id=provider_id,
                  addresses=tuple((a.type, a.address) for a in addresses or ()))  # fmt: skip
        nodes.append(Node(kube_api.get(NODES, droplet["name"])))
    return nodes


def droplet_ids(nodes: list[Node]) -> list[int]:
    return [int(node.provider_id.rsplit("/", 1)[1]) for node in nodes]


def upstream_service(
    kube_api: KubeApi, namespace: str, name: str, annotations: Mapping[str, str] | None = None
) -> Service:
    """A LoadBalancer Service as the service controller leaves it (its finalizer on)."""

    def tweak(body: dict[str, Any]) -> None:
        body["metadata"]["annotations"].update(annotations or {})
        body["metadata"]["finalizers"] = [LOAD_BALANCER_FINALIZER]

    return Service(make_service(kube_api, namespace, name, tweak))


def node_ports(service: Service) -> dict[int, int]:
    return {port.port: port.node_port for port in service.ports}


def annotate(kube_api: KubeApi, service: Service, annotations: Mapping[str, str]) -> None:
    patch = {"metadata": {"annotations": dict(annotations)}}
    kube_api.patch(SERVICES, service.name, patch, service.namespace)


@pytest.mark.usefixtures("clean_nodes")
def test_load_balancers_upstream_made_are_adopted_and_nothing_is_written(
    do: Mapping[str, str],
    cloud: DigitalOceanApi,
    kube_api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> None:
    nodes = cluster_nodes(do, kube_api, 2)
    backends = droplet_ids(nodes)
    # Upstream wrote the id annotation on "web"; "api" predates it (found by name, as upstream
    # finds it); "site" asks for http with the PROXY protocol.
    web = upstream_service(kube_api, namespace, "web")
    made = upstream_load_balancer(cloud, default_load_balancer_name(web), backends,
                                  node_ports(web))  # fmt: skip
    annotate(kube_api, web, {ann.LOAD_BALANCER_ID: made["id"]})
    api = upstream_service(kube_api, namespace, "api")
    upstream_load_balancer(cloud, default_load_balancer_name(api), backends, node_ports(api))
    site = upstream_service(kube_api, namespace, "site",
                            {ann.PROTOCOL: "http", ann.PROXY_PROTOCOL: "true"})  # fmt: skip
    upstream_load_balancer(cloud, default_load_balancer_name(site), backends, node_ports(site),
                           protocol="http", enable_proxy_protocol=True)  # fmt: skip
    read_only = read_only_kubeconfig(kube_api, control_plane, namespace, tmp_path)
    before = writes(do)

    result = plan(read_only)

    assert result.status == 0, result
    assert {
        name: (p["action"], p["differences"]) for name, p in plans_by_service(result).items()
    } == {name: ("adopt", []) for name in ("web", "api", "site")}
    assert json.loads(result.stdout)["nodes"] == []
    assert writes(do) == before
    assert len(cloud.ok("GET", "/v2/load_balancers")["load_balancers"]) == 3


@pytest.mark.usefixtures("clean_nodes")
def test_what_ensure_would_change_is_listed_and_not_done(
    do: Mapping[str, str],
    cloud: DigitalOceanApi,
    kube_api: KubeApi,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    nodes = cluster_nodes(do, kube_api, 2)
    first, second = droplet_ids(nodes)
    # "grown": upstream pointed it at the first node only, and it checks health on a port.
    grown = upstream_service(kube_api, namespace, "grown")
    upstream_load_balancer(cloud, default_load_balancer_name(grown), [first], node_ports(grown),
                           health_check={"protocol": "tcp", "port": 30999})  # fmt: skip
    # "renamed": its id annotation finds it, and the name annotation renames it in place.
    renamed = upstream_service(kube_api, namespace, "renamed")
    made = upstream_load_balancer(cloud, default_load_balancer_name(renamed), [first, second],
                                  node_ports(renamed))  # fmt: skip
    annotate(kube_api, renamed, {ann.LOAD_BALANCER_ID: made["id"], ann.NAME: "shop"})
    make_service(kube_api, namespace, "fresh")
    make_service(kube_api, namespace, "refused", lambda s: s["metadata"]["annotations"].update(
        {ann.TYPE: "REGIONAL", ann.TLS_PORTS: "80"}))  # fmt: skip
    make_service(kube_api, namespace, "typo", lambda s: s["metadata"]["annotations"].update(
        {ann.PREFIX + "sizeslug": "lb-small"}))  # fmt: skip
    before = writes(do)

    result = plan(control_plane.kubeconfig)

    assert result.status == 1, result
    plans = plans_by_service(result)
    assert {name: p["action"] for name, p in plans.items()} == {
        "grown": "update", "renamed": "update", "fresh": "create", "refused": "fail",
        "typo": "create",
    }  # fmt: skip
    # DigitalOcean's defaults: path "/", figures 10/5/5/3; upstream's 3/5/3/5 and proxy_protocol
    # false are always sent (buildHealthCheck, loadbalancers.go:997-1049@v0.1.68).
    assert plans["grown"]["differences"] == [
        {"aspect": "health-check", "detail": "protocol 'tcp' -> 'http', port 30999 -> 10256, "
                                             "path '/' -> '/healthz', proxy_protocol None -> "
                                             "False, check_interval_seconds 10 -> 3, "
                                             "unhealthy_threshold 5 -> 3, healthy_threshold 3 -> "
                                             "5"},
        {"aspect": "backends", "detail": f"add droplet {second}"},
    ]  # fmt: skip
    assert plans["renamed"]["differences"] == [
        {"aspect": "attributes", "detail": f"name '{made['name']}' -> 'shop'"}
    ]
    assert plans["renamed"]["loadBalancer"] == "shop"
    fresh = plans["fresh"]["differences"]
    (port,) = Service(kube_api.get(SERVICES, "fresh", namespace)).ports
    # REGIONAL_NETWORK by default: to the service port, not the nodePort.
    assert {"aspect": "listeners", "detail": f"add tcp:80 -> tcp:{port.port}"} in fresh
    assert {"aspect": "backends", "detail": f"droplets {first}, {second}"} in fresh
    (refusal,) = plans["refused"]["problems"]
    assert refusal["severity"] == "error" and ann.TLS_PORTS in refusal["message"]
    (warning,) = plans["typo"]["problems"]
    assert warning["severity"] == "warning" and "sizeslug" in warning["message"]
    assert writes(do) == before


# Every operation the provider sends, and whether it only reads.
OPERATIONS = {
    "regions.list": True,
    "droplets.get": True,
    "droplets.list": True,
    "certificates.list": True,
    "load_balancers.get": True,
    "load_balancers.list": True,
    "load_balancers.create": False,
    "load_balancers.update": False,
    "load_balancers.delete": False,
    "load_balancers.add_droplets": False,
    "load_balancers.remove_droplets": False,
    "firewalls.get": True,
    "firewalls.list": True,
    "firewalls.create": False,
    "firewalls.update": False,
    "tags.create": False,
    "tags.assign_resources": False,
}


def test_the_read_only_guard_knows_every_operation_the_provider_sends() -> None:
    package = Path(do_provider.__file__).parent
    sent = {
        match
        for path in package.glob("*.py")
        for match in re.findall(r'"((?:[a-z]+_)*[a-z]+s\.[a-z_]+)"', path.read_text())
    }
    provider = do_provider.DigitalOceanProvider(DigitalOceanConfig(token="unused"), region="nyc3")

    assert sent == set(OPERATIONS)
    # The guard gets the operation as DigitalOceanApi.call passes it to cloudcalls.record.
    assert {op: provider.read_only_call(op) for op in OPERATIONS} == OPERATIONS
