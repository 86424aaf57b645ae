"""MetalLB's configuration for the Elastic IPs (the ``packet-metallb`` provider controller).

In the ``metallb:///<namespace>/<configmap>`` mode the Elastic IPs are announced by MetalLB's
speakers, which must be told what to announce and to whom. As upstream's CCM does, this
controller keeps, from the term's caches alone:

- one address pool per LoadBalancer service: its address (``spec.loadBalancerIP``, else the
  Elastic IP reserved with the service's tags: never its status, which MetalLB itself clears
  while the pool does not exist yet) as a ``/32``, auto-assign off;
- while there is a pool, one BGP peer per Metal router of each node, from the node's
  ``metal.equinix.com/bgp-peers-*`` annotations (written by :mod:`polyccm_packet.bgp`): peer ASN
  and address, the node's ASN and source address, the MD5 password, and upstream's node
  selectors: the node's hostname, then one ``nomatch.metal.equinix.com/service-*`` selector per
  service (labels no node has: they only record which services use the peer);
- the advertisement of those pools by BGP.

Where it writes is upstream's choice (metal/loadbalancers/metallb/metallb.go:92-114 at
38d15e2): the legacy ConfigMap ``<namespace>/<configmap>`` (its ``config`` key, ``peers`` and
``address-pools``, pools named ``<ns>/<svc>``), where the operator's own entries are kept; or,
with ``?crdConfiguration=true`` on the URL, ``IPAddressPool`` ``<ns>.<svc>`` (v1beta1),
``BGPPeer`` ``<node>-<i>`` (v1beta2, the password through the Secret :data:`PASSWORD_SECRET`)
and ``BGPAdvertisement`` :data:`ADVERTISEMENT` (v1beta1) objects in ``<namespace>``, labelled
:data:`OWNER_LABEL`, upstream's names and labels, so that upstream's objects are adopted as
they are. An object is written only when it differs, by a PUT carrying the resourceVersion it
was read at (a concurrent change is a conflict, retried with fresh state), and deleted with
that resourceVersion as precondition; only objects of the shapes polyccm and upstream make are
ever deleted (an operator's labelled BGPAdvertisement, as upstream's README suggests, stays).
Pools go with their service, peers with their node or the last service. The password is never
in an event or a log line.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from polyccm.controllers import (
    ApiError,
    Controller,
    ControllerContext,
    JsonObject,
    KubeApi,
    RateLimitingQueue,
    Resource,
    process_one,
    run_periodically,
    run_workers,
)
from polyccm.errors import CloudError
from polyccm.kube.api import CONFIGMAPS, SECRETS
from polyccm.objects import Service

from polyccm_packet.api import MetalClient
from polyccm_packet.bgp import DEFAULT_NAMES, decoded_password
from polyccm_packet.load_balancer import MetalLoadBalancer
from polyccm_packet.names import AnnotationNames

log = logging.getLogger(__name__)

NAME = "packet-metallb"
GROUP = "metallb.io"
IP_ADDRESS_POOLS = Resource(f"{GROUP}/v1beta1", "ipaddresspools", namespaced=True)
BGP_PEERS = Resource(f"{GROUP}/v1beta2", "bgppeers", namespaced=True)
BGP_ADVERTISEMENTS = Resource(f"{GROUP}/v1beta1", "bgpadvertisements", namespaced=True)
#: The label on every MetalLB object this controller owns (upstream's).
OWNER_LABEL = ("cloud-provider", "equinix-metal")
#: The one advertisement of every pool (upstream's name).
ADVERTISEMENT = "equinix-metal-bgp-adv"
#: The ``kubernetes.io/basic-auth`` Secret holding the peers' MD5 password (CRD mode).
PASSWORD_SECRET = "equinix-metal-bgp-pass"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Upstream's labels recording, on a peer's node selectors, the services using it.
NOMATCH_NAMESPACE = "nomatch.metal.equinix.com/service-namespace"
NOMATCH_NAME = "nomatch.metal.equinix.com/service-name"
#: Upstream's label of a pool's service: ``service-<name>: namespace-<namespace>``.
SERVICE_LABEL_PREFIX = "service-"
CONFIG_KEY = "config"
#: The only key of the work queue: every change leads to one whole pass.
KEY = "metallb"
RESYNC_PERIOD = 60.0


@dataclass(frozen=True)
class Pool:
    """The address pool of one service's Elastic IP."""

    namespace: str
    service: str
    address: str

    @property
    def crd_name(self) -> str:
        """Upstream's name (poolName, cr_config.go:13-17 at 38d15e2)."""
        return f"{_name_part(self.namespace)}.{_name_part(self.service)}"


