"""Service -> load-balancer spec: upstream defaults, annotation effects, and early refusals."""

from __future__ import annotations

from typing import Any

import pytest
from polyccm.errors import ImplementedElsewhere, InvalidServiceSpec
from polyccm.objects import Service
from polyccm_aws import annotations as ann
from polyccm_aws.lb_spec import HealthProbeDefaults, build_spec

CERT = "arn:aws:acm:us-east-1:123456789012:certificate/abc"


def service(annotations: dict[str, str] | None = None, **spec: Any) -> Service:
    ports = spec.pop(
        "ports",
        [
            {"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080},
            {"name": "https", "protocol": "TCP", "port": 443, "nodePort": 30443},
        ],
    )
    return Service(
        {
            "metadata": {
                "name": "web",
                "namespace": "default",
                "uid": "u-1",
                "annotations": annotations or {},
            },
            "spec": {"type": "LoadBalancer", "ports": ports, **spec},
        }
    )


def test_classic_defaults() -> None:
    spec = build_spec(service())

    assert not spec.is_nlb and not spec.internal
    assert [(w.load_balancer_port, w.protocol, w.instance_port) for w in spec.listeners] == [
        (80, "tcp", 30080),
        (443, "tcp", 30443),
    ]
    assert spec.health_check is not None
    assert spec.health_check.to_api() == {
        "Target": "TCP:30080",
        "Interval": 10,
        "Timeout": 5,
        "HealthyThreshold": 2,
        "UnhealthyThreshold": 6,
    }
    assert spec.source_ranges == ("0.0.0.0/0",)
    assert spec.elb_attributes.idle_timeout == 60
    assert spec.warnings == ()


@pytest.mark.parametrize(
    ("annotations", "extra", "target"),
    [
        (
            {},
            {"externalTrafficPolicy": "Local", "healthCheckNodePort": 32000},
            "HTTP:32000/healthz",
        ),
        (
            {ann.HC_PORT: "traffic-port"},
            {"externalTrafficPolicy": "Local", "healthCheckNodePort": 32000},
            "HTTP:30080/healthz",
        ),
        ({ann.BACKEND_PROTOCOL: "ssl"}, {}, "SSL:30080"),
        ({ann.HC_PROTOCOL: "http"}, {}, "HTTP:30080/"),
        ({ann.HC_PROTOCOL: "HTTPS", ann.HC_PATH: "/ok", ann.HC_PORT: "8443"}, {}, "HTTPS:8443/ok"),
    ],
)
def test_classic_health_check_target(
    annotations: dict[str, str], extra: dict[str, Any], target: str
) -> None:
    check = build_spec(service(annotations, **extra)).health_check

    assert check is not None and check.target == target


def test_shared_probe_mode_checks_kube_proxy() -> None:
    spec = build_spec(service(), HealthProbeDefaults(shared=True))
    nlb = build_spec(service({ann.TYPE: "nlb"}), HealthProbeDefaults(shared=True, port=10999))

    assert spec.health_check is not None and spec.health_check.target == "HTTP:10256/healthz"
    check = nlb.mappings[0].health_check
    assert (check.protocol, check.port, check.path) == ("HTTP", "10999", "/healthz")


def test_ssl_certificate_on_selected_ports() -> None:
    spec = build_spec(service({ann.SSL_CERT: CERT, ann.SSL_PORTS: "443"}))

    plain, secure = spec.listeners
    assert (plain.protocol, plain.instance_protocol, plain.ssl_certificate_id) == (
        "tcp",
        "tcp",
        None,
    )
    assert (secure.protocol, secure.instance_protocol, secure.ssl_certificate_id) == (
        "ssl",
        "tcp",
        CERT,
    )


@pytest.mark.parametrize(
    ("backend", "front"), [("http", "https"), ("https", "https"), ("ssl", "ssl"), ("tcp", "ssl")]
)
def test_backend_protocol_with_certificate(backend: str, front: str) -> None:
    spec = build_spec(service({ann.SSL_CERT: CERT, ann.BACKEND_PROTOCOL: backend}))

    assert {(w.protocol, w.instance_protocol) for w in spec.listeners} == {(front, backend)}


def test_http_backend_without_certificate() -> None:
    spec = build_spec(service({ann.BACKEND_PROTOCOL: "http"}))

    assert {(w.protocol, w.instance_protocol) for w in spec.listeners} == {("http", "http")}


def test_nlb_defaults_and_tls() -> None:
    spec = build_spec(
        service(
            {
                ann.TYPE: "nlb",
                ann.SSL_CERT: CERT,
                ann.SSL_PORTS: "https",
                ann.SSL_NEGOTIATION_POLICY: "ELBSecurityPolicy-TLS13-1-2-2021-06",
            }
        )
    )

    plain, secure = spec.mappings
    assert (plain.frontend_protocol, plain.traffic_protocol, plain.traffic_port) == (
        "TCP",
        "TCP",
        30080,
    )
    assert (secure.frontend_protocol, secure.certificate_arn) == ("TLS", CERT)
    assert secure.ssl_policy == "ELBSecurityPolicy-TLS13-1-2-2021-06"
    check = plain.health_check
    assert (check.protocol, check.port, check.interval, check.healthy_threshold) == (
        "TCP",
        "traffic-port",
        30,
        3,
    )


def test_nlb_accepts_udp() -> None:
    spec = build_spec(
        service(
            {ann.TYPE: "nlb"},
            ports=[{"name": "dns", "protocol": "UDP", "port": 53, "nodePort": 30053}],
        )
    )

    assert spec.mappings[0].frontend_protocol == "UDP"


def test_attributes_tags_and_labels() -> None:
    spec = build_spec(
        service(
            {
                ann.ACCESS_LOG_ENABLED: "true",
                ann.ACCESS_LOG_BUCKET: "logs",
                ann.ACCESS_LOG_PREFIX: "web",
                ann.ACCESS_LOG_EMIT_INTERVAL: "5",
                ann.CONNECTION_DRAINING_ENABLED: "True",
                ann.CONNECTION_DRAINING_TIMEOUT: "45",
                ann.CONNECTION_IDLE_TIMEOUT: "300",
                ann.CROSS_ZONE: "1",
                ann.ADDITIONAL_TAGS: "a=1, b=, c",
                ann.TARGET_NODE_LABELS: "pool=web,spot",
                ann.INTERNAL: "0.0.0.0/0",
                ann.SUBNETS: "subnet-1, private-a",
                ann.SECURITY_GROUPS: "sg-1,sg-2",
                ann.EXTRA_SECURITY_GROUPS: "sg-3",
            }
        )
    )

    assert spec.elb_attributes.to_api() == {
        "CrossZoneLoadBalancing": {"Enabled": True},
        "AccessLog": {
            "Enabled": True,
            "EmitInterval": 5,
            "S3BucketName": "logs",
            "S3BucketPrefix": "web",
        },
        "ConnectionDraining": {"Enabled": True, "Timeout": 45},
        "ConnectionSettings": {"IdleTimeout": 300},
    }
    assert spec.additional_tags == {"a": "1", "b": "", "c": ""}
    assert spec.target_node_labels == {"pool": "web", "spot": ""}
    assert spec.internal  # upstream: any value but "false" means internal
    assert spec.subnets == ("subnet-1", "private-a")
    assert spec.security_groups == ("sg-1", "sg-2")
    assert spec.extra_security_groups == ("sg-3",)


def test_source_ranges_from_spec_or_annotation() -> None:
    from_spec = build_spec(service(loadBalancerSourceRanges=["10.1.2.3/8"]))
    from_annotation = build_spec(service({ann.SOURCE_RANGES: "192.0.2.0/24, 2001:db8::/32"}))

    assert from_spec.source_ranges == ("10.0.0.0/8",)
    assert from_annotation.source_ranges == ("192.0.2.0/24", "2001:db8::/32")


@pytest.mark.parametrize(
    ("annotations", "extra", "message"),
    [
        ({ann.HC_INTERVAL: "2"}, {}, "between 5 and 300"),
        ({ann.HC_TIMEOUT: "10", ann.HC_INTERVAL: "10"}, {}, "less than the health-check interval"),
        ({ann.HC_HEALTHY: "1"}, {}, ann.HC_HEALTHY),
        ({ann.HC_UNHEALTHY: "eleven"}, {}, "integer"),
        ({ann.HC_PORT: "http"}, {}, "port number or 'traffic-port'"),
        ({ann.HC_PROTOCOL: "HTTP", ann.HC_PATH: "healthz"}, {}, "must start with '/'"),
        ({ann.HC_PROTOCOL: "UDP"}, {}, "TCP, HTTP, HTTPS or SSL"),
        ({ann.SSL_CERT: CERT, ann.BACKEND_PROTOCOL: "grpc"}, {}, ann.BACKEND_PROTOCOL),
        ({ann.SSL_CERT: CERT, ann.BACKEND_PROTOCOL: "HTTPS"}, {}, ann.BACKEND_PROTOCOL),
        ({ann.SSL_CERT: "my-cert"}, {}, "certificate ARN"),
        ({ann.PROXY_PROTOCOL: "true"}, {}, "only supported value is '\\*'"),
        ({ann.CROSS_ZONE: "on"}, {}, "true or false"),
        ({ann.ACCESS_LOG_ENABLED: "true"}, {}, ann.ACCESS_LOG_BUCKET),
        ({ann.ACCESS_LOG_EMIT_INTERVAL: "ten"}, {}, "integer"),
        ({ann.ACCESS_LOG_EMIT_INTERVAL: "2147483648"}, {}, ann.ACCESS_LOG_EMIT_INTERVAL),
        ({ann.CONNECTION_IDLE_TIMEOUT: "0"}, {}, "between 1 and 4000"),
        ({ann.ADDITIONAL_TAGS: "aws:owner=me"}, {}, "reserved aws: prefix"),
        ({ann.SECURITY_GROUPS: "web-sg"}, {}, "not a security group id"),
        ({ann.SUBNETS: " , "}, {}, "lists no subnet"),
        (
            {ann.TARGET_GROUP_ATTRIBUTES: "proxy_protocol_v2.enabled=true"},
            {},
            "only supported on an NLB",
        ),
        ({ann.TYPE: "nlb", ann.EXTRA_SECURITY_GROUPS: "sg-1"}, {}, "not supported on an NLB"),
        ({ann.TYPE: "nlb", ann.TARGET_GROUP_ATTRIBUTES: "a=b"}, {}, "not supported"),
        (
            {ann.TYPE: "nlb", ann.TARGET_GROUP_ATTRIBUTES: "proxy_protocol_v2.enabled="},
            {},
            "true or false",
        ),
        ({ann.TYPE: "nlb", ann.EIP_ALLOCATIONS: "1.2.3.4"}, {}, "eipalloc"),
        ({ann.TYPE: "nlb", ann.PRIVATE_IPV4_ADDRESSES: "10.0.0.5"}, {}, "internal NLB"),
        ({ann.TYPE: "nlb", ann.INTERNAL: "true", ann.PRIVATE_IPV4_ADDRESSES: "10.0.0"}, {}, "IPv4"),
        ({ann.TYPE: "nlb", ann.HC_PROTOCOL: "SSL"}, {}, "TCP, HTTP or HTTPS"),
        ({}, {"loadBalancerIP": "203.0.113.1"}, "loadBalancerIP"),
        ({}, {"sessionAffinity": "ClientIP"}, "sessionAffinity"),
        ({}, {"loadBalancerSourceRanges": ["everyone"]}, "not a CIDR"),
        ({}, {"ports": []}, "at least one port"),
        (
            {},
            {"ports": [{"protocol": "UDP", "port": 53, "nodePort": 30053}]},
            "not supported by a classic ELB",
        ),
        ({}, {"ports": [{"protocol": "TCP", "port": 80}]}, "nodePort"),
        (
            {ann.TYPE: "nlb"},
            {
                "ports": [
                    {"protocol": "TCP", "port": 80, "nodePort": 1},
                    {"protocol": "UDP", "port": 53, "nodePort": 2},
                ]
            },
            "mixed protocols",
        ),
    ],
)
def test_invalid_services_are_refused(
    annotations: dict[str, str], extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidServiceSpec, match=message):
        build_spec(service(annotations, **extra))


@pytest.mark.parametrize("kind", ["nlb-ip", "external"])
def test_load_balancer_controller_types(kind: str) -> None:
    with pytest.raises(ImplementedElsewhere):
        build_spec(service({ann.TYPE: kind}))


def test_ignored_annotations_are_warnings_not_errors() -> None:
    nlb = build_spec(
        service(
            {ann.TYPE: "nlb", ann.PROXY_PROTOCOL: "*", ann.PREFIX + "healthcheck-intervall": "5"}
        )
    )
    classic = build_spec(service({ann.EIP_ALLOCATIONS: "eipalloc-1", ann.SSL_PORTS: "8443"}))

    assert any(ann.PROXY_PROTOCOL in w and "no effect" in w for w in nlb.warnings)
    assert any("healthcheck-intervall" in w and "not known" in w for w in nlb.warnings)
    assert any(ann.EIP_ALLOCATIONS in w for w in classic.warnings)
    assert any("8443" in w for w in classic.warnings)


NLB = {ann.TYPE: "nlb"}


def listener_protocols(annotations: dict[str, str]) -> set[tuple[str, str]]:
    return {(w.protocol, w.instance_protocol) for w in build_spec(service(annotations)).listeners}


@pytest.mark.parametrize(
    ("annotations", "annotation", "value"),
    [
        ({ann.TYPE: "alb"}, ann.TYPE, "alb"),
        ({ann.TYPE: "NLB"}, ann.TYPE, "NLB"),  # upstream compares case-sensitively
        ({ann.BACKEND_PROTOCOL: "grpc"}, ann.BACKEND_PROTOCOL, "grpc"),
        ({ann.BACKEND_PROTOCOL: "HTTP"}, ann.BACKEND_PROTOCOL, "HTTP"),
        ({**NLB, ann.BACKEND_PROTOCOL: "http"}, ann.BACKEND_PROTOCOL, "http"),
        ({ann.INTERNAL: "False"}, ann.INTERNAL, "False"),
        (
            {
                **NLB,
                ann.TARGET_GROUP_ATTRIBUTES: "proxy_protocol_v2.enabled=true,"
                "proxy_protocol_v2.enabled=false",
            },
            ann.TARGET_GROUP_ATTRIBUTES,
            "proxy_protocol_v2.enabled=true,proxy_protocol_v2.enabled=false",
        ),
        ({ann.HC_PATH: "healthz"}, ann.HC_PATH, "healthz"),
        ({**NLB, ann.HC_TIMEOUT: "300"}, ann.HC_TIMEOUT, "300"),
        ({**NLB, ann.HC_TIMEOUT: "10"}, ann.HC_TIMEOUT, "10"),
    ],
)
def test_values_upstream_reads_as_a_default_are_warned_not_refused(
    annotations: dict[str, str], annotation: str, value: str
) -> None:
    spec = build_spec(service(annotations))

    assert any(f"annotation {annotation}={value!r}" in w for w in spec.warnings), spec.warnings


def test_lenient_values_mean_what_they_mean_upstream() -> None:
    assert build_spec(service({ann.TYPE: "alb"})).kind == "classic"
    assert build_spec(service({ann.TYPE: "NLB"})).kind == "classic"
    assert listener_protocols({ann.BACKEND_PROTOCOL: "grpc"}) == {("tcp", "tcp")}
    assert listener_protocols({ann.BACKEND_PROTOCOL: "HTTP"}) == {("tcp", "tcp")}
    check = build_spec(service({ann.BACKEND_PROTOCOL: "HTTPS"})).health_check
    assert check is not None and check.target == "SSL:30080"  # upstream lower-cases it there
    assert build_spec(service({ann.INTERNAL: "False"})).internal
    duplicated = build_spec(
        service(
            {
                **NLB,
                ann.TARGET_GROUP_ATTRIBUTES: (
                    "proxy_protocol_v2.enabled=true,proxy_protocol_v2.enabled=false"
                ),
            }
        )
    )
    assert duplicated.target_group_attributes == {"proxy_protocol_v2.enabled": "false"}
    tcp_check = build_spec(service({ann.HC_PATH: "healthz"})).health_check
    assert tcp_check is not None and tcp_check.target == "TCP:30080"


def test_values_upstream_accepts_silently_are_neither_refused_nor_warned() -> None:
    blank = build_spec(
        service(
            {
                ann.CONNECTION_IDLE_TIMEOUT: "",
                ann.CONNECTION_DRAINING_TIMEOUT: "",
                ann.ACCESS_LOG_EMIT_INTERVAL: "",
                ann.CROSS_ZONE: "",
                ann.INTERNAL: "true",
                ann.BACKEND_PROTOCOL: "tcp",
            }
        )
    )
    # A certificate no port uses is never sent to AWS, so upstream never checks it.
    unused_certificate = build_spec(service({ann.SSL_CERT: "my-cert", ann.SSL_PORTS: "8443"}))
    nlb_groups = build_spec(service({**NLB, ann.SECURITY_GROUPS: "web-sg"}))

    assert blank.elb_attributes.idle_timeout == 60
    assert blank.elb_attributes.connection_draining_timeout is None
    assert blank.warnings == ()
    assert [w.ssl_certificate_id for w in unused_certificate.listeners] == [None, None]
    assert nlb_groups.security_groups == ("web-sg",)


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({ann.HC_INTERVAL: ""}, "integer"),  # upstream refuses an empty health-check number
        ({**NLB, ann.HC_TIMEOUT: "soon"}, "integer"),
        ({**NLB, ann.SSL_CERT: "my-cert"}, "certificate ARN"),
    ],
)
def test_values_upstream_refuses_stay_refused(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidServiceSpec, match=message):
        build_spec(service(annotations))


