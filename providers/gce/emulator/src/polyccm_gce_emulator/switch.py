"""The GCE switch scenario: upstream's cloud-controller-manager (cloud-provider-gcp) first, then
polyccm, on the same cluster and emulated cloud (issue 25).

What is here, for the goldens' recording (:func:`main`) and for ``tests/test_switch_gce.py``:

* :data:`SERVICES`, one ``type: LoadBalancer`` Service per field or annotation that changes what
  upstream's external network load balancer makes, each citing the line of
  cloud-provider-gcp v36.3.8 that reads it; :data:`INSTANCES` in two zones, named and tagged so
  that upstream finds the firewall's target tag (the tag prefixing every instance name);
* :func:`setup_cloud` and :func:`setup_kube`: the instances through the compute API, a static
  address for ``loadBalancerIP``; the cluster id, the Nodes as kubelets register them (with pod
  CIDRs for the routes) and the Services;
* :func:`cloud_state`: forwarding rules, target pools, addresses, firewalls, HTTP health checks
  and routes through the compute API, links written on ``compute.googleapis.com``;
  :func:`kube_results`: what a CCM wrote on Nodes and Services;
* :data:`EDITS`: a port added, an annotation and the source ranges changed, a node added, then
  removed, a Service deleted;
* :func:`ccm_argv` and :class:`CcmProcess`: a CCM (upstream's binary or polyccm's CLI) run
  with the same gce.conf, environment and flags; :func:`settle` waits for it to be quiet.

Two internal Services (``networking.gke.io/load-balancer-type: Internal``) are in the table
too (issue 27): their load balancers are the cluster's instance groups, a regional backend
service, a health check in the ``healthChecks`` API, firewalls and an internal forwarding rule.
"""

from __future__ import annotations

import argparse
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyccm.kube.api import CONFIGMAPS, NAMESPACES, NODES, ApiError, KubeApi
from polyccm.kube.api import SERVICES as SERVICE_OBJECTS

from polyccm_gce_emulator.testing import REGION, ComputeApi, ComputeApiError, free_port

#: The namespace of the scenario's Services (fixed: descriptions name it).
NAMESPACE = "switch-gce"
#: ``--cluster-name``: routes are named after its first 26 characters.
CLUSTER_NAME = "switch"
#: The cluster id in ConfigMap ``kube-system/ingress-uid`` (names the shared health check).
CLUSTER_ID = "5e1f0c0ffee5a17c"
CLUSTER_CIDR = "10.100.0.0/16"
#: Every instance carries this tag and its name starts with it: upstream's firewalls target the
#: longest tag prefixing each instance's name (gce_instances.go:854-900 computeHostTags).
TAG = "switch-node"
ZONE_A, ZONE_B = "us-central1-a", "us-central1-b"
#: Instances at the start: (name, zone, pod CIDR).
INSTANCES: tuple[tuple[str, str, str], ...] = (
    ("switch-node-a1", ZONE_A, "10.100.1.0/24"),
    ("switch-node-a2", ZONE_A, "10.100.2.0/24"),
    ("switch-node-b1", ZONE_B, "10.100.3.0/24"),
)
#: The instance the node-added edit brings (and node-removed takes away).
ADDED = ("switch-node-b2", ZONE_B, "10.100.4.0/24")
#: The static address the ``static-ip`` Service asks for by ``loadBalancerIP``.
STATIC_ADDRESS = "switch-static"

UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
#: What never compares between two runs: ids, times, fingerprints, operations.
VOLATILE = frozenset(
    {"id", "creationTimestamp", "fingerprint", "labelFingerprint", "targetId", "kind"}
)
_LOOPBACK_BASE = re.compile(r"http://127\.0\.0\.1:\d+/compute/v1/")
CANONICAL_BASE = "https://compute.googleapis.com/compute/v1/"
GCE = "cloud-provider-gcp"
VERSION = "v36.3.8"
SOURCE = (
    "github.com/kubernetes/cloud-provider-gcp@f67fc7e3 (tag v36.3.8), "
    "cmd/cloud-controller-manager, vendored tree; six vendored files the snapshot lacked "
    "from google.golang.org/api@v0.293.0 and github.com/mattn/go-sqlite3@v1.14.49 (go.sum hashes)"
)