def _name_part(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9-]+", "", text)


@dataclass(frozen=True)
class Peer:
    """One BGP session of one node's speaker with one Metal router."""

    node: str
    index: int
    my_asn: int
    peer_asn: int
    peer_address: str
    source_address: str
    password: str
    services: tuple[tuple[str, str], ...] = ()
    """The services (namespace, name) using the peer, upstream's ``nomatch`` selectors."""

    @property
    def crd_name(self) -> str:
        """Upstream's name (metallb.go updateNodes at 38d15e2)."""
        return f"{self.node}-{self.index}"

    def selectors(self, key: str) -> list[dict[str, Any]]:
        """The node selectors, ``key`` the spelling of ``matchLabels``: the hostname, then a
        selector per service that no node matches."""
        return [{key: {HOSTNAME_LABEL: self.node}}] + [
            {key: {NOMATCH_NAMESPACE: namespace, NOMATCH_NAME: name}}
            for namespace, name in self.services
        ]


def wanted_pools(
    services: Iterable[Mapping[str, Any]], reserved: Callable[[Mapping[str, Any]], str]
) -> list[Pool]:
    """A pool for every LoadBalancer service (not being deleted) with an IPv4 address: its
    ``spec.loadBalancerIP``, else ``reserved(service)`` (its Elastic IP), as upstream hands
    them to MetalLB; never its status (MetalLB clears a status whose pool does not exist)."""
    pools = []
    for service in services:
        meta = service.get("metadata") or {}
        spec = service.get("spec") or {}
        if meta.get("deletionTimestamp") or spec.get("type") != "LoadBalancer":
            continue
        if spec.get("loadBalancerClass"):  # another implementation's: no CCM ensures it
            continue
        ip = str(spec.get("loadBalancerIP") or "") or reserved(service)
        if ip and ":" not in ip:
            pools.append(Pool(str(meta.get("namespace")), str(meta.get("name")), ip))
    return sorted(pools, key=lambda p: (p.namespace, p.service))


def wanted_peers(
    nodes: Iterable[Mapping[str, Any]], pools: list[Pool], names: AnnotationNames = DEFAULT_NAMES
) -> list[Peer]:
    """The peers announced on every node's ``bgp-peers-{n}-*`` annotations, while a service
    uses them (upstream makes a node's peers when it ensures a service, and removes them with
    the last one)."""
    if not pools:
        return []
    services = tuple(sorted((p.namespace, p.service) for p in pools))
    peers = []
    for node in nodes:
        meta = node.get("metadata") or {}
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        for n in range(names.count(annotations)):
            try:
                peers.append(Peer(
                    node=str(meta["name"]), index=n,
                    my_asn=int(annotations[names.peer("node-asn", n)]),
                    peer_asn=int(annotations[names.peer("peer-asn", n)]),
                    peer_address=annotations[names.peer("peer-ip", n)],
                    source_address=annotations.get(names.peer("src-ip", n), ""),
                    password=decoded_password(annotations.get(names.peer("bgp-pass", n), "")),
                    services=services,
                ))  # fmt: skip
            except (KeyError, ValueError):
                log.warning("%s: node %s: peer %d annotations incomplete; skipped", NAME,
                            meta.get("name"), n)  # fmt: skip
    return sorted(peers, key=lambda p: (p.node, p.index))


