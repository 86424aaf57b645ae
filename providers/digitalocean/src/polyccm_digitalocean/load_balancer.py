"""LoadBalancer on DigitalOcean load balancers: one per service, found again by its id.

The load balancer's id is returned with the status as the service annotation
``kubernetes.digitalocean.com/load-balancer-id`` (written by the service controller through
``LoadBalancerStatus.service_annotations``), and every lookup tries that id first, then an id
this process created in its term, and only then a name (the one the service asks for, or the
default ``a`` + UID). So renaming a load balancer with the ``name`` annotation renames it in
place: never a second one, never an orphan (DO #224).

Ensure checks the service first (:mod:`polyccm_digitalocean.annotations`: nothing reaches the
cloud for an invalid spec), then creates, or updates with one PUT only when what DigitalOcean
reports differs from the request, so a second ensure writes nothing. While the load balancer is
``new`` (no IP yet) it raises ``RetryAfter``: the first time after 1 s, then after as long as it
has been waiting, up to every 15 s (upstream's service controller retries after 5 s, doubling to
5 minutes), reading that one load balancer by its id (as upstream does: some 50 KB with 5,000
droplets, where a listing of 500 such load balancers is 25 MB). A Service with no id
yet is looked up by name in a listing shared by those asking within 5 s (a burst of new
Services: one listing, not one each), with this process's creates and deletes applied to it,
and the one found is then read by its id.
A droplet DigitalOcean took out of a load balancer on its own (it does so when the droplet
is destroyed) is not asked back for two minutes: its node may still be listed until the node
lifecycle controller deletes it, and adding it would have the whole request refused (422), the
new nodes' droplets with it. Deleting one whose id is
annotated is one ``DELETE``. An annotated id DigitalOcean answers 404 for is not looked up by
name: ensure makes a new load balancer, as upstream does. A service annotated
``service.kubernetes.io/do-loadbalancer-disown: "true"`` is left before anything else is read
or called: its status stays as it is, its load balancer neither changed nor deleted.
The backends are the nodes :func:`~polyccm_digitalocean.backends.backends` keeps (a
REGIONAL_NETWORK EXTERNAL load balancer takes only nodes with a public address). When
DigitalOcean renewed a Let's Encrypt certificate (a new id, the same name) the load balancer's
id is kept and written to the ``certificate-id`` annotation, as upstream does, for a service
naming its certificate with ``certificate-name`` too (the id annotation then wins, as upstream's).
Every request carries the ``k8s:<DO_CLUSTER_ID>`` tag, an update's as a create's (upstream's
buildLoadBalancerRequest serves both); DigitalOcean sets tags at creation only, so a tag missing
on an existing load balancer is the ``cluster-tags`` controller's to add, never a PUT's.

A new load balancer's type is the ``type`` annotation's, else ``DEFAULT_LB_TYPE``'s
(``REGIONAL_NETWORK`` unless it says ``REGIONAL``); an existing one keeps its own, and its type
is written back as the ``type`` annotation with the id, as upstream writes both (since v0.1.60),
so the default never changes a load balancer that exists.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from polyccm.cloud import LoadBalancer, LoadBalancerIngress, LoadBalancerStatus
from polyccm.errors import CloudError, InvalidServiceSpec, RetryAfter
from polyccm.keptlisting import KeptListing
from polyccm.objects import Node, Service

from polyccm_digitalocean.annotations import (
    CERTIFICATE_ID,
    CERTIFICATE_NAME,
    LOAD_BALANCER_ID,
    TYPE,
    LoadBalancerSpec,
    disowned,
    service_spec,
)
from polyccm_digitalocean.api import DigitalOceanApi, NotFound
from polyccm_digitalocean.backends import Backends, backends, network_stack
from polyccm_digitalocean.instances import droplet_id_from_provider_id

log = logging.getLogger(__name__)

#: Seconds before asking again about a load balancer still ``new``: the first time, then at
#: most (in between: as long as it has been waiting so far).
FIRST_RETRY_DELAY = 1.0
NEW_RETRY_DELAY = 15.0
#: Seconds a listing of every load balancer answers name lookups (a Service with no id yet): a
#: burst of new Services shares one listing instead of one each (500 load balancers of 5,000
#: droplets list as ~25 MB). Shorter than a leader's lease (15 s), so no listing kept here
#: predates a load balancer another replica made before this one's term; what this process
#: makes or deletes meanwhile is applied to the kept listing.
NAME_LISTING_AGE = 5.0
#: Seconds a droplet DigitalOcean dropped from a load balancer is not added back.
DROPPED_FOR = 120.0
#: Distinct droplet sets kept for sharing before those no load balancer holds are let go.
SHARED_SETS = 8

Balancer = Mapping[str, Any]
#: Request fields an update sends but DigitalOcean does not change (tags: set at creation, then
#: through the tags API), so never a difference worth a PUT.
UNCHANGEABLE = frozenset({"tags"})


def droplet_ids(nodes: Sequence[Node]) -> list[int]:
    ids = {droplet_id_from_provider_id(node.provider_id) for node in nodes}
    return sorted(i for i in ids if i is not None)


def rule_key(rule: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two forwarding rules the same rule (DigitalOcean fills in the rest)."""
    return (rule["entry_protocol"], int(rule["entry_port"]), rule["target_protocol"],
            int(rule["target_port"]), rule.get("certificate_id") or "",
            bool(rule.get("tls_passthrough")))  # fmt: skip