@dataclass(frozen=True)
class ScenarioService:
    """One Service of the table: its ports ``(port, protocol, nodePort)``, annotations and
    extra spec fields, what it changes in upstream's result (with the line), and the issue
    naming what polyccm does differently today (empty when nothing)."""

    name: str
    why: str
    ports: tuple[tuple[int, str, int], ...] = ((80, "TCP", 30080),)
    annotations: Mapping[str, str] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)
    issue: str = ""


#: gce_loadbalancer_external.go of cloud-provider-gcp v36.3.8 unless another file is named.
SERVICES: tuple[ScenarioService, ...] = (
    ScenarioService(
        "plain",
        "the shared nodes health check k8s-<cluster-id>-node on :10256/healthz and its "
        "firewall (:264, :1035), pool, rule on an ephemeral IP, firewall 0.0.0.0/0 (:1191)",
        ports=((80, "TCP", 30080),),
    ),
    ScenarioService(
        "ports",
        "several ports: the rule's portRange min-max (:853, :964 loadBalancerPortRange), the "
        "firewall's ports as ranges (:1150 getPortsAndProtocol)",
        ports=((80, "TCP", 30081), (443, "TCP", 30082), (8080, "TCP", 30083)),
    ),
    ScenarioService(
        "udp",
        "UDP: the rule's IPProtocol and the firewall's protocol (:927 getProtocol, :1079, :1175)",
        ports=((53, "UDP", 30053),),
    ),
    ScenarioService(
        "local",
        "externalTrafficPolicy Local: a health check of its own, <lb> on healthCheckNodePort "
        "(:243-253), and its firewall k8s-<lb>-http-hc",
        ports=((80, "TCP", 30084),),
        spec={"externalTrafficPolicy": "Local", "healthCheckNodePort": 32084},
    ),
    ScenarioService(
        "affinity",
        "sessionAffinity ClientIP: the pool's sessionAffinity CLIENT_IP (:659, :974)",
        ports=((80, "TCP", 30085),),
        spec={"sessionAffinity": "ClientIP"},
    ),
    ScenarioService(
        "ranges",
        "spec.loadBalancerSourceRanges: the firewall's sourceRanges (:1191, "
        "k8s.io/cloud-provider service/helpers GetLoadBalancerSourceRanges)",
        ports=((80, "TCP", 30086),),
        spec={"loadBalancerSourceRanges": ["203.0.113.0/24", "198.51.100.7/32"]},
    ),
    ScenarioService(
        "static-ip",
        "loadBalancerIP on a reserved address: the rule takes it and the address stays "
        "(:191 verifyUserRequestedIP, :514)",
        ports=((80, "TCP", 30087),),
        spec={"loadBalancerIP": "<static>"},
    ),
    ScenarioService(
        "ranges-annotation",
        "the source-ranges annotation service.beta.kubernetes.io/load-balancer-source-ranges "
        "(read when the spec has none; service/helpers GetLoadBalancerSourceRanges): the "
        "firewall's sourceRanges",
        ports=((80, "TCP", 30088),),
        annotations={"service.beta.kubernetes.io/load-balancer-source-ranges": "192.0.2.0/24"},
    ),
    ScenarioService(
        "standard-tier",
        "cloud.google.com/network-tier: Standard (gce_annotations.go:78, :160): the address "
        "and the rule on the STANDARD tier (:123, :133, :1096, :1436)",
        ports=((80, "TCP", 30089),),
        annotations={"cloud.google.com/network-tier": "Standard"},
    ),
    # gce_loadbalancer_internal.go of v36.3.8 for the two below.
    ScenarioService(
        "internal",
        "networking.gke.io/load-balancer-type: Internal (gce_annotations.go:197-214 "
        "GetLoadBalancerAnnotationType): the instance groups k8s-ig--<cluster-id> per zone with "
        "their nodes (:121, :661-788), the shared health check k8s-<cluster-id>-node in the "
        "healthChecks API on :10256/healthz and its firewall (:141-151, :612-617, :899), the "
        "backend service <lb> (:819), the firewall <lb> (:600-609), an INTERNAL rule on an "
        "address reserved and released around it (:167-183, :1126)",
        ports=((80, "TCP", 30090),),
        annotations={"networking.gke.io/load-balancer-type": "Internal"},
    ),
    ScenarioService(
        "internal-local",
        "an internal Service with externalTrafficPolicy Local: a health check of its own "
        "<lb> on healthCheckNodePort (:141-147, :899-917) and its firewall <lb>-hc "
        "(:612-617; gce_loadbalancer_naming.go:68-91), the backend service not shared (:886)",
        ports=((80, "TCP", 30091),),
        annotations={"networking.gke.io/load-balancer-type": "Internal"},
        spec={"externalTrafficPolicy": "Local", "healthCheckNodePort": 32091},
    ),
)


