"""The DigitalOcean switch scenario (issue 25): upstream's CCM first, then polyccm.

The scenario's parts, shared by the goldens' recorder (:func:`main`) and
``tests/test_switch_digitalocean.py``:

* :data:`CASES`: one LoadBalancer Service per annotation of upstream's
  (digitalocean-cloud-controller-manager v0.1.68, ``cloud-controller-manager/do/``) that changes
  the load balancer it builds, each citing the line that reads it;
* :func:`setup_cloud`, :func:`register_nodes`, :func:`create_services`: droplets and a
  certificate made through DigitalOcean's own API, the Nodes as ``kubelet
  --cloud-provider=external`` registers them, and the Services. A DigitalOcean cluster lives in
  one region (upstream's ``REGION``, metadata.go:38-50 via cloud.go:126, is the region of every
  load balancer it makes, loadbalancers.go:991), so every droplet is in :data:`REGION`; what
  varies between them is the IP stack (one dual-stack droplet), which upstream reads
  (classifyNode, loadbalancers.go:640-675);
* :func:`cloud_state`, read through the API; :func:`kube_state`, what a CCM wrote to Kubernetes;
* :data:`EDITS`: step 4's edits (a port added, an annotation changed, a node added, a node
  removed, a Service deleted);
* :func:`main`: ``python -m polyccm_digitalocean_emulator.switch --peer PATH`` (from the
  repository's root) runs upstream's binary through the recorder against the emulator and a
  local control plane and writes ``providers/digitalocean/tests/goldens/switch/NN-<step>.json``
  (``--out`` elsewhere; ``--work DIR`` keeps both CCMs' logs). Upstream settles when no write
  has gone out for ``--quiet`` seconds (20). About four minutes.

Node ports are fixed in the manifests, so a REGIONAL load balancer's rules (to node ports) are
the same at every run; load balancers' names hold their Service's UID (``a`` + the UID without
dashes, upstream's ``cloudprovider.DefaultLoadBalancerName``), which the replay binds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyccm.kube.api import NAMESPACES, NODES, SERVICES, KubeApi
from polyccm_testing.devenv.binaries import BinaryError
from polyccm_testing.kubeobjects import make_node
from polyccm_testing.peers import builds
from polyccm_testing.peers.run import RunningPeer, common_flags, running_peer

from polyccm_digitalocean_emulator.testing import DigitalOceanApi

#: The one region of the cluster (see the module docstring).
REGION = "nyc3"
NAMESPACE = "switch"
#: The peer whose recordings the goldens hold.
PEER = builds.DIGITALOCEAN
PEER_NAME = PEER.binary
PEER_VERSION = PEER.version
GOLDENS = Path("providers/digitalocean/tests/goldens/switch")

_BASE = "service.beta.kubernetes.io/do-loadbalancer-"
LOAD_BALANCER_ID = "kubernetes.digitalocean.com/load-balancer-id"
DISOWN = "service.kubernetes.io/do-loadbalancer-disown"
UNINITIALIZED_TAINT = "node.cloudprovider.kubernetes.io/uninitialized"
#: Stands for the certificate's id in :data:`CASES` (it is made by :func:`setup_cloud`).
CERTIFICATE = "{certificate-id}"
CERTIFICATE_NAME = "switch-cert"

#: The droplets (name, whether it has IPv6). Node names are droplet names, as on DOKS.
DROPLETS = (("switch-a", True), ("switch-b", False), ("switch-c", False))
#: The droplet step 4 adds, and the node it removes.
ADDED_DROPLET = "switch-d"
REMOVED_NODE = "switch-c"


@dataclass(frozen=True)
class Port:
    name: str
    port: int
    node_port: int
    protocol: str = "TCP"

    def manifest(self) -> dict[str, Any]:
        return {"name": self.name, "port": self.port, "targetPort": self.port,
                "nodePort": self.node_port, "protocol": self.protocol}  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One Service of the table: its annotations (without the common prefix where it has it),
    its ports, more of its spec, and the upstream lines that read what it sets."""

    name: str
    annotations: Mapping[str, str]
    ports: tuple[Port, ...]
    cites: str
    spec: Mapping[str, Any] = field(default_factory=dict)

    def manifest(self, certificate_id: str) -> dict[str, Any]:
        annotations = {
            (key if "/" in key else _BASE + key): value.replace(CERTIFICATE, certificate_id)
            for key, value in self.annotations.items()
        }
        spec = {"type": "LoadBalancer", "selector": {"app": self.name},
                "ports": [p.manifest() for p in self.ports], **self.spec}  # fmt: skip
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": self.name, "namespace": NAMESPACE,
                             "annotations": annotations}, "spec": spec}  # fmt: skip