def _relevant(obj: Mapping[str, Any], names: AnnotationNames = DEFAULT_NAMES) -> object:
    """What of a node or service the configuration depends on (other updates are ignored)."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return (
        meta.get("deletionTimestamp"),
        (obj.get("spec") or {}).get("type"),
        (obj.get("spec") or {}).get("loadBalancerIP"),
        ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress"),
        sorted(names.peers_of(annotations).items()),
    )


# -- the legacy ConfigMap ------------------------------------------------------------------


def _legacy_peer(peer: Peer) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "peer-address": peer.peer_address,
        "peer-asn": peer.peer_asn,
        "my-asn": peer.my_asn,
    }
    if peer.source_address:
        entry["source-address"] = peer.source_address
    if peer.password:
        entry["password"] = peer.password
    entry["node-selectors"] = peer.selectors("match-labels")
    return entry


def _legacy_pool(pool: Pool) -> dict[str, Any]:
    return {
        "name": f"{pool.namespace}/{pool.service}",
        "protocol": "bgp",
        "addresses": [f"{pool.address}/32"],
        "auto-assign": False,
    }


def _upstream_selectors(selectors: object, key: str) -> bool:
    """Whether ``selectors`` have the shape upstream's (and polyccm's) peers have: a hostname
    selector, then only ``nomatch`` service selectors."""
    if not isinstance(selectors, list) or not selectors:
        return False
    labels = [
        (selector or {}).get(key) if isinstance(selector, Mapping) else None
        for selector in selectors
    ]
    if not all(isinstance(found, Mapping) for found in labels):
        return False
    return list(labels[0] or {}) == [HOSTNAME_LABEL] and all(
        set(found or {}) <= {NOMATCH_NAMESPACE, NOMATCH_NAME} and found for found in labels[1:]
    )


def _is_ours_legacy_peer(entry: Mapping[str, Any]) -> bool:
    return _upstream_selectors(entry.get("node-selectors"), "match-labels")


def _is_ours_legacy_pool(entry: Mapping[str, Any]) -> bool:
    # Upstream names a service's pool "namespace/name"; an operator's pool has no slash.
    return "/" in str(entry.get("name", "")) and entry.get("auto-assign") is False


def legacy_config(current: Mapping[str, Any], pools: list[Pool], peers: list[Peer]) -> JsonObject:
    """``current`` (the parsed ``config``) with this controller's entries replaced; the
    operator's own peers and pools are kept first, in their order."""
    kept_peers = [p for p in current.get("peers") or () if not _is_ours_legacy_peer(p)]
    kept_pools = [p for p in current.get("address-pools") or () if not _is_ours_legacy_pool(p)]
    config: JsonObject = {k: v for k, v in current.items() if k not in ("peers", "address-pools")}
    config["peers"] = kept_peers + [_legacy_peer(p) for p in peers]
    config["address-pools"] = kept_pools + [_legacy_pool(p) for p in pools]
    return config


# -- the metallb.io objects ----------------------------------------------------------------


def _owned(
    name: str, namespace: str, kind: str, group_version: str, spec: JsonObject
) -> JsonObject:
    return {
        "apiVersion": group_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict([OWNER_LABEL])},
        "spec": spec,
    }


def crd_objects(
    namespace: str, pools: list[Pool], peers: list[Peer]
) -> dict[Resource, dict[str, JsonObject]]:
    """Every object wanted in ``namespace``, by resource and name."""
    wanted: dict[Resource, dict[str, JsonObject]] = {}
    wanted[IP_ADDRESS_POOLS] = {}
    for p in pools:
        pool = _owned(p.crd_name, namespace, "IPAddressPool", IP_ADDRESS_POOLS.group_version,
                      {"addresses": [f"{p.address}/32"], "autoAssign": False})  # fmt: skip
        # upstream's label naming the pool's service (cr_config.go:35-38 at 38d15e2)
        pool["metadata"]["labels"][SERVICE_LABEL_PREFIX + p.service] = f"namespace-{p.namespace}"
        wanted[IP_ADDRESS_POOLS][p.crd_name] = pool
    peer_objects = {}
    for peer in peers:
        spec: JsonObject = {
            "myASN": peer.my_asn,
            "peerASN": peer.peer_asn,
            "peerAddress": peer.peer_address,
            "nodeSelectors": peer.selectors("matchLabels"),
        }
        if peer.source_address:
            spec["sourceAddress"] = peer.source_address
        if peer.password:
            spec["passwordSecret"] = {"name": PASSWORD_SECRET, "namespace": namespace}
        peer_objects[peer.crd_name] = _owned(
            peer.crd_name, namespace, "BGPPeer", BGP_PEERS.group_version, spec
        )
    wanted[BGP_PEERS] = peer_objects
    wanted[BGP_ADVERTISEMENTS] = (
        {ADVERTISEMENT: _owned(ADVERTISEMENT, namespace, "BGPAdvertisement",
                               BGP_ADVERTISEMENTS.group_version,
                               {"ipAddressPools": sorted(p.crd_name for p in pools)})}
        if pools else {}
    )  # fmt: skip
    return wanted


