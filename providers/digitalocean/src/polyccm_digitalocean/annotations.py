"""Service annotations -> the load-balancer request DigitalOcean should get: pure functions.

:func:`load_balancer_spec` reads a service the way digitalocean-cloud-controller-manager does
and checks every value and every combination before any cloud call. What upstream refuses
raises :class:`~polyccm.errors.InvalidServiceSpec` with a message naming the annotation (it
becomes the service's Warning event); what upstream silently ignores (DO #322, #512: an
annotation that does nothing) is kept in :attr:`LoadBalancerSpec.warnings`, each naming the
annotation, and becomes a ``LoadBalancerWarning`` event.

``spec.loadBalancerSourceRanges`` is the firewall's allow list when set (``cidr:<network>``
each, as upstream since v0.1.52), taking precedence over the ``allow-rules`` annotation.

The type is the ``type`` annotation's, else the default (``REGIONAL_NETWORK``, upstream's since
v0.1.61; ``DEFAULT_LB_TYPE`` chooses), but an existing load balancer keeps its own
(``fixed_type``): DigitalOcean cannot change it, and upstream sets the annotation back to it. A
``REGIONAL_NETWORK`` load balancer forwards each port as tcp or udp to the service port itself
(no nodePort needed), as upstream's ``buildRegionalNetworkForwardingRule``; the protocol, port
list, certificate and passthrough annotations mean nothing to it (upstream ignores them: here a
warning names each).

The health check is upstream's buildHealthCheck: kube-proxy's ``/healthz`` on 10256 (or the
healthCheckNodePort with externalTrafficPolicy Local) over http with ``proxy_protocol: false``,
unless ``override-health-check`` is present (any value, even empty); its interval, timeout and
thresholds are always sent (their annotations', else 3/5/3/5). The network stack is the
annotation's, else the existing load balancer's, else IPV4 for INTERNAL, DUALSTACK for REGIONAL,
and for REGIONAL_NETWORK decided with the nodes (:mod:`polyccm_digitalocean.backends`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from polyccm.cloud import default_load_balancer_name
from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service

PREFIX = "service.beta.kubernetes.io/do-loadbalancer-"
#: Where the load balancer's id is kept on the service (written through the contract).
LOAD_BALANCER_ID = "kubernetes.digitalocean.com/load-balancer-id"
DISOWN = "service.kubernetes.io/do-loadbalancer-disown"

NAME = PREFIX + "name"
PROTOCOL = PREFIX + "protocol"
HTTP_PORTS = PREFIX + "http-ports"
TLS_PORTS = PREFIX + "tls-ports"
HTTP2_PORTS = PREFIX + "http2-ports"
HTTP3_PORT = PREFIX + "http3-port"
TLS_PASSTHROUGH = PREFIX + "tls-passthrough"
CERTIFICATE_ID = PREFIX + "certificate-id"
CERTIFICATE_NAME = PREFIX + "certificate-name"
HOSTNAME = PREFIX + "hostname"
REDIRECT_HTTP_TO_HTTPS = PREFIX + "redirect-http-to-https"
DISABLE_LETS_ENCRYPT_DNS_RECORDS = PREFIX + "disable-lets-encrypt-dns-records"
SIZE_SLUG = PREFIX + "size-slug"
SIZE_UNIT = PREFIX + "size-unit"
STICKY_TYPE = PREFIX + "sticky-sessions-type"
STICKY_COOKIE_NAME = PREFIX + "sticky-sessions-cookie-name"
STICKY_COOKIE_TTL = PREFIX + "sticky-sessions-cookie-ttl"
PROXY_PROTOCOL = PREFIX + "enable-proxy-protocol"
BACKEND_KEEPALIVE = PREFIX + "enable-backend-keepalive"
IDLE_TIMEOUT = PREFIX + "http-idle-timeout-seconds"
HC_PATH = PREFIX + "healthcheck-path"
HC_PORT = PREFIX + "healthcheck-port"
HC_PROTOCOL = PREFIX + "healthcheck-protocol"
HC_INTERVAL = PREFIX + "healthcheck-check-interval-seconds"
HC_TIMEOUT = PREFIX + "healthcheck-response-timeout-seconds"
HC_UNHEALTHY = PREFIX + "healthcheck-unhealthy-threshold"
HC_HEALTHY = PREFIX + "healthcheck-healthy-threshold"
OVERRIDE_HEALTH_CHECK = PREFIX + "override-health-check"
ALLOW_RULES = PREFIX + "allow-rules"
DENY_RULES = PREFIX + "deny-rules"
TYPE = PREFIX + "type"
NETWORK = PREFIX + "network"
NETWORK_STACK = PREFIX + "network-stack"
#: Deprecated upstream (lb_annotations.go:116-121): read and sent, but DigitalOcean ignores it.
ALGORITHM = PREFIX + "algorithm"

HEALTH_CHECK_ANNOTATIONS = (HC_PATH, HC_PORT, HC_PROTOCOL, HC_INTERVAL, HC_TIMEOUT,
                            HC_UNHEALTHY, HC_HEALTHY)  # fmt: skip
KNOWN = frozenset({
    NAME, PROTOCOL, HTTP_PORTS, TLS_PORTS, HTTP2_PORTS, HTTP3_PORT, TLS_PASSTHROUGH,
    CERTIFICATE_ID, CERTIFICATE_NAME, HOSTNAME, REDIRECT_HTTP_TO_HTTPS,
    DISABLE_LETS_ENCRYPT_DNS_RECORDS, SIZE_SLUG, SIZE_UNIT, STICKY_TYPE, STICKY_COOKIE_NAME,
    STICKY_COOKIE_TTL, PROXY_PROTOCOL, BACKEND_KEEPALIVE, IDLE_TIMEOUT, OVERRIDE_HEALTH_CHECK,
    ALLOW_RULES, DENY_RULES, TYPE, NETWORK, NETWORK_STACK, ALGORITHM, *HEALTH_CHECK_ANNOTATIONS,
})  # fmt: skip

#: kube-proxy's health endpoint, the default health check (as upstream).
KUBE_PROXY_HEALTH_PORT = 10256
KUBE_PROXY_HEALTH_PATH = "/healthz"
PROTOCOLS = ("tcp", "http", "https", "http2", "http3")
SIZE_SLUGS = ("lb-small", "lb-medium", "lb-large")
#: The types upstream's getType accepts, spelled exactly so (GLOBAL and lowercase refused).
TYPES = ("REGIONAL", "REGIONAL_NETWORK")
REGIONAL_NETWORK = "REGIONAL_NETWORK"
#: Upstream's default type since v0.1.61 (May 2025), when neither the annotation nor
#: ``DEFAULT_LB_TYPE`` says otherwise.
DEFAULT_TYPE = REGIONAL_NETWORK
#: What ``DEFAULT_LB_TYPE`` may choose (upstream's choice: GLOBAL is never a default).
DEFAULT_TYPES = ("REGIONAL", REGIONAL_NETWORK)
#: Annotations only an HTTP(S)-capable load balancer reads: ignored on REGIONAL_NETWORK.
LAYER7_ANNOTATIONS = (PROTOCOL, HTTP_PORTS, TLS_PORTS, HTTP2_PORTS, HTTP3_PORT, TLS_PASSTHROUGH,
                      CERTIFICATE_ID, CERTIFICATE_NAME)  # fmt: skip
NETWORKS = ("EXTERNAL", "INTERNAL")
NETWORK_STACKS = ("IPV4", "DUALSTACK")
IPV4, DUALSTACK = NETWORK_STACKS
#: upstream's buildHealthCheck figures when no annotation gives one: interval, timeout,
#: unhealthy and healthy thresholds (always sent, so DigitalOcean's own 10/5/5/3 never apply).
HEALTH_CHECK_FIGURES = (
    (HC_INTERVAL, "check_interval_seconds", 3, 3, 300),
    (HC_TIMEOUT, "response_timeout_seconds", 5, 3, 300),
    (HC_UNHEALTHY, "unhealthy_threshold", 3, 2, 10),
    (HC_HEALTHY, "healthy_threshold", 5, 2, 10),
)
#: The port a certificate or tls-passthrough makes https when no tls-ports says otherwise.
DEFAULT_SECURE_PORT = 443
_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9.-]{0,254}$")
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


@dataclass(frozen=True)
class LoadBalancerSpec:
    """The checked request body (without region, droplets and VPC) and what to tell the user."""

    name: str
    body: Mapping[str, Any]
    certificate_name: str = ""
    """A certificate to find by name: its id goes into every rule that needs one."""
    hostname: str = ""
    """The ingress hostname to report instead of the IP."""
    disowned: bool = False
    warnings: tuple[str, ...] = field(default=())
    stack_from_nodes: bool = False
    """REGIONAL_NETWORK EXTERNAL with no ``network-stack``: DUALSTACK only when every backend
    node is dual-stack (decided with the nodes; ``body`` says IPV4 until then)."""


def _bool(annotations: Mapping[str, str], key: str, default: bool = False) -> bool:
    value = annotations.get(key)
    if value is None or value.strip() == "":
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidServiceSpec(f"annotation {key}: {value!r} is not true or false")


def _int(annotations: Mapping[str, str], key: str, low: int, high: int) -> int | None:
    value = annotations.get(key)
    if value is None or value.strip() == "":
        return None
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidServiceSpec(f"annotation {key}: {value!r} is not a whole number") from None
    if not low <= number <= high:
        raise InvalidServiceSpec(f"annotation {key}: {number} is not between {low} and {high}")
    return number


def _choice(annotations: Mapping[str, str], key: str, choices: tuple[str, ...], default: str,
            *, upper: bool = False) -> str:  # fmt: skip
    value = annotations.get(key, "").strip()
    if not value:
        return default
    value = value.upper() if upper else value.lower()
    if value not in choices:
        raise InvalidServiceSpec(f"annotation {key}: {value!r} is not one of {', '.join(choices)}")
    return value


def _ports(annotations: Mapping[str, str], key: str, service_ports: set[int]) -> set[int]:
    value = annotations.get(key, "").strip()
    if not value:
        return set()
    ports: set[int] = set()
    for item in value.split(","):
        item = item.strip()
        if not item.isdigit():
            raise InvalidServiceSpec(f"annotation {key}: {item!r} is not a port number")
        port = int(item)
        if port not in service_ports:
            raise InvalidServiceSpec(f"annotation {key}: port {port} is not a port of the service")
        ports.add(port)
    return ports


def _rules(annotations: Mapping[str, str], key: str) -> list[str]:
    value = annotations.get(key, "").strip()
    rules: list[str] = []
    for item in (part.strip() for part in value.split(",") if part.strip()):
        kind, _, address = item.partition(":")
        try:
            if kind == "ip":
                ipaddress.ip_address(address)
            elif kind == "cidr":
                ipaddress.ip_network(address, strict=False)
            else:
                raise ValueError(kind)
        except ValueError:
            raise InvalidServiceSpec(
                f"annotation {key}: {item!r} is not ip:<address> or cidr:<network>"
            ) from None
        rules.append(item)
    return rules


def _allowed(service: Service, warnings: list[str]) -> list[str]:
    """The firewall's allow list: ``spec.loadBalancerSourceRanges`` as ``cidr:<network>`` rules
    (each network written as Go writes a parsed one: host bits cleared), else ``allow-rules``."""
    ranges = service.load_balancer_source_ranges
    if not ranges:
        return _rules(service.annotations, ALLOW_RULES)
    allowed: dict[str, None] = {}
    for value in ranges:
        try:
            if "/" not in value:
                raise ValueError(value)
            network = ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            raise InvalidServiceSpec(
                f"spec.loadBalancerSourceRanges: {value!r} is not a network (10.0.0.0/24)"
            ) from None
        allowed[f"cidr:{network}"] = None
    if service.annotations.get(ALLOW_RULES, "").strip():
        warnings.append(f"annotation {ALLOW_RULES} is ignored: spec.loadBalancerSourceRanges "
                        "take precedence")  # fmt: skip
    return list(allowed)


def disowned(service: Service) -> bool:
    """Whether ``service`` disowns its load balancer: read before anything else, as upstream's
    getDisownLB is first in each of its calls (a disowned service's other annotations are never
    read, and no cloud call is made for it)."""
    return _bool(service.annotations, DISOWN)


def _type(annotations: Mapping[str, str], default_type: str, fixed_type: str,
          warnings: list[str]) -> str:  # fmt: skip
    """The type as upstream's getType reads it: REGIONAL or REGIONAL_NETWORK spelled exactly so
    (GLOBAL, which needs glb_settings upstream never sends, and lowercase refused); an existing
    load balancer keeps its own."""
    asked = annotations.get(TYPE, "").strip()
    if asked and asked not in TYPES:
        raise InvalidServiceSpec(f"annotation {TYPE}: {asked!r} is not one of {', '.join(TYPES)} "
                                 "(spelled in capitals)")  # fmt: skip
    lb_type = asked or default_type
    if fixed_type and fixed_type != lb_type:
        if asked:
            warnings.append(f"annotation {TYPE}: the load balancer is {fixed_type} and its type "
                            f"cannot change; {lb_type} ignored")  # fmt: skip
        lb_type = fixed_type
    if lb_type not in TYPES:
        raise InvalidServiceSpec(f"the load balancer is {lb_type}: only {', '.join(TYPES)} "
                                 "load balancers are managed")  # fmt: skip
    return lb_type


def _network_stack(annotations: Mapping[str, str], lb_type: str, network: str,
                   fixed_stack: str) -> tuple[str, bool]:  # fmt: skip
    """The network stack as upstream's getNetworkStack decides it, and whether the nodes decide
    it: the annotation's, else an existing load balancer's own (adopting never changes it), else
    IPV4 for INTERNAL, DUALSTACK for REGIONAL, and for REGIONAL_NETWORK DUALSTACK only when every
    backend node is dual-stack. INTERNAL and DUALSTACK are refused together."""
    stack = _choice(annotations, NETWORK_STACK, NETWORK_STACKS, "", upper=True)
    from_nodes = False
    if not stack:
        if fixed_stack in NETWORK_STACKS:
            stack = fixed_stack
        elif network == "INTERNAL":
            stack = IPV4
        elif lb_type == REGIONAL_NETWORK:
            stack, from_nodes = IPV4, True
        else:
            stack = DUALSTACK
    if stack == DUALSTACK and network == "INTERNAL":
        raise InvalidServiceSpec(f"annotation {NETWORK_STACK}: DUALSTACK is not supported for an "
                                 f"INTERNAL load balancer ({NETWORK})")  # fmt: skip
    return stack, from_nodes


def load_balancer_spec(
    service: Service,
    *,
    default_name: str,
    default_type: str = DEFAULT_TYPE,
    fixed_type: str = "",
    fixed_stack: str = "",
) -> LoadBalancerSpec:
    """The load balancer ``service`` asks for; :class:`InvalidServiceSpec` naming the annotation
    for anything upstream refuses. ``fixed_type``, ``fixed_stack``: the type and network stack
    of the load balancer that exists already (the type wins; the stack is kept unless annotated).
    No cloud call."""
    annotations = service.annotations
    warnings: list[str] = []
    for key in sorted(annotations):
        if key.startswith(PREFIX) and key not in KNOWN:
            warnings.append(f"annotation {key} is not a DigitalOcean load-balancer annotation; "
                            "ignored (misspelled?)")  # fmt: skip
    is_disowned = disowned(service)
    name = annotations.get(NAME, "").strip() or default_name
    if not _NAME.match(name):
        raise InvalidServiceSpec(
            f"annotation {NAME}: {name!r} is not a valid name (letters, digits, dots and "
            "dashes, at most 255)"
        )
    lb_type = _type(annotations, default_type, fixed_type, warnings)
    network = _choice(annotations, NETWORK, NETWORKS, "EXTERNAL", upper=True)
    network_stack, stack_from_nodes = _network_stack(annotations, lb_type, network, fixed_stack)

    if lb_type == REGIONAL_NETWORK:
        rules, certificate_name = _network_rules(service), ""
        rule_warnings = _layer7_ignored(service)
    else:
        rules, rule_warnings, certificate_name = _forwarding_rules(service)
    warnings.extend(rule_warnings)
    body: dict[str, Any] = {
        "name": name,
        "type": lb_type,
        "network": network,
        "network_stack": network_stack,
        "forwarding_rules": rules,
        "health_check": _health_check(service, warnings),
        "sticky_sessions": _sticky_sessions(annotations, warnings),
        "redirect_http_to_https": _bool(annotations, REDIRECT_HTTP_TO_HTTPS),
        "enable_proxy_protocol": _bool(annotations, PROXY_PROTOCOL),
        "enable_backend_keepalive": _bool(annotations, BACKEND_KEEPALIVE),
        "disable_lets_encrypt_dns_records": _bool(annotations, DISABLE_LETS_ENCRYPT_DNS_RECORDS),
        "firewall": {"allow": _allowed(service, warnings),
                     "deny": _rules(annotations, DENY_RULES)},
    }  # fmt: skip
    idle = _int(annotations, IDLE_TIMEOUT, 30, 600)
    body["http_idle_timeout_seconds"] = 60 if idle is None else idle
    if body["redirect_http_to_https"] and not any(
        r["entry_protocol"] in ("https", "http2", "http3") for r in rules
    ):
        warnings.append(f"annotation {REDIRECT_HTTP_TO_HTTPS}: no https port to redirect to; "
                        "ignored")  # fmt: skip
    if lb_type == "REGIONAL_NETWORK" and idle is not None:
        warnings.append(f"annotation {IDLE_TIMEOUT}: a REGIONAL_NETWORK load balancer has no "
                        "http idle timeout; ignored")  # fmt: skip
    size_slug = annotations.get(SIZE_SLUG, "").strip()
    size_unit = _int(annotations, SIZE_UNIT, 1, 100)
    if size_slug and size_unit is not None:
        raise InvalidServiceSpec(f"annotations {SIZE_SLUG} and {SIZE_UNIT} conflict: set one")
    if size_slug:
        if size_slug not in SIZE_SLUGS:
            raise InvalidServiceSpec(
                f"annotation {SIZE_SLUG}: {size_slug!r} is not one of {', '.join(SIZE_SLUGS)}"
            )
        body["size"] = size_slug
    if size_unit is not None:
        body["size_unit"] = size_unit
    return LoadBalancerSpec(
        name=name,
        body=body,
        certificate_name=certificate_name,
        hostname=annotations.get(HOSTNAME, "").strip(),
        disowned=is_disowned,
        warnings=tuple(warnings),
        stack_from_nodes=stack_from_nodes,
    )


def service_spec(
    service: Service,
    *,
    default_type: str = DEFAULT_TYPE,
    fixed_type: str = "",
    fixed_stack: str = "",
) -> LoadBalancerSpec:
    """The load balancer ``service`` asks for, named ``a`` + its UID unless the ``name``
    annotation says otherwise: what ensure, ``polyccm plan`` and ``polyccm check-service`` all
    check first. No cloud call."""
    return load_balancer_spec(service, default_name=default_load_balancer_name(service),
                              default_type=default_type, fixed_type=fixed_type,
                              fixed_stack=fixed_stack)  # fmt: skip


def _network_rules(service: Service) -> list[dict[str, Any]]:
    """REGIONAL_NETWORK: each port forwarded as tcp or udp to the same port on the droplets."""
    rules: list[dict[str, Any]] = []
    for port in service.ports:
        protocol = (port.protocol or "TCP").lower()
        if protocol not in ("tcp", "udp"):
            raise InvalidServiceSpec(
                f"port {port.port} uses {port.protocol}: a REGIONAL_NETWORK load balancer "
                "forwards TCP and UDP only"
            )
        rules.append({"entry_protocol": protocol, "entry_port": port.port,
                      "target_protocol": protocol, "target_port": port.port})  # fmt: skip
    if not rules:
        raise InvalidServiceSpec("the service has no port to forward")
    return rules


def _layer7_ignored(service: Service) -> list[str]:
    """A warning for each annotation a REGIONAL_NETWORK load balancer does not read (``protocol:
    tcp`` and ``tls-passthrough: false`` ask for nothing it lacks)."""
    said: list[str] = []
    for key in LAYER7_ANNOTATIONS:
        value = service.annotations.get(key, "").strip().lower()
        harmless = {PROTOCOL: ("tcp",), TLS_PASSTHROUGH: _FALSE}.get(key, ())
        if value and value not in harmless:
            said.append(f"annotation {key} is ignored: a {REGIONAL_NETWORK} load balancer "
                        "forwards tcp and udp to the service port")  # fmt: skip
    return said


def _forwarding_rules(service: Service) -> tuple[list[dict[str, Any]], list[str], str]:
    """One rule per service port as upstream's buildForwardingRules: the ``protocol`` default,
    then http-ports, tls-ports and http2-ports in that order of precedence (udp stays udp); a
    certificate or tls-passthrough makes 443 https unless tls-ports names ports or http2-ports
    names 443; and an http3 rule beside the https or http2 rule of the http3-port."""
    annotations = service.annotations
    warnings: list[str] = []
    ports = [p for p in service.ports if p.node_port]
    if not ports:
        raise InvalidServiceSpec("the service has no port with a nodePort to forward to")
    numbers = {p.port for p in ports}
    default = _choice(annotations, PROTOCOL, PROTOCOLS, "tcp")
    http, tls, http2 = _port_lists(annotations, numbers)
    http3 = _int(annotations, HTTP3_PORT, 1, 65535)
    certificate_id = annotations.get(CERTIFICATE_ID, "").strip()
    # The id wins over the name, as upstream's findCertificateID (loadbalancers.go:1547-1551
    # @v0.1.68): both are there once a renewed certificate of that name was followed (the id
    # annotation written then, 299-337), and the name is not looked up again.
    certificate_name = "" if certificate_id else annotations.get(CERTIFICATE_NAME, "").strip()
    has_certificate = bool(certificate_id or certificate_name)
    passthrough = _bool(annotations, TLS_PASSTHROUGH)
    if passthrough and has_certificate:
        raise InvalidServiceSpec(
            f"annotations {TLS_PASSTHROUGH} and {CERTIFICATE_ID}/{CERTIFICATE_NAME} conflict"
        )
    if (has_certificate or passthrough) and not tls and DEFAULT_SECURE_PORT not in http2:
        tls = {DEFAULT_SECURE_PORT}
    rules: list[dict[str, Any]] = []
    for port in ports:
        number, node_port = port.port, port.node_port
        protocol = default
        for listed, named in ((http, "http"), (tls, "https"), (http2, "http2")):
            if number in listed:
                protocol = named
        if port.protocol.upper() == "UDP":
            protocol = "udp"
        rule: dict[str, Any] = {"entry_protocol": protocol, "entry_port": number,
                                "target_protocol": protocol, "target_port": node_port}  # fmt: skip
        if protocol in ("https", "http2", "http3"):
            if passthrough and protocol != "http3":
                rule["tls_passthrough"] = True
            elif not has_certificate:
                key = {"https": TLS_PORTS, "http2": HTTP2_PORTS, "http3": PROTOCOL}[protocol]
                raise InvalidServiceSpec(
                    f"port {number} uses {protocol} ({key} or {PROTOCOL}) but neither "
                    f"{CERTIFICATE_ID} nor {CERTIFICATE_NAME}"
                    + (f" nor {TLS_PASSTHROUGH}" if protocol != "http3" else "")
                    + " is set"
                )
            else:
                rule["target_protocol"] = "http"
                rule["certificate_id"] = certificate_id
        rules.append(rule)
    if http3 is not None:
        rules.extend(_http3_rule(service, http3, certificate_id, has_certificate, passthrough))
    if (has_certificate or passthrough) and not any(
        r.get("tls_passthrough") or "certificate_id" in r for r in rules
    ):
        key = TLS_PASSTHROUGH if passthrough else (CERTIFICATE_ID if certificate_id
                                                   else CERTIFICATE_NAME)  # fmt: skip
        warnings.append(f"annotation {key}: no port uses tls (set {TLS_PORTS}); ignored")
    return rules, warnings, certificate_name


def _http3_rule(service: Service, port: int, certificate_id: str, has_certificate: bool,
                passthrough: bool) -> list[dict[str, Any]]:  # fmt: skip
    """The http3 rule of ``http3-port``, which shares its entry port with that port's https or
    http2 rule (DigitalOcean requires the shared port; upstream's buildHTTP3ForwardingRule)."""
    if passthrough:
        raise InvalidServiceSpec(f"annotations {TLS_PASSTHROUGH} and {HTTP3_PORT} conflict")
    if not has_certificate:
        raise InvalidServiceSpec(
            f"annotation {HTTP3_PORT} needs {CERTIFICATE_ID} or {CERTIFICATE_NAME}"
        )
    for service_port in service.ports:
        if service_port.port == port:
            return [{"entry_protocol": "http3", "entry_port": port, "target_protocol": "http",
                     "target_port": service_port.node_port,
                     "certificate_id": certificate_id}]  # fmt: skip
    raise InvalidServiceSpec(f"annotation {HTTP3_PORT}: port {port} is not a port of the service")


def _port_lists(
    annotations: Mapping[str, str], numbers: set[int]
) -> tuple[set[int], set[int], set[int]]:
    """The ports of http-ports, tls-ports and http2-ports; a port in two is refused (the
    http3-port is not among them: it shares a tls or http2 port)."""
    lists = {key: _ports(annotations, key, numbers)
             for key in (HTTP_PORTS, TLS_PORTS, HTTP2_PORTS)}  # fmt: skip
    keys = list(lists)
    for index, first in enumerate(keys):
        for second in keys[index + 1 :]:
            both = lists[first] & lists[second]
            if both:
                raise InvalidServiceSpec(
                    f"annotations {first} and {second} both name port {min(both)}"
                )
    return lists[HTTP_PORTS], lists[TLS_PORTS], lists[HTTP2_PORTS]


def _health_check(service: Service, warnings: list[str]) -> dict[str, Any]:
    """upstream's buildHealthCheck: kube-proxy's ``:10256/healthz`` over http (the service's
    healthCheckNodePort with externalTrafficPolicy Local) with proxy_protocol false (kube-proxy
    speaks no PROXY protocol), unless ``override-health-check`` is present (any value, even
    empty): then the healthcheck-path/port/protocol annotations, a path meaning http, the first
    TCP port by default. The four figures always sent, each its annotation's or 3/5/3/5."""
    annotations = service.annotations
    check: dict[str, Any]
    if OVERRIDE_HEALTH_CHECK not in annotations:
        for key in (HC_PATH, HC_PORT, HC_PROTOCOL):
            if annotations.get(key, "").strip():
                warnings.append(f"annotation {key} is ignored without {OVERRIDE_HEALTH_CHECK}")
        port = KUBE_PROXY_HEALTH_PORT
        if service.external_traffic_policy == "Local" and service.health_check_node_port:
            port = service.health_check_node_port
        check = {"protocol": "http", "port": port, "path": KUBE_PROXY_HEALTH_PATH,
                 "proxy_protocol": False}  # fmt: skip
    else:
        path = annotations.get(HC_PATH, "").strip()
        protocol = _choice(annotations, HC_PROTOCOL, ("tcp", "http", "https"),
                           "http" if path else "tcp")  # fmt: skip
        check = {"protocol": protocol, "port": _health_check_port(service)}
        if protocol == "tcp":
            if path:
                warnings.append(f"annotation {HC_PATH} is ignored for a tcp health check")
        else:
            check["path"] = path or "/"
    for key, field_name, default, low, high in HEALTH_CHECK_FIGURES:
        value = _int(annotations, key, low, high)
        check[field_name] = default if value is None else value
    return check


def _health_check_port(service: Service) -> int:
    """The node port checked with the override: healthcheck-port's (a TCP port of the service),
    else the first TCP port's (upstream's healthCheckPort)."""
    port_value = _int(service.annotations, HC_PORT, 1, 65535)
    for port in service.ports:
        if port_value is None and port.protocol.upper() != "TCP":
            continue
        if port_value is not None and port.port != port_value:
            continue
        if port.protocol.upper() == "UDP":
            raise InvalidServiceSpec(f"annotation {HC_PORT}: port {port_value} is UDP")
        if not port.node_port:
            raise InvalidServiceSpec(
                f"annotation {OVERRIDE_HEALTH_CHECK}: port {port.port} has no nodePort to check"
            )
        return port.node_port
    if port_value is not None:
        raise InvalidServiceSpec(f"annotation {HC_PORT}: {port_value} is not a port of the service")
    raise InvalidServiceSpec(f"annotation {OVERRIDE_HEALTH_CHECK}: the service has no TCP port")


def _sticky_sessions(annotations: Mapping[str, str], warnings: list[str]) -> dict[str, Any]:
    kind = _choice(annotations, STICKY_TYPE, ("none", "cookies"), "none")
    cookie_name = annotations.get(STICKY_COOKIE_NAME, "").strip()
    ttl = _int(annotations, STICKY_COOKIE_TTL, 1, 31_536_000)
    if kind == "none":
        for key, value in ((STICKY_COOKIE_NAME, cookie_name), (STICKY_COOKIE_TTL, ttl)):
            if value:
                warnings.append(f"annotation {key} is ignored without {STICKY_TYPE}=cookies")
        return {"type": "none"}
    if not cookie_name or ttl is None:
        raise InvalidServiceSpec(
            f"annotation {STICKY_TYPE}=cookies needs {STICKY_COOKIE_NAME} and {STICKY_COOKIE_TTL}"
        )
    return {"type": "cookies", "cookie_name": cookie_name, "cookie_ttl_seconds": ttl}
