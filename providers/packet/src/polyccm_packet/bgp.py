"""BGP for the Elastic IPs: the project's BGP, a session per node, and the nodes' peer
annotations (the ``packet-bgp`` provider controller).

An Elastic IP reaches the cluster only when its nodes announce it to Metal's routers. As
upstream's CCM does in its ``metallb://``, ``kube-vip://`` and ``empty://`` modes, this
controller enables
BGP on the project (local deployment, ``METAL_LOCAL_ASN``, the MD5 password of
``METAL_BGP_PASS`` when given), makes an IPv4 BGP session for every node's device, and writes
on each node what its speaker must peer with, from the device's BGP neighbours::

    metal.equinix.com/bgp-peers-{n}-node-asn   the cluster's ASN
    metal.equinix.com/bgp-peers-{n}-peer-asn   Metal's ASN
    metal.equinix.com/bgp-peers-{n}-peer-ip    one of Metal's routers
    metal.equinix.com/bgp-peers-{n}-src-ip     the device's private address
    metal.equinix.com/bgp-peers-{n}-bgp-pass   the MD5 password, base64 (empty when none)

The peers come from the device's first IPv4 neighbour, its routers in the order of their
sorted addresses (as upstream's ``annotateNode``, metal/loadbalancers.go:337-373 at 38d15e2;
kube-vip decodes the password from base64). ``metal.equinix.com/network-4-private`` is the CIDR
of the device's private network, written once (upstream never rewrites it).

Event-driven, and batched per project: a node is queued when it gets its device (its
providerID) or when its peer annotations are missing or incomplete, never for a heartbeat of a
peered node. A worker takes every queued node at once (up to :data:`BATCH`; :data:`WORKERS`
batches at a time), once no node has got its device for :data:`QUIET` seconds (:data:`STALL`
while nodes still carry the uninitialised taint): a burst of node initialisations, which is
what makes pods schedulable, goes first, and its nodes share a few batches. It reads the
project's BGP once for them, with ``findBgpConfigByProject``, which answers the project's
ASN, its MD5 password and every BGP session with its device (Metal's documented way to read a
project's BGP configuration and sessions). Only then, per node: a
session is created for a device that has none, and the device's neighbours are read when its
session is new or its annotations do not match the project (missing, another ASN, another
password); the node is patched once, only when an annotation differs. A peered node whose
device has its session costs no request.

Which nodes, and when, as upstream: only nodes the service controller gives load balancers
(the ``node.kubernetes.io/exclude-from-external-load-balancers`` label and the autoscaler's
scale-down taint leave a node out) that ``METAL_BGP_NODE_SELECTOR`` matches, and only once a
Service wants a load balancer (upstream makes sessions while reconciling one). A node left out
keeps any session it has: upstream deletes none either.

A pass every :data:`RESYNC_PERIOD` queues every node, so a session deleted in Metal or a project
whose ASN or password changed is repaired: one request per :data:`BATCH` nodes when nothing
changed (upstream's CCM asks two per node every 60 s). A device whose session shows no
neighbours yet is asked again after :data:`NO_NEIGHBORS_RETRY`. A session made again for a
node that had peers (deleted in Metal) is a ``BGPSessionCreated`` Event on the node; a new
node's first session only a log line (a burst's thousand Events would crowd the node and
service controllers' out of the recorder's queue). Events and logs name the device and the
session, never the password.

What a new device needs, and at what pace. Its session is one ``createBgpSession`` (Metal has
no batch form; upstream's CCM makes one per node too). Its annotations need its neighbours,
one ``getBgpNeighborData``: no listing carries them (a device has no ``bgp_neighbors`` field,
``findBgpConfigByProject`` lists sessions without them), and the published document does not
promise values that could be derived instead (``peer_ips`` is "typically" Metal's gateway,
``customer_as`` in a local deployment "an internal ASN"). Its private network needs its
addresses' parent blocks, which upstream reads device by device (``findDeviceById``); the
project's device listing takes the same ``include``, so a batch that would read more devices
than the listing has pages lists them instead (:meth:`ProjectBgp.private_networks`: 5,000
nodes' networks are 10 requests, kept for the burst's later batches), once per node: the
annotation is never rewritten. So two requests per new node. Metal publishes no request rate
for its API (it answers 429 with ``X-RateLimit-Reset``, which the client honours), and
upstream's CCM sends these requests for every node with no pacing at all, and again at every
sync. They go at :data:`~polyccm_packet.api.BACKGROUND_QPS` (200 a second: a 1,000-node
burst's 2,000 requests in about 10 s, a 5,000-node burst's in about 50 s),
and only while node and load-balancer work leaves half the limiter's burst
(:meth:`~polyccm_packet.api.MetalClient.spare_call`).
"""

