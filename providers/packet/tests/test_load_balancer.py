"""Elastic IPs as load balancers: tagged as upstream tags them, found by tag before any
request (a restart or a second leader reserves nothing more), an operator's reservation used
and never released, reserved where upstream's annotations or the config say."""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Mapping
from typing import Any, cast

import pytest
from polyccm.cloud import ProviderContext
from polyccm.errors import InvalidServiceSpec
from polyccm.kube.api import NAMESPACES, SERVICES, KubeApi
from polyccm.objects import Service
from polyccm_packet.load_balancer import (
    EIP_FACILITY_ANNOTATION,
    EIP_METRO_ANNOTATION,
    service_tag,
)
from polyccm_packet.provider import MetalProvider
from polyccm_packet_emulator.testing import MetalApi, MetalCloudUnderTest, control, provider_for
from polyccm_testing.kubeobjects import make_service


def service(name: str = "web", namespace: str = "shop", ip: str = "") -> Service:
    spec: dict[str, Any] = {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}
    if ip:
        spec["loadBalancerIP"] = ip
    return Service({"metadata": {"name": name, "namespace": namespace, "uid": "u-1"},
                    "spec": spec})  # fmt: skip


def annotated(name: str, annotations: Mapping[str, str]) -> Service:
    raw = service(name).raw
    return Service({**raw, "metadata": {**raw["metadata"], "annotations": dict(annotations)}})


def reservations(metal: Mapping[str, str]) -> list[dict[str, Any]]:
    return MetalCloudUnderTest(metal).elastic_ips()


def test_a_service_gets_a_tagged_slash_32_in_the_clusters_metro(metal: Mapping[str, str]) -> None:
    status = (
        provider_for(metal, METAL_CLUSTER_ID="c-1")
        .load_balancer()
        .ensure_load_balancer("kubernetes", service(), [])
    )

    (reserved,) = reservations(metal)
    digest = base64.b64encode(hashlib.sha256(b"shop/web").digest()).decode()
    assert set(reserved["tags"]) == {
        "usage=cloud-provider-equinix-metal-auto", f"service={digest}", "cluster=c-1"
    }  # fmt: skip
    assert (reserved["cidr"], reserved["metro"]["code"]) == (32, "da")
    assert [i.ip for i in status.ingress] == [reserved["address"]]


def test_ensuring_twice_or_from_a_new_provider_reserves_one_address(
    metal: Mapping[str, str],
) -> None:
    first = provider_for(metal).load_balancer().ensure_load_balancer("k", service(), [])
    control(metal).reset_calls()

    again = provider_for(metal).load_balancer().ensure_load_balancer("k", service(), [])
    third = provider_for(metal).load_balancer().ensure_load_balancer("k", service(), [])

    assert first.ingress == again.ingress == third.ingress
    assert len(reservations(metal)) == 1
    assert "requestIPReservation" not in control(metal).calls()


def test_deleting_the_service_releases_only_its_address(metal: Mapping[str, str]) -> None:
    balancer = provider_for(metal).load_balancer()
    balancer.ensure_load_balancer("k", service("web"), [])
    kept = balancer.ensure_load_balancer("k", service("api"), [])

    balancer.ensure_load_balancer_deleted("k", service("web"))
    balancer.ensure_load_balancer_deleted("k", service("web"))

    assert [r["address"] for r in reservations(metal)] == [kept.ingress[0].ip]
    assert balancer.get_load_balancer("k", service("web")) is None


def test_a_load_balancer_ip_naming_a_reservation_is_used_and_never_released(
    metal: Mapping[str, str],
) -> None:
    own = MetalApi(metal).request_ip(tags=["operator"])
    balancer = provider_for(metal).load_balancer()

    status = balancer.ensure_load_balancer("k", service(ip=own["address"]), [])
    balancer.ensure_load_balancer_deleted("k", service(ip=own["address"]))

    assert [i.ip for i in status.ingress] == [own["address"]]
    assert MetalApi(metal).call("GET", f"/ips/{own['id']}").status == 200
    assert reservations(metal) == []


def test_a_load_balancer_ip_the_project_does_not_hold_is_used_with_a_warning(
    metal: Mapping[str, str],
) -> None:
    # Upstream reserves nothing for a Service that names its address (metal/loadbalancers.go:
    # 422@38d15e2) and hands it to the speakers as it is; only a tagged one is released (280).
    balancer = provider_for(metal).load_balancer()

    status = balancer.ensure_load_balancer("k", service(ip="203.0.113.9"), [])
    balancer.ensure_load_balancer_deleted("k", service(ip="203.0.113.9"))

    assert [i.ip for i in status.ingress] == ["203.0.113.9"]
    (warning,) = status.warnings
    assert "203.0.113.9 is not an Elastic IP (/32) of project" in warning
    assert "never released" in warning
    assert reservations(metal) == []
    assert "requestIPReservation" not in control(metal).calls()