def differences(desired: Mapping[str, Any], current: Balancer) -> list[str]:
    """The fields of ``desired`` that ``current`` (as DigitalOcean reports it) does not have."""
    changed: list[str] = []
    for key, want in desired.items():
        if key in UNCHANGEABLE:
            continue
        have = current.get(key)
        if key == "forwarding_rules":
            same = sorted(map(rule_key, want)) == sorted(map(rule_key, have or ()))
        elif key == "droplet_ids":
            same = sorted(want) == sorted(have or ())
        elif key == "region":
            same = want == (have or {}).get("slug", have)
        elif key in ("health_check", "sticky_sessions"):
            same = all((have or {}).get(k) == v for k, v in want.items())
        elif key == "firewall":
            have = have or {}
            same = all(sorted(have.get(k) or ()) == sorted(v) for k, v in want.items())
        else:
            same = have == want
        if not same:
            changed.append(key)
    return changed


def used_certificate(balancer: Balancer) -> str:
    """The certificate id ``balancer``'s rules use ("" for none)."""
    return next((str(r["certificate_id"]) for r in balancer.get("forwarding_rules") or ()
                 if r.get("certificate_id")), "")  # fmt: skip


def balancer_names(api: DigitalOceanApi) -> Iterable[tuple[str, str]]:
    """Each of the account's load balancers as ``(id, name)``, from ``load_balancers.list``.
    Only names are kept: a load balancer found by name is then read by its id, so a listing's
    droplet ids (5,000 a load balancer) do not outlive the page they came in."""
    for balancer in api.pages("load_balancers.list", "load_balancers"):
        yield str(balancer["id"]), str(balancer.get("name") or "")


