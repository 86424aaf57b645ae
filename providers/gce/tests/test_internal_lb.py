"""The internal load balancer against the emulator (and, for the finalizer, the real
kube-apiserver): upstream's pieces and names, what delete removes, and adoption of what
cloud-provider-gcp made. Upstream: k8s.io/cloud-provider-gcp v36.3.8 (f67fc7e3),
providers/gce/gce_loadbalancer_internal.go unless another file is named."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from polyccm import cloudcalls
from polyccm.kube.api import SERVICES, ApiError, KubeApi
from polyccm.objects import Service
from polyccm.ops.contract import ADOPT
from polyccm_gce.internal_lb import ILB_FINALIZER
from polyccm_gce_emulator import upstream_made
from polyccm_gce_emulator.testing import (
    REGION,
    ZONE,
    ComputeApi,
    RunningEmulator,
    gce_provider,
    node_for,
    service_for,
    write_calls,
)
from polyccm_testing.kubeobjects import make_service, wait_for

CID = "cafe0123"
INTERNAL = {"networking.gke.io/load-balancer-type": "Internal"}
OTHER_ZONE = "us-central1-b"


@pytest.fixture
def provider(emulator: RunningEmulator) -> Any:
    built = gce_provider(emulator.endpoint, node_tags=("cluster-node",))
    built._cluster_id = CID  # what initialize reads from kube-system/ingress-uid
    return built


@pytest.fixture
def nodes(api: ComputeApi) -> list[Any]:
    made = []
    for name, zone in (("ilb-a", ZONE), ("ilb-b", ZONE), ("ilb-c", OTHER_ZONE)):
        api.create_instance(name, zone=zone, tags=["cluster-node"])
        made.append(node_for(name, zone=zone))
    return made


def names(api: ComputeApi, path: str) -> set[str]:
    return {item["name"] for item in api.list_all(path)}


def members(api: ComputeApi, zone: str) -> set[str]:
    listed = api.request(
        "POST", f"zones/{zone}/instanceGroups/k8s-ig--{CID}/listInstances", {"instanceState": "ALL"}
    )
    return {item["instance"].rsplit("/", 1)[-1] for item in listed.get("items", [])}


def everything(api: ComputeApi) -> dict[str, set[str]]:
    """Every load-balancer piece in the project, by collection."""
    return {
        "rules": names(api, f"regions/{REGION}/forwardingRules"),
        "backends": names(api, f"regions/{REGION}/backendServices"),
        "checks": names(api, "global/healthChecks"),
        "firewalls": names(api, "global/firewalls"),
        "groups": names(api, f"zones/{ZONE}/instanceGroups")
        | names(api, f"zones/{OTHER_ZONE}/instanceGroups"),
        "addresses": names(api, f"regions/{REGION}/addresses"),
    }


def test_an_internal_service_gets_upstreams_pieces(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # Today's main refused it: InvalidServiceSpec "Internal is not supported yet".
    # Pieces and names: :117-121 (backend service, instance group), :141-148 (shared check
    # on :10256/healthz), :189-208 (rule), :600-618 (firewalls); gce_loadbalancer_naming.go:36-91.
    service = service_for(
        "db", ports=((5432, "TCP"), (5433, "TCP")),
        annotations={**INTERNAL,
                     "networking.gke.io/internal-load-balancer-allow-global-access": "true"},
    )  # fmt: skip
    lb = provider.load_balancer()
    name = lb.get_load_balancer_name("c", service)

    status = lb.ensure_load_balancer("c", service, nodes)

    rule = api.get(f"regions/{REGION}/forwardingRules/{name}")
    assert status.ingress[0].ip == rule["IPAddress"]
    assert rule["IPAddress"].startswith("10.128.")  # the subnetwork's, not an external one
    assert (rule["loadBalancingScheme"], rule["IPProtocol"], rule["ports"]) == (
        "INTERNAL", "TCP", ["5432", "5433"],
    )  # fmt: skip
    assert rule["subnetwork"].endswith(f"/regions/{REGION}/subnetworks/default")
    assert rule["allowGlobalAccess"] is True
    assert rule["description"] == f'{{"kubernetes.io/service-name":"{service.key}"}}'
    backend = api.get(f"regions/{REGION}/backendServices/{name}")
    assert rule["backendService"] == backend["selfLink"]
    assert (backend["loadBalancingScheme"], backend["protocol"], backend["sessionAffinity"]) == (
        "INTERNAL", "TCP", "NONE",
    )  # fmt: skip
    assert sorted(b["group"].split("/zones/")[1] for b in backend["backends"]) == [
        f"{ZONE}/instanceGroups/k8s-ig--{CID}",
        f"{OTHER_ZONE}/instanceGroups/k8s-ig--{CID}",
    ]
    assert (members(api, ZONE), members(api, OTHER_ZONE)) == ({"ilb-a", "ilb-b"}, {"ilb-c"})
    check = api.get(f"global/healthChecks/k8s-{CID}-node")
    assert backend["healthChecks"] == [check["selfLink"]]
    assert (check["type"], check["httpHealthCheck"]["port"], check["description"]) == (
        "HTTP", 10256, "",
    )  # fmt: skip
    assert (check["checkIntervalSec"], check["timeoutSec"]) == (8, 1)
    traffic = api.get(f"global/firewalls/k8s-fw-{name}")
    assert traffic["allowed"] == [{"IPProtocol": "tcp", "ports": ["5432-5433"]}]
    assert traffic["destinationRanges"] == [rule["IPAddress"]]
    assert traffic["targetTags"] == ["cluster-node"]
    probes = api.get(f"global/firewalls/k8s-{CID}-node-hc")
    assert (probes["allowed"], probes["description"]) == (
        [{"IPProtocol": "tcp", "ports": ["10256"]}], "",
    )  # fmt: skip
    assert "35.191.0.0/16" in probes["sourceRanges"]


def test_a_second_sync_writes_nothing_and_a_node_change_moves_only_group_members(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    service = service_for(annotations={"cloud.google.com/load-balancer-type": "Internal"})
    lb = provider.load_balancer()
    lb.ensure_load_balancer("c", service, nodes)
    emulator.control.reset_calls()

    lb.ensure_load_balancer("c", service, nodes)
    assert write_calls(emulator.control.calls()) == 0
    lb.update_load_balancer("c", service, nodes[1:])  # ilb-a gone (:347-382)

    calls = emulator.control.calls()
    assert write_calls(calls) == 1
    assert calls["compute.instanceGroups.removeInstances"] == 1
    assert members(api, ZONE) == {"ilb-b"}


def test_local_traffic_policy_gets_its_own_check_and_firewall(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # :141-147 (a per-service check on the healthCheckNodePort), naming.go:68-91, :899-918
    # (its description names the Service).
    service = service_for(
        annotations=INTERNAL, externalTrafficPolicy="Local", healthCheckNodePort=31999
    )
    lb = provider.load_balancer()
    name = lb.get_load_balancer_name("c", service)

    lb.ensure_load_balancer("c", service, nodes)

    check = api.get(f"global/healthChecks/{name}")
    assert check["httpHealthCheck"]["port"] == 31999
    assert check["description"] == f'{{"kubernetes.io/service-name":"{service.key}"}}'
    assert api.get(f"global/firewalls/{name}-hc")["allowed"][0]["ports"] == ["31999"]
    assert f"k8s-{CID}-node" not in names(api, "global/healthChecks")


def test_the_backend_share_annotation_names_upstreams_shared_backend_service(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # naming.go:45-65: k8s-<cid>-internal-<proto>-nmv1-<sha1(affinity)[:16]>, no description.
    service = service_for(
        annotations={**INTERNAL, "alpha.cloud.google.com/load-balancer-backend-share": "true"}
    )
    provider.load_balancer().ensure_load_balancer("c", service, nodes)

    digest = hashlib.sha1(b"None").hexdigest()[:16]  # upstream names it so
    shared = api.get(f"regions/{REGION}/backendServices/k8s-{CID}-internal-tcp-nmv1-{digest}")
    assert shared["description"] == ""


def test_the_subnet_annotation_puts_the_rule_on_that_subnetwork(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # :153-160, gce_annotations.go:192-198.
    api.do(
        "POST",
        f"regions/{REGION}/subnetworks",
        {"name": "ilbs", "network": "global/networks/default", "ipCidrRange": "10.20.0.0/24"},
    )
    service = service_for(
        annotations={**INTERNAL, "networking.gke.io/internal-load-balancer-subnet": "ilbs"}
    )
    lb = provider.load_balancer()

    status = lb.ensure_load_balancer("c", service, nodes)

    rule = api.get(f"regions/{REGION}/forwardingRules/{lb.get_load_balancer_name('c', service)}")
    assert rule["subnetwork"].endswith("/subnetworks/ilbs")
    assert status.ingress[0].ip.startswith("10.20.0.")


def test_an_external_load_balancer_turned_internal_loses_its_external_pieces(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # gce_loadbalancer.go:171-189: the rule of the other scheme is deleted with its pieces.
    external = service_for("web")
    lb = provider.load_balancer()
    name = lb.get_load_balancer_name("c", external)
    lb.ensure_load_balancer("c", external, nodes)
    internal = Service({**external.raw, "metadata": {**external.raw["metadata"],
                                                     "annotations": INTERNAL}})  # fmt: skip

    lb.ensure_load_balancer("c", internal, nodes)

    assert api.get(f"regions/{REGION}/forwardingRules/{name}")["loadBalancingScheme"] == "INTERNAL"
    assert names(api, f"regions/{REGION}/targetPools") == set()
    assert names(api, "global/httpHealthChecks") == set()


def gone(kube_api: KubeApi, namespace: str, name: str) -> bool:
    try:
        kube_api.get(SERVICES, name, namespace)
    except ApiError as error:
        return error.not_found
    return False


def test_the_finalizer_is_added_and_delete_removes_exactly_upstreams_pieces(
    provider: Any, nodes: list[Any], api: ComputeApi, kube_api: KubeApi, namespace: str
) -> None:
    # :99-103 (finalizer added before any piece), :384-471 (delete: address, rule, backend
    # service, k8s-fw-<lb> and legacy <lb>, the check and its firewall, the groups in every
    # zone of the region, then the finalizer). Today's main refused the Service, and its
    # delete removed the external pieces, leaving upstream's finalizer: the Service stayed
    # Terminating.
    def internal(body: dict[str, Any]) -> None:
        body["metadata"]["annotations"] = dict(INTERNAL)

    service = Service(make_service(kube_api, namespace, "db", internal))
    lb = provider.load_balancer()
    lb.kube = kube_api  # as initialize gives it the term's API
    before = everything(api)
    unrelated = service_for("other", annotations=INTERNAL)
    lb.ensure_load_balancer("c", service, nodes)
    assert ILB_FINALIZER in Service(kube_api.get(SERVICES, "db", namespace)).finalizers

    kube_api.delete(SERVICES, "db", namespace)
    terminating = Service(kube_api.get(SERVICES, "db", namespace))
    assert terminating.deletion_timestamp  # held by the finalizer
    lb.ensure_load_balancer_deleted("c", terminating)

    wait_for(lambda: gone(kube_api, namespace, "db"), 10, "the service deleted")
    assert everything(api) == before
    # A second internal load balancer keeps the shared pieces while it uses them.
    lb.ensure_load_balancer("c", unrelated, nodes)
    lb.ensure_load_balancer("c", service_for("third", annotations=INTERNAL), nodes)
    lb.ensure_load_balancer_deleted("c", unrelated)
    assert f"k8s-{CID}-node" in names(api, "global/healthChecks")
    assert f"k8s-ig--{CID}" in names(api, f"zones/{ZONE}/instanceGroups")


def test_an_internal_load_balancer_upstream_made_is_adopted_with_no_write(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    # Upstream's pieces byte for byte (upstream_made.internal_load_balancer, after :59-272);
    # the plan says adopt and the sync writes nothing (the comparisons of :586, :645, :848,
    # :211 find nothing to change).
    cluster = service_for("db", ports=((5432, "TCP"),), annotations=INTERNAL)
    local = service_for("cache", ports=((6379, "TCP"),), annotations=INTERNAL,
                        externalTrafficPolicy="Local", healthCheckNodePort=31999)  # fmt: skip
    zone_nodes = [n for n in nodes if n.provider_id.split("/")[-2] == ZONE]
    for service, ports in ((cluster, ["5432"]), (local, ["6379"])):
        upstream_made.internal_load_balancer(
            api, service, cluster_id=CID, instances=[n.name for n in zone_nodes],
            tags=["cluster-node"], firewall_ports=ports,
        )  # fmt: skip
    emulator.control.reset_calls()

    with cloudcalls.reads_only(provider.read_only_call):
        plans = [
            provider.load_balancer_planner().plan_load_balancer("c", s, zone_nodes)
            for s in (cluster, local)
        ]
    for service in (cluster, local):
        provider.load_balancer().ensure_load_balancer("c", service, zone_nodes)

    assert [(p.action, p.differences) for p in plans] == [(ADOPT, ()), (ADOPT, ())]
    assert write_calls(emulator.control.calls()) == 0


def test_a_rule_made_again_keeps_its_address_and_plans_before_as_create(
    provider: Any, nodes: list[Any], api: ComputeApi, emulator: RunningEmulator
) -> None:
    # :163 and :1073-1085 (ilbIPToUse: the rule's own address while the subnetwork stays),
    # :210-237 (a rule that differs, here by a port and global access, is deleted and made
    # again after the backend service).
    service = service_for("db", annotations=INTERNAL)
    lb = provider.load_balancer()
    name = lb.get_load_balancer_name("c", service)
    with cloudcalls.reads_only(provider.read_only_call):
        before = provider.load_balancer_planner().plan_load_balancer("c", service, nodes)
    first = lb.ensure_load_balancer("c", service, nodes).ingress[0].ip
    raw = {**service.raw, "spec": {**service.raw["spec"]}}
    raw["spec"]["ports"] = [*raw["spec"]["ports"], {"name": "tls", "port": 443, "protocol": "TCP"}]
    wider = {**INTERNAL, "networking.gke.io/internal-load-balancer-allow-global-access": "true"}
    raw["metadata"] = {**raw["metadata"], "annotations": wider}
    emulator.control.reset_calls()

    again = lb.ensure_load_balancer("c", Service(raw), nodes).ingress[0].ip

    assert before.action == "create"
    assert again == first
    rule = api.get(f"regions/{REGION}/forwardingRules/{name}")
    assert (rule["ports"], rule.get("allowGlobalAccess")) == (["80", "443"], True)
    calls = emulator.control.calls()
    assert (calls["compute.forwardingRules.delete"], calls["compute.forwardingRules.insert"]) == (
        1, 1,
    )  # fmt: skip
    assert api.get(f"global/firewalls/k8s-fw-{name}")["allowed"][0]["ports"] == ["80", "443"]


def test_an_internal_load_balancer_turned_external_loses_its_internal_pieces(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # gce_loadbalancer.go:171-189 the other way: the INTERNAL rule's pieces go first (today's
    # main refuses the first ensure, and takes an internal rule upstream made for GKE's RBS
    # controller's, answering ImplementedElsewhere and leaving it).
    internal = service_for("web", annotations=INTERNAL)
    lb = provider.load_balancer()
    name = lb.get_load_balancer_name("c", internal)
    lb.ensure_load_balancer("c", internal, nodes)
    external = Service({**internal.raw, "metadata": {**internal.raw["metadata"],
                                                     "annotations": {}}})  # fmt: skip

    status = lb.ensure_load_balancer("c", external, nodes)

    rule = api.get(f"regions/{REGION}/forwardingRules/{name}")
    assert (rule["loadBalancingScheme"], status.ingress[0].ip) == ("EXTERNAL", rule["IPAddress"])
    assert names(api, f"regions/{REGION}/backendServices") == set()
    assert names(api, "global/healthChecks") == set()
    assert names(api, f"zones/{ZONE}/instanceGroups") == set()


def test_with_ilb_subsets_a_new_internal_service_is_left_to_ingress_gce(
    provider: Any, nodes: list[Any], api: ComputeApi
) -> None:
    # gce.conf alpha-features = ILBSubsets: upstream answers ImplementedElsewhere for a new
    # internal Service (gce_loadbalancer_internal.go:70-75), and for update and delete of one
    # without its v1 finalizer (:353-356, :388-391). Before: polyccm built it, beside the
    # subsetting load balancer GKE's ingress-gce builds.
    from polyccm.errors import ImplementedElsewhere

    lb = provider.load_balancer()
    lb.ilb_subsets = True
    new = service_for("new", annotations=INTERNAL)

    with pytest.raises(ImplementedElsewhere, match="ILBSubsets"):
        lb.ensure_load_balancer("c", new, nodes)
    with pytest.raises(ImplementedElsewhere):
        lb.update_load_balancer("c", new, nodes)
    with pytest.raises(ImplementedElsewhere):
        lb.ensure_load_balancer_deleted("c", new)
    assert everything(api) == {key: set() for key in everything(api)}

    # One this controller served (its v1 finalizer) is still served.
    served = Service({**new.raw, "metadata": {**new.raw["metadata"],
                                              "finalizers": [ILB_FINALIZER]}})  # fmt: skip
    lb.ensure_load_balancer("c", served, nodes)
    assert names(api, f"regions/{REGION}/backendServices") == {
        lb.get_load_balancer_name("c", served)
    }


def test_ilb_subsets_comes_from_gce_conf(emulator: RunningEmulator) -> None:
    from google.oauth2.credentials import Credentials
    from polyccm_gce.api import GceApi
    from polyccm_gce.config import parse_cloud_config
    from polyccm_gce.provider import GceProvider
    from polyccm_gce_emulator.testing import PROJECT, TEST_TOKEN

    config = parse_cloud_config(
        f"[global]\nproject-id = {PROJECT}\nlocal-zone = {ZONE}\n"
        f"api-endpoint = {emulator.endpoint}/compute/v1/\nalpha-features = ILBSubsets\n"
    )
    credentials = Credentials(token=TEST_TOKEN)  # type: ignore[no-untyped-call]
    api = GceApi(PROJECT, config.endpoint, credentials)
    provider = GceProvider(config, api=api, local_zone=ZONE, cluster_name="c")

    assert provider.load_balancer().ilb_subsets is True
