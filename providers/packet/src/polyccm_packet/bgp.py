"""BGP for the Elastic IPs: the project's BGP, a session per node, and the nodes' peer
annotations (the ``packet-bgp`` provider controller).

An Elastic IP reaches the cluster only when its nodes announce it to Metal's routers. As
upstream's CCM does in its ``metallb://`` and ``kube-vip://`` modes, this controller enables
BGP on the project (local deployment, ``METAL_LOCAL_ASN``, the MD5 password of
``METAL_BGP_PASS`` when given), makes an IPv4 BGP session for every node's device, and writes
on each node what its speaker must peer with, from the device's BGP neighbours::

    metal.equinix.com/bgp-peers-{n}-node-asn   the cluster's ASN
    metal.equinix.com/bgp-peers-{n}-peer-asn   Metal's ASN
    metal.equinix.com/bgp-peers-{n}-peer-ip    one of Metal's routers
    metal.equinix.com/bgp-peers-{n}-src-ip     the device's private address
    metal.equinix.com/bgp-peers-{n}-bgp-pass   the MD5 password (only when one is set)

The node handler only enqueues names; a worker reads the cache, calls the API (each request
through the leadership fence) and patches the node once, only when an annotation differs. A
pass every :data:`RESYNC_PERIOD` keeps the annotations current when neighbours change. Events
name the device and the session, never the password.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from polyccm.controllers import (
    MERGE_PATCH,
    NODES,
    Controller,
    ControllerContext,
    Node,
    RateLimitingQueue,
    process_one,
    run_periodically,
    run_workers,
)

from polyccm_packet.api import MetalClient
from polyccm_packet.config import MetalConfig
from polyccm_packet.instances import device_id_from_provider_id

log = logging.getLogger(__name__)

NAME = "packet-bgp"
ANNOTATION_PREFIX = "metal.equinix.com/bgp-peers-"
RESYNC_PERIOD = 60.0
#: Modes in which the cluster announces Elastic IPs by BGP (``empty://`` announces nothing).
BGP_MODES = ("metallb://", "kube-vip://")


def peer_annotations(neighbors: list[Mapping[str, Any]]) -> dict[str, str]:
    """The annotations for a device's IPv4 neighbours, one numbered peer per router."""
    found: dict[str, str] = {}
    n = 0
    for neighbor in neighbors:
        if int(neighbor.get("address_family", 4)) != 4:
            continue
        for peer_ip in neighbor.get("peer_ips") or ():
            prefix = f"{ANNOTATION_PREFIX}{n}-"
            found[prefix + "node-asn"] = str(neighbor.get("customer_as", ""))
            found[prefix + "peer-asn"] = str(neighbor.get("peer_as", ""))
            found[prefix + "peer-ip"] = str(peer_ip)
            found[prefix + "src-ip"] = str(neighbor.get("customer_ip", ""))
            if neighbor.get("md5_password"):
                found[prefix + "bgp-pass"] = str(neighbor["md5_password"])
            n += 1
    return found


class ProjectBgp:
    """The Metal side: the project's BGP config and the devices' sessions and neighbours."""

    def __init__(self, api: MetalClient) -> None:
        self.api = api
        self._enabled = False
        self._lock = threading.Lock()

    @property
    def config(self) -> MetalConfig:
        return self.api.config

    def ensure_enabled(self) -> None:
        """Request BGP for the project unless it has it (asked once per term)."""
        with self._lock:
            if self._enabled:
                return
            from equinix.services import metalv1

            current = self.api.call("bgp.find_bgp_config_by_project", self.config.project_id)
            if not (current or {}).get("asn"):
                request = metalv1.BgpConfigRequestInput(
                    asn=self.config.local_asn, deployment_type="local",
                    md5=self.config.bgp_pass or None,
                )  # fmt: skip
                self.api.call("bgp.request_bgp_config", self.config.project_id, request)
                log.info("enabled BGP on project %s with ASN %d", self.config.project_id,
                         self.config.local_asn)  # fmt: skip
            self._enabled = True

    def ensure_session(self, device_id: str) -> str | None:
        """The device's IPv4 session, made when missing; the new session's id, else ``None``."""
        from equinix.services import metalv1

        sessions = self.api.call("devices.find_bgp_sessions", device_id) or {}
        if any(s.get("address_family") == "ipv4" for s in sessions.get("bgp_sessions") or ()):
            return None
        made = self.api.call(
            "devices.create_bgp_session", device_id,
            metalv1.BGPSessionInput(address_family="ipv4"),
        )  # fmt: skip
        return str(made.get("id", ""))

    def neighbors(self, device_id: str) -> list[Mapping[str, Any]]:
        body = self.api.call("devices.get_bgp_neighbor_data", device_id) or {}
        return list(body.get("bgp_neighbors") or ())


class BgpController(Controller):
    """Keeps every node's device in BGP and its peer annotations current."""

    name = NAME

    def __init__(self, context: ControllerContext, bgp: ProjectBgp) -> None:
        self.context = context
        self.bgp = bgp
        self.queue = RateLimitingQueue(self.name)

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

    def run(self, stop: threading.Event) -> None:
        nodes = self.context.nodes
        nodes.add_handler(
            on_add=lambda node: self.queue.add(node["metadata"]["name"]),
            on_update=lambda _old, new: self.queue.add(new["metadata"]["name"]),
        )
        threading.Thread(
            target=run_periodically,
            args=(self.name, "resync", self.enqueue_all, RESYNC_PERIOD, stop),
            name=f"{self.name}-resync",
            daemon=True,
        ).start()
        run_workers(
            name=self.name, queue=self.queue, workers=2, stop=stop,
            process=lambda q: process_one(q, self.sync, name=self.name),
        )  # fmt: skip

    def enqueue_all(self) -> None:
        for node in self.context.nodes.list():
            self.queue.add(node["metadata"]["name"])

    def sync(self, name: str) -> None:
        raw = self.context.nodes.get(name)
        if raw is None:
            return  # deleted: Metal deletes the device's sessions with the device
        node = Node(raw)
        device_id = device_id_from_provider_id(node.provider_id)
        if device_id is None:
            return  # not initialised yet: the update that sets providerID enqueues it again
        self.bgp.ensure_enabled()
        session = self.bgp.ensure_session(device_id)
        if session:
            self.context.recorder.event(
                raw, "Normal", "BGPSessionCreated",
                f"BGP session {session} created for device {device_id}",
            )  # fmt: skip
        wanted = peer_annotations(self.bgp.neighbors(device_id))
        current = {k: v for k, v in node.annotations.items() if k.startswith(ANNOTATION_PREFIX)}
        if current == wanted:
            return
        patch: dict[str, str | None] = {k: None for k in current if k not in wanted}
        patch.update(wanted)
        self.context.api.patch(
            NODES, name, {"metadata": {"annotations": patch}}, patch_type=MERGE_PATCH
        )