from __future__ import annotations

import base64
import functools
import logging
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from polyccm.controllers import (
    MERGE_PATCH,
    NODES,
    Controller,
    ControllerContext,
    LeadershipLost,
    Node,
    RateLimitingQueue,
    RetryAfter,
    run_periodically,
    run_workers,
)
from polyccm.controllers.service import is_backend
from polyccm.objects import UNINITIALIZED_TAINT, Service, wants_load_balancer

from polyccm_packet import sdk
from polyccm_packet.api import MetalClient, NotFound
from polyccm_packet.config import MetalConfig
from polyccm_packet.instances import device_id_from_provider_id
from polyccm_packet.names import DEFAULT_NETWORK, PEER_FIELDS, AnnotationNames

DEFAULT_NAMES = AnnotationNames()

log = logging.getLogger(__name__)

NAME = "packet-bgp"
ANNOTATION_PREFIX = "metal.equinix.com/bgp-peers-"
#: Seconds between passes over every node (each costs one request per :data:`BATCH` nodes).
RESYNC_PERIOD = 300.0
#: Nodes whose project BGP one request reads.
BATCH = 250
#: Workers, each on its own batch: a burst's requests overlap (upstream's CCM has one).
WORKERS = 4
#: A batch starts once no node has got its device for this many seconds: a burst of node
#: initialisations (their taints) goes first, and its nodes share a few batches...
QUIET = 1.0
#: ... for this many while nodes still wait for initialisation (a busy control plane pauses
#: between them; a node that is never initialised holds nothing up for longer) ...
STALL = 5.0
#: ... and never more than this, however long the burst goes on.
MAX_DEFER = 60.0
#: Devices a page of the listing that finds private networks carries (Metal allows 1,000).
NETWORK_PAGE_SIZE = 500
#: Seconds before asking again about a device whose session lists no neighbours yet.
NO_NEIGHBORS_RETRY = 30.0
#: Modes in which the nodes get BGP sessions and peers: upstream's ``loadBalancers`` does this
#: in every mode it has (``empty://`` is "BGP only": no speaker is configured for the user's).
BGP_MODES = ("metallb://", "kube-vip://", "empty://")
#: What the project's BGP is for, as upstream says when it requests it.
USE_CASE = "kubernetes-load-balancer"
#: The CIDR of the node's private network (upstream's annotation, for the speakers' routes).
NETWORK_ANNOTATION = DEFAULT_NETWORK


def encoded_password(md5: str) -> str:
    """The ``bgp-pass`` annotation's value: the password base64-encoded, as upstream writes it
    and kube-vip decodes it (an empty password is an empty value, written all the same)."""
    return base64.b64encode(md5.encode()).decode()


