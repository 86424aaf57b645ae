"""Upstream's own example Services, served by polyccm: each gets the load balancer upstream builds.

The Service objects of digitalocean-cloud-controller-manager's example manifests
(docs/controllers/services/examples/*.yml@v0.1.68) are transcribed in ``upstream_examples.yaml``.
Each is created on the real kube-apiserver with polyccm's service controller running on the
DigitalOcean emulator, and the load balancer DigitalOcean then reports must have what upstream's
buildLoadBalancerRequest (cloud-controller-manager/do/loadbalancers.go@v0.1.68, cited by line
below) gives that Service: forwarding rules (protocols, ports, certificate, passthrough), health
check, sticky sessions, the switches, firewall, size, and the hostname as the Service's ingress.

The examples were written for the REGIONAL type (their protocols, certificates and passthrough
mean nothing to a REGIONAL_NETWORK load balancer), which ``DEFAULT_LB_TYPE=REGIONAL`` makes the
default (cloud.go:162-165@v0.1.68); the same Services under upstream's own default,
REGIONAL_NETWORK, are checked too: each port forwarded as tcp or udp to itself
(buildRegionalNetworkForwardingRule, loadbalancers.go:1173-1193).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm.kube.api import SERVICES, KubeApi
from polyccm_digitalocean import annotations as ann
from polyccm_digitalocean_emulator.testing import DigitalOceanApi, provider_for
from polyccm_testing.kubeobjects import make_node, wait_for
from polyccm_testing.manager import manager_options, start_manager

EXAMPLES: dict[str, dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "upstream_examples.yaml").read_text()
)
#: The certificate id the examples name; a certificate made on the emulator stands for it.
EXAMPLE_CERTIFICATE = "c019bbf4-cad2-4884-8a20-410ddad7f54a"


@dataclass(frozen=True)
class Rule:
    """A forwarding rule: ``entry`` protocol on service port ``port``, to ``target`` on that
    port's nodePort; with the certificate, or tls passthrough."""

    entry: str
    port: int
    target: str
    certificate: bool = False
    passthrough: bool = False


@dataclass(frozen=True)
class Expected:
    rules: tuple[Rule, ...]
    #: interval, timeout, unhealthy, healthy: upstream's defaults 3/5/3/5 (loadbalancers.go:
    #: 1407-1465) unless annotated.
    figures: tuple[int, int, int, int] = (3, 5, 3, 5)
    sticky: Mapping[str, Any] = field(default_factory=lambda: {"type": "none"})
    fields: Mapping[str, Any] = field(default_factory=dict)
    hostname: str = ""


STICKY = {"type": "cookies", "cookie_name": "example", "cookie_ttl_seconds": 60}

