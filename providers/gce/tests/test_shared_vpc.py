"""A cluster on a Shared VPC (gce.conf ``network-project-id``): the load balancers' firewalls
live in the network's host project, and a firewall write the host refuses (403) becomes
upstream's ``LoadBalancerManualChange`` event with the gcloud command, not a failed sync.

Upstream's lines are of cloud-provider-gcp v36.3.8 (f67fc7e3), providers/gce/.
"""

from __future__ import annotations

from typing import Any

import pytest
from polyccm.cloud import Route
from polyccm.ops import orphans as orphan_tools
from polyccm_gce_emulator.testing import (
    REGION,
    ComputeApi,
    RunningEmulator,
    gce_provider,
    node_for,
    service_for,
)

HOST = "host-net-proj"
CLUSTER_ID = "cafe0123"


class Events:
    """An event recorder keeping what it is given."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str, str]] = []

    def event(self, obj: Any, event_type: str, reason: str, message: str) -> None:
        self.recorded.append((obj["metadata"]["name"], event_type, reason, message))


@pytest.fixture
def provider(emulator: RunningEmulator) -> Any:
    built = gce_provider(emulator.endpoint, network_project_id=HOST)
    built._cluster_id = CLUSTER_ID
    return built


@pytest.fixture
def nodes(api: ComputeApi) -> list[Any]:
    api.create_instance("vpc-a", tags=["vpc"])
    return [node_for("vpc-a")]


def test_the_firewalls_are_made_in_the_network_project(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    # gce.go NetworkProjectID and gce_firewall.go (firewalls of g.NetworkProjectID()).
    # Before: in the cluster's project, where a Shared VPC's network has no firewalls.
    lb = provider.load_balancer()
    service = service_for()
    name = lb.get_load_balancer_name("c", service)

    lb.ensure_load_balancer("c", service, nodes)

    host = emulator.api(HOST)
    assert {f"k8s-fw-{name}", f"k8s-{CLUSTER_ID}-node-http-hc"} <= {
        item["name"] for item in host.list_all("global/firewalls")
    }
    assert api.list_all("global/firewalls") == []
    assert api.get(f"regions/{REGION}/forwardingRules/{name}")  # the rule stays in the cluster's

    lb.ensure_load_balancer_deleted("c", service)
    assert host.list_all("global/firewalls") == []


def test_a_refused_firewall_write_is_an_event_with_the_gcloud_command(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    # gce_loadbalancer_external.go:1114-1120@v36.3.8 (403 on XPN: raiseFirewallChangeNeededEvent
    # with FirewallToGCloudCreateCmd), gce_util.go:165-205. Before: the sync failed on the 403.
    emulator.control.inject("compute.firewalls.insert", count=0, status=403, reason="forbidden")
    lb = provider.load_balancer()
    lb.recorder = events = Events()
    service = service_for(loadBalancerSourceRanges=["192.0.2.0/24"])
    name = lb.get_load_balancer_name("c", service)

    status = lb.ensure_load_balancer("c", service, nodes)

    ip = status.ingress[0].ip
    manual = [e for e in events.recorded if e[2] == "LoadBalancerManualChange"]
    assert manual[-1][:2] == ("web", "Normal")
    description = (
        f'{{\\"kubernetes.io/service-name\\":\\"default/web\\", '
        f'\\"kubernetes.io/service-ip\\":\\"{ip}\\"}}'
    )
    assert manual[-1][3] == (
        "Firewall change required by security admin: `gcloud compute firewall-rules create "
        f'k8s-fw-{name} --network default --description "{description}" --allow tcp:80 '
        f"--source-ranges 192.0.2.0/24 --target-tags vpc --project {HOST}`"
    )


def test_polyccm_orphans_finds_and_deletes_the_firewalls_in_the_network_project(
    provider: Any, nodes: list[Any], emulator: RunningEmulator
) -> None:
    # The firewalls a Service left are where ensure made them (see the first test). Before:
    # polyccm orphans listed the cluster's project and left the host's firewalls behind.
    lb = provider.load_balancer()
    service = service_for()
    name = lb.get_load_balancer_name("c", service)
    lb.ensure_load_balancer("c", service, nodes)

    found = orphan_tools.find(provider.orphans(), "c", [], nodes)
    assert {r.id for r in found if r.kind == "firewall"} == {
        f"k8s-fw-{name}",
        f"k8s-{CLUSTER_ID}-node-http-hc",
    }
    outcomes = orphan_tools.delete_all(provider.orphans(), "c", found)

    assert [o.error for o in outcomes] == [""] * len(found)
    assert emulator.api(HOST).list_all("global/firewalls") == []


def test_routes_are_listed_made_and_deleted_in_the_network_project(
    emulator: RunningEmulator, api: ComputeApi
) -> None:
    # gce_routes.go@v36.3.8 (ListRoutes, CreateRoute, DeleteRoute on g.NetworkProjectID(), the
    # next hop the cluster project's instance). Before: in the cluster's project, whose network
    # does not carry the nodes' traffic on a Shared VPC.
    provider = gce_provider(emulator.endpoint, network_project_id=HOST)
    api.create_instance("vpc-r")
    node = node_for("vpc-r", pod_cidr="10.100.7.0/24")
    routes = provider.routes()

    routes.create_route("c", node.uid, Route("", node.name, "10.100.7.0/24"), target=node)

    host = emulator.api(HOST)
    (made,) = host.list_all("global/routes", filter='description = "k8s-node-route"')
    assert made["nextHopInstance"].endswith(
        f"/projects/{api.project}/zones/us-central1-a/instances/vpc-r"
    )
    assert [r.target_node for r in routes.list_routes("c")] == ["vpc-r"]
    assert api.list_all("global/routes", filter='description = "k8s-node-route"') == []

    routes.delete_route("c", routes.list_routes("c")[0])
    assert host.list_all("global/routes", filter='description = "k8s-node-route"') == []


def test_a_refused_firewall_delete_is_an_event_and_the_rest_goes(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    # gce_loadbalancer_external.go:383-390@v36.3.8 (FirewallToGCloudDeleteCmd,
    # gce_util.go:185-187). Before: the deletion failed and the Service stayed Terminating.
    lb = provider.load_balancer()
    lb.recorder = events = Events()
    service = service_for()
    name = lb.get_load_balancer_name("c", service)
    lb.ensure_load_balancer("c", service, nodes)
    emulator.control.inject("compute.firewalls.delete", count=0, status=403, reason="forbidden")

    lb.ensure_load_balancer_deleted("c", service)

    assert (
        "web",
        "Normal",
        "LoadBalancerManualChange",
        "Firewall change required by security admin: `gcloud compute firewall-rules delete "
        f"k8s-fw-{name} --project {HOST}`",
    ) in events.recorded
    assert api.list_all(f"regions/{REGION}/forwardingRules") == []
