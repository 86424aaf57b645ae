"""The control plane's Elastic IP (``eipTag``): kept on a healthy control-plane node, with the
``kube-system/cloud-provider-equinix-metal-kubernetes-external`` Service and EndpointSlice in
step with ``default/kubernetes`` (the ``packet-control-plane`` provider controller).

cluster-api's Packet template reserves an Elastic IP tagged ``eipTag`` as the cluster's API
endpoint and passes the tag (and ``apiServerPort``) to the CCM. Upstream's
``controlPlaneEndpointManager`` (metal/eip_controlplane_reconciliation.go at 38d15e2) then does,
and so does this controller, started only when ``eipTag`` is set:

- ``default/kubernetes`` Service: its first port's targetPort is the port the API servers
  listen on (``apiServerPort`` defaults to it); the external Service is applied (server-side,
  field manager ``cloud-provider-equinix-metal-auto``) as a LoadBalancer on the Elastic IP with
  the same ports and MetalLB's pool annotation set to a pool that does not exist (MetalLB must
  leave it alone), and its status given the Elastic IP.
- ``default/kubernetes`` EndpointSlice: copied to ``kube-system`` for the external Service
  (upstream's filter lets every EndpointSlice of ``default`` through, a bug: only the one named
  ``kubernetes`` is copied here).
- control-plane nodes (``node-role.kubernetes.io/control-plane`` or ``.../master``), on every
  update and every :data:`RESYNC_PERIOD`: when the Elastic IP is assigned to none, or to this
  node and ``https://<eip>:<apiServerPort>/healthz`` fails (with
  ``eipHealthCheckUseHostIP``, the node's own ExternalIP and the API servers' port), the
  Elastic IP moves to the first control-plane node (not being deleted, schedulable ones first)
  one of whose addresses answers ``/healthz`` with 200; a node that becomes unschedulable or is
  deleted gives it away the same way. "Assigned to this node" is asked of the assignment's
  device, not of the node's addresses as upstream does (see :func:`_assigned`). TLS is not
  verified (upstream's ``InsecureSkipVerify``:
  the health check proves an API server answers, not who it is); each check has
  :data:`HEALTH_TIMEOUT` seconds.
"""

from __future__ import annotations

import logging
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyccm.controllers import (
    Controller,
    ControllerContext,
    Informer,
    LeadershipLost,
    Node,
    RateLimitingQueue,
    run_periodically,
    run_workers,
)
from polyccm.errors import CloudError
from polyccm.kube.api import SERVICES, Resource

from polyccm_packet import sdk
from polyccm_packet.api import MetalClient
from polyccm_packet.instances import device_id_from_provider_id

log = logging.getLogger(__name__)

NAME = "packet-control-plane"
EXTERNAL_NAMESPACE = "kube-system"
EXTERNAL_NAME = "cloud-provider-equinix-metal-kubernetes-external"
FIELD_MANAGER = "cloud-provider-equinix-metal-auto"
METALLB_POOL_ANNOTATION = "metallb.universe.tf/address-pool"
METALLB_NO_POOL = "disabled-metallb-do-not-use-any-address-pool"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/master", "node-role.kubernetes.io/control-plane")
ENDPOINT_SLICES = Resource("discovery.k8s.io/v1", "endpointslices", namespaced=True)
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
APPLY_PATCH = "application/apply-patch+yaml"
#: Seconds a health check may take (upstream's http.Client timeout).
HEALTH_TIMEOUT = 5.0
#: Seconds between health checks of every control-plane node (upstream's informer resync).
RESYNC_PERIOD = 60.0


def is_control_plane(node: Node) -> bool:
    return any(label in node.labels for label in CONTROL_PLANE_LABELS)