def test_the_eip_annotations_choose_where_a_new_address_is_reserved(
    metal: Mapping[str, str],
) -> None:
    balancer = provider_for(metal).load_balancer()

    balancer.ensure_load_balancer("k", annotated("north", {EIP_METRO_ANNOTATION: "ny"}), [])
    balancer.ensure_load_balancer("k", annotated("west", {EIP_FACILITY_ANNOTATION: "sv15"}), [])
    balancer.ensure_load_balancer("k", service("home"), [])

    names = {service_tag(service(name)): f"shop/{name}" for name in ("north", "west", "home")}
    where = {names[r["tags"][1]]: (r["metro"]["code"], (r.get("facility") or {}).get("code"))
             for r in reservations(metal)}  # fmt: skip
    assert where == {
        "shop/north": ("ny", None), "shop/west": ("sv", "sv15"), "shop/home": ("da", None)
    }  # fmt: skip


def test_an_address_found_in_another_metro_is_kept_with_a_warning(
    metal: Mapping[str, str],
) -> None:
    balancer = provider_for(metal).load_balancer()
    first = balancer.ensure_load_balancer("k", service(), [])

    moved = balancer.ensure_load_balancer("k", annotated("web", {EIP_METRO_ANNOTATION: "am"}), [])

    assert moved.ingress == first.ingress
    assert len(reservations(metal)) == 1
    (warning,) = moved.warnings
    assert f"is in metro da, not in metro am (annotation {EIP_METRO_ANNOTATION})" in warning


def test_with_no_metro_or_facility_anywhere_nothing_is_reserved(
    metal: Mapping[str, str],
) -> None:
    unplaced = {k: v for k, v in metal.items() if "METRO" not in k}

    with pytest.raises(InvalidServiceSpec, match="no metro or facility"):
        provider_for(unplaced).load_balancer().ensure_load_balancer("k", service(), [])
    assert reservations(metal) == []


def test_an_ipv6_load_balancer_ip_is_refused_before_any_call(metal: Mapping[str, str]) -> None:
    control(metal).reset_calls()

    with pytest.raises(InvalidServiceSpec, match="not an IPv4 address"):
        provider_for(metal).load_balancer().ensure_load_balancer("k", service(ip="2001:db8::1"), [])
    assert control(metal).calls() == {}


def test_a_term_tags_with_the_kube_system_uid_and_metal_cluster_id_overrides_it(
    metal: Mapping[str, str], kube_api: KubeApi
) -> None:
    # Upstream's cluster= tag is the kube-system namespace's UID, read when its load balancer
    # starts (metal/loadbalancers.go:74-81,111,627-629@38d15e2): two clusters of one project
    # keep apart, and a switch from upstream finds its addresses. polyccm used --cluster-name.
    uid = kube_api.get(NAMESPACES, "kube-system")["metadata"]["uid"]
    by_uid = in_a_term(MetalProvider.from_environment(dict(metal)), kube_api)
    overridden = in_a_term(
        MetalProvider.from_environment({**metal, "METAL_CLUSTER_ID": "c-9"}), kube_api
    )

    by_uid.load_balancer().ensure_load_balancer("k", service("web"), [])
    overridden.load_balancer().ensure_load_balancer("k", service("api"), [])

    clusters = {r["tags"][1]: r["tags"][2] for r in reservations(metal)}
    assert clusters == {
        service_tag(service("web")): f"cluster={uid}", service_tag(service("api")): "cluster=c-9"
    }  # fmt: skip


def in_a_term(provider: MetalProvider, kube_api: KubeApi) -> MetalProvider:
    provider.initialize(
        ProviderContext(
            api=kube_api, nodes=cast(Any, None), services=cast(Any, None),
            recorder=cast(Any, None), stop=threading.Event(),
        )
    )  # fmt: skip
    return provider


def test_the_address_is_written_back_into_spec_and_released_with_the_service(
    metal: Mapping[str, str], kube_api: KubeApi, namespace: str
) -> None:
    # Upstream writes the reserved address into spec.loadBalancerIP (metal/loadbalancers.go:
    # 485-500@38d15e2; kube-vip announces what it names) and no annotation of its own.
    balancer = in_a_term(MetalProvider.from_environment(dict(metal)), kube_api).load_balancer()
    make_service(kube_api, namespace, "web")
    current = Service(kube_api.get(SERVICES, "web", namespace))

    status = balancer.ensure_load_balancer("k", current, [])

    written = Service(kube_api.get(SERVICES, "web", namespace))
    (reserved,) = reservations(metal)
    assert written.load_balancer_ip == reserved["address"] == status.ingress[0].ip
    assert dict(status.service_annotations) == {}
    again = balancer.ensure_load_balancer("k", written, [])
    assert again.ingress == status.ingress and len(reservations(metal)) == 1
    balancer.ensure_load_balancer_deleted("k", written)
    assert reservations(metal) == []


def test_the_eip_annotations_may_be_renamed_as_upstream_allows(metal: Mapping[str, str]) -> None:
    # METAL_ANNOTATION_EIP_METRO/_FACILITY (metal/config.go:165-167, loadbalancers.go:400-401
    # @38d15e2): the Service annotations read under the operator's names, the defaults not.
    balancer = provider_for(metal, METAL_ANNOTATION_EIP_METRO="example.com/metro").load_balancer()

    balancer.ensure_load_balancer("k", annotated("renamed", {"example.com/metro": "ny"}), [])
    balancer.ensure_load_balancer("k", annotated("default", {EIP_METRO_ANNOTATION: "sv"}), [])

    where = {r["tags"][1]: r["metro"]["code"] for r in reservations(metal)}
    assert where == {service_tag(service("renamed")): "ny", service_tag(service("default")): "da"}
