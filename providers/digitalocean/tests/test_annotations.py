"""The annotations, read as pure functions: what each one asks of the load balancer, what is
refused (naming the annotation) and what is only warned about, all before any cloud call."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service
from polyccm_digitalocean import annotations as ann
from polyccm_digitalocean.annotations import load_balancer_spec

#: upstream's default check (buildHealthCheck, loadbalancers.go:997-1049@v0.1.68): kube-proxy's,
#: its figures 3/5/3/5 and proxy_protocol false always sent.
KUBE_PROXY_CHECK = {"protocol": "http", "port": 10256, "path": "/healthz", "proxy_protocol": False,
                    "check_interval_seconds": 3, "response_timeout_seconds": 5,
                    "unhealthy_threshold": 3, "healthy_threshold": 5}  # fmt: skip


def service(annotations: Mapping[str, str] | None = None, **spec: Any) -> Service:
    ports = spec.pop("ports", None) or [
        {"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080},
        {"name": "https", "protocol": "TCP", "port": 443, "nodePort": 30443},
    ]
    return Service({
        "metadata": {"name": "web", "namespace": "default", "uid": str(uuid.uuid4()),
                     "annotations": dict(annotations or {})},
        "spec": {"type": "LoadBalancer", "ports": ports, **spec},
    })  # fmt: skip


def spec_of(annotations: Mapping[str, str] | None = None, **spec: Any) -> ann.LoadBalancerSpec:
    """The spec with REGIONAL as the default type (``DEFAULT_LB_TYPE=REGIONAL``): the HTTP load
    balancer, the one that reads most annotations."""
    return load_balancer_spec(service(annotations, **spec), default_name="adefault",
                              default_type="REGIONAL")  # fmt: skip


def rules(result: ann.LoadBalancerSpec) -> dict[int, dict[str, Any]]:
    return {r["entry_port"]: r for r in result.body["forwarding_rules"]}


def test_by_default_a_regional_network_load_balancer_forwards_to_the_service_ports() -> None:
    # The Service the API server stores with allocateLoadBalancerNodePorts: false (no nodePort).
    result = load_balancer_spec(service(ports=[
        {"name": "http", "protocol": "TCP", "port": 80},
        {"name": "dns", "protocol": "UDP", "port": 53},
    ]), default_name="adefault")  # fmt: skip

    assert result.name == "adefault"
    assert result.body["type"] == "REGIONAL_NETWORK" and result.body["network"] == "EXTERNAL"
    assert rules(result) == {
        80: {"entry_protocol": "tcp", "entry_port": 80, "target_protocol": "tcp",
             "target_port": 80},
        53: {"entry_protocol": "udp", "entry_port": 53, "target_protocol": "udp",
             "target_port": 53},
    }  # fmt: skip
    assert result.body["health_check"] == KUBE_PROXY_CHECK
    assert result.warnings == ()


def test_a_regional_load_balancer_forwards_tcp_to_the_node_ports() -> None:
    result = spec_of()

    assert rules(result)[80] == {"entry_protocol": "tcp", "entry_port": 80,
                                 "target_protocol": "tcp", "target_port": 30080}  # fmt: skip
    assert result.body["health_check"] == KUBE_PROXY_CHECK
    assert result.body["type"] == "REGIONAL" and result.body["network"] == "EXTERNAL"
    assert result.warnings == ()


def test_the_http_annotations_mean_nothing_to_a_regional_network_load_balancer() -> None:
    asked = {ann.PROTOCOL: "http", ann.TLS_PORTS: "443", ann.CERTIFICATE_NAME: "web",
             ann.TLS_PASSTHROUGH: "false", ann.HTTP3_PORT: "8443"}  # fmt: skip

    result = spec_of({ann.TYPE: "REGIONAL_NETWORK", **asked})

    assert {r["entry_protocol"] for r in rules(result).values()} == {"tcp"}
    assert rules(result)[443]["target_port"] == 443 and result.certificate_name == ""
    named = {key for key in asked for warning in result.warnings if key in warning}
    assert named == set(asked) - {ann.TLS_PASSTHROUGH}  # false asks for nothing
    assert spec_of({ann.TYPE: "REGIONAL_NETWORK", ann.PROTOCOL: "tcp"}).warnings == ()


def test_an_existing_load_balancer_keeps_its_type_whatever_the_default_or_annotation() -> None:
    kept = load_balancer_spec(service(), default_name="a", fixed_type="REGIONAL")
    asked = load_balancer_spec(service({ann.TYPE: "REGIONAL_NETWORK", ann.HTTP_PORTS: "80"}),
                               default_name="a", fixed_type="REGIONAL")  # fmt: skip

    assert kept.body["type"] == "REGIONAL" and rules(kept)[80]["target_port"] == 30080
    assert kept.warnings == ()
    assert asked.body["type"] == "REGIONAL" and rules(asked)[80]["entry_protocol"] == "http"
    (warning,) = asked.warnings
    assert ann.TYPE in warning and "cannot change" in warning


def test_local_traffic_policy_checks_the_health_check_node_port() -> None:
    result = spec_of(externalTrafficPolicy="Local", healthCheckNodePort=32000)

    assert result.body["health_check"] == {**KUBE_PROXY_CHECK, "port": 32000}


def test_port_lists_choose_protocols_and_certificates_terminate_tls() -> None:
    result = spec_of({ann.HTTP_PORTS: "80", ann.TLS_PORTS: "443", ann.CERTIFICATE_ID: "cert-1",
                      ann.REDIRECT_HTTP_TO_HTTPS: "true"})  # fmt: skip

    assert rules(result)[80]["entry_protocol"] == "http"
    assert rules(result)[443] == {"entry_protocol": "https", "entry_port": 443,
                                  "target_protocol": "http", "target_port": 30443,
                                  "certificate_id": "cert-1"}  # fmt: skip
    assert result.body["redirect_http_to_https"] is True


def test_tls_passthrough_forwards_https_untouched() -> None:
    result = spec_of({ann.TLS_PORTS: "443", ann.TLS_PASSTHROUGH: "true"})

    assert rules(result)[443]["tls_passthrough"] is True
    assert rules(result)[443]["target_protocol"] == "https"


def test_http2_and_http3_ports_need_a_certificate() -> None:
    result = spec_of({ann.HTTP2_PORTS: "443", ann.HTTP3_PORT: "80", ann.CERTIFICATE_NAME: "web"})

    assert rules(result)[443]["entry_protocol"] == "http2"
    assert rules(result)[80]["entry_protocol"] == "http3"
    assert result.certificate_name == "web"


def test_every_setting_annotation_reaches_the_request() -> None:
    result = spec_of({
        ann.STICKY_TYPE: "cookies", ann.STICKY_COOKIE_NAME: "c", ann.STICKY_COOKIE_TTL: "300",
        ann.PROXY_PROTOCOL: "true", ann.BACKEND_KEEPALIVE: "true", ann.IDLE_TIMEOUT: "120",
        ann.SIZE_UNIT: "3", ann.ALLOW_RULES: "cidr:10.0.0.0/8,ip:1.2.3.4",
        ann.DENY_RULES: "ip:5.6.7.8", ann.NETWORK: "internal",
        ann.DISABLE_LETS_ENCRYPT_DNS_RECORDS: "true", ann.NAME: "my-lb",
        ann.HOSTNAME: "web.example.com",
    })  # fmt: skip
    body = result.body

    assert body["sticky_sessions"] == {"type": "cookies", "cookie_name": "c",
                                       "cookie_ttl_seconds": 300}  # fmt: skip
    assert body["enable_proxy_protocol"] and body["enable_backend_keepalive"]
    assert body["http_idle_timeout_seconds"] == 120 and body["size_unit"] == 3
    assert body["firewall"] == {"allow": ["cidr:10.0.0.0/8", "ip:1.2.3.4"],
                                "deny": ["ip:5.6.7.8"]}  # fmt: skip
    assert body["network"] == "INTERNAL" and body["network_stack"] == "IPV4"
    assert body["disable_lets_encrypt_dns_records"] is True
    assert result.name == "my-lb" and result.hostname == "web.example.com"
    assert result.warnings == ()


def test_override_health_check_uses_the_healthcheck_annotations() -> None:
    result = spec_of({ann.OVERRIDE_HEALTH_CHECK: "true", ann.HC_PROTOCOL: "http",
                      ann.HC_PORT: "443", ann.HC_PATH: "/ready", ann.HC_INTERVAL: "5",
                      ann.HC_TIMEOUT: "4", ann.HC_UNHEALTHY: "3", ann.HC_HEALTHY: "2"})  # fmt: skip

    assert result.body["health_check"] == {
        "protocol": "http", "port": 30443, "path": "/ready", "check_interval_seconds": 5,
        "response_timeout_seconds": 4, "unhealthy_threshold": 3, "healthy_threshold": 2,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        ({ann.TLS_PORTS: "443"}, ann.CERTIFICATE_ID),
        ({ann.HTTP_PORTS: "80", ann.TLS_PORTS: "80", ann.CERTIFICATE_ID: "c"}, ann.TLS_PORTS),
        ({ann.HTTP_PORTS: "8080"}, ann.HTTP_PORTS),
        ({ann.TLS_PASSTHROUGH: "true", ann.CERTIFICATE_ID: "c"}, ann.TLS_PASSTHROUGH),
        ({ann.SIZE_SLUG: "lb-small", ann.SIZE_UNIT: "2"}, ann.SIZE_UNIT),
        ({ann.SIZE_SLUG: "lb-huge"}, ann.SIZE_SLUG),
        ({ann.SIZE_UNIT: "0"}, ann.SIZE_UNIT),
        ({ann.STICKY_TYPE: "cookies"}, ann.STICKY_COOKIE_NAME),
        ({ann.PROXY_PROTOCOL: "maybe"}, ann.PROXY_PROTOCOL),
        ({ann.IDLE_TIMEOUT: "5"}, ann.IDLE_TIMEOUT),
        ({ann.ALLOW_RULES: "10.0.0.0/8"}, ann.ALLOW_RULES),
        ({ann.NETWORK: "INTERNAL", ann.NETWORK_STACK: "DUALSTACK"}, ann.NETWORK_STACK),
        ({ann.TYPE: "SOMETHING"}, ann.TYPE),
        ({ann.HTTP3_PORT: "80,443", ann.CERTIFICATE_ID: "c"}, ann.HTTP3_PORT),
        ({ann.NAME: "bad name!"}, ann.NAME),
        ({ann.OVERRIDE_HEALTH_CHECK: "true", ann.HC_PORT: "9999"}, ann.HC_PORT),
    ],
)
def test_what_upstream_refuses_is_refused_naming_the_annotation(
    annotations: Mapping[str, str], named: str
) -> None:
    with pytest.raises(InvalidServiceSpec, match=named):
        spec_of(annotations)


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        ({ann.HC_PATH: "/ready"}, ann.HC_PATH),
        ({ann.STICKY_COOKIE_NAME: "c"}, ann.STICKY_COOKIE_NAME),
        ({ann.REDIRECT_HTTP_TO_HTTPS: "true"}, ann.REDIRECT_HTTP_TO_HTTPS),
        ({ann.PREFIX + "healthcheck-pth": "/x"}, ann.PREFIX + "healthcheck-pth"),
        ({ann.TYPE: "REGIONAL_NETWORK", ann.IDLE_TIMEOUT: "90"}, ann.IDLE_TIMEOUT),
        ({ann.TYPE: "REGIONAL_NETWORK", ann.HTTP_PORTS: "80"}, ann.HTTP_PORTS),
    ],
)
def test_what_upstream_ignores_silently_is_a_warning_naming_the_annotation(
    annotations: Mapping[str, str], named: str
) -> None:
    result = spec_of(annotations)

    assert any(named in warning for warning in result.warnings), result.warnings


def test_disown_is_read() -> None:
    assert spec_of({ann.DISOWN: "true"}).disowned
    assert not spec_of().disowned


def test_udp_ports_forward_udp() -> None:
    result = spec_of(ports=[{"name": "dns", "protocol": "UDP", "port": 53, "nodePort": 30053}])

    assert rules(result)[53]["entry_protocol"] == "udp"


def test_source_ranges_are_the_allow_list_before_the_allow_rules() -> None:
    ranges = ["10.1.2.3/8", "2001:DB8::1/32", "10.0.0.0/8", "192.0.2.7/32"]

    result = spec_of({ann.ALLOW_RULES: "ip:203.0.113.1", ann.DENY_RULES: "cidr:10.9.0.0/16"},
                     loadBalancerSourceRanges=ranges)  # fmt: skip

    assert result.body["firewall"] == {
        "allow": ["cidr:10.0.0.0/8", "cidr:2001:db8::/32", "cidr:192.0.2.7/32"],
        "deny": ["cidr:10.9.0.0/16"],
    }
    (warning,) = result.warnings
    assert ann.ALLOW_RULES in warning and "loadBalancerSourceRanges" in warning
    assert spec_of({ann.ALLOW_RULES: "ip:203.0.113.1"}).body["firewall"]["allow"] == [
        "ip:203.0.113.1"
    ]
    for bad in ("10.0.0.0", "10.0.0.0/33", "example"):
        with pytest.raises(InvalidServiceSpec, match="loadBalancerSourceRanges"):
            spec_of(loadBalancerSourceRanges=[bad])


# -- issue 29: as upstream v0.1.68 builds the request -----------------------------------------


def test_the_default_health_check_is_kube_proxys_with_upstreams_figures_and_no_proxy_protocol() -> (
    None
):
    # buildHealthCheck, loadbalancers.go:997-1049@v0.1.68: proxy_protocol false (kube-proxy
    # speaks none: with enable-proxy-protocol every node would be marked down) and 3/5/3/5
    # always sent, so DigitalOcean's 10/5/5/3 (failover ~50 s instead of ~9 s) never apply.
    result = spec_of({ann.PROXY_PROTOCOL: "true"})

    assert result.body["health_check"] == KUBE_PROXY_CHECK
    assert result.body["enable_proxy_protocol"] is True


def test_the_health_check_figures_apply_without_the_override() -> None:
    # loadbalancers.go:1024-1039@v0.1.68: read whether or not override-health-check is set.
    result = spec_of({ann.HC_INTERVAL: "10", ann.HC_HEALTHY: "2"})

    assert result.body["health_check"] == {**KUBE_PROXY_CHECK, "check_interval_seconds": 10,
                                           "healthy_threshold": 2}  # fmt: skip
    assert result.warnings == ()


def test_override_health_check_counts_even_empty_a_path_means_http_on_the_first_tcp_port() -> None:
    # loadbalancers.go:1006 (present is enough), healthCheckProtocol 1364-1372 (a path and no
    # protocol: http), healthCheckPort 1350-1355 (the first TCP port) @v0.1.68.
    result = spec_of({ann.OVERRIDE_HEALTH_CHECK: "", ann.HC_PATH: "/ready"}, ports=[
        {"name": "dns", "protocol": "UDP", "port": 53, "nodePort": 30053},
        {"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080},
    ])  # fmt: skip

    assert result.body["health_check"] == {
        "protocol": "http", "port": 30080, "path": "/ready", "check_interval_seconds": 3,
        "response_timeout_seconds": 5, "unhealthy_threshold": 3, "healthy_threshold": 5,
    }  # fmt: skip
    assert result.warnings == ()


def test_network_stack_defaults_as_upstreams_get_network_stack() -> None:
    # getNetworkStack, loadbalancers.go:1756-1836@v0.1.68: REGIONAL is DUALSTACK (1799),
    # INTERNAL IPV4, REGIONAL_NETWORK left to its nodes (1779-1793).
    regional = spec_of()
    internal = spec_of({ann.NETWORK: "INTERNAL"})
    network = spec_of({ann.TYPE: "REGIONAL_NETWORK"})

    assert regional.body["network_stack"] == "DUALSTACK" and not regional.stack_from_nodes
    assert internal.body["network_stack"] == "IPV4"
    assert network.body["network_stack"] == "IPV4" and network.stack_from_nodes
    adopted = load_balancer_spec(service(), default_name="a", default_type="REGIONAL",
                                 fixed_type="REGIONAL", fixed_stack="IPV4")  # fmt: skip
    assert adopted.body["network_stack"] == "IPV4"


def test_http3_shares_its_port_with_the_tls_port() -> None:
    # buildForwardingRules leaves the http3 port out of the duplicate check
    # (loadbalancers.go:1111-1115@v0.1.68) and buildHTTP3ForwardingRule (1051-1084) adds a
    # second rule on that port.
    result = spec_of({ann.TLS_PORTS: "443", ann.HTTP3_PORT: "443", ann.CERTIFICATE_ID: "c"})

    on_443 = sorted((r["entry_protocol"], r["target_protocol"], r["target_port"],
                     r["certificate_id"])
                    for r in result.body["forwarding_rules"] if r["entry_port"] == 443)  # fmt: skip
    assert on_443 == [("http3", "http", 30443, "c"), ("https", "http", 30443, "c")]


def test_a_certificate_makes_443_https_beside_an_http2_port() -> None:
    # loadbalancers.go:1121-1126@v0.1.68: 443 is https unless tls-ports names ports or
    # http2-ports names 443.
    result = spec_of({ann.HTTP2_PORTS: "8443", ann.CERTIFICATE_ID: "c"}, ports=[
        {"name": "https", "protocol": "TCP", "port": 443, "nodePort": 30443},
        {"name": "h2", "protocol": "TCP", "port": 8443, "nodePort": 30844},
    ])  # fmt: skip

    assert rules(result)[443]["entry_protocol"] == "https"
    assert rules(result)[8443]["entry_protocol"] == "http2"
    assert {r["certificate_id"] for r in rules(result).values()} == {"c"}


def test_http2_may_pass_tls_through() -> None:
    # buildForwardingRule -> buildTLSForwardingRule for http2 too (loadbalancers.go:1211-1216,
    # 1266-1271@v0.1.68): passed through, the target protocol stays http2.
    result = spec_of({ann.HTTP2_PORTS: "443", ann.TLS_PASSTHROUGH: "true"})

    assert rules(result)[443] == {"entry_protocol": "http2", "entry_port": 443,
                                  "target_protocol": "http2", "target_port": 30443,
                                  "tls_passthrough": True}  # fmt: skip


def test_the_algorithm_annotation_is_accepted_silently_as_deprecated() -> None:
    # lb_annotations.go:116-121@v0.1.68: "Specifying this annotation does nothing".
    assert spec_of({ann.PREFIX + "algorithm": "least_connections"}).warnings == ()


@pytest.mark.parametrize("value", ["GLOBAL", "regional", "regional_network"])
def test_types_upstream_refuses_are_refused(value: str) -> None:
    # getType, loadbalancers.go:1725-1737@v0.1.68: REGIONAL or REGIONAL_NETWORK, spelled so.
    with pytest.raises(InvalidServiceSpec, match=ann.TYPE):
        spec_of({ann.TYPE: value})


def test_an_internal_dualstack_load_balancer_is_refused() -> None:
    # getNetworkStack, loadbalancers.go:1811-1814@v0.1.68.
    with pytest.raises(InvalidServiceSpec, match=ann.NETWORK_STACK):
        spec_of({ann.NETWORK: "INTERNAL", ann.NETWORK_STACK: "DUALSTACK"})
