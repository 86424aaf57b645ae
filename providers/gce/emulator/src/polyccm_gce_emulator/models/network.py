"""Networks, subnetworks, routes and firewalls.

Every project starts as GCE creates one: an auto-mode network (``settings.network``, normally
``default``) with a subnetwork per region, its local subnetwork routes and the route to the
internet gateway. Route inserts and deletes run longer than other operations
(``route_running_seconds``) and are rate-limited per project by the HTTP layer, as GCE's are;
a route whose next-hop instance does not exist fails in its operation.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from polyccm_gce_emulator.errors import (
    Invalid,
    NotFound,
    OperationFailure,
    Required,
    ResourceInUse,
)
from polyccm_gce_emulator.models import ipv6
from polyccm_gce_emulator.models.aliases import secondary_ranges
from polyccm_gce_emulator.models.base import ProjectBase, Resource, check_name, reference
from polyccm_gce_emulator.models.common import Link, new_id, timestamp
from polyccm_gce_emulator.models.geography import REGIONS
from polyccm_gce_emulator.models.operations import Operation

INTERNET_GATEWAY = "global/gateways/default-internet-gateway"
NEXT_HOPS = (
    "nextHopInstance",
    "nextHopIp",
    "nextHopGateway",
    "nextHopNetwork",
    "nextHopVpnTunnel",
    "nextHopIlb",
)
FIREWALL_INPUT = (
    "description",
    "network",
    "priority",
    "sourceRanges",
    "destinationRanges",
    "sourceTags",
    "targetTags",
    "sourceServiceAccounts",
    "targetServiceAccounts",
    "allowed",
    "denied",
    "direction",
    "logConfig",
    "disabled",
)


def cidr(value: object, field_name: str) -> str:
    """A valid IPv4 CIDR (host bits clear), else 400 invalid."""
    try:
        return str(ipaddress.IPv4Network(str(value), strict=True))
    except ValueError:
        raise Invalid(
            f"Invalid value for field '{field_name}': '{value}'. Invalid IPCidrRange."
        ) from None


class NetworkMixin(ProjectBase):
    """networks, subnetworks, routes and firewalls, and internal address allocation."""

    #: Internal addresses in use, per subnetwork (or legacy network) link.
    used_addresses: dict[str, set[ipaddress.IPv4Address]]
    #: Per the same link, an address below which none is free (an index: the lowest free
    #: host is looked for from there, not from the start of a /16 at each instance).
    free_from: dict[str, int]

    def seed_network(self) -> None:
        self.used_addresses = {}
        self.free_from = {}
        name = self.settings.network
        network = Resource(
            self.project,
            "global",
            "networks",
            self._network_body(name, auto=True, description="Default network for the project"),
            state="live",
        )
        self.collection("global", "networks")[name] = network
        for region, (_zones, range_) in REGIONS.items():
            subnet = Resource(
                self.project,
                f"regions/{region}",
                "subnetworks",
                self._subnetwork_body(name, network.link, range_, region),
                state="live",
            )
            self.collection(subnet.scope, "subnetworks")[name] = subnet
            self._system_route(
                f"default-route-{new_id()[:16]}",
                network.link,
                range_,
                description=f"Default local route to the subnetwork {range_}.",
                nextHopNetwork=network.link,
                priority=0,
                routeType="SUBNET",
            )
        self._system_route(
            f"default-route-{new_id()[:16]}",
            network.link,
            "0.0.0.0/0",
            description="Default route to the Internet.",
            nextHopGateway=Link(f"projects/{self.project}/{INTERNET_GATEWAY}"),
            priority=1000,
        )

    def _system_route(self, name: str, network: Link, dest: str, **fields: Any) -> None:
        body: dict[str, Any] = {
            "kind": "compute#route",
            "id": new_id(),
            "creationTimestamp": timestamp(self.clock()),
            "name": name,
            "network": network,
            "destRange": dest,
            "routeType": "STATIC",
            **fields,
        }
        route = Resource(self.project, "global", "routes", body, state="live")
        body["selfLink"] = route.link
        self.collection("global", "routes")[name] = route

    def _network_body(self, name: str, *, auto: bool, description: str = "") -> dict[str, Any]:
        return {
            "kind": "compute#network",
            "id": new_id(),
            "creationTimestamp": timestamp(self.clock()),
            "name": name,
            "description": description,
            "autoCreateSubnetworks": auto,
            "routingConfig": {"routingMode": "REGIONAL"},
            "mtu": 1460,
            "networkFirewallPolicyEnforcementOrder": "AFTER_CLASSIC_FIREWALL",
            "selfLink": Link(f"projects/{self.project}/global/networks/{name}"),
        }

    def _subnetwork_body(
        self, name: str, network: Link, range_: str, region: str, description: str = ""
    ) -> dict[str, Any]:
        gateway = ipaddress.IPv4Network(range_).network_address + 1
        return {
            "kind": "compute#subnetwork",
            "id": new_id(),
            "creationTimestamp": timestamp(self.clock()),
            "name": name,
            "description": description,
            "network": network,
            "ipCidrRange": range_,
            "gatewayAddress": str(gateway),
            "region": Link(f"projects/{self.project}/regions/{region}"),
            "privateIpGoogleAccess": False,
            "purpose": "PRIVATE",
            "stackType": "IPV4_ONLY",
            "fingerprint": new_id()[:11] + "=",
            "selfLink": Link(f"projects/{self.project}/regions/{region}/subnetworks/{name}"),
        }

    # -- views -----------------------------------------------------------------------------

    def view(self, resource: Resource) -> dict[str, Any]:
        body = super().view(resource)
        if resource.collection == "networks" and "IPv4Range" not in body:
            body["subnetworks"] = [
                subnet.link
                for subnet in self.every("subnetworks")
                if subnet.body["network"] == resource.link
            ]
        if resource.collection == "routes":
            warnings = self._route_warnings(resource)
            if warnings:
                body["warnings"] = warnings
        return body

    def _route_warnings(self, route: Resource) -> list[dict[str, Any]]:
        target = route.body.get("nextHopInstance")
        if not target:
            return []
        instance = self.find_link(target)
        if instance is None:
            code, message = (
                "NEXT_HOP_INSTANCE_NOT_FOUND",
                f"Next hop instance '{target}' does not exist.",
            )
        elif not instance.body.get("canIpForward"):
            code, message = (
                "NEXT_HOP_CANNOT_IP_FORWARD",
                f"Next hop instance '{target}' cannot ip forward.",
            )
        else:
            return []
        return [{"code": code, "message": message, "data": [{"key": "instance", "value": target}]}]

    # -- networks --------------------------------------------------------------------------

    def insert_network(self, body: dict[str, Any]) -> Operation:
        name = check_name(body.get("name"))
        legacy_range = body.get("IPv4Range")
        auto = body.get("autoCreateSubnetworks")
        if legacy_range is not None and auto is not None:
            raise Invalid(
                "Invalid value for field 'resource.IPv4Range': "
                f"'{legacy_range}'. IPv4Range cannot be set with autoCreateSubnetworks."
            )
        if legacy_range is None and auto is None:
            raise Invalid(
                "Invalid value for field 'resource.autoCreateSubnetworks': ''. "
                "Legacy networks need IPv4Range; set autoCreateSubnetworks for a VPC network."
            )
        stored = self._network_body(name, auto=bool(auto), description=body.get("description", ""))
        del stored["kind"], stored["id"], stored["creationTimestamp"], stored["selfLink"]
        if legacy_range is not None:
            range_ = cidr(legacy_range, "resource.IPv4Range")
            del stored["autoCreateSubnetworks"]
            stored["IPv4Range"] = range_
            stored["gatewayIPv4"] = str(ipaddress.IPv4Network(range_).network_address + 1)
        if "routingConfig" in body:
            stored["routingConfig"] = dict(body["routingConfig"])
        if "mtu" in body:
            stored["mtu"] = int(body["mtu"])
        network_link = Link(self.path("global", "networks", name))

        def created() -> None:
            if auto:
                for region, (_zones, range_) in REGIONS.items():
                    subnet = Resource(
                        self.project,
                        f"regions/{region}",
                        "subnetworks",
                        self._subnetwork_body(name, network_link, range_, region),
                        state="live",
                    )
                    self.collection(subnet.scope, "subnetworks")[name] = subnet

        return self.create("global", "networks", stored, kind="compute#network", on_done=created)

    def delete_network(self, name: str) -> Operation:
        network = self.find("global", "networks", name)
        link = network.link
        users = [item for item in self.every("instances") if self._uses_network(item, link)]
        users += [item for item in self.every("firewalls") if item.body.get("network") == link]
        users += [
            item
            for item in self.every("routes")
            if item.body.get("network") == link
            and not item.body.get("nextHopNetwork")
            and not item.body.get("nextHopGateway")
        ]
        if not network.body.get("autoCreateSubnetworks"):
            users += [s for s in self.every("subnetworks") if s.body["network"] == link]
        if users:
            raise ResourceInUse(
                f"The network resource '{network.path}' is already being used by '{users[0].path}'"
            )

        def gone() -> None:
            # Its auto subnetworks and system routes go with it, as on GCE.
            for (_scope, collection), items in list(self.resources.items()):
                if collection in ("subnetworks", "routes"):
                    for key, item in list(items.items()):
                        if item.body.get("network") == link:
                            del items[key]
                            self.used_addresses.pop(item.path, None)
                            self.free_from.pop(item.path, None)

        return self.delete(network, on_done=gone)

    # -- subnetworks -----------------------------------------------------------------------

    def insert_subnetwork(self, region: str, body: dict[str, Any]) -> Operation:
        self.find("", "regions", region)
        name = check_name(body.get("name"))
        network_link = reference(body.get("network"), self.project, "resource.network", "networks")
        network = self.require_link(network_link)
        if "IPv4Range" in network.body:
            raise Invalid(
                f"Invalid value for field 'resource.network': '{body['network']}'. "
                "Legacy networks cannot have subnetworks."
            )
        range_ = cidr(body.get("ipCidrRange"), "resource.ipCidrRange")
        new = ipaddress.IPv4Network(range_)
        for other in self.every("subnetworks"):
            if other.body["network"] == network_link and new.overlaps(
                ipaddress.IPv4Network(other.body["ipCidrRange"])
            ):
                raise Invalid(
                    f"Invalid IPCidrRange: {range_} conflicts with existing subnetwork "
                    f"'{other.name}' in region '{region}'."
                )
        stored = self._subnetwork_body(
            name, network_link, range_, region, body.get("description", "")
        )
        for key in ("kind", "id", "creationTimestamp", "selfLink"):
            del stored[key]
        if "privateIpGoogleAccess" in body:
            stored["privateIpGoogleAccess"] = bool(body["privateIpGoogleAccess"])
        stored.update(
            ipv6.subnetwork_fields(body, self.path(f"regions/{region}", "subnetworks", name))
        )
        secondary = secondary_ranges(stored, body.get("secondaryIpRanges"))
        if secondary:
            stored["secondaryIpRanges"] = secondary
        return self.create(f"regions/{region}", "subnetworks", stored, kind="compute#subnetwork")

    def delete_subnetwork(self, region: str, name: str) -> Operation:
        subnet = self.find(f"regions/{region}", "subnetworks", name)
        for instance in self.every("instances"):
            for nic in instance.body.get("networkInterfaces", []):
                if nic.get("subnetwork") == subnet.link:
                    raise ResourceInUse(
                        f"The subnetwork resource '{subnet.path}' is already being used by "
                        f"'{instance.path}'"
                    )

        def gone() -> None:
            self.used_addresses.pop(subnet.path, None)
            self.free_from.pop(subnet.path, None)

        return self.delete(subnet, on_done=gone)

    def allocate_internal(self, pool: Resource, requested: str | None) -> str:
        """An internal address in a subnetwork (or legacy network): ``requested`` when free
        and inside the range, else the lowest free host."""
        range_ = ipaddress.IPv4Network(
            pool.body.get("ipCidrRange") or pool.body.get("IPv4Range") or ""
        )
        used = self.used_addresses.setdefault(pool.path, set())
        if requested is not None:
            try:
                address = ipaddress.IPv4Address(requested)
            except ValueError:
                address = None
            if address is None or address not in range_:
                raise Invalid(
                    f"Invalid value for field 'resource.networkInterfaces[0].networkIP': "
                    f"'{requested}'. Requested internal IP is outside the subnetwork "
                    f"CIDR range."
                )
            if address in used:
                raise Invalid(f"IP '{requested}' is already being used by another resource.")
            used.add(address)
            return str(address)
        # .0 is the network, .1 the gateway, and GCE keeps the last two of each range.
        first = int(range_.network_address)
        start = max(self.free_from.get(pool.path, 0) - first, 2)
        for offset in range(start, range_.num_addresses - 2):
            address = ipaddress.IPv4Address(first + offset)
            if address not in used:
                used.add(address)
                self.free_from[pool.path] = first + offset + 1
                return str(address)
        raise OperationFailure(
            "IP_SPACE_EXHAUSTED", f"The subnetwork '{pool.path}' has no free address.", 400
        )

    def release_internal(self, pool_link: str, address: str) -> None:
        freed = ipaddress.IPv4Address(address)
        self.used_addresses.get(pool_link, set()).discard(freed)
        if pool_link in self.free_from:
            self.free_from[pool_link] = min(self.free_from[pool_link], int(freed))

    # -- routes ----------------------------------------------------------------------------

    def insert_route(self, body: dict[str, Any]) -> Operation:
        check_name(body.get("name"))
        network_link = reference(body.get("network"), self.project, "resource.network", "networks")
        self.require_link(network_link)
        dest = cidr(body.get("destRange"), "resource.destRange")
        hops = [hop for hop in NEXT_HOPS if body.get(hop)]
        if len(hops) != 1:
            raise Invalid(
                "Invalid value for field 'resource': ''. "
                "Exactly one of the next hop fields must be specified."
            )
        if body.get("priority") is None:
            # The discovery document marks it required for routes.insert.
            raise Required("resource.priority")
        priority = int(body["priority"])
        if not 0 <= priority <= 65535:
            raise Invalid(f"Invalid value for field 'resource.priority': '{priority}'.")
        stored: dict[str, Any] = {
            "name": body["name"],
            "description": body.get("description", ""),
            "network": network_link,
            "destRange": dest,
            "priority": priority,
            "routeType": "STATIC",
        }
        if body.get("tags"):
            stored["tags"] = [str(tag) for tag in body["tags"]]
        hop = hops[0]
        target: Link | None = None
        if hop == "nextHopInstance":
            target = reference(body[hop], self.project, "resource.nextHopInstance", "instances")
            stored[hop] = target
        elif hop == "nextHopGateway":
            stored[hop] = reference(body[hop], self.project, "resource.nextHopGateway", "gateways")
        elif hop == "nextHopNetwork":
            raise Invalid(
                "Invalid value for field 'resource.nextHopNetwork': routes to a "
                "network are created by GCE for subnetworks only."
            )
        else:
            stored[hop] = body[hop]

        def check_target() -> None:
            # GCE resolves the next hop when the operation runs: a missing instance fails it.
            if target is not None and self.find_link(target) is None:
                raise OperationFailure(
                    "RESOURCE_NOT_FOUND", f"The resource '{target}' was not found", 404
                )

        return self.create(
            "global",
            "routes",
            stored,
            kind="compute#route",
            running_seconds=self.settings.route_running_seconds,
            on_done=check_target,
        )

    def delete_route(self, name: str) -> Operation:
        route = self.find("global", "routes", name)
        if route.body.get("nextHopNetwork"):
            raise Invalid(
                f"The local route '{route.path}' cannot be deleted: it belongs to a subnetwork."
            )
        return self.delete(route, running_seconds=self.settings.route_running_seconds)

    # -- firewalls -------------------------------------------------------------------------

    def _firewall_fields(self, body: dict[str, Any], *, partial: bool) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for key in FIREWALL_INPUT:
            if key in body:
                fields[key] = body[key]
        if "network" in fields:
            fields["network"] = reference(
                fields["network"], self.project, "resource.network", "networks"
            )
            self.require_link(fields["network"])
        for key in ("sourceRanges", "destinationRanges"):
            for value in fields.get(key, []):
                try:
                    ipaddress.ip_network(value, strict=False)
                except ValueError:
                    raise Invalid(f"Invalid value for field 'resource.{key}': '{value}'.") from None
        for key in ("allowed", "denied"):
            for rule in fields.get(key, []):
                if not rule.get("IPProtocol"):
                    raise Invalid(f"Required field 'resource.{key}[0].IPProtocol' not specified")
        direction = fields.get("direction", "INGRESS")
        if direction not in ("INGRESS", "EGRESS"):
            raise Invalid(f"Invalid value for field 'resource.direction': '{direction}'.")
        if not partial:
            if not fields.get("allowed") and not fields.get("denied"):
                raise Invalid(
                    "Invalid value for field 'resource': ''. "
                    "A firewall must have an allowed or a denied rule."
                )
            fields.setdefault(
                "network", Link(self.path("global", "networks", self.settings.network))
            )
            self.require_link(fields["network"])
            fields.setdefault("priority", 1000)
            fields.setdefault("direction", "INGRESS")
            fields.setdefault("disabled", False)
            fields.setdefault("logConfig", {"enable": False})
            fields.setdefault("description", "")
        return fields

    def insert_firewall(self, body: dict[str, Any]) -> Operation:
        stored = {
            "name": check_name(body.get("name")),
            **self._firewall_fields(body, partial=False),
        }
        return self.create("global", "firewalls", stored, kind="compute#firewall")

    def change_firewall(self, name: str, body: dict[str, Any], *, replace: bool) -> Operation:
        """``firewalls.update`` (``replace``: every mutable field from ``body``) or ``patch``."""
        firewall = self.find("global", "firewalls", name)
        if not body.get("name"):
            # Required for update and patch alike, as the discovery document says.
            raise Required("resource.name")
        if body["name"] != name:
            raise Invalid(f"Invalid value for field 'resource.name': '{body['name']}'.")
        fields = self._firewall_fields(
            {"network": firewall.body["network"], **body} if replace else body,
            partial=not replace,
        )
        if fields.get("network", firewall.body["network"]) != firewall.body["network"]:
            raise Invalid(
                "Invalid value for field 'resource.network': the network of a "
                "firewall cannot change."
            )

        def apply() -> None:
            if replace:
                for key in FIREWALL_INPUT:
                    firewall.body.pop(key, None)
            firewall.body.update(fields)

        return self.modify(firewall, "update" if replace else "patch", apply)

    def delete_firewall(self, name: str) -> Operation:
        return self.delete(self.find("global", "firewalls", name))

    @staticmethod
    def _uses_network(instance: Resource, link: str) -> bool:
        return any(nic.get("network") == link for nic in instance.body.get("networkInterfaces", []))

    def require_network(self, link: str) -> Resource:
        found = self.find_link(link)
        if found is None or found.collection != "networks":
            raise NotFound(link)
        return found