def _ports(*items: tuple[str, int, int] | tuple[str, int, int, str]) -> tuple[Port, ...]:
    return tuple(Port(*item) for item in items)


_REGIONAL = {"type": "REGIONAL"}

#: Every annotation that changes upstream's load balancer (loadbalancers.go at v0.1.68, and
#: lb_annotations.go for the names), one Service each or a few that only work together.
CASES: tuple[Case, ...] = (
    Case("plain", {}, _ports(("http", 80, 30080), ("dns", 53, 30053, "UDP")),
         "no type: DEFAULT_LB_TYPE's REGIONAL_NETWORK (cloud.go:162-165, getType "
         "loadbalancers.go:1725-1737), tcp/udp to the service ports (1173-1193), network "
         "stack IPV4 unless every node is dual-stack (1756-)"),
    Case("regional", _REGIONAL, _ports(("http", 80, 30180), ("alt", 8080, 30181)),
         "type REGIONAL (1725-1737): rules to node ports (1195-1218), DUALSTACK by default "
         "(getNetworkStack 1756-), kube-proxy's health check with proxy_protocol false "
         "(buildHealthCheck 997-1049)"),
    Case("named", {"name": "switch-named"}, _ports(("http", 80, 30280)),
         "name (getLoadBalancerName 186-194)"),
    Case("http", {**_REGIONAL, "protocol": "http", "sticky-sessions-type": "cookies",
                  "sticky-sessions-cookie-name": "session", "sticky-sessions-cookie-ttl": "300",
                  "http-idle-timeout-seconds": "120", "enable-backend-keepalive": "true"},
         _ports(("http", 80, 30380)),
         "protocol (getProtocol 1307-1320), sticky sessions (buildStickySessions 1280-), "
         "http-idle-timeout-seconds, enable-backend-keepalive (buildLoadBalancerRequest"
         "WithNodeState 863-876)"),
    Case("tls", {**_REGIONAL, "tls-ports": "443", "http-ports": "80",
                 "certificate-id": CERTIFICATE, "redirect-http-to-https": "true",
                 "disable-lets-encrypt-dns-records": "true"},
         _ports(("http", 80, 30480), ("https", 443, 30443)),
         "tls-ports, http-ports (buildForwardingRules 1088-1171), certificate-id "
         "(findCertificateID 1547-1551, buildTLSForwardingRule 1257-1278), "
         "redirect-http-to-https, disable-lets-encrypt-dns-records (853-871)"),
    Case("http2", {**_REGIONAL, "http2-ports": "443", "certificate-name": CERTIFICATE_NAME},
         _ports(("h2", 443, 30543)),
         "http2-ports (1106, 1149; 443 stays http2: 1124), certificate-name (findCertificateID "
         "1552-1563)"),
    Case("http3", {**_REGIONAL, "tls-ports": "443", "http3-port": "443",
                   "certificate-id": CERTIFICATE},
         _ports(("https", 443, 30583)),
         "http3-port: a second rule on a TLS port (buildHTTP3ForwardingRule 1051-1084, the "
         "shared port required: 1111)"),
    Case("passthrough", {**_REGIONAL, "tls-passthrough": "true"}, _ports(("https", 443, 30643)),
         "tls-passthrough: 443 becomes https passed through (1121-1126, 1266-1271)"),
    Case("healthcheck", {**_REGIONAL, "override-health-check": "", "healthcheck-path": "/ready",
                         "healthcheck-port": "80", "healthcheck-protocol": "http",
                         "healthcheck-check-interval-seconds": "10",
                         "healthcheck-response-timeout-seconds": "6",
                         "healthcheck-unhealthy-threshold": "4",
                         "healthcheck-healthy-threshold": "2"},
         _ports(("http", 80, 30780)),
         "override-health-check (present, even empty: 1006) with healthcheck-path, -port, "
         "-protocol (1009-1019, healthCheckPort 1329-), the four figures (1022-1037)"),
    Case("local", {}, _ports(("http", 80, 30880)),
         "externalTrafficPolicy Local: the health check is the healthCheckNodePort "
         "(healthCheckPathAndPort 1385-1393)",
         {"externalTrafficPolicy": "Local", "healthCheckNodePort": 30881}),
    Case("sized", {"size-unit": "2"}, _ports(("http", 80, 30980)),
         "size-unit (getSizeUnit 1602-1619)"),
    Case("slug", {**_REGIONAL, "size-slug": "lb-medium", "algorithm": "least_connections"},
         _ports(("http", 80, 31080)),
         "size-slug (getSizeSlug 1587-1599), algorithm (getAlgorithm 1575-, sent though "
         "deprecated: lb_annotations.go:116-121)"),
    Case("firewall", {"allow-rules": "ip:203.0.113.7,cidr:198.51.100.0/24",
                      "deny-rules": "cidr:192.0.2.0/24"}, _ports(("http", 80, 31180)),
         "allow-rules, deny-rules (buildFirewall 1220-1236)"),
    Case("ranges", {"allow-rules": "ip:203.0.113.7"}, _ports(("http", 80, 31280)),
         "spec.loadBalancerSourceRanges win over allow-rules (1226-1231, 1240-1255)",
         {"loadBalancerSourceRanges": ["203.0.113.0/24"]}),
    Case("internal", {"network": "INTERNAL"}, _ports(("http", 80, 31380)),
         "network INTERNAL (getNetwork 1739-1748): every node a backend (604-607), IPV4"),
    Case("ipv4", {**_REGIONAL, "network-stack": "IPV4"}, _ports(("http", 80, 31480)),
         "network-stack IPV4 on REGIONAL (getNetworkStack 1772-1775)"),
    Case("proxy", {**_REGIONAL, "enable-proxy-protocol": "true", "hostname": "shop.example.com"},
         _ports(("http", 80, 31580)),
         "enable-proxy-protocol (858-861; the health check keeps proxy_protocol false, 1002), "
         "hostname (the status, EnsureLoadBalancer 259-269)"),
    Case("disowned", {DISOWN: "true"}, _ports(("http", 80, 31680)),
         "disown: no call at all (EnsureLoadBalancer 206-213)"),
)  # fmt: skip


