"""Every request the emulator accepts and every answer it gives, held to Google's compute v1
discovery document: required fields present, types and enums right, no field the document does
not define, for every method the emulator serves."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from polyccm_gce_emulator.app import Exchange
from polyccm_gce_emulator.metadata import numeric_project_id
from polyccm_gce_emulator.testing import REGION, ZONE, ComputeApi, ComputeApiError, emulator_thread
from polyccm_gce_emulator.urls import METHODS

SERVED = sorted(method.id for method in METHODS)


def _expect_error(call: Any, status: int) -> None:
    with pytest.raises(ComputeApiError) as caught:
        call()
    assert caught.value.status == status


def _scenario(api: ComputeApi) -> None:
    """Call every served method at least once with success, and provoke the errors."""
    region = f"regions/{REGION}"
    zone = f"zones/{ZONE}"
    api.get("zones")
    api.get(zone)
    api.get("regions", maxResults=1)
    api.get(region)

    # Networks and subnetworks.
    api.do("POST", "global/networks", {"name": "custom", "autoCreateSubnetworks": False})
    api.do("POST", "global/networks", {"name": "legacy", "IPv4Range": "10.240.0.0/16"})
    api.get("global/networks")
    api.get("global/networks/custom")
    api.do(
        "POST",
        f"{region}/subnetworks",
        {"name": "nodes", "network": "global/networks/custom", "ipCidrRange": "10.10.0.0/24"},
    )
    api.get(f"{region}/subnetworks")
    api.get(f"{region}/subnetworks/nodes")
    for access, cidr in (("EXTERNAL", "10.11.0.0/24"), ("INTERNAL", "10.12.0.0/24")):
        api.do(
            "POST",
            f"{region}/subnetworks",
            {
                "name": f"dual-{access.lower()}",
                "network": "global/networks/custom",
                "ipCidrRange": cidr,
                "stackType": "IPV4_IPV6",
                "ipv6AccessType": access,
            },
        )
        api.create_instance(
            f"dual-{access.lower()}",
            subnetwork=f"{region}/subnetworks/dual-{access.lower()}",
            ipv6=access,
        )
    api.get(f"{api.endpoint}/compute/v1/projects/{numeric_project_id(api.project)}")

    # Instances, through their whole life.
    api.create_instance("node-a", labels={"env": "test"}, tags=["k8s-node"], metadata={"a": "b"})
    api.create_instance(
        "node-b",
        subnetwork=f"{region}/subnetworks/nodes",
        external_ip=False,
        can_ip_forward=False,
    )
    api.create_instance("node-c", network="global/networks/legacy")
    api.get(f"{zone}/instances", filter='name = "node-a"')
    api.get("aggregated/instances", maxResults=2)
    node = api.get(f"{zone}/instances/node-a")
    api.do(
        "POST",
        f"{zone}/instances/node-a/setLabels",
        {"labels": {"env": "prod"}, "labelFingerprint": node["labelFingerprint"]},
    )
    api.do(
        "POST",
        f"{zone}/instances/node-a/setTags",
        {"items": ["k8s-node", "web"], "fingerprint": node["tags"]["fingerprint"]},
    )
    _expect_error(
        lambda: api.request(
            "POST", f"{zone}/instances/node-a/setLabels", {"labels": {}, "labelFingerprint": "x"}
        ),
        412,
    )
    api.stop_instance("node-c")
    api.start_instance("node-c")

    # VPC-native: a subnetwork with secondary ranges, an instance with an alias range from
    # one of them, its aliases replaced through updateNetworkInterface.
    api.do(
        "POST",
        f"{region}/subnetworks",
        {
            "name": "pods",
            "network": "global/networks/custom",
            "ipCidrRange": "10.20.0.0/24",
            "secondaryIpRanges": [{"rangeName": "pod-range", "ipCidrRange": "10.24.0.0/14"}],
        },
    )
    aliased = api.create_instance(
        "node-d",
        subnetwork=f"{region}/subnetworks/pods",
        external_ip=False,
        alias_ip_ranges=[{"ipCidrRange": "/24", "subnetworkRangeName": "pod-range"}],
    )
    nic = aliased["networkInterfaces"][0]
    api.do(
        "PATCH",
        f"{zone}/instances/node-d/updateNetworkInterface?networkInterface=nic0",
        {
            "fingerprint": nic["fingerprint"],
            "aliasIpRanges": [{"ipCidrRange": "10.24.9.0/24", "subnetworkRangeName": "pod-range"}],
        },
    )
    api.get(f"{zone}/instances/node-d")
    _expect_error(lambda: api.get(f"{zone}/instances/missing"), 404)

    # Routes, with a failing one.
    route = {
        "name": "kubernetes-node-a",
        "network": "global/networks/default",
        "destRange": "10.64.1.0/24",
        "nextHopInstance": f"{zone}/instances/node-a",
        "priority": 1000,
        "description": "k8s-node-route",
    }
    api.do("POST", "global/routes", route)
    # A route to an instance that cannot forward: GCE lists it with a warning.
    unforwarded = dict(route, name="kubernetes-node-b", nextHopInstance=f"{zone}/instances/node-b")
    api.do("POST", "global/routes", unforwarded)
    _expect_error(lambda: api.request("POST", "global/routes", route), 409)
    gone = dict(route, name="kubernetes-gone", nextHopInstance=f"{zone}/instances/gone")
    api.wait(api.request("POST", "global/routes", gone), check=False)
    api.get("global/routes", filter='(name eq "kubernetes-.*") (description = "k8s-node-route")')
    api.get("global/routes/kubernetes-node-a")

    # Firewalls.
    firewall = {
        "name": "k8s-fw-a1",
        "network": "global/networks/default",
        "sourceRanges": ["0.0.0.0/0"],
        "targetTags": ["k8s-node"],
        "allowed": [{"IPProtocol": "tcp", "ports": ["80"]}],
        "description": '{"kubernetes.io/service-name":"default/web"}',
    }
    api.do("POST", "global/firewalls", firewall)
    api.get("global/firewalls")
    current = api.get("global/firewalls/k8s-fw-a1")
    current["allowed"] = [{"IPProtocol": "tcp", "ports": ["80", "443"]}]
    api.do("PUT", "global/firewalls/k8s-fw-a1", current)
    api.do(
        "PATCH", "global/firewalls/k8s-fw-a1", {"name": "k8s-fw-a1", "sourceRanges": ["10.0.0.0/8"]}
    )
    # The deny firewall (cloud-provider-gcp's ensureDenyNodeFirewall): denied, priority and
    # destinationRanges, in and out, held to the document too.
    deny = {
        "name": "k8s-fw-a1-deny",
        "network": "global/networks/default",
        "sourceRanges": ["0.0.0.0/0"],
        "destinationRanges": ["203.0.113.7"],
        "targetTags": ["k8s-node"],
        "denied": [{"IPProtocol": "all"}],
        "priority": 1000,
    }
    api.do("POST", "global/firewalls", deny)
    moved = {"name": "k8s-fw-a1-deny", "destinationRanges": ["203.0.113.8"], "priority": 999}
    api.do("PATCH", "global/firewalls/k8s-fw-a1-deny", moved)
    api.get("global/firewalls/k8s-fw-a1-deny")

    # The network load balancer's parts.
    api.do(
        "POST",
        "global/httpHealthChecks",
        {"name": "k8s-cluster-node", "port": 10256, "requestPath": "/healthz"},
    )
    api.get("global/httpHealthChecks")
    check = api.get("global/httpHealthChecks/k8s-cluster-node")
    check["checkIntervalSec"] = 8
    api.do("PUT", "global/httpHealthChecks/k8s-cluster-node", check)
    api.do("PATCH", "global/httpHealthChecks/k8s-cluster-node", {"timeoutSec": 1})
    api.do("POST", f"{region}/addresses", {"name": "static-ip"})
    api.get(f"{region}/addresses")
    static = api.get(f"{region}/addresses/static-ip")
    api.do(
        "POST",
        f"{region}/targetPools",
        {"name": "a1", "instances": [f"{zone}/instances/node-a"], "sessionAffinity": "NONE"},
    )
    api.get(f"{region}/targetPools")
    instance_ref = {"instances": [{"instance": node["selfLink"]}]}
    api.do(
        "POST",
        f"{region}/targetPools/a1/addInstance",
        {"instances": [{"instance": f"{zone}/instances/node-b"}]},
    )
    api.do("POST", f"{region}/targetPools/a1/removeInstance", instance_ref)
    check_ref = {"healthChecks": [{"healthCheck": "global/httpHealthChecks/k8s-cluster-node"}]}
    api.do("POST", f"{region}/targetPools/a1/addHealthCheck", check_ref)
    api.get(f"{region}/targetPools/a1")
    api.do(
        "POST",
        f"{region}/forwardingRules",
        {
            "name": "a1",
            "IPAddress": static["address"],
            "IPProtocol": "TCP",
            "portRange": "80-443",
            "target": f"{region}/targetPools/a1",
            "description": '{"kubernetes.io/service-name":"default/web"}',
        },
    )
    api.get(f"{region}/forwardingRules")
    api.get(f"{region}/forwardingRules/a1")
    _expect_error(lambda: api.request("DELETE", f"{region}/targetPools/a1"), 400)

    _internal_scenario(api, node["selfLink"])

    # Operations, read in each scope.
    for path in (
        f"{zone}/instances/node-a/stop",
        f"{region}/targetPools/a1/removeHealthCheck",
        "global/firewalls/k8s-fw-a1",
    ):
        method = "DELETE" if path.startswith("global") else "POST"
        body = check_ref if "HealthCheck" in path else None
        operation = api.request(method, path, body)
        api.get(operation["selfLink"])
        api.wait(operation)

    # Tear everything down.
    api.do("DELETE", f"{region}/forwardingRules/a1")
    api.do("DELETE", f"{region}/targetPools/a1")
    api.do("DELETE", f"{region}/addresses/static-ip")
    api.do("DELETE", "global/httpHealthChecks/k8s-cluster-node")
    api.do("DELETE", "global/routes/kubernetes-node-a")
    api.do("DELETE", "global/routes/kubernetes-node-b")
    for name in ("node-a", "node-b", "node-c", "node-d"):
        api.delete_instance(name)
    api.do("DELETE", f"{region}/subnetworks/nodes")
    for dual in ("dual-external", "dual-internal"):
        api.delete_instance(dual)
        api.do("DELETE", f"{region}/subnetworks/{dual}")
    api.do("DELETE", f"{region}/subnetworks/pods")
    api.do("DELETE", "global/networks/custom")
    api.do("DELETE", "global/networks/legacy")


def _internal_scenario(api: ComputeApi, node_a: str) -> None:
    """The internal load balancer's parts as cloud-provider-gcp v36.3.8 makes them
    (gce_loadbalancer_internal.go:661-736 instance groups, :620-659 health check, :819-884
    backend service, :189-208 forwarding rule, :384-471 teardown), and GCE's refusals."""
    region = f"regions/{REGION}"
    zone = f"zones/{ZONE}"
    group = f"{zone}/instanceGroups/k8s-ig--cid"
    api.do("POST", f"{zone}/instanceGroups", {"name": "k8s-ig--cid"})
    api.get(f"{zone}/instanceGroups")
    api.do("POST", f"{group}/addInstances", {"instances": [{"instance": node_a}]})
    api.do(
        "POST", f"{group}/addInstances", {"instances": [{"instance": f"{zone}/instances/node-b"}]}
    )
    listed = api.request("POST", f"{group}/listInstances", {"instanceState": "ALL"})
    assert [i["instance"].rsplit("/", 1)[-1] for i in listed["items"]] == ["node-a", "node-b"]
    api.do("POST", f"{group}/removeInstances", {"instances": [{"instance": node_a}]})
    api.get(group)
    check = {
        "name": "k8s-cid-node",
        "type": "HTTP",
        "httpHealthCheck": {"port": 10256, "requestPath": "/healthz"},
        "checkIntervalSec": 8,
        "timeoutSec": 1,
        "healthyThreshold": 1,
        "unhealthyThreshold": 3,
    }
    api.do("POST", "global/healthChecks", check)
    api.get("global/healthChecks")
    api.do("PUT", "global/healthChecks/k8s-cid-node", dict(check, description=""))
    api.do("PATCH", "global/healthChecks/k8s-cid-node", {"timeoutSec": 2})
    hc = api.get("global/healthChecks/k8s-cid-node")
    service = {
        "name": "a2",
        "protocol": "TCP",
        "loadBalancingScheme": "INTERNAL",
        "sessionAffinity": "NONE",
        "healthChecks": [hc["selfLink"]],
        "backends": [{"group": group}],
        "description": '{"kubernetes.io/service-name":"default/internal"}',
    }
    api.do("POST", f"{region}/backendServices", service)
    api.get(f"{region}/backendServices")
    current = api.get(f"{region}/backendServices/a2")
    api.do("PUT", f"{region}/backendServices/a2", dict(current, sessionAffinity="CLIENT_IP"))
    _expect_error(lambda: api.request("PUT", f"{region}/backendServices/a2", current), 412)
    api.do(
        "POST",
        f"{region}/forwardingRules",
        {
            "name": "a2",
            "IPProtocol": "TCP",
            "ports": ["80", "443"],
            "loadBalancingScheme": "INTERNAL",
            "backendService": f"{region}/backendServices/a2",
            "network": "global/networks/default",
            "subnetwork": f"{region}/subnetworks/default",
            "allowGlobalAccess": True,
            "description": '{"kubernetes.io/service-name":"default/internal"}',
        },
    )
    rule = api.get(f"{region}/forwardingRules/a2")
    # The address comes from the subnetwork (an internal one), not from the external pool.
    assert rule["IPAddress"].startswith("10.") and rule["subnetwork"].endswith("/default")
    assert api.get(group)["size"] == 1
    _expect_error(lambda: api.request("DELETE", f"{region}/backendServices/a2"), 400)
    _expect_error(lambda: api.request("DELETE", "global/healthChecks/k8s-cid-node"), 400)
    _expect_error(lambda: api.request("DELETE", group), 400)
    api.do("DELETE", f"{region}/forwardingRules/a2")
    api.do("DELETE", f"{region}/backendServices/a2")
    api.do("DELETE", "global/healthChecks/k8s-cid-node")
    api.do("DELETE", group)