def decoded_password(value: str) -> str:
    """The password a ``bgp-pass`` annotation holds (kube-vip's reading: base64); a value that
    is no base64 (written plain by an older polyccm, until a pass rewrites it) as it is."""
    try:
        return base64.b64decode(value.encode(), validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return value


def peer_annotations(
    neighbors: list[Mapping[str, Any]], names: AnnotationNames = DEFAULT_NAMES
) -> dict[str, str]:
    """The annotations for a device's first IPv4 neighbour, one numbered peer per router in
    the order of their sorted addresses, as upstream's annotateNode writes them."""
    neighbor = next((n for n in neighbors if int(n.get("address_family", 4)) == 4), None)
    if neighbor is None:
        return {}
    found: dict[str, str] = {}
    for n, peer_ip in enumerate(sorted(str(ip) for ip in neighbor.get("peer_ips") or ())):
        found[names.peer("node-asn", n)] = str(neighbor.get("customer_as", ""))
        found[names.peer("peer-asn", n)] = str(neighbor.get("peer_as", ""))
        found[names.peer("peer-ip", n)] = peer_ip
        found[names.peer("src-ip", n)] = str(neighbor.get("customer_ip", ""))
        found[names.peer("bgp-pass", n)] = encoded_password(str(neighbor.get("md5_password") or ""))
    return found


def private_network(device: Mapping[str, Any]) -> str:
    """The ``network/cidr`` of the block holding the device's private management IPv4 address
    (its ``parent_block``), as upstream's getNodePrivateNetwork finds it; empty when none."""
    for ip in device.get("ip_addresses") or ():
        if ip.get("public") or not ip.get("management") or ip.get("address_family") != 4:
            continue
        parent = ip.get("parent_block") or {}
        if parent.get("network") and parent.get("cidr"):
            return f"{parent['network']}/{parent['cidr']}"
        return ""
    return ""


def peer_annotations_of(
    annotations: Mapping[str, str], names: AnnotationNames = DEFAULT_NAMES
) -> dict[str, str]:
    """The peer annotations (``bgp-peers-*`` by default) among ``annotations``."""
    return names.peers_of(annotations)


@dataclass(frozen=True)
class ProjectState:
    """The project's BGP as one ``findBgpConfigByProject`` showed it."""

    asn: int
    md5: str
    sessions: frozenset[str]
    """Devices that have an IPv4 session."""

    def peered(
        self, annotations: Mapping[str, str], names: AnnotationNames = DEFAULT_NAMES
    ) -> bool:
        """Whether ``annotations`` name at least one peer, each complete, with this project's
        ASN and exactly its password, encoded (empty when it has none)."""
        peers = names.peers_of(annotations)
        count = names.count(peers)
        expected = {names.peer(f, n) for n in range(count) for f in PEER_FIELDS}
        password = encoded_password(self.md5)
        return (
            count > 0
            and set(peers) == expected
            and all(peers[names.peer("node-asn", n)] == str(self.asn) for n in range(count))
            and all(peers[names.peer("bgp-pass", n)] == password for n in range(count))
        )


@functools.cache
def _session_input_class() -> Any:
    """``BGPSessionInput`` sending only the fields set; made once (a pydantic class costs
    milliseconds and memory to make: one per session was 5,000 of them for 5,000 nodes)."""
    metalv1 = sdk.metalv1()

    class SessionInput(metalv1.BGPSessionInput):  # type: ignore[misc,name-defined]
        def to_dict(self) -> dict[str, Any]:
            fields: dict[str, Any] = self.model_dump(
                by_alias=True, exclude_unset=True, exclude_none=True
            )
            return fields

    return SessionInput


def _session_input(**fields: Any) -> Any:
    """A ``BGPSessionInput`` that sends only the fields given, as upstream's does (the model
    would add ``default_route: false``, a policy upstream never sets)."""
    return _session_input_class()(**fields)


def device_of(session: Mapping[str, Any]) -> str:
    """The device id of a session (the last part of its device's href)."""
    device = session.get("device")
    href = str(device.get("href", "")) if isinstance(device, Mapping) else ""
    return href.rstrip("/").rsplit("/", 1)[-1]


class ProjectBgp:
    """The Metal side: the project's BGP config and the devices' sessions and neighbours. Its
    requests are background work: they use the budget node and load-balancer work leaves
    (:meth:`~polyccm_packet.api.MetalClient.spare_call`)."""

    def __init__(self, api: MetalClient) -> None:
        self.api = api
        self._lock = threading.Lock()
        self._enabled = False
        self._networks_lock = threading.Lock()
        self._networks: Mapping[str, str] = {}
        """The private networks of the project's devices, by id, as the last listing showed
        them (a device's never changes): later batches of a burst read none again."""

    @property
    def config(self) -> MetalConfig:
        return self.api.config

    def state(self) -> ProjectState:
        """The project's ASN, password and sessions, in one request; BGP is requested first
        (local, ``METAL_LOCAL_ASN``, ``METAL_BGP_PASS``) when the project has none."""
        current = self._read() if self._enabled else {}
        if not current.get("asn"):
            with self._lock:  # one request for BGP, not one per worker
                current = self._read()
                self._enabled = True
                if not current.get("asn"):
                    self._request()
                    return ProjectState(self.config.local_asn, self.config.bgp_pass, frozenset())
        sessions = frozenset(
            device_of(s) for s in current.get("sessions") or () if s.get("address_family") == "ipv4"
        )
        return ProjectState(int(current["asn"]), str(current.get("md5") or ""), sessions)

    def _read(self) -> dict[str, Any]:
        found = self.api.spare_call("bgp.find_bgp_config_by_project", self.config.project_id)
        return dict(found or {})

    def _request(self) -> None:
        metalv1 = sdk.metalv1()

        # Upstream's request (bgp.go enableBGP); the SDK refuses an empty md5, which upstream
        # sends when it has no password: none is sent then, which Metal reads the same way.
        request = metalv1.BgpConfigRequestInput(
            asn=self.config.local_asn,
            deployment_type="local",
            md5=self.config.bgp_pass or None,
            use_case=USE_CASE,
        )
        self.api.spare_call("bgp.request_bgp_config", self.config.project_id, request)
        log.info("enabled BGP on project %s with ASN %d", self.config.project_id,
                 self.config.local_asn)  # fmt: skip

    def create_session(self, device_id: str) -> str:
        """A new IPv4 session for the device; its id."""

        made = self.api.spare_call(
            "devices.create_bgp_session", device_id, _session_input(address_family="ipv4")
        )
        return str((made or {}).get("id", ""))

    def private_network(self, device_id: str) -> str:
        """The device's private network (:func:`private_network`), one read of the device."""
        device = self.api.spare_call(
            "devices.find_device_by_id", device_id, include=["ip_addresses.parent_block"]
        )
        return private_network(device or {})

    def private_networks(self, device_ids: Collection[str], devices: int) -> Mapping[str, str]:
        """The private networks of ``device_ids`` (a device the answer lacks is read on its
        own, :meth:`private_network`), from one listing of the project's devices (of about
        ``devices``) with their addresses' parent blocks when that takes fewer requests than
        reading each; a listing made since another caller asked serves it too."""
        with self._networks_lock:
            known = self._networks
            missing = [d for d in device_ids if d not in known]
            if len(missing) <= -(-max(devices, 1) // NETWORK_PAGE_SIZE):
                return known
            listed: dict[str, str] = {}
            for device in self.api.pages(
                "devices.find_project_devices", "devices", self.config.project_id,
                per_page=NETWORK_PAGE_SIZE, spare=True, include=["ip_addresses.parent_block"],
            ):  # fmt: skip
                network = private_network(device)
                if network:
                    listed[str(device.get("id"))] = network
            self._networks = listed
            return listed

    def neighbors(self, device_id: str) -> list[Mapping[str, Any]]:
        body = self.api.spare_call("devices.get_bgp_neighbor_data", device_id) or {}
        return list(body.get("bgp_neighbors") or ())


class BgpController(Controller):
    """Keeps every node's device in BGP and its peer annotations current."""

    name = NAME

    def __init__(self, context: ControllerContext, bgp: ProjectBgp) -> None:
        self.context = context
        self.bgp = bgp
        self.queue = RateLimitingQueue(self.name)
        self._waiting: set[str] = set()
        """Nodes asked about again later (no neighbours yet): a heartbeat does not queue them."""
        self._lock = threading.Lock()
        self._last_device = 0.0
        """When (monotonic) a node last got its device."""
        self._uninitialised: set[str] = set()
        """Nodes with the cloud provider's taint: while there are, a burst is on until
        :data:`STALL` after the last device, else until :data:`QUIET` after it."""
        self._balancing = False
        """A Service wanting a load balancer has been seen (set by its cache's handler)."""
        self._unbalanced: set[str] = set()
        """Nodes passed over while no Service wanted a load balancer: the first one queues them."""

    @classmethod
    def for_term(cls, context: ControllerContext) -> BgpController | None:
        api = getattr(context.provider, "api", None)
        if not isinstance(api, MetalClient):
            return None
        if not api.config.load_balancer.startswith(BGP_MODES):
            log.info("%s: METAL_LOAD_BALANCER %r announces nothing by BGP; not started", NAME,
                     api.config.load_balancer)  # fmt: skip
            return None
        return cls(context, ProjectBgp(api))

    def selected(self, node: Node) -> bool:
        """Whether ``node`` gets a session and peers: it is one the service controller gives
        load balancers (not excluded by its label, not being deleted or scaled down) and
        ``METAL_BGP_NODE_SELECTOR`` matches it, as upstream's ``filterNodes`` on that set."""
        selector = self.bgp.config.bgp_node_selector
        return is_backend(node) and selector.matches(node.labels)

    def run(self, stop: threading.Event) -> None:
        self.context.nodes.add_handler(
            on_add=self._on_add, on_update=self._on_update, on_delete=self._on_delete
        )
        self.context.services.add_handler(
            on_add=self._on_service, on_update=lambda _old, new: self._on_service(new)
        )
        threading.Thread(
            target=run_periodically,
            args=(self.name, "resync", self.enqueue_all, RESYNC_PERIOD, stop),
            name=f"{self.name}-resync",
            daemon=True,
        ).start()
        run_workers(
            name=self.name, queue=self.queue, workers=WORKERS, stop=stop,
            process=self._process_batch,
        )  # fmt: skip

    def _on_service(self, raw: Mapping[str, Any]) -> None:
        """The first Service that wants a load balancer queues the nodes left alone until
        then; later ones change nothing here (upstream makes sessions and peers only while
        reconciling such a Service: ``addService``, ``UpdateLoadBalancer``)."""
        if self._balancing or not wants_load_balancer(Service(raw)):
            return
        with self._lock:
            self._balancing = True
            waiting, self._unbalanced = self._unbalanced, set()
        for name in waiting:
            self.queue.add(name)

    def _on_add(self, raw: Mapping[str, Any]) -> None:
        """Every node with a device, once, when the cache first lists it."""
        node = Node(raw)
        self._note_taint(node)
        if device_id_from_provider_id(node.provider_id) is not None:
            self._last_device = time.monotonic()
            self.queue.add(node.name)

    def _on_update(self, old: Mapping[str, Any], raw: Mapping[str, Any]) -> None:
        """A node with a device whose peer annotations are incomplete, when the update is what
        made it so (it just got its device, or someone changed or removed them), unless it is
        already due for a retry. Other updates of such a node (its status) do not queue it
        again: it is queued already, and a second pass would read its neighbours twice."""
        node, before = Node(raw), Node(old)
        self._note_taint(node)
        if device_id_from_provider_id(node.provider_id) is None:
            return
        if device_id_from_provider_id(before.provider_id) is None:
            self._last_device = time.monotonic()
        with self._lock:
            if node.name in self._waiting:
                return
        names = self.bgp.config.annotation_names
        if _looks_peered(node.annotations, names):
            return
        newly_selected = self.selected(node) and not self.selected(before)  # a label changed
        if (
            newly_selected
            or node.provider_id != before.provider_id
            or peer_annotations_of(node.annotations, names)
            != peer_annotations_of(before.annotations, names)
        ):
            self.queue.add(node.name)

    def _on_delete(self, raw: Mapping[str, Any]) -> None:
        with self._lock:
            self._uninitialised.discard(Node(raw).name)
            self._unbalanced.discard(Node(raw).name)

    def _note_taint(self, node: Node) -> None:
        with self._lock:
            if node.has_taint(UNINITIALIZED_TAINT):
                self._uninitialised.add(node.name)
            else:
                self._uninitialised.discard(node.name)

    def enqueue_all(self) -> None:
        for node in self.context.nodes.list():
            self.queue.add(node["metadata"]["name"])

    # -- the batch worker -------------------------------------------------------------------

    def _process_batch(self, queue: RateLimitingQueue) -> bool:
        names = queue.get_batch(BATCH, timeout=1.0)
        if not names:
            return not queue.shutting_down
        try:
            if len(names) < BATCH:
                self._wait_for_quiet(queue)
                if len(queue) and not queue.shutting_down:
                    names += queue.get_batch(BATCH - len(names), timeout=0)
            self._sync_batch(names)
        finally:
            for name in names:
                queue.done(name)
        return True

    def _wait_for_quiet(self, queue: RateLimitingQueue) -> None:
        """Until no node has got its device for :data:`QUIET` seconds (:data:`STALL` while
        nodes still wait for theirs; at most :data:`MAX_DEFER` in all): the nodes of a burst
        join the batch, and node initialisation keeps the API and the CPU meanwhile."""
        deadline = time.monotonic() + MAX_DEFER
        while not queue.shutting_down:
            now = time.monotonic()
            with self._lock:
                quiet = STALL if self._uninitialised else QUIET
            wait = min(self._last_device + quiet, deadline) - now
            if wait <= 0:
                return
            time.sleep(min(wait, QUIET))

    def _sync_batch(self, names: list[str]) -> None:
        nodes = [Node(raw) for raw in map(self.context.nodes.get, names) if raw is not None]
        for name in set(names) - {node.name for node in nodes}:
            self.queue.forget(name)  # deleted: Metal deletes the device's sessions with it
        with self._lock:
            if not self._balancing:  # the first LoadBalancer Service queues them again
                self._unbalanced.update(node.name for node in nodes)
                nodes = []
        for node in [node for node in nodes if not self.selected(node)]:
            # left alone, as upstream leaves it (a session it has stays); a label change
            # that selects it queues it (its peer annotations are then missing)
            self.queue.forget(node.name)
        nodes = [node for node in nodes if self.selected(node)]
        if not nodes:
            for name in names:
                self.queue.forget(name)
            return
        try:
            project = self.bgp.state()
        except LeadershipLost:
            raise
        except Exception as error:  # noqa: BLE001 - every node of the batch comes back later
            log.warning("%s: reading the project's BGP: %s", self.name, error)
            for node in nodes:
                self._retry_later(node.name)
            return
        networks = self._networks_for(nodes)
        for node in nodes:
            if self.queue.shutting_down:
                # The term ended (SIGTERM, leadership lost): the rest of the batch waits for
                # the next term, whose caches queue every node again.
                return
            with self._lock:
                self._waiting.discard(node.name)
            try:
                self.sync(node, project, networks)
            except LeadershipLost:
                raise
            except RetryAfter as error:
                log.info("%s: %s: retrying in %.0fs: %s", self.name, node.name, error.delay,
                         error)  # fmt: skip
                self._retry_later(node.name, error.delay)
            except NotFound:  # its device is gone: the node goes too (or the next pass asks)
                log.info("%s: %s: device gone; not retried", self.name, node.name)
                self.queue.forget(node.name)
            except Exception as error:  # noqa: BLE001 - reported and retried with backoff
                log.warning("%s: %s: sync failed (retry %d): %s", self.name, node.name,
                            self.queue.num_requeues(node.name) + 1, error)  # fmt: skip
                self._retry_later(node.name)
            else:
                self.queue.forget(node.name)

    def _networks_for(self, nodes: list[Node]) -> Mapping[str, str]:
        """The private networks of the nodes' devices that lack the annotation, listed for the
        batch when that is cheaper (:meth:`ProjectBgp.private_networks`); empty when it fails
        (each node then reads its own)."""
        names = self.bgp.config.annotation_names
        wanted = [
            device_id for node in nodes if names.network not in node.annotations
            if (device_id := device_id_from_provider_id(node.provider_id)) is not None
        ]  # fmt: skip
        if not wanted:
            return {}
        try:
            return self.bgp.private_networks(wanted, len(self.context.nodes))
        except LeadershipLost:
            raise
        except Exception as error:  # noqa: BLE001 - each node reads its own device instead
            log.warning("%s: listing the devices' private networks: %s", self.name, error)
            return {}

    def _retry_later(self, name: str, delay: float | None = None) -> None:
        """Ask about ``name`` again after ``delay`` (default: its backoff); node updates do not
        queue it meanwhile."""
        with self._lock:
            self._waiting.add(name)
        if delay is None:
            self.queue.add_rate_limited(name)
        else:
            self.queue.add_after(name, delay)

    def sync(
        self, node: Node, project: ProjectState, networks: Mapping[str, str] | None = None
    ) -> None:
        """One node, knowing the project's BGP (and maybe its device's private network): its
        session made when missing, its neighbours read when its session is new or its
        annotations do not match the project."""
        device_id = device_id_from_provider_id(node.provider_id)
        if device_id is None:
            return  # not initialised yet: the update that sets providerID queues it again
        names = self.bgp.config.annotation_names
        current = peer_annotations_of(node.annotations, names)
        network_known = names.network in node.annotations
        if device_id in project.sessions and project.peered(current, names) and network_known:
            return
        if device_id not in project.sessions:
            session = self.bgp.create_session(device_id)
            message = f"BGP session {session} created for device {device_id}"
            if current:  # it had peers: its session went away in Metal, worth an Event
                self.context.recorder.event(node.raw, "Normal", "BGPSessionCreated", message)
            else:  # a new node's (a burst would crowd the node and service Events out)
                log.info("%s: %s: %s", self.name, node.name, message)
        wanted = peer_annotations(self.bgp.neighbors(device_id), names)
        if not wanted:
            raise RetryAfter(f"device {device_id} has no BGP neighbours yet", NO_NEIGHBORS_RETRY)
        patch: dict[str, str | None] = {k: None for k in current if k not in wanted}
        patch.update({k: v for k, v in wanted.items() if current.get(k) != v})
        if not network_known:
            network = (networks or {}).get(device_id) or self.bgp.private_network(device_id)
            if network:
                patch[names.network] = network
        if not patch:
            return
        self.context.api.patch(
            NODES, node.name, {"metadata": {"annotations": patch}}, patch_type=MERGE_PATCH
        )


def _looks_peered(annotations: Mapping[str, str], names: AnnotationNames) -> bool:
    """Whether the first peer's annotations are all there (the project is not read here: a
    pass compares them with its ASN and password)."""
    return all(names.peer(field, 0) in annotations for field in PEER_FIELDS)