def service_named(name: str) -> ScenarioService:
    for service in SERVICES:
        if service.name == name:
            return service
    raise KeyError(name)


def service_manifest(service: ScenarioService, static_ip: str) -> dict[str, Any]:
    """The Service as a user applies it (``loadBalancerIP: <static>`` is ``static_ip``)."""
    spec: dict[str, Any] = {
        "type": "LoadBalancer",
        "selector": {"app": service.name},
        "ports": [
            {
                "name": f"{protocol.lower()}-{port}",
                "port": port,
                "targetPort": 8080,
                "protocol": protocol,
                "nodePort": node_port,
            }
            for port, protocol, node_port in service.ports
        ],
    }
    for key, value in service.spec.items():
        spec[key] = static_ip if value == "<static>" else value
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service.name,
            "namespace": NAMESPACE,
            "annotations": dict(service.annotations),
        },
        "spec": spec,
    }


def load_balancer_name(uid: str) -> str:
    """cloud-provider's default load-balancer name: ``a`` and the UID without dashes, 32
    characters (k8s.io/cloud-provider cloud.go GetLoadBalancerName)."""
    return ("a" + uid.replace("-", ""))[:32]


# -- setup ------------------------------------------------------------------------------------


def create_instance(compute: ComputeApi, name: str, zone: str) -> None:
    compute.create_instance(name, zone=zone, tags=[TAG])


def setup_cloud(compute: ComputeApi) -> str:
    """The instances (two zones) and the static address; the address's IP."""
    for name, zone, _cidr in INSTANCES:
        create_instance(compute, name, zone)
    compute.do(
        "POST",
        f"regions/{REGION}/addresses",
        {"name": STATIC_ADDRESS, "description": "the switch scenario's loadBalancerIP"},
    )
    return str(compute.get(f"regions/{REGION}/addresses/{STATIC_ADDRESS}")["address"])


def register_node(api: KubeApi, name: str, cidr: str) -> None:
    """The Node as a kubelet with ``--cloud-provider=external`` registers it (tainted, no
    providerID), with the Hostname address it reports and the pod CIDR node IPAM would give it
    (``--allocate-node-cidrs=false``). The cloud-node controller keeps a Hostname the cloud
    does not give (k8s.io/cloud-provider v0.35.4 controllers/node/node_controller.go
    updateNodeAddress, :373-387); upstream's GCE gives none (gce_instances.go:287-305)."""
    from polyccm_testing.kubeobjects import make_node

    make_node(api, name, pod_cidrs=(cidr,), addresses=(("Hostname", name),))


def setup_kube(api: KubeApi, static_ip: str, *, services: bool = True) -> None:
    """The cluster id, the namespace, the Nodes and (unless ``services`` is false) the
    Services."""
    ensure_cluster_id(api)
    ensure_namespace(api)
    for name, _zone, cidr in INSTANCES:
        register_node(api, name, cidr)
    if services:
        for service in SERVICES:
            api.create(SERVICE_OBJECTS, service_manifest(service, static_ip), NAMESPACE)


