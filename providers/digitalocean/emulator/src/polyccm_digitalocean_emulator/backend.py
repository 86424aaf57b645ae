"""The emulated account: every resource, the rules that change them, and nothing of HTTP.

One :class:`Backend` is one DigitalOcean account. Its methods are the API's operations on
already-validated input; they raise :mod:`polyccm_digitalocean_emulator.errors` for what
DigitalOcean refuses. The HTTP layer (:mod:`polyccm_digitalocean_emulator.responses`) renders
what they return. Callers serialise access (the app holds one lock per request).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from polyccm_digitalocean_emulator import catalog
from polyccm_digitalocean_emulator import load_balancers as lbs
from polyccm_digitalocean_emulator.droplets import POWER_ACTIONS, Action, Droplet
from polyccm_digitalocean_emulator.errors import NotFound, Unprocessable
from polyccm_digitalocean_emulator.network import PublicAddresses
from polyccm_digitalocean_emulator.resources import Certificate, Firewall
from polyccm_digitalocean_emulator.settings import EmulatorSettings
from polyccm_digitalocean_emulator.timers import Clock, Timers
from polyccm_digitalocean_emulator.vpcs import Vpc, new_default, overlaps

#: DigitalOcean creates at most this many droplets in one request.
MAX_DROPLETS_PER_CREATE = 10
ACCOUNT_UUID = "b6fc89dbf6d9156cace5f3c78dc9851d957381ef"
PROJECT_ID = "4de7ac8b-495b-4884-9a69-1050c6793cd6"


class Backend:
    """One emulated DigitalOcean account."""

    def __init__(self, settings: EmulatorSettings | None = None, clock: Clock | None = None):
        self.settings = settings or EmulatorSettings()
        self.clock = clock or Clock()
        self.reset()

    def reset(self) -> None:
        """Forget every resource (settings stay)."""
        self.timers = Timers(self.clock)
        self.droplets: dict[int, Droplet] = {}
        self.actions: dict[int, Action] = {}
        self.load_balancers: dict[str, lbs.LoadBalancer] = {}
        self.tags: dict[str, None] = {}  # insertion-ordered set of tag names
        self.certificates: dict[str, Certificate] = {}
        self.firewalls: dict[str, Firewall] = {}
        self.vpcs: dict[str, Vpc] = {}
        self.public = PublicAddresses()
        self._droplet_ids = itertools.count(463_000_001)
        self._action_ids = itertools.count(2_000_000_001)
        self._vpc_ranges = itertools.count(0)

    def tick(self) -> None:
        """Apply every transition that has come due (called before each request)."""
        self.timers.run_due()

    # -- account and catalog ----------------------------------------------------------------

    def account(self) -> dict[str, Any]:
        return {
            "droplet_limit": self.settings.droplet_limit,
            "floating_ip_limit": 3,
            "email": "emulator@polyccm.invalid",
            "name": "polyccm emulator",
            "uuid": ACCOUNT_UUID,
            "email_verified": True,
            "status": "active",
            "status_message": "",
            "team": {"uuid": "5df3e3004a5fd3e4b1db8f8a9e4bd8ed3b3c1a4b", "name": "My Team"},
        }

    @staticmethod
    def _region(slug: str, what: str) -> str:
        if slug not in catalog.REGIONS:
            raise Unprocessable(f"You specified an invalid region for {what}.")
        return slug

    # -- VPCs --------------------------------------------------------------------------------

    def default_vpc(self, region: str) -> Vpc:
        for vpc in self.vpcs.values():
            if vpc.region == region and vpc.default:
                return vpc
        index = list(catalog.REGIONS).index(region)
        vpc = new_default(str(uuid.uuid4()), region, index, self.clock)
        self.vpcs[vpc.id] = vpc
        return vpc

    def vpc(self, vpc_id: str) -> Vpc:
        try:
            return self.vpcs[vpc_id]
        except KeyError:
            raise NotFound() from None

    def create_vpc(self, body: Mapping[str, Any]) -> Vpc:
        region = self._region(str(body["region"]), "VPC creation")
        self.default_vpc(region)  # an account always has its default before any other
        ip_range = body.get("ip_range")
        if ip_range is None:
            ip_range = f"10.{200 + next(self._vpc_ranges)}.0.0/20"
        clash = overlaps(str(ip_range), list(self.vpcs.values()))
        if clash is not None:
            raise Unprocessable(f"ip_range {ip_range} overlaps VPC {clash.name} ({clash.ip_range})")
        vpc = Vpc(
            id=str(uuid.uuid4()),
            name=str(body["name"]),
            region=region,
            ip_range=str(ip_range),
            created_at=self.clock.now(),
            description=str(body.get("description", "")),
        )
        self.vpcs[vpc.id] = vpc
        return vpc

    def delete_vpc(self, vpc_id: str) -> None:
        vpc = self.vpc(vpc_id)
        if vpc.default:
            raise Unprocessable("A default VPC cannot be deleted.")
        members = [d.name for d in self.droplets.values() if d.vpc_uuid == vpc_id]
        members += [lb.spec["name"] for lb in self.load_balancers.values()
                    if lb.spec["vpc_uuid"] == vpc_id]  # fmt: skip
        if members:
            raise Unprocessable(f"VPC {vpc.name} still has members: {', '.join(members)}")
        del self.vpcs[vpc_id]

    # -- droplets ----------------------------------------------------------------------------

    def create_droplets(self, names: list[str], body: Mapping[str, Any]) -> list[Droplet]:
        """Create one droplet per name; each starts ``new`` with a ``create`` action."""
        region = self._region(str(body.get("region") or "nyc3"), "Droplet creation")
        size = catalog.SIZES.get(str(body["size"]))
        if size is None:
            raise Unprocessable("You specified an invalid size for Droplet creation.")
        image = catalog.find_image(body["image"])
        if image is None:
            raise Unprocessable("You specified an invalid image for Droplet creation.")
        if len(names) > MAX_DROPLETS_PER_CREATE:
            raise Unprocessable(
                f"You can only create up to {MAX_DROPLETS_PER_CREATE} Droplets at once."
            )
        if len(self.droplets) + len(names) > self.settings.droplet_limit:
            raise Unprocessable(
                "creating this/these droplet(s) will exceed your droplet limit "
                f"({self.settings.droplet_limit})"
            )
        vpc = self._droplet_vpc(body.get("vpc_uuid"), region)
        if vpc.pool.left < len(names):
            raise Unprocessable(
                f"VPC {vpc.name} ({vpc.ip_range}) has no private address left for "
                f"{len(names)} more Droplet(s)."
            )
        tags = list(dict.fromkeys(str(tag) for tag in body.get("tags") or []))
        for tag in tags:
            self.tags.setdefault(tag, None)
        public = body.get("public_networking", True) is not False
        created = []
        for name in names:
            droplet = Droplet(
                id=next(self._droplet_ids),
                name=name,
                region=region,
                size=size,
                image=image,
                vpc_uuid=vpc.id,
                private_ip=vpc.pool.take(),
                public_ip=self.public.v4.take() if public else None,
                ipv6=self.public.take_v6() if body.get("ipv6") else None,
                created_at=self.clock.now(),
                tags=list(tags),
                monitoring=bool(body.get("monitoring")),
            )
            self.droplets[droplet.id] = droplet
            self._start_action(droplet, "create", "active", self.settings.droplet_active_delay)
            created.append(droplet)
        return created

    def _droplet_vpc(self, vpc_uuid: object, region: str) -> Vpc:
        if vpc_uuid is None:
            return self.default_vpc(region)
        vpc = self.vpcs.get(str(vpc_uuid))
        if vpc is None:
            raise Unprocessable(f"VPC {vpc_uuid} could not be found.")
        if vpc.region != region:
            raise Unprocessable(f"VPC {vpc.name} is in {vpc.region}, not in {region}.")
        return vpc

    def droplet(self, droplet_id: int) -> Droplet:
        try:
            return self.droplets[droplet_id]
        except KeyError:
            raise NotFound() from None

    def list_droplets(self, *, tag_name: str | None = None, name: str | None = None,
                      kind: str | None = None) -> list[Droplet]:  # fmt: skip
        """Droplets in creation order, filtered as ``GET /v2/droplets`` filters them."""
        found = list(self.droplets.values())
        if tag_name is not None:
            found = [d for d in found if tag_name in d.tags]
        if name is not None:
            found = [d for d in found if d.name == name]
        if kind == "gpus":
            found = []  # the catalog has no GPU sizes
        return found

    def delete_droplet(self, droplet_id: int) -> None:
        self.droplet(droplet_id)
        self._forget_droplets([droplet_id])

    def delete_droplets_by_tag(self, tag_name: str) -> None:
        self._forget_droplets([d.id for d in self.droplets.values() if tag_name in d.tags])

    def _forget_droplets(self, droplet_ids: Iterable[int]) -> None:
        """Remove droplets, and their ids from load balancers and firewalls, as DO does."""
        gone = set(droplet_ids)
        for droplet_id in gone:
            del self.droplets[droplet_id]
        for lb in self.load_balancers.values():
            for droplet_id in gone:
                lb.droplet_ids.pop(droplet_id, None)
        for firewall in self.firewalls.values():
            ids = firewall.spec.get("droplet_ids") or []
            firewall.spec["droplet_ids"] = [i for i in ids if i not in gone]

    def droplet_action(self, droplet_id: int, body: Mapping[str, Any]) -> Action:
        droplet = self.droplet(droplet_id)
        kind = str(body["type"])
        if kind not in POWER_ACTIONS:
            supported = ", ".join(POWER_ACTIONS)
            raise Unprocessable(
                f"The polyccm emulator does not carry out {kind} actions (only {supported})."
            )
        if droplet.locked:
            raise Unprocessable("Droplet already has a pending event.")
        if kind in ("power_off", "shutdown") and droplet.status == "off":
            raise Unprocessable("Droplet is already powered off.")
        if kind == "power_on" and droplet.status == "active":
            raise Unprocessable("Droplet is already powered on.")
        return self._start_action(droplet, kind, POWER_ACTIONS[kind], self.settings.action_delay)

    def _start_action(self, droplet: Droplet, kind: str, outcome: str, delay: float) -> Action:
        action = Action(
            id=next(self._action_ids),
            type=kind,
            droplet_id=droplet.id,
            region=droplet.region,
            started_at=self.clock.now(),
        )
        self.actions[action.id] = action
        droplet.locked = True

        def complete() -> None:
            action.completed_at = self.clock.now()
            current = self.droplets.get(droplet.id)
            if current is droplet:
                droplet.status = outcome
                droplet.locked = False

        self.timers.after(delay, complete)
        return action

    def action(self, action_id: int, droplet_id: int | None = None) -> Action:
        action = self.actions.get(action_id)
        if action is None or (droplet_id is not None and action.droplet_id != droplet_id):
            raise NotFound()
        return action

    def droplet_actions(self, droplet_id: int) -> list[Action]:
        self.droplet(droplet_id)
        return [a for a in self.actions.values() if a.droplet_id == droplet_id]

    # -- tags --------------------------------------------------------------------------------

    def create_tag(self, name: str) -> str:
        self.tags.setdefault(name, None)
        return name

    def tag(self, name: str) -> str:
        if name not in self.tags:
            raise NotFound()
        return name

    def tagged_droplets(self, name: str) -> list[int]:
        return [d.id for d in self.droplets.values() if name in d.tags]

    def delete_tag(self, name: str) -> None:
        self.tag(name)
        del self.tags[name]
        for droplet in self.droplets.values():
            if name in droplet.tags:
                droplet.tags.remove(name)

    def tag_resources(self, name: str, resources: list[Mapping[str, Any]], *, add: bool) -> None:
        self.tag(name)
        targets = [self._tag_target(resource) for resource in resources]
        for target in targets:
            tags = (
                target.tags if isinstance(target, Droplet) else target.spec.setdefault("tags", [])
            )
            if add and name not in tags:
                tags.append(name)
            elif not add and name in tags:
                tags.remove(name)

    def _tag_target(self, resource: Mapping[str, Any]) -> Droplet | lbs.LoadBalancer:
        kind = resource.get("resource_type")
        if kind == "load_balancer":
            # Overlay: the document lists droplets, databases, images and volumes, but godo has
            # a load_balancer resource type (godo tags.go:43) and upstream's CCM tags its load
            # balancers with it (cloud-controller-manager/do/resources.go:179-187@v0.1.68).
            try:
                return self.load_balancer(str(resource.get("resource_id")))
            except NotFound:
                raise NotFound(
                    f"load balancer {resource.get('resource_id')} could not be found"
                ) from None
        if kind != "droplet":
            raise Unprocessable(
                f"The polyccm emulator tags droplets and load balancers only, not {kind} resources."
            )
        try:
            return self.droplet(int(str(resource.get("resource_id"))))
        except (NotFound, ValueError):
            raise NotFound(f"droplet {resource.get('resource_id')} could not be found") from None

    # -- certificates ------------------------------------------------------------------------

    def create_certificate(self, body: Mapping[str, Any]) -> Certificate:
        certificate = Certificate.from_request(str(uuid.uuid4()), body, self.clock.now())
        self.certificates[certificate.id] = certificate
        if certificate.state == "pending":

            def issued() -> None:
                certificate.state = "verified"

            self.timers.after(self.settings.certificate_delay, issued)
        return certificate

    def certificate(self, certificate_id: str) -> Certificate:
        try:
            return self.certificates[certificate_id]
        except KeyError:
            raise NotFound() from None

    def list_certificates(self, name: str | None = None) -> list[Certificate]:
        found = list(self.certificates.values())
        return [c for c in found if c.name == name] if name else found

    def delete_certificate(self, certificate_id: str) -> None:
        self.certificate(certificate_id)
        del self.certificates[certificate_id]

    # -- firewalls ---------------------------------------------------------------------------

    def _check_firewall(self, body: Mapping[str, Any]) -> None:
        for droplet_id in body.get("droplet_ids") or []:
            if droplet_id not in self.droplets:
                raise Unprocessable(f"droplet {droplet_id} could not be found")

    def create_firewall(self, body: Mapping[str, Any]) -> Firewall:
        self._check_firewall(body)
        firewall = Firewall(str(uuid.uuid4()), self.clock.now(), dict(body))
        self.firewalls[firewall.id] = firewall
        return firewall

    def firewall(self, firewall_id: str) -> Firewall:
        try:
            return self.firewalls[firewall_id]
        except KeyError:
            raise NotFound() from None

    def update_firewall(self, firewall_id: str, body: Mapping[str, Any]) -> Firewall:
        firewall = self.firewall(firewall_id)
        self._check_firewall(body)
        firewall.spec = dict(body)
        return firewall

    def delete_firewall(self, firewall_id: str) -> None:
        self.firewall(firewall_id)
        del self.firewalls[firewall_id]

    # -- load balancers ----------------------------------------------------------------------

    def create_load_balancer(self, body: Mapping[str, Any]) -> lbs.LoadBalancer:
        """A load balancer, ``new`` without an ``ip`` until ``lb_active_delay`` has passed."""
        region = self._region(str(body["region"]), "load balancer creation")
        lbs.check_spec(body, self.certificates)
        vpc = self._droplet_vpc(body.get("vpc_uuid"), region)
        droplet_ids = self._backends(body.get("droplet_ids") or [], region)
        lb = lbs.LoadBalancer(
            id=str(uuid.uuid4()),
            region=region,
            spec=lbs.normalized(body, project_id=PROJECT_ID, vpc_uuid=vpc.id),
            created_at=self.clock.now(),
            droplet_ids=dict.fromkeys(droplet_ids),
            tag=str(body.get("tag") or ""),
        )
        if lb.tag:
            self.tags.setdefault(lb.tag, None)
        if not lb.spec["name"]:
            lb.spec["name"] = f"lb-{lb.id[:8]}"
        self.load_balancers[lb.id] = lb
        self.timers.after(self.settings.lb_active_delay, lambda: self._activate(lb))
        return lb

    def _activate(self, lb: lbs.LoadBalancer) -> None:
        if self.load_balancers.get(lb.id) is not lb:
            return
        lb.status = "active"
        if lb.spec["network"] == "INTERNAL":
            lb.ip = self.vpc(lb.spec["vpc_uuid"]).pool.take()
        else:
            lb.ip = self.public.v4.take()
            if lb.spec["network_stack"] == "DUALSTACK":
                lb.ipv6 = self.public.take_v6()

    def _backends(self, droplet_ids: Iterable[int], region: str) -> list[int]:
        result: list[int] = []
        seen: set[int] = set()  # the list's order kept, each id once (a set: 5,000 ids)
        for droplet_id in droplet_ids:
            droplet = self.droplets.get(droplet_id)
            if droplet is None:
                raise Unprocessable(f"droplet {droplet_id} could not be found")
            if droplet.region != region:
                raise Unprocessable(
                    f"droplet {droplet_id} is in {droplet.region}; load balancer droplets "
                    f"must be in its region {region}"
                )
            if droplet_id not in seen:
                seen.add(droplet_id)
                result.append(droplet_id)
        return result

    def load_balancer(self, lb_id: str) -> lbs.LoadBalancer:
        try:
            return self.load_balancers[lb_id]
        except KeyError:
            raise NotFound() from None

    def lb_droplet_ids(self, lb: lbs.LoadBalancer) -> list[int]:
        """The droplets behind ``lb``: its list, or those carrying its tag."""
        return self.tagged_droplets(lb.tag) if lb.tag else list(lb.droplet_ids)

    def update_load_balancer(self, lb_id: str, body: Mapping[str, Any]) -> lbs.LoadBalancer:
        """Replace the spec (PUT): what the body leaves out returns to its default."""
        lb = self.load_balancer(lb_id)
        lbs.check_spec(body, self.certificates)
        spec = lbs.normalized(body, project_id=PROJECT_ID, vpc_uuid=lb.spec["vpc_uuid"])
        current = {**lb.spec, "region": lb.region}
        wanted = {**spec, "region": body["region"]}
        for name in lbs.FIXED_ON_UPDATE:
            if wanted.get(name) != current.get(name):
                raise Unprocessable(f"the load balancer's {name} cannot be changed")
        lb.droplet_ids = dict.fromkeys(self._backends(body.get("droplet_ids") or [], lb.region))
        lb.tag = str(body.get("tag") or "")
        if not spec["name"]:
            spec["name"] = lb.spec["name"]
        # Tags are set at creation only (godo load_balancers.go:53, vendored by the CCM v0.1.68),
        # then by the tags API: a PUT neither drops nor replaces them.
        # A load balancer made without tags answers without the field, before and after.
        spec.pop("tags", None)
        if lb.spec.get("tags"):
            spec["tags"] = list(lb.spec["tags"])
        lb.spec = spec
        return lb

    def delete_load_balancer(self, lb_id: str) -> None:
        self.load_balancer(lb_id)
        del self.load_balancers[lb_id]

    def add_lb_droplets(self, lb_id: str, droplet_ids: list[int]) -> None:
        lb = self.load_balancer(lb_id)
        if lb.tag:
            raise Unprocessable("droplets cannot be added to a load balancer that uses a tag")
        for droplet_id in self._backends(droplet_ids, lb.region):
            lb.droplet_ids.setdefault(droplet_id)

    def remove_lb_droplets(self, lb_id: str, droplet_ids: list[int]) -> None:
        lb = self.load_balancer(lb_id)
        if lb.tag:
            raise Unprocessable("droplets cannot be removed from a load balancer that uses a tag")
        for droplet_id in droplet_ids:
            lb.droplet_ids.pop(droplet_id, None)

    def add_lb_rules(self, lb_id: str, rules: list[Mapping[str, Any]]) -> None:
        lb = self.load_balancer(lb_id)
        merged = lb.spec["forwarding_rules"] + [lbs.normalized_rule(rule) for rule in rules]
        lbs.check_rules(merged, self.certificates)
        lb.spec["forwarding_rules"] = merged

    def remove_lb_rules(self, lb_id: str, rules: list[Mapping[str, Any]]) -> None:
        lb = self.load_balancer(lb_id)
        unwanted = {lbs.rule_key(rule) for rule in rules}
        kept = [r for r in lb.spec["forwarding_rules"] if lbs.rule_key(r) not in unwanted]
        if not kept:
            raise Unprocessable("a load balancer needs at least one forwarding rule")
        lb.spec["forwarding_rules"] = kept