def health_check(url: str) -> bool:
    """Whether ``GET url`` answers 200 within :data:`HEALTH_TIMEOUT` (no proxy, TLS not
    verified, as upstream's client)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(url, timeout=HEALTH_TIMEOUT) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError) as error:
        log.info("%s: health check %s failed: %s", NAME, url, error)
        return False


def _url(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"https://{host}:{port}/healthz"


class ControlPlaneEndpoint(Controller):
    """Keeps the control plane's Elastic IP on a healthy node and its Service in step."""

    name = NAME

    def __init__(self, context: ControllerContext, api: MetalClient) -> None:
        self.context = context
        self.api = api
        self.queue = RateLimitingQueue(self.name)
        self.healthy: Callable[[str], bool] = health_check
        """The health check (a test points it at loopback servers only)."""
        self.eip_port = api.config.api_server_port
        self.node_port = 0
        self._gone: dict[str, Mapping[str, Any]] = {}
        self._lock = threading.Lock()
        self.slices = Informer(
            context.api, ENDPOINT_SLICES, namespace="default",
            field_selector="metadata.name=kubernetes", name=f"{NAME}-endpointslices",
        )  # fmt: skip

    @classmethod
    def for_term(cls, context: ControllerContext) -> ControlPlaneEndpoint | None:
        api = getattr(context.provider, "api", None)
        if not isinstance(api, MetalClient) or not api.config.eip_tag:
            return None
        return cls(context, api)

    @property
    def tag(self) -> str:
        return self.api.config.eip_tag

    # -- events -------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        def on_service(raw: Mapping[str, Any]) -> None:
            meta = raw.get("metadata") or {}
            if (meta.get("namespace"), meta.get("name")) == ("default", "kubernetes"):
                self.queue.add("service")

        self.context.services.add_handler(
            on_add=on_service, on_update=lambda _old, new: on_service(new)
        )
        self.slices.add_handler(
            on_add=lambda _raw: self.queue.add("endpoints"),
            on_update=lambda _old, _new: self.queue.add("endpoints"),
        )
        self.context.nodes.add_handler(on_update=self._on_node_update, on_delete=self._on_delete)
        self.slices.start()
        threading.Thread(
            target=run_periodically,
            args=(self.name, "health checks", self.check_all, RESYNC_PERIOD, stop),
            name=f"{self.name}-resync", daemon=True,
        ).start()  # fmt: skip
        try:
            run_workers(name=self.name, queue=self.queue, workers=1, stop=stop,
                        process=self._process)  # fmt: skip
        finally:
            self.slices.stop()

    def _on_node_update(self, old: Mapping[str, Any], raw: Mapping[str, Any]) -> None:
        node, before = Node(raw), Node(old)
        if not is_control_plane(node):
            return
        unschedulable = bool(node.raw.get("spec", {}).get("unschedulable"))
        if unschedulable and not before.raw.get("spec", {}).get("unschedulable"):
            self.queue.add(f"away/{node.name}")
        else:
            self.queue.add(f"check/{node.name}")

    def _on_delete(self, raw: Mapping[str, Any]) -> None:
        node = Node(raw)
        if is_control_plane(node):
            with self._lock:
                self._gone[node.name] = raw
            self.queue.add(f"away/{node.name}")

    def check_all(self) -> None:
        for raw in self.context.nodes.list():
            if is_control_plane(Node(raw)):
                self.queue.add(f"check/{Node(raw).name}")

    def _process(self, queue: RateLimitingQueue) -> bool:
        key = queue.get(timeout=1.0)
        if key is None:
            return not queue.shutting_down
        try:
            self.sync(key)
        except LeadershipLost:
            raise
        except Exception as error:  # noqa: BLE001 - reported and retried with backoff
            log.warning("%s: %s: %s", self.name, key, error)
            queue.add_rate_limited(key)
        else:
            queue.forget(key)
        finally:
            queue.done(key)
        return True

    def sync(self, key: str) -> None:
        if key == "service":
            self.sync_service()
        elif key == "endpoints":
            self.sync_endpoints()
        elif self.node_port and self.eip_port:  # upstream waits for the ports, as here
            kind, _, name = key.partition("/")
            if kind == "away":
                with self._lock:
                    gone = self._gone.pop(name, None)
                raw = gone or self.context.nodes.get(name)
                if raw is not None:
                    self.reassign_away(Node(raw))
            else:
                raw = self.context.nodes.get(name)
                if raw is not None:
                    self.health_check(Node(raw))

    # -- Metal --------------------------------------------------------------------------------

    def reservation(self) -> Mapping[str, Any]:
        """The Elastic IP tagged ``eipTag`` (the first, as upstream's), with its assignments;
        :class:`CloudError` when there is none or it is assigned to more than one device."""
        body = self.api.call(
            "ips.find_ip_reservations", self.api.config.project_id, include=["assignments"],
            per_page=1000,
        ) or {}  # fmt: skip
        for reservation in body.get("ip_addresses") or ():
            if self.tag in (reservation.get("tags") or ()):
                if len(reservation.get("assignments") or ()) > 1:
                    raise CloudError(
                        f"the Elastic IP {reservation.get('address')} tagged {self.tag!r} is "
                        "assigned to more than one device; unassign all but one"
                    )
                found: Mapping[str, Any] = reservation
                return found
        raise CloudError(f"no Elastic IP tagged {self.tag!r} in the project")

    # -- the Service and its EndpointSlice ------------------------------------------------------

    def _apply(self, resource: Resource, name: str, body: Mapping[str, Any], **extra: Any) -> None:
        path = resource.path(EXTERNAL_NAMESPACE, name) + extra.pop("suffix", "")
        self.context.api.request(
            "PATCH", path, body=dict(body), content_type=APPLY_PATCH,
            query={"fieldManager": FIELD_MANAGER},
        )  # fmt: skip

    def sync_service(self) -> None:
        raw = self.context.services.get("default/kubernetes")
        if raw is None:
            return
        ports: Sequence[Mapping[str, Any]] = raw.get("spec", {}).get("ports") or ()
        if not ports:
            raise CloudError("default/kubernetes has no ports")
        target = ports[0].get("targetPort")
        self.node_port = target if isinstance(target, int) else 0
        if not self.api.config.api_server_port:
            self.eip_port = self.node_port
        eip = str(self.reservation().get("address"))
        spec_ports = []
        for port in ports:
            fields = ("name", "port", "protocol", "targetPort", "appProtocol")
            spec_ports.append({k: port[k] for k in fields if port.get(k) not in (None, "")})
        self._apply(SERVICES, EXTERNAL_NAME, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": EXTERNAL_NAME, "namespace": EXTERNAL_NAMESPACE,
                         "annotations": {METALLB_POOL_ANNOTATION: METALLB_NO_POOL}},
            "spec": {"type": "LoadBalancer", "loadBalancerIP": eip, "ports": spec_ports},
        })  # fmt: skip
        self._apply(SERVICES, EXTERNAL_NAME, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": EXTERNAL_NAME, "namespace": EXTERNAL_NAMESPACE},
            "status": {"loadBalancer": {"ingress": [{"ip": eip}]}},
        }, suffix="/status")  # fmt: skip

    def sync_endpoints(self) -> None:
        raw = self.slices.get("default/kubernetes")
        if raw is None:
            return
        ports = [
            {k: port[k] for k in ("name", "port", "protocol", "appProtocol") if k in port}
            for port in raw.get("ports") or ()
        ]
        endpoints = []
        for endpoint in raw.get("endpoints") or ():
            if not endpoint.get("addresses"):
                continue
            copied: dict[str, Any] = {"addresses": list(endpoint["addresses"])}
            conditions = endpoint.get("conditions") or {}
            if "ready" in conditions:  # upstream copies the conditions only with ready set
                fields = ("ready", "serving", "terminating")
                copied["conditions"] = {k: conditions[k] for k in fields if k in conditions}
            endpoints.append(copied)
        self._apply(ENDPOINT_SLICES, EXTERNAL_NAME, {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": EXTERNAL_NAME, "namespace": EXTERNAL_NAMESPACE,
                         "labels": {SERVICE_NAME_LABEL: EXTERNAL_NAME}},
            "addressType": raw.get("addressType", "IPv4"), "ports": ports,
            "endpoints": endpoints,
        })  # fmt: skip

    # -- health and reassignment --------------------------------------------------------------

    def health_check(self, node: Node) -> None:
        """Upstream's doHealthCheck for ``node``."""
        reservation = self.reservation()
        if not reservation.get("assignments"):
            log.info("%s: the Elastic IP %s is assigned to no node; assigning it", self.name,
                     reservation.get("address"))  # fmt: skip
            self.reassign(reservation)
            return
        if not _assigned(node, reservation):
            return
        eip = str(reservation.get("address"))
        url = _url(eip, self.eip_port)
        if self.api.config.eip_health_check_use_host_ip:
            for kind, address in node.addresses:
                if kind == "ExternalIP" and address != eip:
                    url = _url(address, self.node_port)
        if not self.healthy(url):
            log.info("%s: %s: %s failed; moving the Elastic IP %s", self.name, node.name, url,
                     eip)  # fmt: skip
            self.reassign(reservation)

    def reassign_away(self, node: Node) -> None:
        """Upstream's tryReassignAwayFromSelf: ``node`` is going (unschedulable, deleted)."""
        reservation = self.reservation()
        if _assigned(node, reservation) or not reservation.get("assignments"):
            self.reassign(reservation, leaving=node.name)

    def reassign(self, reservation: Mapping[str, Any], *, leaving: str = "") -> None:
        """The Elastic IP to the first healthy control-plane node; :class:`CloudError` when
        none answers (the cluster is unhealthy: nothing changes)."""
        eip = str(reservation.get("address"))
        own_url = _url(eip, self.eip_port)
        nodes = sorted(
            (Node(raw) for raw in self.context.nodes.list()),
            key=lambda node: node.name,
        )
        candidates = [n for n in nodes if is_control_plane(n) and n.deletion_timestamp is None]
        schedulable = [n for n in candidates if not n.raw.get("spec", {}).get("unschedulable")]
        candidates = schedulable or candidates
        others = [n for n in candidates if n.name != leaving]
        for node in others or candidates:
            for kind, address in node.addresses:
                if kind == "Hostname":
                    continue
                url = _url(address, self.node_port)
                if url == own_url or not self.healthy(url):
                    continue
                self._move(reservation, node)
                return
        raise CloudError(
            f"no control-plane node answers /healthz: the Elastic IP {eip} stays where it is"
        )

    def _move(self, reservation: Mapping[str, Any], node: Node) -> None:
        metalv1 = sdk.metalv1()

        device_id = device_id_from_provider_id(node.provider_id)
        if device_id is None:
            raise CloudError(f"{node.name}: providerID {node.provider_id!r} names no device")
        assignments = list(reservation.get("assignments") or ())
        if len(assignments) == 1:
            self.api.call("ips.delete_ip_address", str(assignments[0].get("id")))
        self.api.call(
            "devices.create_ip_assignment", device_id,
            metalv1.IPAssignmentInput(address=str(reservation.get("address"))),
        )  # fmt: skip
        log.info("%s: the Elastic IP %s is now on %s (device %s)", self.name,
                 reservation.get("address"), node.name, device_id)  # fmt: skip


def _assigned(node: Node, reservation: Mapping[str, Any]) -> bool:
    """Whether the Elastic IP is assigned to ``node``'s device. Upstream's nodeIsAssigned asks
    whether the node lists the address, which a node whose device lost it still does until its
    next address sync: it would be health-checked as the holder and the address moved again.
    The assignment's device is asked instead (the address when an assignment names none)."""
    device_id = device_id_from_provider_id(node.provider_id)
    for assignment in reservation.get("assignments") or ():
        holder = assignment.get("assigned_to")
        href = str(holder.get("href", "")) if isinstance(holder, Mapping) else ""
        if href:
            if device_id is not None and href.rstrip("/").rsplit("/", 1)[-1] == device_id:
                return True
        elif any(address == assignment.get("address") for _, address in node.addresses):
            return True
    return False