def ensure_cluster_id(api: KubeApi) -> None:
    """ConfigMap ``kube-system/ingress-uid`` with :data:`CLUSTER_ID` (upstream reads ``uid``
    and ``provider-uid``, gce_clusterid.go:50-53)."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ingress-uid", "namespace": "kube-system"},
        "data": {"uid": CLUSTER_ID, "provider-uid": CLUSTER_ID},
    }
    try:
        api.delete(CONFIGMAPS, "ingress-uid", "kube-system")
    except ApiError as error:
        if not error.not_found:
            raise
    api.create(CONFIGMAPS, body, "kube-system")


def ensure_namespace(api: KubeApi) -> None:
    try:
        api.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
    except ApiError as error:
        if error.status != 409:
            raise


def clear_kube(api: KubeApi) -> None:
    """No scenario namespace (its Services forced past their finalizers) and no Node left."""
    from polyccm_testing.devenv.cleanup import delete_all_nodes, delete_namespace

    delete_namespace(api, NAMESPACE, timeout=60.0)
    delete_all_nodes(api)


# -- what a CCM left -------------------------------------------------------------------------


def canonical(value: Any) -> Any:
    """``value`` with the emulator's and the recorder's loopback bases written as GCE's."""
    if isinstance(value, str):
        return _LOOPBACK_BASE.sub(CANONICAL_BASE, value)
    if isinstance(value, dict):
        return {key: canonical(item) for key, item in value.items()}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


def _by_name(compute: ComputeApi, path: str) -> dict[str, Any]:
    try:
        items = compute.list_all(path)
    except ComputeApiError as error:
        if error.status == 404:
            return {}
        raise
    return {item["name"]: canonical(item) for item in items}


def _groups(compute: ComputeApi) -> dict[str, Any]:
    """The instance groups of both zones, by ``<zone>/<name>``, each with its ``members`` (the
    instances' links, sorted) as ``listInstances`` gives them."""
    groups: dict[str, Any] = {}
    for zone in (ZONE_A, ZONE_B):
        for name, group in _by_name(compute, f"zones/{zone}/instanceGroups").items():
            listed = compute.request(
                "POST", f"zones/{zone}/instanceGroups/{name}/listInstances", {}
            )
            members = sorted(item["instance"] for item in listed.get("items") or ())
            groups[f"{zone}/{name}"] = {**group, "members": canonical(members)}
    return groups


def cloud_state(compute: ComputeApi) -> dict[str, dict[str, Any]]:
    """Every load-balancer piece and route, by kind and name, as the API shows them."""
    return {
        "instanceGroups": _groups(compute),
        "healthChecks": _by_name(compute, "global/healthChecks"),
        "backendServices": _by_name(compute, f"regions/{REGION}/backendServices"),
        "forwardingRules": _by_name(compute, f"regions/{REGION}/forwardingRules"),
        "targetPools": _by_name(compute, f"regions/{REGION}/targetPools"),
        "addresses": _by_name(compute, f"regions/{REGION}/addresses"),
        "firewalls": _by_name(compute, "global/firewalls"),
        "httpHealthChecks": _by_name(compute, "global/httpHealthChecks"),
        "routes": {
            name: route
            for name, route in _by_name(compute, "global/routes").items()
            if route.get("description") == "k8s-node-route"
        },
    }


def kube_results(api: KubeApi) -> dict[str, Any]:
    """What a CCM writes on Kubernetes: per Service its uid (to map load-balancer names), the
    annotations, finalizers and status; per Node its providerID, labels, addresses, taints and
    NetworkUnavailable condition."""
    services: dict[str, Any] = {}
    for item in api.list(SERVICE_OBJECTS, NAMESPACE)["items"]:
        metadata = item["metadata"]
        services[metadata["name"]] = {
            "uid": metadata["uid"],
            "annotations": {
                key: value
                for key, value in (metadata.get("annotations") or {}).items()
                if key != "kubectl.kubernetes.io/last-applied-configuration"
            },
            "finalizers": sorted(metadata.get("finalizers") or []),
            "status": item.get("status") or {},
        }
    nodes: dict[str, Any] = {}
    for item in api.list(NODES)["items"]:
        status = item.get("status") or {}
        conditions = {
            c["type"]: {"status": c["status"], "reason": c.get("reason", "")}
            for c in status.get("conditions") or ()
            if c["type"] == "NetworkUnavailable"
        }
        nodes[item["metadata"]["name"]] = {
            "uid": item["metadata"]["uid"],
            "providerID": (item.get("spec") or {}).get("providerID", ""),
            "labels": item["metadata"].get("labels") or {},
            "addresses": status.get("addresses") or [],
            "taints": [t["key"] for t in (item.get("spec") or {}).get("taints") or ()],
            "conditions": conditions,
        }
    return {"services": services, "nodes": nodes}


