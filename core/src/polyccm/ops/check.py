"""``polyccm check-service``: a Service manifest checked offline by the provider's own validation.

The manifest (YAML or JSON, several documents, or a ``List``; at most
:data:`MAX_MANIFEST_BYTES` and :data:`MAX_SERVICES` Services) is read by :mod:`polyccm.inputs`,
and every Service is first held to what the API server would accept
(:mod:`polyccm.ops.service_shape`): a manifest the API server would refuse is bad input, one
line, before any provider sees it. Every ``Service`` of ``type: LoadBalancer`` without a
``loadBalancerClass`` is then completed as the API server would complete it on create
(namespace, port protocols, a UID, node ports) so that the provider sees what its
``ensure_load_balancer`` would see, and handed to its
:class:`~polyccm.ops.contract.ServiceChecker`. Other objects are passed over.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from polyccm import inputs
from polyccm.errors import ConfigError
from polyccm.inputs import cut
from polyccm.objects import Service, wants_load_balancer
from polyccm.ops.contract import Problem, ServiceChecker
from polyccm.ops.service_shape import describe, service_errors, show

FIRST_NODE_PORT = 30000
"""Node ports given to ports without one (the API server picks real ones on create)."""

MAX_MANIFEST_BYTES = 32 << 20
"""The largest manifest read: 32 MiB, room for :data:`MAX_SERVICES` Services of 3 KiB each."""

MAX_SERVICES = 10_000
"""The most Services checked at once: the number of Services per cluster Kubernetes'
scalability thresholds are tested with."""


class ManifestError(Exception):
    """The input is not a readable manifest or holds no Service (exit status 2)."""


@dataclass(frozen=True)
class Finding:
    """One problem of one service."""

    service: str
    """``namespace/name``."""
    problem: Problem


def load_services(text: str, source: str) -> list[dict[str, Any]]:
    """Every ``v1`` Service in ``text`` (the contents of ``source``), as written.

    Raises :class:`ManifestError` (one line) when ``text`` is not YAML or JSON, a document or a
    ``List`` item is not an object, there is no Service or more than :data:`MAX_SERVICES`, or a
    Service holds something the API server would refuse (:mod:`polyccm.ops.service_shape`)."""
    try:
        documents = inputs.load_documents(text, source)
    except ConfigError as error:
        raise ManifestError(str(error)) from None
    objects: list[tuple[str, Any]] = []
    for number, document in enumerate(documents, start=1):
        where = f"document {number}"
        if not isinstance(document, Mapping):
            raise ManifestError(f"{source}: {where} is not an object: {show(document)}")
        if document.get("kind") != "List":
            objects.append((where, document))
            continue
        items = document.get("items")
        if items is not None and not isinstance(items, list):
            raise ManifestError(f"{source}: {where}: items: must be a list: {show(items)}")
        for index, item in enumerate(items or ()):
            if not isinstance(item, Mapping):
                raise ManifestError(
                    f"{source}: {where}: items[{index}] is not an object: {show(item)}"
                )
            objects.append((f"{where}, items[{index}]", item))
    services = [
        (where, dict(o))
        for where, o in objects
        if o.get("kind") == "Service" and o.get("apiVersion") == "v1"
    ]
    if not services:
        raise ManifestError(f"{source}: no Service (apiVersion v1) in it")
    if len(services) > MAX_SERVICES:
        raise ManifestError(
            f"{source}: {len(services)} Services; check-service checks at most {MAX_SERVICES} "
            "at once (split the file)"
        )
    for where, service in services:
        errors = service_errors(service)
        if errors:
            raise ManifestError(
                f"{source}: {_named(service, where)} is invalid: {describe(errors)}"
            )
    return [service for _, service in services]


def _named(service: Mapping[str, Any], where: str) -> str:
    metadata = service.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if isinstance(name, str) and name:
        namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
        shown = f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name
        return f'Service "{cut(shown)}"'
    return f"the Service in {where}"


def completed(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` (which :func:`load_services` accepted) as the API server would store it: a name
    from ``generateName``, namespace ``default``, a UID, ``""`` for null annotations, ``TCP`` for
    ports without a protocol, and a node port for each port that has none (unless
    ``spec.allocateLoadBalancerNodePorts`` is false)."""
    service: dict[str, Any] = copy.deepcopy(dict(raw))
    metadata = service["metadata"] = service.get("metadata") or {}
    if not metadata.get("name"):
        # As the API server names it: generateName and five random characters.
        metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:5]
    if not metadata.get("namespace"):
        metadata["namespace"] = "default"
    if not metadata.get("uid"):
        metadata["uid"] = str(uuid.uuid4())
    # A null annotation is stored as "", as the API server decodes it.
    annotations = metadata.get("annotations") or {}
    metadata["annotations"] = {k: "" if v is None else v for k, v in annotations.items()}
    spec = service["spec"] = service.get("spec") or {}
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