@pytest.fixture(scope="module")
def exchanges() -> Iterator[list[Exchange]]:
    recorded: list[Exchange] = []
    with emulator_thread() as running:
        running.app.observers.append(recorded.append)
        _scenario(running.api())
    yield recorded


def test_every_served_path_is_the_discovery_documents(discovery: Any) -> None:
    for method in METHODS:
        described = discovery.methods.get(method.id)
        assert described is not None, f"{method.id} is not in the discovery document"
        assert (method.http_method, method.path) == (
            described["httpMethod"],
            described["flatPath"],
        ), method.id


def test_every_served_method_is_validated(exchanges: list[Exchange]) -> None:
    answered = {
        (exchange.method, exchange.http_method) for exchange in exchanges if exchange.status == 200
    }
    assert answered == {(method.id, method.http_method) for method in METHODS}


@pytest.mark.parametrize("method", SERVED)
def test_method_matches_the_discovery_document(
    method: str, exchanges: list[Exchange], discovery: Any
) -> None:
    mine = [exchange for exchange in exchanges if exchange.method == method]
    assert any(exchange.status == 200 for exchange in mine)
    for exchange in mine:
        if exchange.status == 200:
            assert discovery.request_errors(method, exchange.request_body) == [], exchange
            assert discovery.response_errors(method, exchange.response_body) == [], exchange
        else:
            assert discovery.error_body_errors(exchange.response_body) == [], exchange