class DroppedDroplets:
    """The droplets each load balancer held when last seen here, and those DigitalOcean has
    dropped since on its own (as it does when a droplet is destroyed), kept out of requests for
    :data:`DROPPED_FOR` seconds. Load balancers holding the same droplets share one set (500
    load balancers of 5,000 droplets would otherwise keep 200 MB of sets)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._held: dict[str, frozenset[int]] = {}
        self._sets: dict[frozenset[int], frozenset[int]] = {}
        """Each distinct set in :attr:`_held`, to share it."""
        self._dropped: dict[int, float] = {}
        self._lock = threading.Lock()

    def seen(self, balancer: Balancer) -> None:
        """``balancer`` as DigitalOcean reports it: what it held and holds no longer was not
        taken out by this process."""
        held, now = frozenset(balancer.get("droplet_ids") or ()), self.clock()
        with self._lock:
            for droplet_id in self._held.get(str(balancer["id"]), held) - held:
                self._dropped[droplet_id] = now
            self._keep(str(balancer["id"]), held)

    def wrote(self, balancer: Balancer) -> None:
        """``balancer`` as this process just made or replaced it."""
        with self._lock:
            self._keep(str(balancer["id"]), frozenset(balancer.get("droplet_ids") or ()))

    def changed(self, lb_id: str, added: Iterable[int] = (), removed: Iterable[int] = ()) -> None:
        """This process added or removed droplets of ``lb_id``."""
        with self._lock:
            held = self._held.get(lb_id, frozenset())
            self._keep(lb_id, (held | frozenset(added)) - frozenset(removed))

    def forget(self, lb_id: str) -> None:
        with self._lock:
            self._held.pop(lb_id, None)

    def wanted(self, droplet_ids: Iterable[int]) -> list[int]:
        """``droplet_ids`` without those DigitalOcean dropped in the last :data:`DROPPED_FOR` s."""
        since = self.clock() - DROPPED_FOR
        with self._lock:
            if self._dropped:
                self._dropped = {i: at for i, at in self._dropped.items() if at > since}
            dropped = set(self._dropped)
        return [i for i in droplet_ids if i not in dropped]

    def _keep(self, lb_id: str, held: frozenset[int]) -> None:
        self._held[lb_id] = self._sets.setdefault(held, held)
        if len(self._sets) > 2 * SHARED_SETS:  # keep only the sets still held
            self._sets = {kept: kept for kept in self._held.values()}


class WaitingBalancers:
    """Load balancers seen ``new``: since when each waits, for the delay before the next look."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._since: dict[str, float] = {}
        self._lock = threading.Lock()

    def retry_delay(self, lb_id: str) -> float:
        """Seconds until ``lb_id`` (not active yet) is asked about again: as long as it has
        waited so far, between :data:`FIRST_RETRY_DELAY` and :data:`NEW_RETRY_DELAY`."""
        with self._lock:
            since = self._since.setdefault(lb_id, self.clock())
        return min(NEW_RETRY_DELAY, max(FIRST_RETRY_DELAY, self.clock() - since))

    def done(self, lb_id: str) -> None:
        with self._lock:
            self._since.pop(lb_id, None)


