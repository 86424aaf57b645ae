"""What a service asks of AWS: a validated, cloud-independent load-balancer spec.

:func:`build_spec` turns a :class:`~polyccm.objects.Service` into a :class:`LoadBalancerSpec`
(listeners or NLB port mappings, health checks, attributes, tags, security groups) or raises
before anything is created: :class:`~polyccm.errors.ImplementedElsewhere` for ``nlb-ip`` and
``external``, :class:`~polyccm.errors.InvalidServiceSpec` for the values and combinations
upstream (or AWS) refuses (extra security groups on an NLB, target-group attributes on a classic
ELB, ``spec.loadBalancerIP``, a backend protocol without a listener mapping for a port with a
certificate...). Values upstream reads silently as a default are read the same way and listed in
:attr:`LoadBalancerSpec.warnings`. The defaults and derivations follow cloud-provider-aws.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service, ServicePort

from polyccm_aws import annotations as ann
from polyccm_aws.config import CloudConfig

KUBE_PROXY_HEALTH_PORT = 10256
KUBE_PROXY_HEALTH_PATH = "/healthz"


@dataclass(frozen=True)
class HealthProbeDefaults:
    """``ClusterServiceLoadBalancerHealthProbeMode`` and friends from the cloud config."""

    shared: bool = False
    port: int = KUBE_PROXY_HEALTH_PORT
    path: str = KUBE_PROXY_HEALTH_PATH

    @classmethod
    def from_config(cls, config: CloudConfig) -> HealthProbeDefaults:
        return cls(
            shared=config.cluster_service_load_balancer_health_probe_mode == "Shared",
            port=config.cluster_service_shared_load_balancer_health_probe_port
            or KUBE_PROXY_HEALTH_PORT,
            path=config.cluster_service_shared_load_balancer_health_probe_path
            or KUBE_PROXY_HEALTH_PATH,
        )


@dataclass(frozen=True)
class ElbListener:
    """One classic ELB listener (protocols lower-case, as upstream sends them)."""

    load_balancer_port: int
    protocol: str
    instance_port: int
    instance_protocol: str
    ssl_certificate_id: str | None = None

    def to_api(self) -> dict[str, object]:
        api: dict[str, object] = {
            "Protocol": self.protocol,
            "LoadBalancerPort": self.load_balancer_port,
            "InstanceProtocol": self.instance_protocol,
            "InstancePort": self.instance_port,
        }
        if self.ssl_certificate_id:
            api["SSLCertificateId"] = self.ssl_certificate_id
        return api

    def matches(self, actual: Mapping[str, object]) -> bool:
        """Whether a described listener is this one (protocols and ARNs compare case-blind)."""
        return (
            str(actual.get("Protocol", "")).lower() == self.protocol.lower()
            and str(actual.get("InstanceProtocol", "")).lower() == self.instance_protocol.lower()
            and actual.get("InstancePort") == self.instance_port
            and actual.get("LoadBalancerPort") == self.load_balancer_port
            and str(actual.get("SSLCertificateId") or "").lower()
            == (self.ssl_certificate_id or "").lower()
        )


@dataclass(frozen=True)
class ElbHealthCheck:
    """A classic ELB health check (``Target`` is ``PROTOCOL:port[/path]``)."""

    target: str
    interval: int
    timeout: int
    healthy_threshold: int
    unhealthy_threshold: int

    def to_api(self) -> dict[str, object]:
        return {
            "Target": self.target,
            "Interval": self.interval,
            "Timeout": self.timeout,
            "HealthyThreshold": self.healthy_threshold,
            "UnhealthyThreshold": self.unhealthy_threshold,
        }

    def matches(self, actual: Mapping[str, object]) -> bool:
        return all(actual.get(k) == v for k, v in self.to_api().items())


@dataclass(frozen=True)
class TargetHealthCheck:
    """An NLB target-group health check."""

    protocol: str
    port: str
    path: str
    interval: int
    healthy_threshold: int
    unhealthy_threshold: int


@dataclass(frozen=True)
class PortMapping:
    """One NLB listener and the target group behind it."""

    frontend_port: int
    frontend_protocol: str
    traffic_port: int
    traffic_protocol: str
    health_check: TargetHealthCheck
    certificate_arn: str = ""
    ssl_policy: str = ""


@dataclass(frozen=True)
class LoadBalancerSpec:
    """Everything the cloud side needs, decided before any cloud call."""

    kind: str
    """``classic`` or ``nlb``."""
    internal: bool
    subnets: tuple[str, ...] | None
    """Subnet ids or Name tags from the annotation; None means discover by tags."""
    security_groups: tuple[str, ...]
    extra_security_groups: tuple[str, ...]
    source_ranges: tuple[str, ...]
    additional_tags: Mapping[str, str]
    target_node_labels: Mapping[str, str]
    listeners: tuple[ElbListener, ...] = ()
    health_check: ElbHealthCheck | None = None
    elb_attributes: ann.ElbAttributes = field(default_factory=ann.ElbAttributes)
    proxy_protocol: bool = False
    ssl_negotiation_policy: str | None = None
    mappings: tuple[PortMapping, ...] = ()
    nlb_attributes: ann.NlbAttributes = field(default_factory=ann.NlbAttributes)
    target_group_attributes: Mapping[str, str] = field(default_factory=dict)
    eip_allocations: tuple[str, ...] = ()
    private_ipv4_addresses: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    """Annotations read leniently, as upstream reads them, or without effect here; each names
    the annotation (and value) and becomes a Warning event on the service."""

    @property
    def is_nlb(self) -> bool:
        return self.kind == ann.NLB

    @property
    def traffic_ports(self) -> tuple[int, ...]:
        if self.is_nlb:
            return tuple(m.traffic_port for m in self.mappings)
        return tuple(listener.instance_port for listener in self.listeners)


def _check_ports(service: Service, kind: str) -> tuple[ServicePort, ...]:
    ports = service.ports
    if not ports:
        raise InvalidServiceSpec("spec.ports: a LoadBalancer service needs at least one port")
    allowed = ("TCP", "UDP") if kind == ann.NLB else ("TCP",)
    for port in ports:
        if port.protocol not in allowed:
            lb = "an NLB" if kind == ann.NLB else "a classic ELB"
            raise InvalidServiceSpec(
                f"spec.ports[{port.name or port.port}]: protocol {port.protocol} is not supported "
                f"by {lb} (supported: {', '.join(allowed)})"
            )
    if len({p.protocol for p in ports}) > 1:
        raise InvalidServiceSpec("spec.ports: mixed protocols are not supported by AWS")
    with_node_port = tuple(p for p in ports if p.node_port)
    if not with_node_port:
        raise InvalidServiceSpec(
            "spec.ports: no port has a nodePort (spec.allocateLoadBalancerNodePorts: false is "
            "not supported by instance-target AWS load balancers)"
        )
    return with_node_port


def _check_combinations(service: Service, kind: str, warnings: list[str]) -> None:
    annotations = service.annotations
    if service.load_balancer_ip:
        raise InvalidServiceSpec(
            f"spec.loadBalancerIP={service.load_balancer_ip!r}: AWS load balancers cannot take "
            f"a requested IP (for an NLB use {ann.EIP_ALLOCATIONS} or "
            f"{ann.PRIVATE_IPV4_ADDRESSES})"
        )
    if service.session_affinity not in ("", "None"):
        raise InvalidServiceSpec(
            f"spec.sessionAffinity={service.session_affinity!r}: not supported by AWS load "
            "balancers (use None)"
        )
    if kind == ann.NLB and ann.EXTRA_SECURITY_GROUPS in annotations:
        raise ann.invalid(
            ann.EXTRA_SECURITY_GROUPS,
            annotations[ann.EXTRA_SECURITY_GROUPS],
            "extra security groups are not supported on an NLB",
        )
    if kind == ann.CLASSIC and ann.TARGET_GROUP_ATTRIBUTES in annotations:
        raise ann.invalid(
            ann.TARGET_GROUP_ATTRIBUTES,
            annotations[ann.TARGET_GROUP_ATTRIBUTES],
            "target-group attributes are only supported on an NLB",
        )
    ignored = ann.ELB_ONLY if kind == ann.NLB else ann.NLB_ONLY
    kind_name = "an NLB" if kind == ann.NLB else "a classic ELB"
    for name in ignored:
        if name in annotations:
            warnings.append(f"annotation {name} has no effect on {kind_name}")
    for name in sorted(annotations):
        if name.startswith(ann.PREFIX) and name not in ann.KNOWN:
            warnings.append(f"annotation {name} is not known to the AWS provider; ignored")


def _health_threshold(annotations: Mapping[str, str], name: str, default: int) -> int:
    value = ann.parse_int(annotations, name, low=2, high=10)
    return default if value is None else value


def _health_port(annotations: Mapping[str, str]) -> str | None:
    value = annotations.get(ann.HC_PORT)
    if value is None or value == ann.TRAFFIC_PORT:
        return value
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise ann.invalid(ann.HC_PORT, value, "expected a port number or 'traffic-port'")
    return value


def _health_path(annotations: Mapping[str, str], protocol: str, warnings: list[str]) -> str | None:
    """The annotated path, which only HTTP and HTTPS checks use (upstream ignores it otherwise;
    so does polyccm, with a warning)."""
    value = annotations.get(ann.HC_PATH)
    if value is None:
        return None
    if protocol not in ("HTTP", "HTTPS"):
        if value:
            warnings.append(
                ann.warning(ann.HC_PATH, value, f"no effect on a {protocol} health check")
            )
        return None
    if value and not value.startswith("/"):
        raise ann.invalid(ann.HC_PATH, value, "must start with '/'")
    return value or None


def classic_health_check(
    service: Service,
    first_node_port: int,
    backend_protocol: str,
    probe: HealthProbeDefaults,
    warnings: list[str] | None = None,
) -> ElbHealthCheck:
    """The ELB health check upstream configures, with annotation overrides."""
    annotations = service.annotations
    warnings = [] if warnings is None else warnings
    port_override = _health_port(annotations)
    local = service.external_traffic_policy == "Local" and service.health_check_node_port
    if local:
        protocol, port, path = "HTTP", service.health_check_node_port, KUBE_PROXY_HEALTH_PATH
        if port_override == ann.TRAFFIC_PORT:
            port = first_node_port
    else:
        # Upstream lower-cases the annotation here (and only here).
        protocol = "SSL" if backend_protocol.lower() in ("https", "ssl") else "TCP"
        port, path = first_node_port, ""
        if probe.shared:
            protocol, port, path = "HTTP", probe.port, probe.path
    if ann.HC_PROTOCOL in annotations:
        protocol = annotations[ann.HC_PROTOCOL].upper()
        if protocol not in ("TCP", "HTTP", "HTTPS", "SSL"):
            raise ann.invalid(
                ann.HC_PROTOCOL, annotations[ann.HC_PROTOCOL], "expected TCP, HTTP, HTTPS or SSL"
            )
    if port_override not in (None, ann.TRAFFIC_PORT):
        port = int(port_override)
    path_override = _health_path(annotations, protocol, warnings)
    path = (path_override or path or "/") if protocol in ("HTTP", "HTTPS") else ""
    interval = ann.parse_int(annotations, ann.HC_INTERVAL, low=5, high=300, unit=" seconds")
    timeout = ann.parse_int(annotations, ann.HC_TIMEOUT, low=2, high=60, unit=" seconds")
    check = ElbHealthCheck(
        target=f"{protocol}:{port}{path}",
        interval=10 if interval is None else interval,
        timeout=5 if timeout is None else timeout,
        healthy_threshold=_health_threshold(annotations, ann.HC_HEALTHY, 2),
        unhealthy_threshold=_health_threshold(annotations, ann.HC_UNHEALTHY, 6),
    )
    if check.timeout >= check.interval:
        raise ann.invalid(
            ann.HC_TIMEOUT,
            str(check.timeout),
            f"must be less than the health-check interval ({check.interval}s)",
        )
    return check


def nlb_health_check(
    service: Service, probe: HealthProbeDefaults, warnings: list[str] | None = None
) -> TargetHealthCheck:
    """The target-group health check upstream configures, with annotation overrides."""
    annotations = service.annotations
    warnings = [] if warnings is None else warnings
    local = service.external_traffic_policy == "Local" and service.health_check_node_port
    protocol, port, path = "TCP", ann.TRAFFIC_PORT, "/"
    interval, healthy, unhealthy = 30, 3, 3
    if local:
        protocol, port, path = "HTTP", str(service.health_check_node_port), KUBE_PROXY_HEALTH_PATH
        interval, healthy, unhealthy = 10, 2, 2
    if ann.HC_PROTOCOL in annotations:
        protocol = annotations[ann.HC_PROTOCOL].upper()
        if protocol not in ("TCP", "HTTP", "HTTPS"):
            raise ann.invalid(
                ann.HC_PROTOCOL,
                annotations[ann.HC_PROTOCOL],
                "expected TCP, HTTP or HTTPS for an NLB",
            )
    path_override = _health_path(annotations, protocol, warnings)
    path = (path_override or path) if protocol != "TCP" else ""
    port = _health_port(annotations) or port
    if probe.shared and not local:
        protocol, port, path = "HTTP", str(probe.port), probe.path
    parsed_interval = ann.parse_int(annotations, ann.HC_INTERVAL, low=5, high=300, unit=" seconds")
    _check_nlb_health_timeout(annotations, warnings)
    return TargetHealthCheck(
        protocol=protocol,
        port=port,
        path=path,
        interval=interval if parsed_interval is None else parsed_interval,
        healthy_threshold=_health_threshold(annotations, ann.HC_HEALTHY, healthy),
        unhealthy_threshold=_health_threshold(annotations, ann.HC_UNHEALTHY, unhealthy),
    )


def _check_nlb_health_timeout(annotations: Mapping[str, str], warnings: list[str]) -> None:
    """Upstream parses ``healthcheck-timeout`` for an NLB (refusing what is not a 32-bit
    integer) and never sends it: the target groups keep AWS's timeout. Said as a warning."""
    if ann.HC_TIMEOUT not in annotations:
        return
    ann.parse_int(annotations, ann.HC_TIMEOUT, low=ann.INT32_MIN, high=ann.INT32_MAX)
    warnings.append(
        ann.warning(
            ann.HC_TIMEOUT,
            annotations[ann.HC_TIMEOUT],
            "an NLB's target groups keep AWS's health-check timeout (upstream never sends it)",
        )
    )