# -- setup --------------------------------------------------------------------------------------


@dataclass
class Setup:
    """What :func:`setup_cloud` made: droplet ids by droplet (node) name, the certificate's id."""

    droplets: dict[str, int]
    certificate_id: str

    def as_json(self) -> dict[str, Any]:
        return {"droplets": dict(self.droplets), "certificate_id": self.certificate_id}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Setup:
        droplets = {str(k): int(v) for k, v in value["droplets"].items()}
        return cls(droplets, str(value["certificate_id"]))


def make_droplet(api: DigitalOceanApi, name: str, ipv6: bool) -> tuple[str, int]:
    """One active droplet (``create_droplets`` names it ``<name>-0``): its name and id."""
    (droplet,) = api.create_droplets(1, prefix=name, region=REGION, ipv6=ipv6, tags=["k8s"])
    droplet_id = int(droplet["id"])
    api.wait_for_status(f"/v2/droplets/{droplet_id}", "droplet", "active")
    return str(droplet["name"]), droplet_id


def setup_cloud(api: DigitalOceanApi) -> Setup:
    """The droplets and the certificate, through the API."""
    droplets = dict(make_droplet(api, name, ipv6) for name, ipv6 in DROPLETS)
    body = {"name": CERTIFICATE_NAME, "type": "custom", "private_key": "switch-key",
            "leaf_certificate": "switch-leaf", "certificate_chain": "switch-chain"}  # fmt: skip
    certificate = api.ok("POST", "/v2/certificates", body)["certificate"]
    return Setup(droplets, str(certificate["id"]))


