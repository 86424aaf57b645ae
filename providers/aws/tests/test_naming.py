"""Resource names match cloud-provider-aws (expected values are upstream's own test vectors)."""

from __future__ import annotations

import pytest
from polyccm.objects import Service
from polyccm_aws.naming import (
    elb_security_group_name,
    nlb_security_group_name,
    route_name,
    target_group_name,
)


@pytest.mark.parametrize(
    ("cluster_id", "namespace", "expected"),
    [
        ("cluster-a", "default", "k8s-default-servicea-7fa2e07508"),
        ("cluster-b", "default", "k8s-default-servicea-719ee635da"),
        ("cluster-a", "another", "k8s-another-servicea-f66e09847d"),
    ],
)
def test_target_group_names(cluster_id: str, namespace: str, expected: str) -> None:
    name = target_group_name(
        cluster_id=cluster_id,
        namespace=namespace,
        name="service-a",
        service_port=80,
        node_port=8080,
        target_protocol="TCP",
        health_check_protocol="",
        health_check_interval=0,
    )

    assert name == expected


@pytest.mark.parametrize(
    ("cluster", "name", "namespace", "uid", "expected"),
    [
        (
            "test-cluster",
            "my-service",
            "default",
            "12345678-1234-1234-1234-123456789abc",
            "k8s-default-myservic-b7cb8b02f0",
        ),
        ("c", "a", "b", "x", "k8s-b-a-7a83d4e37a"),
        ("test", "---***---", "___@@@___", "special-uid", "k8s---a9ace1b206"),
    ],
)
def test_managed_nlb_security_group_names(
    cluster: str, name: str, namespace: str, uid: str, expected: str
) -> None:
    service = Service({"metadata": {"name": name, "namespace": namespace, "uid": uid}})

    assert nlb_security_group_name(cluster, service) == expected


def test_elb_group_and_route_names() -> None:
    assert elb_security_group_name("a0123") == "k8s-elb-a0123"
    assert route_name("kubernetes", "100.64.1.0/24") == "kubernetes-100.64.1.0/24"