# Upstream's listener protocol for each backend protocol, on ports with a certificate.
_SECURE_LISTENER = {"https": "https", "http": "https", "ssl": "ssl", "tcp": "ssl"}


def _classic_listener(
    port: ServicePort, certificate: str, backend: str, ssl_ports: ann.SslPorts
) -> ElbListener:
    """Upstream's listener for ``port``; ``backend`` is the annotation as written (upstream
    compares it case-sensitively)."""
    protocol = instance_protocol = port.protocol.lower()
    if certificate and ssl_ports.covers(port.port, port.name):
        _check_certificate(certificate)
        if backend:
            if backend not in _SECURE_LISTENER:
                raise ann.invalid(
                    ann.BACKEND_PROTOCOL,
                    backend,
                    f"a port with {ann.SSL_CERT} needs one of {', '.join(_SECURE_LISTENER)}",
                )
            instance_protocol, protocol = backend, _SECURE_LISTENER[backend]
        else:
            protocol, instance_protocol = "ssl", "tcp"
        return ElbListener(port.port, protocol, port.node_port, instance_protocol, certificate)
    if backend == "http":
        protocol = instance_protocol = "http"
    return ElbListener(port.port, protocol, port.node_port, instance_protocol)


def _backend_protocol(annotations: Mapping[str, str], kind: str, warnings: list[str]) -> str:
    """The annotation as written, with a warning when upstream would read it as nothing
    (a classic ELB: TCP listeners; an NLB: only ``ssl`` with a certificate has an effect)."""
    value = annotations.get(ann.BACKEND_PROTOCOL, "")
    if kind == ann.NLB and value not in ("", "ssl", "tcp"):
        warnings.append(
            ann.warning(
                ann.BACKEND_PROTOCOL,
                value,
                f"no effect on an NLB (only 'ssl', with {ann.SSL_CERT}, makes the targets TLS)",
            )
        )
    elif kind == ann.CLASSIC and value and value not in ann.BACKEND_PROTOCOLS:
        warnings.append(
            ann.warning(
                ann.BACKEND_PROTOCOL,
                value,
                f"not one of {', '.join(ann.BACKEND_PROTOCOLS)} (lower case); listeners without "
                "a certificate use TCP, as upstream reads it",
            )
        )
    return value


