"""``polyccm check-service``: a Service manifest checked offline by the provider's own validation.

The manifest (YAML or JSON, several documents, or a ``List``) is read; every ``Service`` of
``type: LoadBalancer`` without a ``loadBalancerClass`` is completed as the API server would
complete it on create (namespace, port protocols, a UID, node ports) so that the provider sees
what its ``ensure_load_balancer`` would see, and handed to its
:class:`~polyccm.ops.contract.ServiceChecker`. Other objects are passed over.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from polyccm.controllers.service import wants_load_balancer
from polyccm.objects import Service
from polyccm.ops.contract import Problem, ServiceChecker

FIRST_NODE_PORT = 30000
"""Node ports given to ports without one (the API server picks real ones on create)."""


class ManifestError(Exception):
    """The input is not a readable manifest or holds no Service (exit status 2)."""


@dataclass(frozen=True)
class Finding:
    """One problem of one service."""

    service: str
    """``namespace/name``."""
    problem: Problem


def load_services(text: str, source: str) -> list[dict[str, Any]]:
    """Every ``v1`` Service in ``text`` (the contents of ``source``), as written."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(error, "problem", None) or "not YAML"
        raise ManifestError(f"{where}: {problem}") from None
    objects: list[Any] = []
    for document in documents:
        if isinstance(document, Mapping) and document.get("kind") == "List":
            objects.extend(document.get("items") or ())
        else:
            objects.append(document)
    services = [
        dict(o)
        for o in objects
        if isinstance(o, Mapping) and o.get("kind") == "Service" and o.get("apiVersion") == "v1"
    ]
    if not services:
        raise ManifestError(f"{source}: no Service (apiVersion v1) in it")
    for service in services:
        if not isinstance(service.get("metadata"), Mapping) or not service["metadata"].get("name"):
            raise ManifestError(f"{source}: a Service without metadata.name")
        if not isinstance(service.get("spec") or {}, Mapping):
            raise ManifestError(f"{source}: Service {service['metadata']['name']}: spec is no map")
    return services


def completed(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` as the API server would store it: namespace ``default``, a UID, ``TCP`` for
    ports without a protocol, and a node port for each port that has none (unless
    ``spec.allocateLoadBalancerNodePorts`` is false)."""
    service: dict[str, Any] = copy.deepcopy(dict(raw))
    metadata = service.setdefault("metadata", {})
    metadata.setdefault("namespace", "default")
    metadata.setdefault("uid", str(uuid.uuid4()))
    metadata.setdefault("annotations", {})
    spec = service.setdefault("spec", {})
    allocate = spec.get("allocateLoadBalancerNodePorts") is not False
    ports = [dict(p) if isinstance(p, Mapping) else p for p in spec.get("ports") or ()]
    for index, port in enumerate(ports):
        if not isinstance(port, dict):
            continue
        port.setdefault("protocol", "TCP")
        if allocate and spec.get("type") == "LoadBalancer" and not port.get("nodePort"):
            port["nodePort"] = FIRST_NODE_PORT + index
    if ports:
        spec["ports"] = ports
    return service


def check(checker: ServiceChecker, services: list[dict[str, Any]]) -> list[Finding]:
    """The problems of each service that would get a load balancer, in manifest order."""
    findings: list[Finding] = []
    for raw in services:
        service = Service(completed(raw))
        if not wants_load_balancer(service):
            continue
        findings += [Finding(service.key, p) for p in checker.check_service(service)]
    return findings