def register_recorded(api: KubeApi, recorded: Mapping[str, Any], static_ip: str) -> dict[str, Any]:
    """Create what upstream's cluster held (``recorded`` from :func:`kube_results`): each Node
    with upstream's providerID, labels, addresses and taints, each Service with its
    finalizers; annotations, status and conditions come with :func:`finish_recorded`, once
    the new UIDs' load-balancer names are bound. The cluster as :func:`kube_results` sees it."""
    from polyccm_testing.kubeobjects import make_node

    ensure_cluster_id(api)
    ensure_namespace(api)
    cidrs = {name: cidr for name, _zone, cidr in (*INSTANCES, ADDED)}
    for name, node in recorded["nodes"].items():
        make_node(
            api,
            name,
            tainted=UNINITIALIZED in node["taints"],
            provider_id=node["providerID"],
            labels=dict(node["labels"]),
            pod_cidrs=(cidrs[name],),
            addresses=tuple((a["type"], a["address"]) for a in node["addresses"]),
        )
    for name, service in recorded["services"].items():
        body = service_manifest(service_named(name), static_ip)
        body["metadata"]["finalizers"] = list(service["finalizers"])
        api.create(SERVICE_OBJECTS, body, NAMESPACE)
    return kube_results(api)


def finish_recorded(api: KubeApi, recorded: Mapping[str, Any], bindings: Mapping[str, str]) -> None:
    """Upstream's Service annotations and status and Node conditions, ``bindings`` applied
    (load-balancer names, addresses)."""
    from polyccm_testing.peers.goldens import substitute

    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for name, node in recorded["nodes"].items():
        condition = node["conditions"].get("NetworkUnavailable")
        if not condition:
            continue
        current = api.get(NODES, name)["status"].get("conditions") or []
        current.append(
            {
                "type": "NetworkUnavailable",
                "status": condition["status"],
                "reason": condition["reason"],
                "message": "",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        )
        api.patch(NODES, name, {"status": {"conditions": current}}, subresource="status")
    for name, service in recorded["services"].items():
        annotations = substitute(dict(service["annotations"]), bindings)
        api.patch(SERVICE_OBJECTS, name, {"metadata": {"annotations": annotations}}, NAMESPACE)
        if service["status"]:
            status = substitute(service["status"], bindings)
            api.patch(SERVICE_OBJECTS, name, {"status": status}, NAMESPACE, subresource="status")


def kube_bindings(recorded: Mapping[str, Any], actual: Mapping[str, Any]) -> dict[str, str]:
    """Recorded -> actual values of the objects both name: Service UIDs and the load-balancer
    names made of them, Node UIDs (in route names)."""
    bindings: dict[str, str] = {}
    for name, service in recorded["services"].items():
        now = actual["services"].get(name)
        if now is None:
            continue
        bindings[service["uid"]] = now["uid"]
        bindings[load_balancer_name(service["uid"])] = load_balancer_name(now["uid"])
    for name, node in recorded["nodes"].items():
        now = actual["nodes"].get(name)
        if now is not None and node.get("uid"):
            bindings[node["uid"]] = now["uid"]
    return bindings


def replayer(base_url: str, bindings: Mapping[str, str]) -> Any:
    """A :class:`~polyccm_testing.peers.goldens.Replayer` for the compute API that pairs the
    items of two lists by name: lists come sorted by name, and names hold UIDs."""
    from polyccm_testing.peers.goldens import Replayer

    from polyccm_gce_emulator.testing import TEST_TOKEN

    return Replayer(
        base_url,
        bindings=dict(bindings),
        headers={"Authorization": f"Bearer {TEST_TOKEN}"},
        pair_lists_by="name",
    )


_ADDRESS_LIKE = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?$")


def fixed_values(steps: Sequence[Any]) -> dict[str, str]:
    """Every IPv4 address and CIDR the ``steps`` hold, bound to itself: the emulator hands out
    addresses in request order, so a replay gets the recorded ones, and binding them to
    themselves keeps the replayer from learning a wrong pair where it walks two lists whose
    items come in another order (lists are by name, and names hold UIDs)."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and _ADDRESS_LIKE.match(value):
            found.add(value)

    for step in steps:
        walk(step.cloud)
        walk(step.kube)
        for exchange in step.exchanges:
            walk(exchange.request)
            walk(exchange.response)
    return {value: value for value in found}


def rebind(state: Mapping[str, Mapping[str, Any]], bindings: Mapping[str, str]) -> dict[str, Any]:
    """``state`` (kind -> name -> resource) with ``bindings`` applied to names and bodies."""
    from polyccm_testing.peers.goldens import substitute

    return {
        kind: {
            substitute(name, bindings): canonical(substitute(body, bindings))
            for name, body in items.items()
        }
        for kind, items in state.items()
    }


#: POSTs that only read: ``operations.wait`` and ``instanceGroups.listInstances``.
_READING_POSTS = ("/wait", "/listInstances")


def cloud_writes(exchanges: Sequence[Any]) -> list[Any]:
    """The exchanges that change the cloud (not the :data:`_READING_POSTS`)."""
    return [
        e for e in exchanges if e.is_write and not e.path.split("?")[0].endswith(_READING_POSTS)
    ]


def without(state: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """``state`` without the resources whose name contains one of ``names`` (load balancers
    compared elsewhere)."""
    return {
        kind: {key: value for key, value in items.items() if not any(name in key for name in names)}
        for kind, items in state.items()
    }


def only(state: Mapping[str, Mapping[str, Any]], name: str) -> dict[str, Any]:
    """The resources of ``state`` whose name contains ``name`` (one load balancer's)."""
    return {
        kind: {key: value for key, value in items.items() if name in key}
        for kind, items in state.items()
    }


# -- edits -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One edit of step 4: its step name, what it does, and the Service it is about (empty
    when it is about the nodes)."""

    name: str
    note: str
    apply: Callable[[KubeApi, ComputeApi], None]
    service: str = ""


def _patch_service(name: str, patch: dict[str, Any]) -> Callable[[KubeApi, ComputeApi], None]:
    def apply(api: KubeApi, compute: ComputeApi) -> None:
        del compute
        api.patch(SERVICE_OBJECTS, name, patch, NAMESPACE)

    return apply


def _add_port(api: KubeApi, compute: ComputeApi) -> None:
    del compute
    ports = api.get(SERVICE_OBJECTS, "plain", NAMESPACE)["spec"]["ports"]
    ports.append(
        {"name": "tcp-443", "port": 443, "targetPort": 8443, "protocol": "TCP", "nodePort": 30443}
    )
    api.patch(SERVICE_OBJECTS, "plain", {"spec": {"ports": ports}}, NAMESPACE)


def _add_node(api: KubeApi, compute: ComputeApi) -> None:
    name, zone, cidr = ADDED
    create_instance(compute, name, zone)
    register_node(api, name, cidr)


def _remove_node(api: KubeApi, compute: ComputeApi) -> None:
    name, zone, _cidr = ADDED
    api.delete(NODES, name)
    compute.delete_instance(name, zone=zone)


def _delete_service(api: KubeApi, compute: ComputeApi) -> None:
    del compute
    api.delete(SERVICE_OBJECTS, "udp", NAMESPACE)


EDITS: tuple[Edit, ...] = (
    Edit("port-added", "port 443 added to Service plain (80 -> 80-443)", _add_port, "plain"),
    Edit(
        "ranges-changed",
        "Service ranges: spec.loadBalancerSourceRanges changed to 192.0.2.0/25",
        _patch_service("ranges", {"spec": {"loadBalancerSourceRanges": ["192.0.2.0/25"]}}),
        "ranges",
    ),
    Edit(
        "annotation-changed",
        "Service ranges-annotation: the source-ranges annotation changed to 198.51.100.0/24",
        _patch_service(
            "ranges-annotation",
            {
                "metadata": {
                    "annotations": {
                        "service.beta.kubernetes.io/load-balancer-source-ranges": "198.51.100.0/24"
                    }
                }
            },
        ),
        "ranges-annotation",
    ),
    Edit("node-added", f"instance and Node {ADDED[0]} ({ADDED[1]}) added", _add_node),
    Edit("node-removed", f"Node and instance {ADDED[0]} removed", _remove_node),
    Edit("service-deleted", "Service udp deleted", _delete_service, "udp"),
)


# -- running a CCM ---------------------------------------------------------------------------


def gce_conf(directory: Path, api_endpoint: str, project: str) -> Path:
    """The gce.conf both CCMs are given: upstream's keys (gce.go ConfigGlobal)."""
    path = directory / "gce.conf"
    path.write_text(
        "[global]\n"
        f"project-id = {project}\n"
        "network-name = default\n"
        f"local-zone = {ZONE_A}\n"
        "multizone = true\n"
        f"api-endpoint = {api_endpoint.rstrip('/')}/compute/v1/\n"
    )
    return path


def common_flags(config: Path, kubeconfig: Path) -> list[str]:
    """The flags of the deployment, given alike to upstream's binary and to polyccm: one
    service worker so the exchanges come in a stable order, short periods so it settles in
    seconds."""
    return [
        f"--cloud-config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--authentication-skip-lookup=true",
        "--leader-elect=false",
        "--use-service-account-credentials=false",
        "--bind-address=127.0.0.1",
        "--controllers=cloud-node-controller,cloud-node-lifecycle-controller,"
        "service-lb-controller,node-route-controller",
        f"--cluster-name={CLUSTER_NAME}",
        f"--cluster-cidr={CLUSTER_CIDR}",
        "--allocate-node-cidrs=false",
        "--configure-cloud-routes=true",
        "--concurrent-service-syncs=1",
        "--node-monitor-period=2s",
        "--route-reconciliation-period=2s",
    ]


def ccm_environment(emulator_endpoint: str, state_dir: Path) -> dict[str, str]:
    """The environment of either CCM: the emulator's metadata server for the token
    (``GCE_METADATA_HOST``), an empty gcloud directory so no developer credentials are found."""
    from polyccm_gce_emulator.devconfig import launch_environment

    port = int(emulator_endpoint.rsplit(":", 1)[1])
    env = launch_environment(port, state_dir)
    Path(env["CLOUDSDK_CONFIG"]).mkdir(parents=True, exist_ok=True)
    keep = {"PATH", "HOME", "LANG", "TMPDIR", "VIRTUAL_ENV"}
    base = {key: value for key, value in os.environ.items() if key in keep}
    return {
        **base,
        "GCE_METADATA_HOST": env["GCE_METADATA_HOST"],
        "GCE_METADATA_IP": env["GCE_METADATA_IP"],
        "CLOUDSDK_CONFIG": env["CLOUDSDK_CONFIG"],
        "HOME": str(state_dir),
    }


def ccm_argv(peer: Path | None, config: Path, kubeconfig: Path, secure_port: int) -> list[str]:
    """Upstream's binary at ``peer`` (``--cloud-provider=gce``), or polyccm's CLI when
    ``peer`` is None (``--provider=gce``), with :func:`common_flags`."""
    flags = [*common_flags(config, kubeconfig), f"--secure-port={secure_port}"]
    if peer is not None:
        return [str(peer), "--cloud-provider=gce", "--webhook-secure-port=0", "--v=2", *flags]
    return [sys.executable, "-m", "polyccm.cli", "--provider=gce", *flags]


class CcmProcess:
    """A CCM running in a process of its own, its output in ``log``; ready once its health
    endpoint (``https://127.0.0.1:<port><path>``) answers 200."""

    def __init__(
        self, argv: Sequence[str], env: Mapping[str, str], log: Path, health: tuple[int, str]
    ) -> None:
        self.log = log
        self.health = health
        self._ready = False
        self._file = log.open("w")
        self.process = subprocess.Popen(
            list(argv), env=dict(env), stdout=self._file, stderr=subprocess.STDOUT
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def ready(self) -> bool:
        if not self._ready:
            port, path = self.health
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # its own self-signed serving certificate
            try:
                with urllib.request.urlopen(
                    f"https://127.0.0.1:{port}{path}", context=context, timeout=2
                ) as answer:
                    self._ready = answer.status == 200
            except OSError:
                return False
        return self._ready

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._file.close()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running(
    peer: Path | None, config: Path, kubeconfig: Path, env: Mapping[str, str], log: Path
) -> Iterator[CcmProcess]:
    """Upstream's binary at ``peer`` (or polyccm's CLI when None) running with ``config``."""
    port = free_port()
    argv = ccm_argv(peer, config, kubeconfig, port)
    process = CcmProcess(argv, env, log, (port, "/healthz" if peer else "/readyz"))
    try:
        yield process
    finally:
        process.stop()


class NotSettled(AssertionError):
    """A CCM did not reach the expected state, or kept writing."""


def settle(
    take: Callable[[], list[Any]],
    ready: Callable[[], bool],
    process: CcmProcess | None = None,
    *,
    quiet: float = 4.0,
    timeout: float = 90.0,
) -> list[Any]:
    """Wait until ``ready()`` holds and ``quiet`` seconds pass without a write; the exchanges
    ``take()`` returned meanwhile."""
    taken: list[Any] = []
    deadline = time.monotonic() + timeout
    last_write = time.monotonic()
    while True:
        fresh = take()
        taken += fresh
        now = time.monotonic()
        if cloud_writes(fresh) or (process is not None and not process.ready()):
            last_write = now  # quiet counts from the CCM's readiness on
        if process is not None and not process.alive():
            raise NotSettled(f"the CCM exited:\n{process.tail()}")
        if now - last_write >= quiet and ready():
            return taken
        if now > deadline:
            tail = process.tail() if process is not None else ""
            raise NotSettled(f"not settled after {timeout:g}s (ready: {ready()})\n{tail}")
        time.sleep(0.25)


def everything_served(api: KubeApi, compute: ComputeApi, *, services: Sequence[str] = ()) -> bool:
    """Every Node initialised and routed, every (named) Service with an ingress IP."""
    nodes = api.list(NODES)["items"]
    for node in nodes:
        spec = node.get("spec") or {}
        if not spec.get("providerID") or any(
            t["key"] == UNINITIALIZED for t in spec.get("taints") or ()
        ):
            return False
    routes = [
        r for r in compute.list_all("global/routes") if r.get("description") == "k8s-node-route"
    ]
    if len(routes) != len(nodes):
        return False
    wanted = set(services)
    for item in api.list(SERVICE_OBJECTS, NAMESPACE)["items"]:
        if wanted and item["metadata"]["name"] not in wanted:
            continue
        ingress = ((item.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        if not ingress or not ingress[0].get("ip"):
            return False
    return True


# -- recording the goldens -------------------------------------------------------------------

GOLDENS = Path(__file__).resolve().parents[3] / "tests" / "goldens" / "switch"


def main(argv: Sequence[str] | None = None) -> int:
    """Record upstream's steps on the emulator and a dev control plane into the goldens."""
    parser = argparse.ArgumentParser(
        prog="python -m polyccm_gce_emulator.switch",
        description="Regenerate the GCE switch goldens with upstream's CCM binary.",
    )
    parser.add_argument("--peer", type=Path, required=True, help="cloud-controller-manager binary")
    parser.add_argument("--out", type=Path, default=GOLDENS, help="golden directory")
    parser.add_argument(
        "--work", type=Path, help="keep the CCMs' logs and the control plane's state here"
    )
    arguments = parser.parse_args(argv)
    if not os.access(arguments.peer, os.X_OK):
        print(f"--peer {arguments.peer}: not an executable file", file=sys.stderr)
        return 2
    from polyccm_gce_emulator import switch_recording

    return switch_recording.record(arguments.peer, arguments.out, arguments.work)


if __name__ == "__main__":
    sys.exit(main())