def _check_certificate(value: str) -> None:
    """A certificate a listener uses must be an ARN (AWS refuses anything else)."""
    if not value.startswith("arn:"):
        raise ann.invalid(ann.SSL_CERT, value, "expected a certificate ARN (arn:aws:acm:...)")


def _ssl_port_warnings(
    ports: tuple[ServicePort, ...], ssl_ports: ann.SslPorts, certificate: str
) -> list[str]:
    warnings: list[str] = []
    if ssl_ports.everything:
        return warnings
    if not certificate:
        warnings.append(f"annotation {ann.SSL_PORTS} has no effect without {ann.SSL_CERT}")
    unknown = sorted(
        {str(n) for n in ssl_ports.numbers if n not in {p.port for p in ports}}
        | {repr(n) for n in ssl_ports.names if n not in {p.name for p in ports}}
    )
    if unknown:
        warnings.append(
            f"annotation {ann.SSL_PORTS} names ports the service does not have: "
            f"{', '.join(unknown)}"
        )
    return warnings


def build_spec(service: Service, probe: HealthProbeDefaults | None = None) -> LoadBalancerSpec:
    """Validate ``service`` and derive its load balancer, without any cloud call."""
    probe = probe or HealthProbeDefaults()
    annotations = service.annotations
    warnings: list[str] = []
    kind = ann.load_balancer_type(annotations, warnings)
    _check_combinations(service, kind, warnings)
    ports = _check_ports(service, kind)
    subnets = ann.parse_list(annotations, ann.SUBNETS)
    if subnets is not None and not subnets:
        raise ann.invalid(ann.SUBNETS, annotations[ann.SUBNETS], "lists no subnet")
    certificate = annotations.get(ann.SSL_CERT, "").strip()
    backend = _backend_protocol(annotations, kind, warnings)
    ssl_ports = ann.parse_ssl_ports(annotations)
    warnings.extend(_ssl_port_warnings(ports, ssl_ports, certificate))
    policy = annotations.get(ann.SSL_NEGOTIATION_POLICY) or None
    # An NLB uses annotated groups only in Managed mode (upstream ignores them otherwise); AWS
    # refuses a bad id when they are used.
    security_groups = (
        ann.parse_list(annotations, ann.SECURITY_GROUPS) or ()
        if kind == ann.NLB
        else ann.parse_security_groups(annotations, ann.SECURITY_GROUPS)
    )
    common = {
        "kind": kind,
        "internal": ann.is_internal(annotations, warnings),
        "subnets": subnets,
        "security_groups": security_groups,
        "extra_security_groups": ann.parse_security_groups(annotations, ann.EXTRA_SECURITY_GROUPS),
        "source_ranges": ann.parse_source_ranges(service.load_balancer_source_ranges, annotations),
        "additional_tags": ann.parse_additional_tags(annotations),
        "target_node_labels": ann.parse_key_values(annotations, ann.TARGET_NODE_LABELS),
        "ssl_negotiation_policy": policy,
    }
    if kind == ann.NLB:
        tls = _Tls(certificate, backend, ssl_ports, str(policy or ""))
        return _nlb_spec(service, ports, probe, tls, common=common, warnings=warnings)
    proxy = annotations.get(ann.PROXY_PROTOCOL, "")
    if proxy not in ("", "*"):
        raise ann.invalid(ann.PROXY_PROTOCOL, proxy, "the only supported value is '*'")
    listeners = tuple(_classic_listener(p, certificate, backend, ssl_ports) for p in ports)
    return LoadBalancerSpec(
        **common,  # type: ignore[arg-type]
        listeners=listeners,
        health_check=classic_health_check(service, ports[0].node_port, backend, probe, warnings),
        elb_attributes=ann.parse_elb_attributes(annotations),
        proxy_protocol=proxy == "*",
        warnings=tuple(warnings),
    )