# What loadbalancers.go@v0.1.68 builds for each example on a REGIONAL load balancer. The rules:
# buildForwardingRules (1088-1171): the protocol annotation's default (tcp without one,
# getProtocol 1307-1321), then http-ports, tls-ports and http2-ports, in that order (1141-1151);
# UDP stays udp (1153-1155). A certificate or passthrough makes 443 https unless tls-ports or an
# http2 443 says otherwise (1122-1126); https and http2 with a certificate target http
# (buildTLSForwardingRule 1272-1275), with passthrough their own protocol (1266-1271); the
# http3-port adds an http3 rule on the same port, with the certificate, to http
# (buildHTTP3ForwardingRule 1051-1086). None of the examples sets override-health-check, so
# their healthcheck-path/port/protocol are not read (buildHealthCheck 997-1049): the check is
# kube-proxy's, http /healthz on 10256, or the healthCheckNodePort for externalTrafficPolicy
# Local (healthCheckPathAndPort 1385-1393), with proxy_protocol false (1002).
EXPECTED: dict[str, Expected] = {
    # "https-ports" is no annotation of upstream's (tls-ports is, lb_annotations.go:86): 443
    # is https because a certificate is set (1122-1126); 80 is http (http-ports).
    "all-protos-nginx": Expected(
        (
            Rule("tcp", 22, "tcp"),
            Rule("http", 80, "http"),
            Rule("https", 443, "http", certificate=True),
        )
    ),
    "http-nginx-with-backend-keepalive": Expected(
        (Rule("tcp", 80, "tcp"),), fields={"enable_backend_keepalive": True}
    ),
    "http-nginx-with-healthcheck-numeric-values": Expected(
        (Rule("tcp", 80, "tcp"),), figures=(8, 6, 2, 2)
    ),
    "http-nginx-with-healthcheck-path": Expected((Rule("http", 80, "http"),)),
    "http-nginx-with-healthcheck-port": Expected(
        (Rule("http", 80, "http"), Rule("http", 55, "http"))
    ),
    "http-nginx-with-healthcheck-protocol": Expected((Rule("http", 80, "http"),)),
    # getHttpIdleTimeoutSeconds (1697-1709), sent as HTTPIdleTimeoutSeconds (895).
    "http-nginx-with-http-idle-timeout-config": Expected(
        (Rule("http", 80, "http"),), fields={"http_idle_timeout_seconds": 120}
    ),
    # buildFirewall (1220-1237): the allow and deny rules as written.
    "http-nginx-with-load-balancer-firewall": Expected(
        (Rule("tcp", 80, "tcp"),),
        fields={"firewall": {"allow": ["ip:1.2.3.4", "ip:1.2.3.5"], "deny": ["cidr:1.2.0.0/16"]}},
    ),
    # The load balancer speaks PROXY to the backends; the health check does not (1002).
    "http-nginx-with-proxy-protocol": Expected(
        (Rule("tcp", 80, "tcp"),), fields={"enable_proxy_protocol": True}
    ),
    "http-nginx-with-redirect": Expected(
        (Rule("http", 80, "http"), Rule("https", 443, "http", certificate=True)),
        fields={"redirect_http_to_https": True},
    ),
    "http-nginx": Expected((Rule("http", 80, "http"),)),
    # getSizeSlug (1587-1600), sent as SizeSlug (885).
    "http-with-large-nginx": Expected((Rule("http", 80, "http"),), fields={"size": "lb-large"}),
    # buildStickySessions (1280-1305).
    "http-with-sticky-sessions": Expected((Rule("http", 80, "http"),), sticky=STICKY),
    # The protocol annotation says http2, but no http2-ports names 443, so the certificate makes
    # it https (1124-1125, 1144-1146).
    "http2-with-cert-nginx": Expected((Rule("https", 443, "http", certificate=True),)),
    # getHostname (1323-1326): the Service's ingress is the hostname (260-269).
    "http2-with-hostname-and-cert": Expected(
        (Rule("https", 443, "http", certificate=True),), hostname="example.com"
    ),
    "http2-with-pass-through-nginx": Expected(
        (Rule("http", 80, "http"), Rule("http2", 443, "http2", passthrough=True))
    ),
    "http2-with-sticky-sessions": Expected(
        (Rule("https", 443, "http", certificate=True),), sticky=STICKY
    ),
    "http3-with-http2": Expected(
        (Rule("http2", 443, "http", certificate=True), Rule("http3", 443, "http", certificate=True))
    ),
    "https-with-cert-nginx-minimal": Expected((Rule("https", 443, "http", certificate=True),)),
    "https-with-cert-nginx": Expected(
        (Rule("http", 80, "http"), Rule("https", 443, "http", certificate=True))
    ),
    "https-with-hostname-and-cert": Expected(
        (Rule("http", 80, "http"), Rule("https", 443, "http", certificate=True)),
        hostname="example.com",
    ),
    "https-with-pass-through-nginx": Expected(
        (Rule("http", 80, "http"), Rule("https", 443, "https", passthrough=True))
    ),
    "https-with-sticky-sessions": Expected(
        (Rule("https", 443, "http", certificate=True),), sticky=STICKY
    ),
    "tcp-nginx": Expected((Rule("tcp", 80, "tcp"),)),
    # The healthcheck-port and -protocol are not read without the override; the figures are.
    "udp-with-healthcheck": Expected(
        (Rule("tcp", 10001, "tcp"), Rule("udp", 10002, "udp")), figures=(3, 4, 3, 5)
    ),
}
#: What every example's load balancer has unless its Expected says otherwise: the switches off
#: (getBool of an absent annotation, 1658-1695), no firewall rule, DigitalOcean's 60 s idle
#: timeout (none sent, 1697-1701).
DEFAULT_FIELDS: Mapping[str, Any] = {
    "redirect_http_to_https": False,
    "enable_proxy_protocol": False,
    "enable_backend_keepalive": False,
    "http_idle_timeout_seconds": 60,
    "firewall": {"allow": [], "deny": []},
}