class DigitalOceanLoadBalancer(LoadBalancer):
    """Services of ``type: LoadBalancer`` on DigitalOcean load balancers."""

    def __init__(
        self,
        api: DigitalOceanApi,
        *,
        region: str,
        vpc_id: str = "",
        default_type: str = "",
        clock: Callable[[], float] = time.monotonic,
        name_listing_age: float = NAME_LISTING_AGE,
    ) -> None:
        """``default_type``: a new load balancer's type when its Service names none (default:
        the API's configuration's ``DEFAULT_LB_TYPE``); ``name_listing_age``: how old a listing
        may answer a lookup by name (0 for ``polyccm plan``, which reads afresh)."""
        self.api = api
        self.region = region
        self.vpc_id = vpc_id
        self.default_type = default_type or api.config.default_lb_type
        self._made: dict[str, str] = {}
        """Service UID -> id of a load balancer created here (until its id is annotated)."""
        self._lock = threading.Lock()
        self._name_listing_age = name_listing_age
        self._names: KeptListing[str] = KeptListing(lambda: balancer_names(api), clock=clock)
        """Id -> name for lookups by name, with this process's creates and deletes applied."""
        self._waiting = WaitingBalancers(clock)
        self._dropped = DroppedDroplets(clock)
        self._kept: tuple[Sequence[Node], dict[tuple[str, str], tuple[Backends, list[int]]]] | None
        self._kept = None
        """The last node list given and, for each type and network asked since, the backends
        it keeps and their droplets: the service controller gives every ensure and update of a
        burst the same list (one per node cache version), so a thousand nodes are classified
        once, not once per Service."""

    # -- finding -----------------------------------------------------------------------------

    def _find(self, service: Service, spec: LoadBalancerSpec | None = None) -> Balancer | None:
        """The service's load balancer: by annotated id, by the id made here, then by name. An
        annotated id DigitalOcean no longer has (404) is not looked up by name: as upstream's
        retrieveLoadBalancer, the service then gets a new load balancer."""
        annotated = service.annotations.get(LOAD_BALANCER_ID, "").strip()
        for lb_id in (annotated, self._made.get(service.uid, "")):
            if lb_id and (balancer := self._get(lb_id)) is not None:
                return balancer
        if annotated:
            return None
        names = {self.get_load_balancer_name("", service)}
        if spec is not None:
            names.add(spec.name)
        for lb_id, name in self._names.current(self._name_listing_age).items():
            if name in names and (balancer := self._get(lb_id)) is not None:
                return balancer
        return None

    def _get(self, lb_id: str) -> Balancer | None:
        """``lb_id`` as DigitalOcean reports it now (``None`` once deleted)."""
        try:
            balancer: Balancer = self.api.call("load_balancers.get", lb_id=lb_id)["load_balancer"]
        except NotFound:  # deleted behind this process's back
            self._waiting.done(lb_id)
            self._names.drop(lb_id)
            self._dropped.forget(lb_id)
            return None
        self._dropped.seen(balancer)
        return balancer

    def _spec(self, service: Service, balancer: Balancer | None = None) -> LoadBalancerSpec:
        """The checked request for ``service``; with ``balancer`` (the one that exists), of its
        type."""
        fixed = str((balancer or {}).get("type") or "")
        stack = str((balancer or {}).get("network_stack") or "")
        return service_spec(service, default_type=self.default_type, fixed_type=fixed,
                            fixed_stack=stack)  # fmt: skip

    # -- the contract -----------------------------------------------------------------------

    def get_load_balancer(self, cluster_name: str, service: Service) -> LoadBalancerStatus | None:
        try:
            spec = self._spec(service)
        except InvalidServiceSpec:
            spec = None
        balancer = self._find(service, spec)
        if balancer is None:
            return None
        return self._status(balancer, spec.hostname if spec else "", ())

    def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        if disowned(service):  # before anything else, as upstream (loadbalancers.go:206-213)
            log.info("service %s: its load balancer is disowned; left as it is", service.key)
            return self._current_status(service)
        spec = self._spec(service)  # every check before any cloud call
        balancer = self._find(service, spec)
        extra: dict[str, str] = {}
        certificate = ""
        if balancer is not None:
            spec = self._spec(service, balancer)  # of the type and stack it has
            if spec.certificate_name:
                certificate = self._certificate_id(spec.certificate_name)
            extra = self._renewed_certificate(service, certificate, balancer)
        body = self._body(spec, nodes, certificate=extra.get(CERTIFICATE_ID, certificate))
        if balancer is None:
            balancer = self.api.call("load_balancers.create", body=body)["load_balancer"]
            self._names.put(str(balancer["id"]), str(balancer.get("name") or ""))
            self._dropped.wrote(balancer)
            with self._lock:
                self._made[service.uid] = str(balancer["id"])
            log.info("service %s: created load balancer %s (%s)",
                     service.key, balancer["id"], spec.name)  # fmt: skip
            if balancer.get("status") == "new":
                # One look right away: a quick cloud (or an emulator) may be done already.
                balancer = self._get(str(balancer["id"])) or balancer
        else:
            if "region" in body:
                body["region"] = (balancer.get("region") or {}).get("slug", body["region"])
            changed = differences(body, balancer)
            if changed:
                log.info("service %s: updating load balancer %s (%s)",
                         service.key, balancer["id"], ", ".join(changed))  # fmt: skip
                balancer = self.api.call("load_balancers.update", lb_id=balancer["id"], body=body)[
                    "load_balancer"
                ]
                self._names.put(str(balancer["id"]), str(balancer.get("name") or ""))
                self._dropped.wrote(balancer)
        lb_id = str(balancer["id"])
        if balancer.get("status") != "active" or not balancer.get("ip"):
            raise RetryAfter(
                f"load balancer {lb_id} is not yet active "
                f"(current status: {balancer.get('status')})",
                self._waiting.retry_delay(lb_id),
            )
        self._waiting.done(lb_id)
        return self._status(balancer, spec.hostname, spec.warnings, extra)

    def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        if disowned(service):
            return
        spec = self._spec(service)
        balancer = self._find(service, spec)
        if balancer is None:
            raise CloudError(f"service {service.key}: no load balancer to update")
        lb_id = str(balancer["id"])
        _, ids = self._backends(nodes, str(balancer.get("type") or spec.body["type"]),
                                str(balancer.get("network") or spec.body["network"]))  # fmt: skip
        want = set(self._dropped.wanted(ids))
        have = set(balancer.get("droplet_ids") or ())
        if want - have:
            self.api.call("load_balancers.add_droplets", lb_id=lb_id,
                          body={"droplet_ids": sorted(want - have)})  # fmt: skip
            self._dropped.changed(lb_id, added=want - have)
        if have - want:
            self.api.call("load_balancers.remove_droplets", lb_id=lb_id,
                          body={"droplet_ids": sorted(have - want)})  # fmt: skip
            self._dropped.changed(lb_id, removed=have - want)

    def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        if disowned(service):
            log.info("service %s: load balancer disowned; not deleted", service.key)
            return
        try:
            spec: LoadBalancerSpec | None = self._spec(service)
        except InvalidServiceSpec:
            spec = None
        annotated = service.annotations.get(LOAD_BALANCER_ID, "").strip()
        deleted = bool(annotated) and self._delete(annotated)
        if not deleted:  # no id annotated, or none by that id: found as ensure finds it
            balancer = self._find(service, spec)
            if balancer is not None:
                self._delete(str(balancer["id"]))
                annotated = str(balancer["id"])
                deleted = True
        if deleted:
            log.info("service %s: deleted load balancer %s", service.key, annotated)
        with self._lock:
            self._made.pop(service.uid, None)

    def _delete(self, lb_id: str) -> bool:
        """Delete ``lb_id``; whether DigitalOcean had it (a 404 is "already gone")."""
        self._waiting.done(lb_id)
        self._dropped.forget(lb_id)
        try:
            self.api.call("load_balancers.delete", lb_id=lb_id)
        except NotFound:
            return False
        finally:
            self._names.drop(lb_id)
        return True

    # -- helpers ----------------------------------------------------------------------------

    def _body(self, spec: LoadBalancerSpec, nodes: Sequence[Node], *,
              certificate: str = "") -> dict[str, Any]:  # fmt: skip
        """The request: the spec's body with the backends among ``nodes`` (checked for the type
        the load balancer has or gets: before any write), the network stack they allow, the
        certificate (``certificate``: the one the load balancer was renewed to; else the named
        one's id), the cluster's tag, region and VPC."""
        body = dict(spec.body)
        kept, ids = self._backends(nodes, body["type"], body["network"])
        body["network_stack"] = network_stack(body["network_stack"], spec.stack_from_nodes,
                                              kept, body["type"])  # fmt: skip
        if spec.certificate_name and not certificate:
            certificate = self._certificate_id(spec.certificate_name)
        if certificate:
            body["forwarding_rules"] = [
                {**rule, "certificate_id": certificate} if "certificate_id" in rule else rule
                for rule in body["forwarding_rules"]
            ]
        # The cluster's tag in every request, create and update alike, as upstream's
        # buildLoadBalancerRequest (loadbalancers.go:985-989@v0.1.68, used by both): a new load
        # balancer is this cluster's from its first moment. DigitalOcean sets tags at creation
        # only (godo load_balancers.go:53), so an update's are no difference to PUT for.
        from polyccm_digitalocean.orphans import cluster_tag  # orphans imports this module

        if tag := cluster_tag(self.api.config.cluster_id):
            body["tags"] = [tag]
        body["region"] = self.region
        body["droplet_ids"] = self._dropped.wanted(ids)
        if self.vpc_id:
            body["vpc_uuid"] = self.vpc_id
        return body

    def _backends(
        self, nodes: Sequence[Node], lb_type: str, network: str
    ) -> tuple[Backends, list[int]]:
        """The backends a ``lb_type`` ``network`` load balancer keeps of ``nodes``, and their
        droplets (:func:`~polyccm_digitalocean.backends.backends`, :meth:`_droplet_ids`),
        computed once per node list given (see ``_kept``). Droplets found by a listing (nodes
        without a providerID) are looked up again each time."""
        kept_before = self._kept
        if kept_before is not None and kept_before[0] is nodes:
            found = kept_before[1].get((lb_type, network))
            if found is not None:
                return found
        kept = backends(nodes, lb_type, network)
        answer = (kept, self._droplet_ids(kept.nodes))
        if all(node.provider_id for node in kept.nodes):
            with self._lock:
                if self._kept is None or self._kept[0] is not nodes:
                    self._kept = (nodes, {})
                self._kept[1][lb_type, network] = answer
        return answer

    def _droplet_ids(self, nodes: Sequence[Node]) -> list[int]:
        """The droplets of ``nodes``: by providerID, and for a node without one, as upstream's
        nodesToDropletIDs (loadbalancers.go:723-782@v0.1.68), the droplet of the node's name (or
        with the node's name as an address), from one listing of the droplets."""
        ids = set(droplet_ids(nodes))
        missing = {node.name for node in nodes if not node.provider_id}
        if missing:
            for droplet in self.api.pages("droplets.list", "droplets"):
                networks = droplet.get("networks") or {}
                addresses = {str(n.get("ip_address")) for kind in ("v4", "v6")
                             for n in networks.get(kind) or ()}  # fmt: skip
                found = missing & ({str(droplet.get("name"))} | addresses)
                if found:
                    ids.add(int(droplet["id"]))
                    missing -= found
                if not missing:
                    break
            if missing:
                log.warning("no droplet found for nodes %s", ", ".join(sorted(missing)[:3]))
        return sorted(ids)

    def _certificate_id(self, name: str) -> str:
        """The id of the certificate named ``name``: the first DigitalOcean lists under that
        name, as upstream's findCertificateID (loadbalancers.go:1547-1566@v0.1.68)."""
        for certificate in self.api.pages("certificates.list", "certificates", name=name):
            if certificate.get("name") == name:
                return str(certificate["id"])
        raise InvalidServiceSpec(f"annotation {CERTIFICATE_NAME}: no certificate named {name!r}")

    def _renewed_certificate(self, service: Service, named: str,
                             balancer: Balancer) -> dict[str, str]:  # fmt: skip
        """``{certificate-id: new id}`` when DigitalOcean renewed the service's Let's Encrypt
        certificate on ``balancer`` (a new id, the same name), as upstream's
        recordUpdatedLetsEncryptCert (loadbalancers.go:299-337@v0.1.68) given the id of
        findCertificateID (348-357): the ``certificate-id`` annotation's, else ``named`` (the
        id of the ``certificate-name`` annotation's certificate). The id annotation is then
        written (for a name too, as upstream writes it) and the old id never sent back. Read
        from one listing of the account's certificates."""
        used = used_certificate(balancer)
        if not used:
            return {}
        annotated = service.annotations.get(CERTIFICATE_ID, "").strip() or named
        if not annotated or used == annotated:
            return {}
        wanted = {annotated, used}
        found = {str(c["id"]): c for c in self.api.pages("certificates.list", "certificates")
                 if str(c.get("id")) in wanted}  # fmt: skip
        renewed = found.get(used)
        if renewed is None or renewed.get("type") != "lets_encrypt":
            return {}
        before = found.get(annotated)
        if before is not None and before.get("name") != renewed.get("name"):
            return {}  # changed by hand to another certificate: the annotation's wins
        log.info("service %s: certificate %s was renewed as %s; following it",
                 service.key, annotated, used)  # fmt: skip
        return {CERTIFICATE_ID: used}

    def _current_status(self, service: Service) -> LoadBalancerStatus:
        """The status ``service`` has (a disowned one's, as upstream returns it unchanged)."""
        ingress = tuple(
            LoadBalancerIngress(ip=str(i.get("ip") or ""), hostname=str(i.get("hostname") or ""))
            for i in service.load_balancer_status.get("ingress") or ()
        )
        return LoadBalancerStatus(ingress=ingress)

    @staticmethod
    def _status(balancer: Balancer, hostname: str, warnings: Sequence[str],
                extra: Mapping[str, str] | None = None) -> LoadBalancerStatus:  # fmt: skip
        if hostname:
            ingress: tuple[LoadBalancerIngress, ...] = (LoadBalancerIngress(hostname=hostname),)
        else:
            ingress = tuple(
                LoadBalancerIngress(ip=str(address))
                for address in (balancer.get("ip"), balancer.get("ipv6"))
                if address
            )
        annotations = {**(extra or {}), LOAD_BALANCER_ID: str(balancer["id"])}
        if balancer.get("type"):
            annotations[TYPE] = str(balancer["type"])
        return LoadBalancerStatus(
            ingress=ingress, warnings=tuple(warnings), service_annotations=annotations
        )