def register_nodes(kube: KubeApi, made: Setup) -> None:
    """The Nodes as kubelets register them: tainted, no providerID."""
    for name in made.droplets:
        make_node(kube, name)


def create_services(kube: KubeApi, made: Setup) -> None:
    """The namespace and every Service of :data:`CASES`."""
    kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": NAMESPACE}})  # fmt: skip
    for case in CASES:
        kube.create(SERVICES, case.manifest(made.certificate_id), NAMESPACE)


def nodes_initialised(kube: KubeApi) -> bool:
    nodes = kube.list(NODES)["items"]
    return bool(nodes) and all(_node_initialised(kube, n["metadata"]["name"]) for n in nodes)


# -- state --------------------------------------------------------------------------------------

#: Keys whose values differ between two runs of the same scenario (assigned by the cloud, or
#: times); IPs are compared on their own (the same IP where upstream keeps it).
VOLATILE = ("id", "created_at", "vpc_uuid", "project_id", "ip", "ipv6")


def cloud_state(api: DigitalOceanApi) -> dict[str, Any]:
    """The load balancers and droplets (in name order) as the API lists them."""
    balancers = api.ok("GET", "/v2/load_balancers?per_page=200")["load_balancers"]
    droplets = api.ok("GET", "/v2/droplets?per_page=200")["droplets"]
    return {
        "load_balancers": sorted(balancers, key=lambda lb: str(lb["name"])),
        "droplets": sorted(({"name": d["name"], "id": d["id"], "status": d["status"]}
                            for d in droplets), key=lambda d: str(d["name"])),
    }  # fmt: skip


def kube_state(kube: KubeApi) -> dict[str, Any]:
    """What a CCM wrote to Kubernetes: each Node's providerID, labels, taints and addresses;
    each scenario Service's UID, annotations, finalizers and load-balancer status."""
    nodes = {}
    for node in kube.list(NODES)["items"]:
        nodes[node["metadata"]["name"]] = {
            "providerID": node["spec"].get("providerID", ""),
            "labels": node["metadata"].get("labels", {}),
            "taints": node["spec"].get("taints", []),
            "addresses": node.get("status", {}).get("addresses", []),
        }
    services = {}
    for service in kube.list(SERVICES, NAMESPACE)["items"]:
        services[service["metadata"]["name"]] = {
            "uid": service["metadata"]["uid"],
            "annotations": service["metadata"].get("annotations", {}),
            "finalizers": service["metadata"].get("finalizers", []),
            "loadBalancer": service.get("status", {}).get("loadBalancer", {}),
        }
    return {"nodes": nodes, "services": services}


def load_balancer_name(uid: str) -> str:
    """Upstream's name of a Service's load balancer without a ``name`` annotation
    (``cloudprovider.DefaultLoadBalancerName``: ``a`` + the UID without dashes, 32 at most)."""
    return ("a" + uid.replace("-", ""))[:32]


# -- step 4's edits -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One edit of step 4: its golden's step name, what it does, and whether it is done."""

    name: str
    note: str
    apply: Callable[[KubeApi, DigitalOceanApi], None]
    done: Callable[[KubeApi], bool]


def _add_port(kube: KubeApi, api: DigitalOceanApi) -> None:
    service = kube.get(SERVICES, "regional", NAMESPACE)
    ports = [*service["spec"]["ports"], Port("extra", 9090, 30182).manifest()]
    kube.patch(SERVICES, "regional", {"spec": {"ports": ports}}, NAMESPACE,
               patch_type="application/merge-patch+json")  # fmt: skip


