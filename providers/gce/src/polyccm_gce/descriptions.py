"""The descriptions cloud-provider-gcp gives a network load balancer's pieces, byte for byte,
and how polyccm reads them.

Upstream formats them with ``fmt.Sprintf`` templates, not ``json.Marshal``: no space after a
colon, one space after the comma between a firewall's two keys. It compares a health check's
and a firewall's description byte for byte on every sync and rewrites any other form, so
polyccm writes exactly these strings (switching back to upstream then rewrites nothing).
Reading, polyccm compares what a description says (:func:`says`), not its spacing: one in
another form (earlier polyccm wrote ``{"kubernetes.io/service-name": "ns/name"}`` everywhere)
is rewritten only when what it says differs.

=========================  ====================================================================
piece                      description
=========================  ====================================================================
forwarding rule, pool      ``{"kubernetes.io/service-name":"<ns>/<name>"}``
HTTP health check          ``{"kubernetes.io/service-name":"<the check's own name>"}``
firewall ``k8s-fw-<lb>``   ``{"kubernetes.io/service-name":"<ns>/<name>",
                           "kubernetes.io/service-ip":"<the rule's address>"}``
per-service check's        the same as ``k8s-fw-<lb>``
firewall
shared check's firewall    ``{"kubernetes.io/cluster-id":"<cluster id>"}``
=========================  ====================================================================
"""

from __future__ import annotations

import json
from typing import Any

SERVICE_NAME = "kubernetes.io/service-name"
SERVICE_IP = "kubernetes.io/service-ip"
CLUSTER_ID = "kubernetes.io/cluster-id"


def service_description(service_key: str) -> str:
    """A forwarding rule's and a target pool's: the Service's ``namespace/name``."""
    return f'{{"{SERVICE_NAME}":"{service_key}"}}'


def health_check_description(check_name: str) -> str:
    """An HTTP health check's: upstream names the check itself, not a Service."""
    return service_description(check_name)


def firewall_description(service_key: str, address: str) -> str:
    """``k8s-fw-<lb>``'s and a per-service health check's firewall: the Service and the
    forwarding rule's address."""
    return f'{{"{SERVICE_NAME}":"{service_key}", "{SERVICE_IP}":"{address}"}}'


def cluster_description(cluster_id: str) -> str:
    """The shared health check's firewall ``k8s-<cluster-id>-node-http-hc``."""
    return f'{{"{CLUSTER_ID}":"{cluster_id}"}}'


def decoded(description: str) -> dict[str, Any] | None:
    """What a description says (a JSON object in any spacing), or None when it is not one."""
    try:
        value = json.loads(description or "")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def says(description: str, wanted: str) -> bool:
    """Whether ``description`` says what ``wanted`` says, whatever its spacing."""
    have = decoded(description)
    return have is not None and have == decoded(wanted)
