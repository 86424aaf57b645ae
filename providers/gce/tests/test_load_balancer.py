"""The legacy network load balancer against the emulator: upstream's pieces and names,
adoption of what cloud-provider-gcp made, and what is refused."""

from __future__ import annotations

from typing import Any

import pytest
from polyccm.errors import CloudError, ImplementedElsewhere, InvalidServiceSpec
from polyccm.kube.api import SERVICES, ApiError, KubeApi
from polyccm.objects import Service
from polyccm_gce import load_balancer
from polyccm_gce.service_spec import LEGACY_FINALIZER, RBS_ANNOTATION
from polyccm_gce_emulator import upstream_made
from polyccm_gce_emulator.testing import (
    REGION,
    ComputeApi,
    RunningEmulator,
    gce_provider,
    node_for,
    service_for,
    write_calls,
)
from polyccm_testing.kubeobjects import make_service, wait_for

CLUSTER_ID = "cafe0123"


@pytest.fixture
def provider(emulator: RunningEmulator) -> Any:
    built = gce_provider(emulator.endpoint)
    built._cluster_id = CLUSTER_ID  # what initialize reads from kube-system/ingress-uid
    return built


@pytest.fixture
def nodes(api: ComputeApi) -> list[Any]:
    for name in ("lb-a", "lb-b", "lb-c"):
        api.create_instance(name, tags=["lb"])
    return [node_for(name) for name in ("lb-a", "lb-b", "lb-c")]


def names(api: ComputeApi, path: str) -> set[str]:
    return {item["name"] for item in api.list_all(path)}


def test_ensure_builds_upstreams_pieces(provider: Any, nodes: list[Any], api: ComputeApi) -> None:
    service = service_for(ports=((80, "TCP"), (443, "TCP")))
    lb = provider.load_balancer()
    name = lb.get_load_balancer_name("c", service)

    status = lb.ensure_load_balancer("c", service, nodes)

    rule = api.get(f"regions/{REGION}/forwardingRules/{name}")
    assert status.ingress[0].ip == rule["IPAddress"]
    assert (rule["IPProtocol"], rule["portRange"]) == ("TCP", "80-443")
    pool = api.get(f"regions/{REGION}/targetPools/{name}")
    assert {url.rsplit("/", 1)[-1] for url in pool["instances"]} == {"lb-a", "lb-b", "lb-c"}
    assert pool["healthChecks"][0].endswith(f"/httpHealthChecks/k8s-{CLUSTER_ID}-node")
    check = api.get(f"global/httpHealthChecks/k8s-{CLUSTER_ID}-node")
    assert (check["port"], check["requestPath"]) == (10256, "/healthz")
    firewall = api.get(f"global/firewalls/k8s-fw-{name}")
    assert firewall["allowed"] == [{"IPProtocol": "tcp", "ports": ["80", "443"]}]
    assert firewall["targetTags"] == ["lb"]
    assert firewall["sourceRanges"] == ["0.0.0.0/0"]
    assert f"k8s-{CLUSTER_ID}-node-http-hc" in names(api, "global/firewalls")