def _change_annotation(kube: KubeApi, api: DigitalOceanApi) -> None:
    annotations = {_BASE + "deny-rules": "cidr:192.0.2.0/24,ip:198.51.100.9"}
    kube.patch(SERVICES, "firewall", {"metadata": {"annotations": annotations}}, NAMESPACE)


def _add_node(kube: KubeApi, api: DigitalOceanApi) -> None:
    name, _ = make_droplet(api, ADDED_DROPLET, False)
    make_node(kube, name)


def _remove_node(kube: KubeApi, api: DigitalOceanApi) -> None:
    kube.delete(NODES, f"{REMOVED_NODE}-0")


def _delete_service(kube: KubeApi, api: DigitalOceanApi) -> None:
    kube.delete(SERVICES, "named", NAMESPACE)


def _node_initialised(kube: KubeApi, name: str) -> bool:
    node = kube.get(NODES, name)
    taints = node["spec"].get("taints", [])
    return bool(node["spec"].get("providerID")) and not any(
        t["key"] == UNINITIALIZED_TAINT for t in taints
    )


def _service_gone(kube: KubeApi, name: str) -> bool:
    return all(s["metadata"]["name"] != name for s in kube.list(SERVICES, NAMESPACE)["items"])


EDITS = (
    Edit(
        "port-added",
        "Service regional gains port 9090 (node port 30182)",
        _add_port,
        lambda kube: True,
    ),
    Edit(
        "annotation-changed",
        "Service firewall's deny-rules gain ip:198.51.100.9",
        _change_annotation,
        lambda kube: True,
    ),
    Edit(
        "node-added",
        f"droplet {ADDED_DROPLET}-0 made and its Node registered",
        _add_node,
        lambda kube: _node_initialised(kube, f"{ADDED_DROPLET}-0"),
    ),
    Edit(
        "node-removed",
        f"Node {REMOVED_NODE}-0 deleted (its droplet kept)",
        _remove_node,
        lambda kube: True,
    ),
    Edit(
        "service-deleted",
        "Service named deleted",
        _delete_service,
        lambda kube: _service_gone(kube, "named"),
    ),
)


#: Services polyccm does not serve where upstream does: none since issue 29 (http3 on a TLS
#: port is served as upstream's loadbalancers.go:1111; a disowned Service is left at once, as
#: loadbalancers.go:206-213, and is never waited for).
POLYCCM_UNSERVED: frozenset[str] = frozenset()


def served(kube: KubeApi, unserved: frozenset[str] = frozenset()) -> bool:
    """Every node initialised and every scenario Service served (but the disowned one, and
    those named in ``unserved``)."""
    if not nodes_initialised(kube):
        return False
    services = kube.list(SERVICES, NAMESPACE)["items"]
    return all(
        s.get("status", {}).get("loadBalancer", {}).get("ingress")
        for s in services
        if DISOWN not in s["metadata"].get("annotations", {})
        and s["metadata"]["name"] not in unserved
    )


# -- the recording ------------------------------------------------------------------------------


def upstream_flags(kubeconfig: Path) -> list[str]:
    """Upstream's command line as a deployment runs it, for a local control plane: the shared
    peers' flags (the three controllers polyccm runs, no leader election, no serving port, no
    routes) and a 5 s node monitor period."""
    return [*common_flags(kubeconfig), "--node-monitor-period=5s"]


def upstream_env(endpoint: str, token: str, metrics_port: int) -> dict[str, str]:
    """Upstream's environment (cloud.go:89-165): the token, the endpoint, the region (so it
    never asks the metadata address) and its metrics on loopback (default :80)."""
    return {"DO_ACCESS_TOKEN": token, "DO_OVERRIDE_URL": endpoint, "REGION": REGION,
            "METRICS_ADDR": f"127.0.0.1:{metrics_port}"}  # fmt: skip