def test_the_scenario_meets_the_cloud_errors_it_must(exchanges: list[Exchange]) -> None:
    reasons = {
        (exchange.status, exchange.response_body["error"]["errors"][0]["reason"])
        for exchange in exchanges
        if exchange.status != 200
    }
    assert {
        (404, "notFound"),
        (409, "alreadyExists"),
        (412, "conditionNotMet"),
        (400, "resourceInUseByAnotherResource"),
    } <= reasons
    failed = [
        exchange.response_body
        for exchange in exchanges
        if exchange.status == 200
        and isinstance(exchange.response_body, dict)
        and exchange.response_body.get("error")
    ]
    assert failed and failed[0]["error"]["errors"][0]["code"] == "RESOURCE_NOT_FOUND"


def test_the_validation_refuses_what_google_does_not_send(discovery: Any) -> None:
    # The yardstick itself: an unknown field, a wrong type, a bad enum and a missing selfLink
    # are each caught, so a clean result above means something.
    route = {
        "kind": "compute#route",
        "id": "1",
        "name": "r",
        "creationTimestamp": "2024-01-01T00:00:00.000-00:00",
        "selfLink": "http://x/compute/v1/projects/p/global/routes/r",
    }
    assert discovery.response_errors("compute.routes.get", route) == []
    assert discovery.response_errors("compute.routes.get", {**route, "nextHop": "x"})
    assert discovery.response_errors("compute.routes.get", {**route, "priority": "high"})
    assert discovery.response_errors("compute.routes.get", {**route, "routeType": "MAGIC"})
    assert discovery.response_errors("compute.routes.get", {**route, "kind": "compute#network"})
    del route["selfLink"]
    assert discovery.response_errors("compute.routes.get", route)
    assert discovery.request_errors("compute.routes.insert", {"name": "r"})