def test_local_traffic_policy_gets_its_own_health_check(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    service = service_for(externalTrafficPolicy="Local", healthCheckNodePort=31999)
    lb = provider.load_balancer()
    name = lb.get_load_balancer_name("c", service)

    lb.ensure_load_balancer("c", service, nodes)

    assert api.get(f"global/httpHealthChecks/{name}")["port"] == 31999
    assert f"k8s-{name}-http-hc" in names(api, "global/firewalls")
    lb.ensure_load_balancer_deleted("c", service)
    assert names(api, "global/httpHealthChecks") == set()
    assert not any(n.startswith("k8s-") for n in names(api, "global/firewalls"))


def test_a_load_balancer_made_by_cloud_provider_gcp_is_adopted(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    cluster, local = service_for(), service_for("local", externalTrafficPolicy="Local",
                                                healthCheckNodePort=31999)  # fmt: skip
    for service in (cluster, local):
        upstream_made.network_load_balancer(
            api,
            service,
            cluster_id=CLUSTER_ID,
            instances=[n.name for n in nodes],
            tags=["lb"],
            firewall_ports=["80"],
        )
    emulator.control.reset_calls()

    for service in (cluster, local):
        provider.load_balancer().ensure_load_balancer("c", service, nodes)

    assert write_calls(emulator.control.calls()) == 0


def test_the_pool_is_made_with_the_first_instances_and_the_rest_added(
    provider: Any, nodes: list[Any], emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load_balancer, "POOL_CREATE_LIMIT", 2)  # upstream's 200, at small N
    emulator.control.reset_calls()

    provider.load_balancer().ensure_load_balancer("c", service_for(), nodes)

    calls = emulator.control.calls()
    assert calls["compute.targetPools.insert"] == 1
    assert calls["compute.targetPools.addInstance"] == 1


def test_load_balancers_on_the_same_nodes_read_their_tags_once(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    lb = provider.load_balancer()
    emulator.control.reset_calls()

    for index in range(3):
        lb.ensure_load_balancer("c", service_for(f"web{index}"), nodes)
    api.create_instance("ot-d", tags=["ot"])
    last = service_for("web3")
    lb.ensure_load_balancer("c", last, [*nodes, node_for("ot-d")])

    assert emulator.control.calls()["compute.instances.aggregatedList"] == 2
    name = lb.get_load_balancer_name("c", last)
    assert api.get(f"global/firewalls/k8s-fw-{name}")["targetTags"] == ["lb", "ot"]


def test_a_new_load_balancer_inserts_its_own_pieces_without_reading_them_first(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    lb = provider.load_balancer()
    first, second = service_for("first"), service_for("second")
    lb.ensure_load_balancer("c", first, nodes)  # the shared check and its firewall, once
    emulator.control.reset_calls()

    lb.ensure_load_balancer("c", second, nodes)

    calls = emulator.control.calls()
    assert "compute.targetPools.get" not in calls
    assert calls["compute.firewalls.get"] == 1  # the shared check's firewall, not its own
    # rule read before and after its insert, shared check read, 3 inserts and their waits
    assert sum(calls.values()) == 10
    emulator.control.reset_calls()

    for service in (second, first):
        lb.ensure_load_balancer_deleted("c", service)

    assert "compute.httpHealthChecks.get" not in emulator.control.calls()
    assert names(api, "global/httpHealthChecks") == set()
    assert not any(n.startswith("k8s-") for n in names(api, "global/firewalls"))


def test_pieces_left_without_their_forwarding_rule_are_corrected_not_doubled(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    service = service_for()
    lb = provider.load_balancer()
    name = lb.get_load_balancer_name("c", service)
    lb.ensure_load_balancer("c", service, nodes[:1])
    api.do("DELETE", f"regions/{REGION}/forwardingRules/{name}")  # as a failed attempt leaves it
    service.raw["spec"]["loadBalancerSourceRanges"] = ["10.0.0.0/8"]

    lb.ensure_load_balancer("c", service, nodes)

    pool = api.get(f"regions/{REGION}/targetPools/{name}")
    assert {url.rsplit("/", 1)[-1] for url in pool["instances"]} == {"lb-a", "lb-b", "lb-c"}
    assert api.get(f"global/firewalls/k8s-fw-{name}")["sourceRanges"] == ["10.0.0.0/8"]
    assert api.get(f"regions/{REGION}/forwardingRules/{name}")["target"].endswith(name)


def test_load_balancer_ip_uses_the_reserved_address(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    api.do("POST", f"regions/{REGION}/addresses", {"name": "mine"})
    reserved = api.get(f"regions/{REGION}/addresses/mine")["address"]

    status = provider.load_balancer().ensure_load_balancer(
        "c", service_for(loadBalancerIP=reserved), nodes
    )

    assert status.ingress[0].ip == reserved
    with pytest.raises(InvalidServiceSpec, match="reserve it"):
        provider.load_balancer().ensure_load_balancer(
            "c", service_for("other", loadBalancerIP="203.0.113.9"), nodes
        )


@pytest.mark.parametrize(
    ("service", "words"),
    [
        (service_for(ports=((53, "UDP"), (80, "TCP"))), "one protocol"),
    ],
)
def test_what_the_network_load_balancer_cannot_do_is_refused_before_any_write(
    provider: Any, nodes: list[Any], emulator: RunningEmulator, service: Any, words: str
) -> None:
    emulator.control.reset_calls()

    with pytest.raises(InvalidServiceSpec, match=words):
        provider.load_balancer().ensure_load_balancer("c", service, nodes)

    assert emulator.control.calls() == {}


def test_a_service_of_the_regional_backend_service_controller_is_left_to_it(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    lb = provider.load_balancer()
    lb.ensure_load_balancer("c", service_for("other"), nodes)  # the shared check is in use
    rbs = service_for("rbs", annotations={RBS_ANNOTATION: "enabled"})
    emulator.control.reset_calls()

    for call in (
        lambda: lb.ensure_load_balancer("c", rbs, nodes),
        lambda: lb.update_load_balancer("c", rbs, nodes),
        lambda: lb.ensure_load_balancer_deleted("c", rbs),
    ):
        with pytest.raises(ImplementedElsewhere, match=RBS_ANNOTATION):
            call()

    assert emulator.control.calls() == {}
    # Upstream's own finalizer says the target-pool load balancer is this controller's.
    rbs.raw["metadata"]["finalizers"] = [LEGACY_FINALIZER]
    lb.ensure_load_balancer("c", rbs, nodes)
    assert lb.get_load_balancer_name("c", rbs) in names(api, f"regions/{REGION}/forwardingRules")


def test_every_piece_carries_upstreams_description_byte_for_byte(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    lb = provider.load_balancer()
    cluster = service_for("web", namespace="shop")
    local = service_for("local", externalTrafficPolicy="Local", healthCheckNodePort=31999)
    lb.ensure_load_balancer("c", cluster, nodes)
    lb.ensure_load_balancer("c", local, nodes)
    web, own = lb.get_load_balancer_name("c", cluster), lb.get_load_balancer_name("c", local)
    address = api.get(f"regions/{REGION}/forwardingRules/{web}")["IPAddress"]
    local_address = api.get(f"regions/{REGION}/forwardingRules/{own}")["IPAddress"]

    def described(path: str) -> tuple[str, list[str] | None]:
        found = api.get(path)
        return found["description"], found.get("destinationRanges")

    web_only = '{"kubernetes.io/service-name":"shop/web"}'
    assert described(f"regions/{REGION}/forwardingRules/{web}") == (web_only, None)
    assert described(f"regions/{REGION}/targetPools/{web}") == (web_only, None)
    assert described(f"global/firewalls/k8s-fw-{web}") == (
        f'{{"kubernetes.io/service-name":"shop/web", "kubernetes.io/service-ip":"{address}"}}',
        [address],
    )
    assert described(f"global/httpHealthChecks/k8s-{CLUSTER_ID}-node") == (
        f'{{"kubernetes.io/service-name":"k8s-{CLUSTER_ID}-node"}}',
        None,
    )
    assert described(f"global/firewalls/k8s-{CLUSTER_ID}-node-http-hc") == (
        f'{{"kubernetes.io/cluster-id":"{CLUSTER_ID}"}}',
        None,
    )
    assert described(f"global/httpHealthChecks/{own}") == (
        f'{{"kubernetes.io/service-name":"{own}"}}',
        None,
    )
    assert described(f"global/firewalls/k8s-{own}-http-hc") == (
        '{"kubernetes.io/service-name":"default/local", '
        f'"kubernetes.io/service-ip":"{local_address}"}}',
        [local_address],
    )


def test_earlier_descriptions_are_corrected_once_and_another_spacing_is_left_alone(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    lb = provider.load_balancer()
    service = service_for()
    name = lb.get_load_balancer_name("c", service)
    lb.ensure_load_balancer("c", service, nodes)
    address = api.get(f"regions/{REGION}/forwardingRules/{name}")["IPAddress"]
    check, firewall = f"k8s-{CLUSTER_ID}-node", f"k8s-fw-{name}"
    # As earlier polyccm left them: the Service everywhere, any destination.
    earlier = '{"kubernetes.io/service-name": "default/web"}'
    api.do("PATCH", f"global/httpHealthChecks/{check}", {"name": check, "description": earlier})
    api.do("PUT", f"global/firewalls/{firewall}", {
        **{k: v for k, v in api.get(f"global/firewalls/{firewall}").items()
           if k in ("name", "network", "sourceRanges", "targetTags", "allowed")},
        "description": earlier,
    })  # fmt: skip
    emulator.control.reset_calls()

    lb.ensure_load_balancer("c", service, nodes)

    assert write_calls(emulator.control.calls()) == 2
    assert api.get(f"global/httpHealthChecks/{check}")["description"] == (
        f'{{"kubernetes.io/service-name":"{check}"}}'
    )
    corrected = api.get(f"global/firewalls/{firewall}")
    assert corrected["destinationRanges"] == [address]
    assert corrected["description"] == (
        f'{{"kubernetes.io/service-name":"default/web", "kubernetes.io/service-ip":"{address}"}}'
    )
    spaced = (
        f'{{"kubernetes.io/service-name": "default/web", "kubernetes.io/service-ip": "{address}"}}'
    )
    api.do("PATCH", f"global/firewalls/{firewall}", {"name": firewall, "description": spaced})
    emulator.control.reset_calls()

    lb.ensure_load_balancer("c", service, nodes)

    assert write_calls(emulator.control.calls()) == 0


def test_the_firewalls_follow_the_rules_new_address(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    lb = provider.load_balancer()
    for reserved in ("first", "second"):
        api.do("POST", f"regions/{REGION}/addresses", {"name": reserved})
    first, second = (api.get(f"regions/{REGION}/addresses/{n}")["address"]
                     for n in ("first", "second"))  # fmt: skip
    service = service_for(externalTrafficPolicy="Local", healthCheckNodePort=31999,
                          loadBalancerIP=first)  # fmt: skip
    name = lb.get_load_balancer_name("c", service)
    lb.ensure_load_balancer("c", service, nodes)
    service.raw["spec"]["loadBalancerIP"] = second

    lb.ensure_load_balancer("c", service, nodes)

    for firewall in (f"k8s-fw-{name}", f"k8s-{name}-http-hc"):
        found = api.get(f"global/firewalls/{firewall}")
        assert found["destinationRanges"] == [second], firewall
        assert f'"kubernetes.io/service-ip":"{second}"' in found["description"]


def test_a_health_check_timing_is_raised_to_upstreams_and_never_lowered(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    lb = provider.load_balancer()
    lb.ensure_load_balancer("c", service_for(), nodes)
    check = f"k8s-{CLUSTER_ID}-node"
    # Tuned by hand: a slower interval (kept, as upstream keeps it), a hasty timeout (raised).
    api.do("PATCH", f"global/httpHealthChecks/{check}",
           {"name": check, "checkIntervalSec": 30, "timeoutSec": 0})  # fmt: skip
    emulator.control.reset_calls()

    lb.ensure_load_balancer("c", service_for(), nodes)
    lb.ensure_load_balancer("c", service_for(), nodes)

    found = api.get(f"global/httpHealthChecks/{check}")
    assert (found["checkIntervalSec"], found["timeoutSec"]) == (30, 1)
    assert emulator.control.calls()["compute.httpHealthChecks.patch"] == 1


def gone(kube_api: KubeApi, namespace: str, name: str) -> bool:
    try:
        kube_api.get(SERVICES, name, namespace)
    except ApiError as error:
        return error.not_found
    return False


def test_a_service_upstream_served_is_not_left_terminating(
    provider: Any, nodes: list[Any], api: ComputeApi, kube_api: KubeApi, namespace: str
) -> None:
    def upstreams(body: dict[str, Any]) -> None:
        body["metadata"]["finalizers"] = [LEGACY_FINALIZER]

    service = Service(make_service(kube_api, namespace, "web", upstreams))
    name = upstream_made.network_load_balancer(
        api, service, cluster_id=CLUSTER_ID, instances=[n.name for n in nodes],
        tags=["lb"], firewall_ports=["80"],
    )  # fmt: skip
    kube_api.delete(SERVICES, "web", namespace)
    terminating = Service(kube_api.get(SERVICES, "web", namespace))
    assert terminating.deletion_timestamp  # held by upstream's finalizer
    lb = provider.load_balancer()
    lb.kube = kube_api  # as initialize gives it the term's API

    lb.ensure_load_balancer_deleted("c", terminating)

    wait_for(lambda: gone(kube_api, namespace, "web"), 10, "the service deleted")
    assert name not in names(api, f"regions/{REGION}/forwardingRules")


@pytest.mark.parametrize(
    "request_class",
    [
        load_balancer.compute_v1.TargetPoolsAddInstanceRequest,
        load_balancer.compute_v1.TargetPoolsRemoveInstanceRequest,
    ],
)
def test_an_instance_request_built_on_its_message_is_the_sdks_own(request_class: Any) -> None:
    urls = [f"zones/us-central1-a/instances/node-{i}" for i in range(3)]
    references = [load_balancer.compute_v1.InstanceReference(instance=url) for url in urls]

    built = load_balancer._naming_instances(request_class, urls)

    assert built == request_class(instances=references)
    assert [reference.instance for reference in built.instances] == urls


def test_the_firewall_targets_the_tag_prefixing_each_instance_name_only(
    provider: Any, api: ComputeApi
) -> None:
    # gce_instances.go:848-905@v36.3.8 computeHostTags: per instance, the longest tag that
    # prefixes its name (used when gce.conf has no node-tags, gce_loadbalancer_external.go:1154).
    # Before: every tag the instances carried, so http-server's other VMs were opened too.
    api.create_instance("web-node-1", tags=["web", "web-node", "http-server"])
    lb = provider.load_balancer()
    service = service_for()

    lb.ensure_load_balancer("c", service, [node_for("web-node-1")])

    name = lb.get_load_balancer_name("c", service)
    assert api.get(f"global/firewalls/k8s-fw-{name}")["targetTags"] == ["web-node"]


def test_no_tag_prefixing_an_instance_name_is_an_error_before_any_write(
    provider: Any, api: ComputeApi, emulator: RunningEmulator
) -> None:
    # gce_instances.go:896-898@v36.3.8 and gce_loadbalancer_external.go:1157-1158: no
    # firewall without its targets. Before: the union of the tags, here none: a firewall
    # without targetTags, which GCE applies to every VM of the network.
    api.create_instance("bare-1")
    emulator.control.reset_calls()

    with pytest.raises(CloudError, match="no tag that prefixes its name"):
        provider.load_balancer().ensure_load_balancer("c", service_for(), [node_for("bare-1")])

    assert write_calls(emulator.control.calls()) == 0


def test_consecutive_ports_are_one_range_in_the_firewall(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # gce_loadbalancer_external.go:1150@v36.3.8 getPortsAndProtocol: port ranges, as GCE
    # allows 100 ports or ranges per firewall. Before: 80, 81, 82 listed one by one.
    lb = provider.load_balancer()
    service = service_for(ports=((80, "TCP"), (81, "TCP"), (82, "TCP"), (443, "TCP")))

    lb.ensure_load_balancer("c", service, nodes)

    firewall = api.get(f"global/firewalls/k8s-fw-{lb.get_load_balancer_name('c', service)}")
    assert firewall["allowed"] == [{"IPProtocol": "tcp", "ports": ["80-82", "443"]}]