def running_upstream(
    binary: Path, kubeconfig: Path, env: Mapping[str, str], log: Path
) -> AbstractContextManager[RunningPeer]:
    """Upstream's CCM as a process (only ``env`` and the few variables a process needs, every
    URL on loopback), stopped afterwards."""
    return running_peer(binary, upstream_flags(kubeconfig), env, log)


class Settler:
    """Collects a recorder's exchanges and tells when the CCM behind it has settled: ``done``
    holds and no write has gone out for ``quiet`` seconds (upstream retries a load balancer
    still ``new`` after 15 s, loadbalancers.go:251-253)."""

    def __init__(self, recorder: Any, quiet: float) -> None:
        self.recorder = recorder
        self.quiet = quiet
        self.exchanges: list[Any] = []
        self._last_write = time.monotonic()

    def take(self) -> list[Any]:
        self._collect()
        taken, self.exchanges = self.exchanges, []
        return taken

    def _collect(self) -> None:
        new = self.recorder.take()
        if any(exchange.is_write for exchange in new):
            self._last_write = time.monotonic()
        self.exchanges.extend(new)

    def wait(
        self, done: Callable[[], bool], *, timeout: float = 180.0, need_write: bool = False
    ) -> None:
        start = time.monotonic()
        deadline = start + timeout
        while time.monotonic() < deadline:
            self._collect()
            wrote = any(e.is_write for e in self.exchanges)
            quiet = time.monotonic() - self._last_write >= self.quiet
            if (wrote or not need_write) and quiet and done():
                return
            time.sleep(0.5)
        raise TimeoutError(f"not settled after {timeout} s")


@dataclass
class _Environment:
    """A local control plane with the emulator, its API and the recorder in front of it."""

    plane: Any
    api: DigitalOceanApi
    kube: KubeApi
    recorder: Any
    token: str


@contextmanager
def _environment(state: Path) -> Iterator[_Environment]:
    from polyccm_testing.devenv import controlplane
    from polyccm_testing.peers.recording import Recorder

    from polyccm_digitalocean_emulator.plugin import CA_BUNDLE_VARIABLE
    from polyccm_digitalocean_emulator.testing import control

    plane = controlplane.start(state, clouds=("digitalocean",), die_with_caller=True)
    try:
        env = dict(plane.env)
        control(env).configure(lb_active_delay=1.0)
        ca_file = Path(env[CA_BUNDLE_VARIABLE])
        with Recorder(env["DO_OVERRIDE_URL"], ca_file=ca_file) as recorder:
            yield _Environment(plane, DigitalOceanApi(env), plane.kube_api(qps=0), recorder,
                               env["DO_ACCESS_TOKEN"])  # fmt: skip
    finally:
        plane.stop()


def _record_upstream_first(
    peer: Path, state: Path, save: Callable[[Any], None], quiet: float
) -> None:
    """Upstream makes everything, then takes step 4's edits one by one."""
    from polyccm_testing.emulation.testing import free_port
    from polyccm_testing.peers.goldens import Step

    with _environment(state / "upstream-first") as at:
        made = setup_cloud(at.api)
        register_nodes(at.kube, made)
        upstream = upstream_env(at.recorder.url, at.token, free_port())
        settler = Settler(at.recorder, quiet)
        with running_upstream(peer, at.plane.kubeconfig, upstream, state / "upstream.log"):
            # The cluster's nodes come first, as in a cluster; then its Services.
            settler.wait(lambda: nodes_initialised(at.kube), timeout=60)
            create_services(at.kube, made)
            settler.wait(lambda: served(at.kube), need_write=True)
            kube = {**kube_state(at.kube), "setup": made.as_json()}
            note = "upstream initialises the nodes and makes every load balancer"
            save(Step("create", tuple(settler.take()), cloud_state(at.api), kube, note))
            for edit in EDITS:
                edit.apply(at.kube, at.api)
                settler.wait(lambda e=edit: e.done(at.kube), need_write=True)  # type: ignore[misc]
                exchanges = tuple(settler.take())
                save(
                    Step(edit.name, exchanges, cloud_state(at.api), kube_state(at.kube), edit.note)
                )


