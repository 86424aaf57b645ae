"""kube-apiserver restarts (same etcd, same port, same certificates, as in an upgrade) in the middle
of a burst of 200 node registrations and 30 LoadBalancer services, with the AWS provider
against the emulator. Once it is back, every node is initialised, every service has its load
balancer, and the cloud holds exactly one load balancer per service with every node behind it.

The session's API server is the one restarted; it is ready again when the test ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import boto3
import pytest
from polyccm.kube.api import NODES, SERVICES, ApiError, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node, Service
from polyccm_aws.config import CloudConfig
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World
from polyccm_testing.kubeobjects import make_service, set_ready, wait_for
from polyccm_testing.manager import manager_options, start_manager

NODE_COUNT = 200
SERVICE_COUNT = 30
DOWN_AFTER = 0.4
"""Share of the burst registered when the API server goes down."""


@pytest.fixture
def manager(control_plane: Any, clean_nodes: None, aws: EmulatorControl) -> Iterator[None]:
    """polyccm with the AWS provider, running on a thread for the test."""
    options = manager_options(
        "aws",
        control_plane.kubeconfig,
        cluster_name=CLUSTER,
        configure_cloud_routes=False,
        concurrent_service_syncs=2,
    )
    provider = AwsProvider(
        CloudConfig(kubernetes_cluster_id=CLUSTER), cluster_name=CLUSTER, cache_ttl=0.0
    )
    running = start_manager(options, provider)
    yield
    running.stop()


@dataclass
class Burst:
    """Registers nodes (as kubelets do: tainted, then Ready) and services on a pool of
    threads, each retrying until the API server takes it, as kubelets and users would."""

    api: KubeApi
    namespace: str
    nodes: list[str] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def registered(self) -> int:
        with self.lock:
            return len(self.nodes) + len(self.services)

    def _until_accepted(self, action: Callable[[], Any]) -> None:
        deadline = time.monotonic() + 90
        while True:
            try:
                action()
                return
            except ApiError as error:
                if error.conflict:  # created by an attempt whose answer was lost
                    return
                if time.monotonic() > deadline:
                    raise
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def node(self, name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {}},
            "spec": {
                "taints": [{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]
            },
        }
        self._until_accepted(lambda: self.api.create(NODES, body))
        self._until_accepted(lambda: set_ready(self.api, name, True))
        with self.lock:
            self.nodes.append(name)

    def service(self, name: str) -> None:
        self._until_accepted(lambda: make_service(self.api, self.namespace, name))
        with self.lock:
            self.services.append(name)


def initialised_nodes(api: KubeApi) -> dict[str, str] | None:
    """Each node's providerID, once every node of the burst is there and initialised."""
    nodes = [Node(item) for item in api.list(NODES)["items"]]
    if len(nodes) != NODE_COUNT or any(node.has_taint(UNINITIALIZED_TAINT) for node in nodes):
        return None
    return {node.name: node.provider_id for node in nodes}


def balancers() -> list[dict[str, Any]]:
    pages = boto3.client("elb").get_paginator("describe_load_balancers").paginate()
    return [lb for page in pages for lb in page["LoadBalancerDescriptions"]]


def test_an_api_server_restart_mid_burst_loses_no_node_and_duplicates_no_load_balancer(
    kube_api: KubeApi, namespace: str, control_plane: Any, manager: None
) -> None:
    world = World()
    instances = world.instances(NODE_COUNT // 2, "us-east-1a") + world.instances(
        NODE_COUNT // 2, "us-east-1b"
    )
    instance_ids = {str(i["InstanceId"]) for i in instances}
    node_names = sorted(str(i["PrivateDnsName"]) for i in instances)
    service_names = [f"svc-{i:02d}" for i in range(SERVICE_COUNT)]
    burst = Burst(kube_api, namespace)
    # Services spread through the nodes, as a scale-up and a deployment arrive together.
    work: list[Callable[[], None]] = [partial(burst.node, name) for name in node_names]
    spacing = NODE_COUNT // SERVICE_COUNT
    for index, service in enumerate(service_names):
        work.insert(index * (spacing + 1) + 3, partial(burst.service, service))

    started = time.monotonic()
    with ThreadPoolExecutor(8, "kubelet") as pool:
        futures = [pool.submit(item) for item in work]
        wait_for(lambda: burst.registered >= DOWN_AFTER * len(work), 60, "the burst under way")
        with control_plane.apiserver_stopped():
            # Down: load balancers asked for before now are not all made yet (the cloud side
            # can tell, the API cannot), and the burst goes on retrying.
            with burst.lock:
                services_before, nodes_before = len(burst.services), len(burst.nodes)
            in_cloud = len(balancers())
        for future in futures:
            future.result()
    assert nodes_before < NODE_COUNT and services_before < SERVICE_COUNT, "down mid-burst"
    assert in_cloud < services_before, "load balancers were still being made when it went down"

    provider_ids = wait_for(lambda: initialised_nodes(kube_api), 90, "every node initialised")
    assert {pid.rsplit("/", 1)[-1] for pid in provider_ids.values()} == instance_ids

    def hostnames() -> dict[str, str]:
        found = {}
        for item in kube_api.list(SERVICES, namespace)["items"]:
            ingress = Service(item).load_balancer_status.get("ingress") or [{}]
            if ingress[0].get("hostname"):
                found[item["metadata"]["name"]] = ingress[0]["hostname"]
        return found

    wait_for(lambda: len(hostnames()) == SERVICE_COUNT, 90, "every service's load balancer")

    def all_backends() -> bool:
        return all({i["InstanceId"] for i in lb["Instances"]} == instance_ids for lb in balancers())

    wait_for(all_backends, 60, "every node behind every load balancer")
    found = balancers()
    uids = {
        item["metadata"]["name"]: item["metadata"]["uid"]
        for item in kube_api.list(SERVICES, namespace)["items"]
    }
    expected = {("a" + uid.replace("-", ""))[:32] for uid in uids.values()}
    assert len(found) == SERVICE_COUNT, "one load balancer per service, no duplicate"
    assert {lb["LoadBalancerName"] for lb in found} == expected
    assert {lb["DNSName"] for lb in found} == set(hostnames().values())
    print(
        f"down after {nodes_before} nodes and {services_before} services, with {in_cloud} load "
        f"balancers made; all done {time.monotonic() - started:.0f}s after the burst began"
    )
