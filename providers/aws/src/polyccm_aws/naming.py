"""Names of the cloud resources made for a service, identical to cloud-provider-aws.

Matching names is what lets polyccm adopt load balancers, security groups and target groups that
an upstream CCM created, instead of creating duplicates.
"""

from __future__ import annotations

import hashlib
import re

from polyccm.cloud import default_load_balancer_name
from polyccm.objects import Service

__all__ = [
    "default_load_balancer_name",
    "elb_security_group_name",
    "nlb_security_group_name",
    "route_name",
    "target_group_name",
    "target_group_prefix",
]

_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def elb_security_group_name(load_balancer_name: str) -> str:
    """The security group upstream creates for a classic ELB: ``k8s-elb-<lb name>``."""
    return f"k8s-elb-{load_balancer_name}"


def elb_security_group_description(load_balancer_name: str, service: Service) -> str:
    return f"Security group for Kubernetes ELB {load_balancer_name} ({service.key})"


def _short(text: str) -> str:
    return _NOT_ALNUM.sub("", text)[:8]


def target_group_prefix(namespace: str, name: str) -> str:
    """The part of a service's target-group names before the hash: ``k8s-<ns:8>-<name:8>``."""
    return f"k8s-{_short(namespace)}-{_short(name)}"


def target_group_name(
    *,
    cluster_id: str,
    namespace: str,
    name: str,
    service_port: int,
    node_port: int,
    target_protocol: str,
    health_check_protocol: str,
    health_check_interval: int,
    target_type: str = "instance",
) -> str:
    """``k8s-<ns:8>-<name:8>-<sha1:10>``: upstream hashes everything a target group cannot
    change in place, so a change of those yields a new group name."""
    digest = hashlib.sha1(usedforsecurity=False)
    for part in (
        cluster_id,
        namespace,
        name,
        str(service_port),
        str(node_port),
        target_protocol,
        target_type,
        health_check_protocol,
        str(health_check_interval),
    ):
        digest.update(part.encode())
    return f"{target_group_prefix(namespace, name)}-{digest.hexdigest()[:10]}"


def nlb_security_group_name(cluster_name: str, service: Service) -> str:
    """The managed NLB security group (``NLBSecurityGroupMode = Managed``), upstream's
    ``k8s-<ns:8>-<name:8>-<sha256:10>`` over cluster name, service name, namespace and UID."""
    digest = hashlib.sha256()
    for part in (cluster_name, service.name, service.namespace, service.uid):
        digest.update(part.encode())
    return f"k8s-{_short(service.namespace)}-{_short(service.name)}-{digest.hexdigest()[:10]}"


NLB_SECURITY_GROUP_DESCRIPTION = "[k8s] Managed SecurityGroup for LoadBalancer"


def route_name(cluster_name: str, destination_cidr: str) -> str:
    """Upstream names a listed route ``<cluster name>-<destination CIDR>``."""
    return f"{cluster_name}-{destination_cidr}"