def made_by_a_ccm(resource: Resource, found: Mapping[str, Any]) -> bool:
    """Whether ``found`` (labelled :data:`OWNER_LABEL`) has the shape polyccm and upstream give
    their objects: a pool naming its service in a label, a peer with upstream's selectors, the
    one advertisement. Only those are deleted: an operator's labelled object never is."""
    meta = found.get("metadata") or {}
    if resource == IP_ADDRESS_POOLS:
        return any(k.startswith(SERVICE_LABEL_PREFIX) for k in meta.get("labels") or {})
    if resource == BGP_PEERS:
        selectors = (found.get("spec") or {}).get("nodeSelectors")
        return _upstream_selectors(selectors, "matchLabels")
    return bool(meta.get("name") == ADVERTISEMENT)


def _differs(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    # Only the fields written are compared: the API server adds defaults (avoidBuggyIPs...).
    spec = existing.get("spec") or {}
    labels = (existing.get("metadata") or {}).get("labels") or {}
    return any(spec.get(k) != v for k, v in wanted["spec"].items()) or any(
        labels.get(k) != v for k, v in wanted["metadata"]["labels"].items()
    )


class MetalLbConfigurer:
    """Writes the wanted configuration through the KubeApi, only what differs."""

    def __init__(self, api: KubeApi, namespace: str, configmap: str, *, crds: bool) -> None:
        self.api = api
        self.namespace = namespace
        self.configmap = configmap
        self.crds = crds
        """``?crdConfiguration=true``: the ``metallb.io`` objects, else the ConfigMap."""

    def crds_served(self) -> bool:
        """Whether the API serves MetalLB's ``metallb.io`` group (discovery)."""
        try:
            group = self.api.request("GET", f"/apis/{GROUP}")
        except ApiError as error:
            if error.not_found:
                return False
            raise
        versions = {v.get("version") for v in group.get("versions") or ()}
        return {"v1beta1", "v1beta2"} <= versions

    def apply(self, pools: list[Pool], peers: list[Peer]) -> int:
        """Bring the cluster's MetalLB configuration to ``pools`` and ``peers``; the number of
        objects written (0 when all was current)."""
        if not self.crds:
            return self._apply_configmap(pools, peers)
        if not self.crds_served():
            raise CloudError(
                f"METAL_LOAD_BALANCER asks for MetalLB's objects (crdConfiguration=true) but "
                f"the API serves no {GROUP} v1beta1 and v1beta2: is MetalLB 0.13+ installed?"
            )
        return self._apply_crds(pools, peers)

    def _apply_configmap(self, pools: list[Pool], peers: list[Peer]) -> int:
        try:
            current: JsonObject | None = self.api.get(CONFIGMAPS, self.configmap, self.namespace)
        except ApiError as error:
            if not error.not_found:
                raise
            current = None
        text = ((current or {}).get("data") or {}).get(CONFIG_KEY) or ""
        parsed = yaml.safe_load(text) if text.strip() else {}
        if not isinstance(parsed, dict):
            parsed = {}
        wanted = legacy_config(parsed, pools, peers)
        if current is not None and wanted == parsed:
            return 0
        data = {CONFIG_KEY: yaml.safe_dump(wanted, sort_keys=False)}
        if current is None:
            body: JsonObject = {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": self.configmap, "namespace": self.namespace},
                "data": data,
            }  # fmt: skip
            self.api.create(CONFIGMAPS, body, self.namespace)
        else:
            # The resourceVersion read makes the PUT fail on a concurrent change (409).
            current["data"] = {**(current.get("data") or {}), **data}
            self.api.replace(CONFIGMAPS, self.configmap, current, self.namespace)
        return 1

    def _apply_crds(self, pools: list[Pool], peers: list[Peer]) -> int:
        written = 0
        passwords = {p.password for p in peers if p.password}
        if passwords:
            written += self._ensure_password(min(passwords))
        selector = "=".join(OWNER_LABEL)
        for resource, wanted in crd_objects(self.namespace, pools, peers).items():
            existing = {
                o["metadata"]["name"]: o
                for o in self.api.list(resource, self.namespace, labelSelector=selector)
                .get("items") or ()
            }  # fmt: skip
            for name, body in wanted.items():
                found = existing.get(name)
                if found is None:
                    self.api.create(resource, body, self.namespace)
                elif _differs(found, body):
                    body["metadata"]["resourceVersion"] = found["metadata"]["resourceVersion"]
                    self.api.replace(resource, name, body, self.namespace)
                else:
                    continue
                written += 1
            for name, found in existing.items():
                if name not in wanted and made_by_a_ccm(resource, found):
                    self._delete(resource, found)
                    written += 1
        return written

    def _delete(self, resource: Resource, found: Mapping[str, Any]) -> None:
        meta = found["metadata"]
        try:
            self.api.delete(resource, meta["name"], self.namespace, body={
                "preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
            })  # fmt: skip
        except ApiError as error:
            if not error.not_found:
                raise

    def _ensure_password(self, password: str) -> int:
        encoded = base64.b64encode(password.encode()).decode()
        try:
            found: JsonObject | None = self.api.get(SECRETS, PASSWORD_SECRET, self.namespace)
        except ApiError as error:
            if not error.not_found:
                raise
            found = None
        if found is not None and (found.get("data") or {}).get("password") == encoded:
            return 0
        body: JsonObject = {
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/basic-auth",
            "metadata": {"name": PASSWORD_SECRET, "namespace": self.namespace,
                         "labels": dict([OWNER_LABEL])},
            "data": {"password": encoded},
        }  # fmt: skip
        if found is None:
            self.api.create(SECRETS, body, self.namespace)
        else:
            body["metadata"]["resourceVersion"] = found["metadata"]["resourceVersion"]
            self.api.replace(SECRETS, PASSWORD_SECRET, body, self.namespace)
        return 1


class MetalLbController(Controller):
    """Keeps MetalLB's configuration equal to the services' Elastic IPs and the nodes' peers."""

    name = NAME

    def __init__(
        self, context: ControllerContext, configurer: MetalLbConfigurer,
        reserved: Callable[[Mapping[str, Any]], str] = lambda _service: "",
        names: AnnotationNames = DEFAULT_NAMES,
    ) -> None:  # fmt: skip
        self.context = context
        self.configurer = configurer
        self.reserved = reserved
        self.names = names
        """A service's Elastic IP (the reservation with its tags), for a service whose
        ``spec.loadBalancerIP`` does not name it yet."""
        self.queue = RateLimitingQueue(self.name)

    @classmethod
    def for_term(cls, context: ControllerContext) -> MetalLbController | None:
        api = getattr(context.provider, "api", None)
        if not isinstance(api, MetalClient):
            return None
        target = api.config.metallb_target
        if target is None:
            log.info("%s: METAL_LOAD_BALANCER %r is not metallb://; not started", NAME,
                     api.config.load_balancer)  # fmt: skip
            return None
        balancer = context.provider.load_balancer()

        def reserved(service: Mapping[str, Any]) -> str:
            own = (
                balancer.own(Service(service)) if isinstance(balancer, MetalLoadBalancer) else None
            )
            return str((own or {}).get("address") or "")

        configurer = MetalLbConfigurer(context.api, *target, crds=api.config.metallb_crds)
        return cls(context, configurer, reserved, api.config.annotation_names)

    def run(self, stop: threading.Event) -> None:
        enqueue = lambda *_: self.queue.add(KEY)  # noqa: E731

        names = self.names

        def on_update(old: JsonObject, new: JsonObject) -> None:
            if _relevant(old, names) != _relevant(new, names):
                self.queue.add(KEY)

        for informer in (self.context.nodes, self.context.services):
            informer.add_handler(on_add=enqueue, on_update=on_update, on_delete=enqueue)
        threading.Thread(
            target=run_periodically,
            args=(self.name, "resync", lambda: self.queue.add(KEY), RESYNC_PERIOD, stop),
            name=f"{self.name}-resync",
            daemon=True,
        ).start()
        run_workers(
            name=self.name, queue=self.queue, workers=1, stop=stop,
            process=lambda q: process_one(q, self.sync, name=self.name),
        )  # fmt: skip

    def sync(self, _key: str = KEY) -> None:
        pools = wanted_pools(self.context.services.list(), self.reserved)
        peers = wanted_peers(self.context.nodes.list(), pools, self.names)
        written = self.configurer.apply(pools, peers)
        if written:
            log.info("%s: MetalLB configuration in %s updated (%d pools, %d peers, %d writes)",
                     NAME, self.configurer.namespace, len(pools), len(peers), written)  # fmt: skip