def test_ssl_port_names_are_matched_exactly_as_upstream() -> None:
    # Upstream splits ssl-ports on commas and keeps each item as it is: whatever Atoi does not
    # take is a port name, compared with the Service's port names exactly (no trimming, no
    # case folding): cloud-provider-aws v1.37.1 pkg/providers/v1/aws.go:1932-1951.
    def tls_ports(value: str) -> list[int]:
        spec = build_spec(service({ann.SSL_CERT: CERT, ann.SSL_PORTS: value}))
        return [w.load_balancer_port for w in spec.listeners if w.ssl_certificate_id]

    assert tls_ports("https") == [443]
    assert tls_ports("HTTPS") == []
    assert tls_ports("http, https") == [80]  # " https" is not "https"
    assert tls_ports("80, 443") == [80]  # " 443" is no number to Atoi: a name no port has
    nlb = build_spec(service({**NLB, ann.SSL_CERT: CERT, ann.SSL_PORTS: "Https"}))
    assert [m.frontend_protocol for m in nlb.mappings] == ["TCP", "TCP"]
    warned = build_spec(service({ann.SSL_CERT: CERT, ann.SSL_PORTS: "HTTPS"})).warnings
    assert any("'HTTPS'" in w for w in warned), warned


def test_access_log_emit_interval_passes_any_integer_to_aws() -> None:
    # Upstream parses the interval as a 32-bit integer and sends it as it is (AWS answers for
    # its range): cloud-provider-aws v1.37.1 pkg/providers/v1/aws.go:2587-2597.
    for value, sent in (("10", 10), ("5", 5), ("-1", -1)):
        spec = build_spec(service({ann.ACCESS_LOG_EMIT_INTERVAL: value}))
        assert spec.elb_attributes.to_api()["AccessLog"] == {"Enabled": False, "EmitInterval": sent}
