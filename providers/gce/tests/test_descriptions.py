"""Upstream's descriptions, byte for byte (cloud-provider-gcp's Sprintf templates), and their
reading in any spacing; pure."""

from __future__ import annotations

from polyccm_gce.descriptions import (
    cluster_description,
    decoded,
    firewall_description,
    health_check_description,
    says,
    service_description,
)


def test_the_strings_are_upstreams_own() -> None:
    assert service_description("shop/web") == '{"kubernetes.io/service-name":"shop/web"}'
    assert health_check_description("k8s-cafe-node") == (
        '{"kubernetes.io/service-name":"k8s-cafe-node"}'
    )
    assert firewall_description("shop/web", "203.0.113.7") == (
        '{"kubernetes.io/service-name":"shop/web", "kubernetes.io/service-ip":"203.0.113.7"}'
    )
    assert cluster_description("cafe") == '{"kubernetes.io/cluster-id":"cafe"}'


def test_a_description_is_read_by_what_it_says_not_its_spacing() -> None:
    upstream = firewall_description("shop/web", "203.0.113.7")
    spaced = '{"kubernetes.io/service-name": "shop/web", "kubernetes.io/service-ip": "203.0.113.7"}'

    assert says(spaced, upstream)
    assert (
        decoded(spaced)
        == decoded(upstream)
        == {
            "kubernetes.io/service-name": "shop/web",
            "kubernetes.io/service-ip": "203.0.113.7",
        }
    )
    # What earlier polyccm wrote on every piece says less: no address.
    assert not says('{"kubernetes.io/service-name": "shop/web"}', upstream)
    assert says('{"kubernetes.io/service-name": "shop/web"}', service_description("shop/web"))
    for other in ("", "not json", "[]", firewall_description("shop/web", "203.0.113.8")):
        assert not says(other, upstream)