def test_every_example_is_transcribed_and_expected() -> None:
    assert len(EXAMPLES) == 25 and set(EXAMPLES) == set(EXPECTED)
    assert all(e["kind"] == "Service" for e in EXAMPLES.values())


@pytest.fixture
def served(
    request: pytest.FixtureRequest,
    control_plane: Any,
    kube_api: KubeApi,
    clean_nodes: None,
    namespace: str,
    do: Mapping[str, str],
) -> Iterator[tuple[str, DigitalOceanApi, str]]:
    """Two nodes on two droplets, a certificate, and polyccm's service controller with
    ``DEFAULT_LB_TYPE`` as the test's parameter says; yields (default type, the cloud's API,
    the certificate's id)."""
    default_type: str = request.param
    cloud = DigitalOceanApi(do)
    for index, droplet in enumerate(cloud.create_droplets(2, prefix="example")):
        make_node(kube_api, droplet["name"], tainted=False,
                  provider_id=f"digitalocean://{droplet['id']}",
                  addresses=(("InternalIP", f"10.0.0.{index + 2}"),
                             ("ExternalIP", f"203.0.113.{index + 2}")))  # fmt: skip
    certificate = cloud.ok("POST", "/v2/certificates", {
        "name": "example", "type": "custom", "private_key": "k", "leaf_certificate": "c",
    })["certificate"]  # fmt: skip
    options = manager_options("digitalocean", control_plane.kubeconfig,
                              controllers=frozenset({"service"}))  # fmt: skip
    running = start_manager(options, provider_for(do, DEFAULT_LB_TYPE=default_type))
    try:
        yield default_type, cloud, str(certificate["id"])
    finally:
        running.stop()


def manifest(name: str, certificate_id: str) -> dict[str, Any]:
    """The example ``name`` as a Service of that name, the example certificate id replaced."""
    service = copy.deepcopy(EXAMPLES[name])
    service["metadata"]["name"] = name
    annotations = service["metadata"].setdefault("annotations", {})
    for key, value in annotations.items():
        if value == EXAMPLE_CERTIFICATE:
            annotations[key] = certificate_id
    return service


