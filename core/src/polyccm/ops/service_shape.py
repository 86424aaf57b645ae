"""What the API server would refuse in a Service manifest, found before any provider sees it.

``polyccm check-service`` reads Services from a file, not from the API server, so nothing has
decoded them into the ``v1.Service`` types yet: a port may be the string ``"eighty"``, an
annotation a list, ``metadata`` a number. :func:`service_errors` checks every field polyccm or a
provider reads (types, and the value rules of the API server's validation that ensure relies on:
port ranges, protocols, the service type, names, the annotations' size), so that the providers'
checks only ever see a Service the API server could have stored.

Each problem is worded as the API server's field errors are (``FIELD: Invalid value: VALUE:
DETAIL``, ``FIELD: Required value``, ``FIELD: Unsupported value: ...``); a wrong type, which the
API server reports as a decoding error, is an ``Invalid value`` that says the type it must have.
Echoed values are cut (:func:`polyccm.inputs.cut`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from polyccm.inputs import cut

INT32 = (-(2**31), 2**31 - 1)
MAX_ANNOTATIONS_BYTES = 256 * 1024
"""The total size the API server allows the annotations of an object (keys and values)."""

SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
PROTOCOLS = ("SCTP", "TCP", "UDP")
TRAFFIC_POLICIES = ("Cluster", "Local")
SESSION_AFFINITIES = ("ClientIP", "None")
IP_FAMILIES = ("IPv4", "IPv6")
IP_FAMILY_POLICIES = ("PreferDualStack", "RequireDualStack", "SingleStack")

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

DNS1035_DETAIL = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
DNS1123_DETAIL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character"
)
QUALIFIED_NAME_DETAIL = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)

MAX_ERRORS = 5
"""Problems :func:`describe` names before counting the rest."""


def show(value: Any) -> str:
    """A bad value as a field error shows it: strings in double quotes, numbers and booleans
    as they are, anything else as JSON; cut to a one-line echo."""
    if isinstance(value, str):
        return cut(json.dumps(value, ensure_ascii=False)[1:-1]).join('""')
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return cut(repr(value))
    return cut(json.dumps(value, ensure_ascii=False, default=str))


def invalid(field: str, value: Any, detail: str) -> str:
    return f"{field}: Invalid value: {show(value)}: {detail}"


def unsupported(field: str, value: Any, supported: tuple[str, ...]) -> str:
    listed = ", ".join(f'"{s}"' for s in supported)
    return f"{field}: Unsupported value: {show(value)}: supported values: {listed}"


def required(field: str, detail: str = "") -> str:
    return f"{field}: Required value" + (f": {detail}" if detail else "")


def describe(errors: list[str]) -> str:
    """``errors`` on one line, as the API server aggregates them (``[a, b]`` for several);
    past :data:`MAX_ERRORS`, the rest are counted."""
    shown = errors[:MAX_ERRORS]
    if len(errors) > MAX_ERRORS:
        shown.append(f"and {len(errors) - MAX_ERRORS} more")
    return shown[0] if len(shown) == 1 else f"[{', '.join(shown)}]"


# -- types --------------------------------------------------------------------------------------

Check = Callable[[str, Any], list[str]]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def string(field: str, value: Any) -> list[str]:
    if value is None or isinstance(value, str):
        return []
    return [invalid(field, value, "must be a string")]


def boolean(field: str, value: Any) -> list[str]:
    if value is None or isinstance(value, bool):
        return []
    return [invalid(field, value, "must be a boolean")]


def integer(field: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not _is_int(value) or not INT32[0] <= value <= INT32[1]:
        return [invalid(field, value, "must be an integer")]
    return []


def obj(field: str, value: Any) -> list[str]:
    if value is None or isinstance(value, Mapping):
        return []
    return [invalid(field, value, "must be an object")]


def list_of(check: Check) -> Check:
    def checked(field: str, value: Any) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list):
            return [invalid(field, value, "must be a list")]
        return [e for index, item in enumerate(value) for e in check(f"{field}[{index}]", item)]

    return checked


def string_map(field: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [invalid(field, value, "must be an object of strings")]
    # A null value is read as "" by the API server: allowed here too (completed() writes "").
    return [
        invalid(f"{field}[{cut(str(key))}]", item, "must be a string")
        for key, item in value.items()
        if item is not None and not isinstance(item, str)
    ]


def one_of(choices: tuple[str, ...]) -> Check:
    def checked(field: str, value: Any) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, str):
            return [invalid(field, value, "must be a string")]
        return [] if value in choices else [unsupported(field, value, choices)]

    return checked


def fields(checks: Mapping[str, Check]) -> Check:
    """An object whose named fields pass their checks (others are not looked at)."""

    def checked(field: str, value: Any) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, Mapping):
            return [invalid(field, value, "must be an object")]
        return [
            e
            for name, check in checks.items()
            for e in check(f"{field}.{name}" if field else name, value.get(name))
        ]

    return checked


# -- the Service --------------------------------------------------------------------------------


PORT_RANGE = "must be between 1 and 65535, inclusive"


def _port_number(field: str, value: Any) -> list[str]:
    if _is_int(value) and not 1 <= value <= 65535:
        return [invalid(field, value, PORT_RANGE)]
    return integer(field, value)


def _node_port(field: str, value: Any) -> list[str]:
    if _is_int(value) and not 0 <= value <= 65535:
        return [invalid(field, value, "must be between 0 and 65535, inclusive")]
    return integer(field, value)


def _target_port(field: str, value: Any) -> list[str]:
    if value is None or isinstance(value, str):
        return []
    if _is_int(value) and not 0 <= value <= 65535:
        return [invalid(field, value, PORT_RANGE)]
    return [] if _is_int(value) else [invalid(field, value, "must be an integer or a string")]


_PORT = fields(
    {
        "name": string,
        "protocol": one_of(PROTOCOLS),
        "appProtocol": string,
        "port": _port_number,
        "targetPort": _target_port,
        "nodePort": _node_port,
    }
)

_SPEC = fields(
    {
        "type": one_of(SERVICE_TYPES),
        "ports": list_of(_PORT),
        "selector": string_map,
        "clusterIP": string,
        "clusterIPs": list_of(string),
        "externalIPs": list_of(string),
        "externalName": string,
        "externalTrafficPolicy": one_of(TRAFFIC_POLICIES),
        "internalTrafficPolicy": one_of(TRAFFIC_POLICIES),
        "healthCheckNodePort": _node_port,
        "sessionAffinity": one_of(SESSION_AFFINITIES),
        "sessionAffinityConfig": obj,
        "loadBalancerIP": string,
        "loadBalancerSourceRanges": list_of(string),
        "loadBalancerClass": string,
        "allocateLoadBalancerNodePorts": boolean,
        "publishNotReadyAddresses": boolean,
        "ipFamilies": list_of(one_of(IP_FAMILIES)),
        "ipFamilyPolicy": one_of(IP_FAMILY_POLICIES),
        "trafficDistribution": string,
    }
)

_INGRESS = fields({"ip": string, "hostname": string, "ipMode": string, "ports": list_of(obj)})
_STATUS = fields(
    {"loadBalancer": fields({"ingress": list_of(_INGRESS)}), "conditions": list_of(obj)}
)

_METADATA = fields(
    {
        "name": string,
        "generateName": string,
        "namespace": string,
        "uid": string,
        "resourceVersion": string,
        "deletionTimestamp": string,
        "labels": string_map,
        "annotations": string_map,
        "finalizers": list_of(string),
    }
)


def service_errors(service: Mapping[str, Any]) -> list[str]:
    """What the API server would refuse in ``service`` (a ``v1`` ``Service`` as written), in
    field order; empty when it could be stored."""
    metadata = service.get("metadata")
    errors = _METADATA("metadata", metadata)
    if not errors:
        errors += _metadata_values(metadata or {})
    errors += _SPEC("spec", service.get("spec"))
    errors += _STATUS("status", service.get("status"))
    if not errors:
        errors += _spec_values(service.get("spec") or {})
    return errors


def _metadata_values(metadata: Mapping[str, Any]) -> list[str]:
    errors: list[str] = []
    name = metadata.get("name")
    if not name and not metadata.get("generateName"):
        errors.append(required("metadata.name", "name or generateName is required"))
    elif name and (len(name) > 63 or not _DNS1035.fullmatch(name)):
        errors.append(invalid("metadata.name", name, DNS1035_DETAIL))
    namespace = metadata.get("namespace")
    if namespace and (len(namespace) > 63 or not _DNS1123_LABEL.fullmatch(namespace)):
        errors.append(invalid("metadata.namespace", namespace, DNS1123_DETAIL))
    annotations = metadata.get("annotations") or {}
    size = 0
    for key, value in annotations.items():
        size += len(key.encode()) + len((value or "").encode())
        if not _qualified_name(key):
            errors.append(invalid("metadata.annotations", key, QUALIFIED_NAME_DETAIL))
    if size > MAX_ANNOTATIONS_BYTES:
        errors.append(
            f"metadata.annotations: Too long: may not be more than {MAX_ANNOTATIONS_BYTES} bytes"
        )
    return errors


def _qualified_name(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and bool(_QUALIFIED_NAME.fullmatch(name))


def _spec_values(spec: Mapping[str, Any]) -> list[str]:
    errors: list[str] = []
    ports = spec.get("ports") or []
    if spec.get("type") in ("LoadBalancer", "NodePort") and not ports:
        errors.append(required("spec.ports"))
    for index, port in enumerate(ports):
        port = port or {}  # a null item decodes as an empty port
        if port.get("port") is None:
            errors.append(invalid(f"spec.ports[{index}].port", 0, PORT_RANGE))
        if len(ports) > 1 and not port.get("name"):
            errors.append(required(f"spec.ports[{index}].name"))
    return errors