def _record_reverse(peer: Path, state: Path, save: Callable[[Any], None], quiet: float) -> None:
    """polyccm makes everything; then upstream starts on what it made."""
    from polyccm_testing.demo import running_polyccm
    from polyccm_testing.emulation.testing import free_port
    from polyccm_testing.peers.goldens import Step

    with _environment(state / "polyccm-first") as at:
        made = setup_cloud(at.api)
        register_nodes(at.kube, made)
        create_services(at.kube, made)
        ours = upstream_env(at.recorder.url, at.token, free_port())  # upstream's, as it is
        settler = Settler(at.recorder, 5.0)
        with running_polyccm("digitalocean", state=state, env=ours, kubeconfig=at.plane.kubeconfig,
                             args=["--configure-cloud-routes=false"]):  # fmt: skip
            settler.wait(lambda: served(at.kube, POLYCCM_UNSERVED), need_write=True)
        settler.take()
        kube = {**kube_state(at.kube), "setup": made.as_json()}
        note = "polyccm made everything: the state upstream starts on (no upstream exchange)"
        save(Step("reverse-polyccm", (), cloud_state(at.api), kube, note))
        settler = Settler(at.recorder, quiet)
        upstream = upstream_env(at.recorder.url, at.token, free_port())
        with running_upstream(peer, at.plane.kubeconfig, upstream, state / "reverse.log"):
            time.sleep(quiet)
            settler.wait(lambda: served(at.kube))  # upstream serves http3 too
            note = "upstream started on what polyccm made"
            save(
                Step(
                    "reverse", tuple(settler.take()), cloud_state(at.api), kube_state(at.kube), note
                )
            )


def record(peer: Path, out: Path, *, quiet: float = 20.0, work: Path | None = None) -> list[str]:
    """Run the scenario with upstream's binary ``peer``; write one golden per step in ``out``
    (its old goldens removed first); return the files' names."""
    from polyccm_testing.peers.goldens import Peer, Step, save_step

    peer_info = Peer(**PEER.describe())
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()
    written: list[str] = []

    def save(step: Step) -> None:
        path = save_step(out, len(written) + 1, step, peer_info)
        written.append(path.name)
        print(f"wrote {path} ({len(step.exchanges)} exchanges, {len(step.writes)} writes)",
              flush=True)  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="polyccm-switch-do-") as directory:
        state = work or Path(directory)
        _record_upstream_first(peer, state, save, quiet)
        _record_reverse(peer, state, save, quiet)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m polyccm_digitalocean_emulator.switch",
        description="Record the DigitalOcean switch goldens with upstream's CCM binary.",
    )
    parser.add_argument("--peer", type=Path, default=None,
                        help=f"{PEER_NAME} {PEER_VERSION}, built (see the README); default: "
                        f"${PEER.variable}, else {PEER.cache_path}")  # fmt: skip
    parser.add_argument("--out", type=Path, default=GOLDENS, help="where the goldens go")
    parser.add_argument("--quiet", type=float, default=20.0,
                        help="seconds without a write that mean upstream has settled")  # fmt: skip
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the CCMs' logs and the control planes' state here")  # fmt: skip
    args = parser.parse_args(argv)
    if args.peer is None:
        try:
            args.peer = builds.peer_binary("digitalocean")
        except BinaryError as error:
            print(error, file=sys.stderr)
            return 2
        if args.peer is None:
            print(f"no {PEER_NAME} {PEER_VERSION} in {PEER.cache_path}: build it (README) or "
                  "give --peer", file=sys.stderr)  # fmt: skip
            return 2
    if not os.access(args.peer, os.X_OK):
        print(f"--peer {args.peer}: not an executable file", file=sys.stderr)
        return 2
    record(args.peer.resolve(), args.out, quiet=args.quiet, work=args.work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