def ingress(kube_api: KubeApi, namespace: str, name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (
        kube_api.get(SERVICES, name, namespace)["status"].get("loadBalancer", {}).get("ingress")
        or []
    )
    return found


def rule_facts(rule: Mapping[str, Any]) -> tuple[Any, ...]:
    return (rule["entry_protocol"], rule["entry_port"], rule["target_protocol"],
            rule["target_port"], rule.get("certificate_id") or "",
            bool(rule.get("tls_passthrough")))  # fmt: skip


@pytest.mark.parametrize("served", ["REGIONAL", "REGIONAL_NETWORK"], indirect=True)
def test_each_upstream_example_gets_the_load_balancer_upstream_builds(
    served: tuple[str, DigitalOceanApi, str], kube_api: KubeApi, namespace: str
) -> None:
    lb_type, cloud, certificate_id = served
    for name in EXPECTED:
        kube_api.create(SERVICES, manifest(name, certificate_id), namespace)
    wait_for(lambda: all(ingress(kube_api, namespace, n) for n in EXPECTED), 120,
             "every example Service's load balancer")  # fmt: skip

    droplets = sorted(int(d["id"]) for d in cloud.ok("GET", "/v2/droplets")["droplets"])
    found: dict[str, list[str]] = {}
    for name, expected in EXPECTED.items():
        service = kube_api.get(SERVICES, name, namespace)
        lb_id = service["metadata"]["annotations"][ann.LOAD_BALANCER_ID]
        balancer = cloud.ok("GET", f"/v2/load_balancers/{lb_id}")["load_balancer"]
        want, have = expectation(expected, service, lb_type, certificate_id), facts(balancer)
        have["droplet_ids"] = sorted(have["droplet_ids"])
        want["droplet_ids"] = droplets
        want["ingress"] = ([{"hostname": expected.hostname}] if expected.hostname
                           else [{"ip": balancer["ip"]}, {"ip": balancer["ipv6"]}]
                           if balancer.get("ipv6") else [{"ip": balancer["ip"]}])  # fmt: skip
        have["ingress"] = [{k: v for k, v in i.items() if k in ("ip", "hostname")}
                           for i in ingress(kube_api, namespace, name)]  # fmt: skip
        wrong = [f"{key}: {have.get(key)!r}, upstream {value!r}" for key, value in want.items()
                 if have.get(key) != value]  # fmt: skip
        if wrong:
            found[name] = wrong
    assert found == {}


def expectation(
    expected: Expected, service: Mapping[str, Any], lb_type: str, certificate_id: str
) -> dict[str, Any]:
    """What upstream builds for ``service`` (as the API server made it: its nodePorts and
    healthCheckNodePort) on a load balancer of ``lb_type``."""
    spec = service["spec"]
    node_ports = {int(p["port"]): int(p["nodePort"]) for p in spec["ports"]}
    if lb_type == "REGIONAL_NETWORK":
        rules = sorted((p["protocol"].lower(), int(p["port"]), p["protocol"].lower(),
                        int(p["port"]), "", False) for p in spec["ports"])  # fmt: skip
    else:
        rules = sorted((r.entry, r.port, r.target, node_ports[r.port],
                        certificate_id if r.certificate else "", r.passthrough)
                       for r in expected.rules)  # fmt: skip
    local = spec.get("externalTrafficPolicy") == "Local"
    interval, timeout, unhealthy, healthy = expected.figures
    check = {"protocol": "http", "path": "/healthz",
             "port": int(spec["healthCheckNodePort"]) if local else 10256,
             "check_interval_seconds": interval, "response_timeout_seconds": timeout,
             "unhealthy_threshold": unhealthy, "healthy_threshold": healthy,
             "proxy_protocol": False}  # fmt: skip
    fields = {**DEFAULT_FIELDS, **expected.fields}
    # REGIONAL DUALSTACK by default (getNetworkStack 1797-1800); REGIONAL_NETWORK EXTERNAL only
    # when every node is dual-stack (1801-1817): these nodes have no IPv6 address.
    stack = "DUALSTACK" if lb_type == "REGIONAL" else "IPV4"
    return {"type": lb_type, "network": "EXTERNAL", "network_stack": stack,
            "forwarding_rules": rules, "health_check": check,
            "sticky_sessions": dict(expected.sticky), **fields}  # fmt: skip


def facts(balancer: Mapping[str, Any]) -> dict[str, Any]:
    """The load balancer as DigitalOcean reports it, in the expectation's terms."""
    have = dict(balancer)
    have["forwarding_rules"] = sorted(map(rule_facts, balancer["forwarding_rules"]))
    check = balancer.get("health_check") or {}
    have["health_check"] = {k: check.get(k) for k in (
        "protocol", "path", "port", "check_interval_seconds", "response_timeout_seconds",
        "unhealthy_threshold", "healthy_threshold", "proxy_protocol")}  # fmt: skip
    sticky = balancer.get("sticky_sessions") or {}
    have["sticky_sessions"] = {k: v for k, v in sticky.items() if v not in ("", 0, None)}
    firewall = balancer.get("firewall") or {}
    have["firewall"] = {"allow": list(firewall.get("allow") or []),
                        "deny": list(firewall.get("deny") or [])}  # fmt: skip
    return have