@dataclass(frozen=True)
class _Tls:
    """The TLS-related annotations of an NLB."""

    certificate: str
    backend: str
    ports: ann.SslPorts
    policy: str


def _nlb_mapping(port: ServicePort, health_check: TargetHealthCheck, tls: _Tls) -> PortMapping:
    if port.protocol != "UDP" and tls.certificate and tls.ports.covers(port.port, port.name):
        _check_certificate(tls.certificate)
        return PortMapping(
            frontend_port=port.port,
            frontend_protocol="TLS",
            traffic_port=port.node_port,
            traffic_protocol="TLS" if tls.backend == "ssl" else port.protocol,
            health_check=health_check,
            certificate_arn=tls.certificate,
            ssl_policy=tls.policy,
        )
    return PortMapping(
        frontend_port=port.port,
        frontend_protocol=port.protocol,
        traffic_port=port.node_port,
        traffic_protocol=port.protocol,
        health_check=health_check,
    )


def _nlb_spec(
    service: Service,
    ports: tuple[ServicePort, ...],
    probe: HealthProbeDefaults,
    tls: _Tls,
    *,
    common: dict[str, object],
    warnings: list[str],
) -> LoadBalancerSpec:
    annotations = service.annotations
    health_check = nlb_health_check(service, probe, warnings)
    mappings = [_nlb_mapping(port, health_check, tls) for port in ports]
    internal = bool(common["internal"])
    eips = ann.parse_eip_allocations(annotations)
    if eips and internal:
        raise ann.invalid(
            ann.EIP_ALLOCATIONS,
            annotations[ann.EIP_ALLOCATIONS],
            "Elastic IPs cannot be used with an internal NLB",
        )
    addresses = ann.parse_addresses(annotations, ann.PRIVATE_IPV4_ADDRESSES)
    if addresses and not internal:
        raise ann.invalid(
            ann.PRIVATE_IPV4_ADDRESSES,
            annotations[ann.PRIVATE_IPV4_ADDRESSES],
            f'private addresses need an internal NLB ({ann.INTERNAL}: "true")',
        )
    return LoadBalancerSpec(
        **common,  # type: ignore[arg-type]
        mappings=tuple(mappings),
        nlb_attributes=ann.parse_nlb_attributes(annotations),
        target_group_attributes=ann.parse_target_group_attributes(
            annotations, tuple(p.protocol for p in ports), warnings
        ),
        eip_allocations=eips,
        private_ipv4_addresses=addresses,
        warnings=tuple(warnings),
    )


def config_warnings(spec: LoadBalancerSpec, config: CloudConfig) -> tuple[str, ...]:
    """Warnings that depend on the cloud config as well as the service (ensure returns them
    with the spec's own): annotated security groups on an NLB outside Managed mode."""
    if spec.is_nlb and spec.security_groups and not config.nlb_security_groups_managed:
        return (
            ann.warning(
                ann.SECURITY_GROUPS,
                ",".join(spec.security_groups),
                "no effect on an NLB unless the cloud config sets NLBSecurityGroupMode = Managed",
            ),
        )
    return ()


def select_target_nodes(
    labels: Mapping[str, str], node_labels: list[Mapping[str, str]]
) -> list[bool]:
    """For each node's labels, whether it matches ``target-node-labels`` (empty value = any)."""
    return [
        all(key in node and (not value or node[key] == value) for key, value in labels.items())
        for node in node_labels
    ]
