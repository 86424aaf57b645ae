"""The legacy network load balancer's parts: addresses, forwarding rules, target pools and
HTTP health checks.

As on GCE, a resource still referred to cannot be deleted (a target pool behind a forwarding
rule, a health check on a target pool, an address in use), a target pool has at most one health
check, and a forwarding rule without ``IPAddress`` gets an ephemeral one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polyccm_gce_emulator.errors import Invalid, ResourceInUse
from polyccm_gce_emulator.models.base import ProjectBase, Resource, check_name, reference
from polyccm_gce_emulator.models.common import Link, fingerprint
from polyccm_gce_emulator.models.geography import GeographyMixin
from polyccm_gce_emulator.models.network import NetworkMixin
from polyccm_gce_emulator.models.operations import Operation

_PORT_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
HEALTH_CHECK_INPUT = (
    "description",
    "host",
    "requestPath",
    "port",
    "checkIntervalSec",
    "timeoutSec",
    "unhealthyThreshold",
    "healthyThreshold",
)
HEALTH_CHECK_DEFAULTS: dict[str, Any] = {
    "description": "",
    "requestPath": "/",
    "port": 80,
    "checkIntervalSec": 5,
    "timeoutSec": 5,
    "unhealthyThreshold": 2,
    "healthyThreshold": 2,
}


@dataclass(frozen=True)
class HealthCheckKind:
    """A health-check collection and the ``kind`` of its resources."""

    collection: str
    kind: str


HTTP_HEALTH_CHECKS = HealthCheckKind("httpHealthChecks", "compute#httpHealthCheck")
HEALTH_CHECKS = HealthCheckKind("healthChecks", "compute#healthCheck")


def in_use(resource: Resource, user: Resource) -> ResourceInUse:
    singular = resource.collection.removesuffix(
        "es" if resource.collection.endswith("sses") else "s"
    )
    kind = re.sub(r"(?<!^)(?=[A-Z])", "_", singular).lower()
    return ResourceInUse(
        f"The {kind} resource '{resource.path}' is already being used by '{user.path}'"
    )


class LoadBalancingMixin(GeographyMixin, NetworkMixin, ProjectBase):
    """addresses, forwardingRules, targetPools and httpHealthChecks."""

    # -- addresses -------------------------------------------------------------------------

    def insert_address(self, region: str, body: dict[str, Any]) -> Operation:
        self.region(region)
        name = check_name(body.get("name"))
        address_type = body.get("addressType", "EXTERNAL")
        stored: dict[str, Any] = {
            "name": name,
            "description": body.get("description", ""),
            "addressType": address_type,
            "status": "RESERVED",
            "region": Link(f"projects/{self.project}/regions/{region}"),
            "labelFingerprint": fingerprint({}),
        }
        if address_type == "EXTERNAL":
            stored["networkTier"] = body.get("networkTier", "PREMIUM")
        elif address_type != "INTERNAL":
            raise Invalid(f"Invalid value for field 'resource.addressType': '{address_type}'.")
        requested = body.get("address")
        if address_type == "INTERNAL":
            subnet = self.require_link(
                reference(
                    body.get("subnetwork"), self.project, "resource.subnetwork", "subnetworks"
                )
            )
            stored["subnetwork"] = subnet.link
            stored["purpose"] = "GCE_ENDPOINT"
            self._check_quota("addresses")
            holder = self._ephemeral_holder(region, str(requested)) if requested else None
            if holder is not None:
                # Promotion, as for an external IP below: upstream's internal load balancer
                # reserves its rule's IP as <lb> on every sync (cloud-provider-gcp v36.3.8,
                # gce_loadbalancer_internal.go:167-175, gce_address_manager.go
                # HoldAddress).
                stored.update(address=str(requested), status="IN_USE", users=[holder.link])
            else:
                stored["address"] = self.allocate_internal(subnet, requested)
        else:
            self._check_quota("addresses")
            holder = self._ephemeral_holder(region, str(requested)) if requested else None
            if requested and holder is None:
                raise Invalid(
                    f"Invalid value for field 'resource.address': '{requested}'. Specific "
                    "external addresses cannot be reserved in this project."
                )
            if holder is not None:
                # Promotion: GCE reserves the ephemeral IP a forwarding rule holds as this
                # static address, in use by that rule. Upstream's GCE CCM does this on every
                # sync of an existing load balancer to keep its IP across a re-created rule
                # (cloud-provider-gcp v36.3.8, gce_loadbalancer_external.go:1424-1441
                # ensureStaticIP, called at :201 with the rule's IP).
                stored.update(address=str(requested), status="IN_USE", users=[holder.link])
            else:
                stored["address"] = self.allocate_external()
        operation = self.create(f"regions/{region}", "addresses", stored, kind="compute#address")
        resource = self.collection(f"regions/{region}", "addresses")[name]
        if stored.get("status") == "IN_USE":
            operation.on_fail = lambda: None  # the rule keeps its IP
        else:
            operation.on_fail = lambda: self._release_address(resource)
        return operation

    def _ephemeral_holder(self, region: str, address: str) -> Resource | None:
        """The forwarding rule in ``region`` holding ``address`` as an ephemeral IP (no static
        address has it), if any."""
        if any(
            a.body.get("address") == address and a.state != "deleting"
            for a in self.every("addresses")
        ):
            return None
        for rule in self.every("forwardingRules"):
            if (
                rule.scope == f"regions/{region}"
                and rule.body.get("IPAddress") == address
                and rule.state != "deleting"
            ):
                return rule
        return None

    def _release_address(self, address: Resource) -> None:
        if address.body["addressType"] == "EXTERNAL":
            self.release_external(address.body["address"])
        else:
            self.release_internal(address.body["subnetwork"], address.body["address"])

    def delete_address(self, region: str, name: str) -> Operation:
        address = self.find(f"regions/{region}", "addresses", name)
        user = None
        if address.body.get("status") == "IN_USE":
            user = self.find_link(address.body["users"][0])
        if user is None:
            return self.delete(address, on_done=lambda: self._release_address(address))
        if user.collection == "forwardingRules":
            # GCE releases the reservation and the rule keeps the IP as an ephemeral one: the
            # address stays out of the pool until the rule goes (its deletion finds no static
            # address and gives the IP back). External and internal alike: upstream's internal
            # load balancer releases its <lb> address after making the rule on every sync
            # (cloud-provider-gcp v36.3.8 gce_loadbalancer_internal.go:176-183,
            # gce_address_manager.go:99-108).
            return self.delete(address)
        raise in_use(address, user)

    # -- HTTP health checks ----------------------------------------------------------------

    def _health_check_fields(self, body: dict[str, Any]) -> dict[str, Any]:
        fields = {key: body[key] for key in HEALTH_CHECK_INPUT if key in body}
        for key in (
            "port",
            "checkIntervalSec",
            "timeoutSec",
            "unhealthyThreshold",
            "healthyThreshold",
        ):
            if key in fields:
                try:
                    fields[key] = int(fields[key])
                except (TypeError, ValueError):
                    raise Invalid(
                        f"Invalid value for field 'resource.{key}': '{fields[key]}'."
                    ) from None
        port = fields.get("port")
        if port is not None and not 1 <= port <= 65535:
            raise Invalid(f"Invalid value for field 'resource.port': '{port}'.")
        return fields

    def insert_http_health_check(self, body: dict[str, Any]) -> Operation:
        return self.insert_any_health_check(
            HTTP_HEALTH_CHECKS, body, defaults=HEALTH_CHECK_DEFAULTS,
            fields_of=self._health_check_fields,
        )  # fmt: skip

    def change_http_health_check(
        self, name: str, body: dict[str, Any], *, replace: bool
    ) -> Operation:
        return self.change_any_health_check(
            HTTP_HEALTH_CHECKS, name, body, replace=replace, inputs=HEALTH_CHECK_INPUT,
            defaults=HEALTH_CHECK_DEFAULTS, fields_of=self._health_check_fields,
        )  # fmt: skip

    def delete_http_health_check(self, name: str) -> Operation:
        return self.delete_any_health_check(HTTP_HEALTH_CHECKS, name, users="targetPools")

    # -- both kinds of health check (httpHealthChecks here, healthChecks: models.internal) -

    def insert_any_health_check(
        self,
        kind: HealthCheckKind,
        body: dict[str, Any],
        *,
        defaults: Mapping[str, Any],
        fields_of: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> Operation:
        stored = {"name": check_name(body.get("name")), **defaults, **fields_of(body)}
        return self.create("global", kind.collection, stored, kind=kind.kind)

    def change_any_health_check(
        self,
        kind: HealthCheckKind,
        name: str,
        body: dict[str, Any],
        *,
        replace: bool,
        inputs: Sequence[str],
        defaults: Mapping[str, Any],
        fields_of: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> Operation:
        """``update`` (``replace``: the body is the whole check) or ``patch`` (the body over
        the stored check); the result is validated whole and stored over the defaults."""
        check = self.find("global", kind.collection, name)
        if "name" in body and body["name"] != name:
            raise Invalid(f"Invalid value for field 'resource.name': '{body['name']}'.")
        fields = fields_of(body if replace else {**check.body, **body})

        def apply() -> None:
            for key in inputs:
                check.body.pop(key, None)
            check.body.update(defaults)
            check.body.update(fields)

        return self.modify(check, "update" if replace else "patch", apply)

    def delete_any_health_check(self, kind: HealthCheckKind, name: str, *, users: str) -> Operation:
        """Delete, unless a resource of the collection ``users`` names it in its
        ``healthChecks`` (400 resourceInUseByAnotherResource)."""
        check = self.find("global", kind.collection, name)
        for user in self.every(users):
            if check.link in user.body.get("healthChecks", []):
                raise in_use(check, user)
        return self.delete(check)

    # -- target pools ----------------------------------------------------------------------

    def _instance_links(self, items: list[Any], field_name: str) -> list[Link]:
        links = []
        for index, item in enumerate(items):
            value = item.get("instance") if isinstance(item, dict) else item
            link = reference(value, self.project, f"{field_name}[{index}]", "instances")
            self.require_link(link)
            links.append(link)
        return links

    def _health_check_links(self, items: list[Any], field_name: str) -> list[Link]:
        links = []
        for index, item in enumerate(items):
            value = item.get("healthCheck") if isinstance(item, dict) else item
            link = reference(value, self.project, f"{field_name}[{index}]", "httpHealthChecks")
            self.require_link(link)
            links.append(link)
        if len(links) > 1:
            raise Invalid(
                f"Invalid value for field '{field_name}': a target pool can have at most one "
                "health check."
            )
        return links

    def insert_target_pool(self, region: str, body: dict[str, Any]) -> Operation:
        self.region(region)
        stored: dict[str, Any] = {
            "name": check_name(body.get("name")),
            "description": body.get("description", ""),
            "region": Link(f"projects/{self.project}/regions/{region}"),
            "sessionAffinity": body.get("sessionAffinity", "NONE"),
        }
        instances = self._instance_links(body.get("instances", []), "resource.instances")
        if instances:
            stored["instances"] = list(dict.fromkeys(instances))
        checks = self._health_check_links(body.get("healthChecks", []), "resource.healthChecks")
        if checks:
            stored["healthChecks"] = checks
        if "failoverRatio" in body:
            stored["failoverRatio"] = float(body["failoverRatio"])
        return self.create(f"regions/{region}", "targetPools", stored, kind="compute#targetPool")

    def target_pool(self, region: str, name: str) -> Resource:
        self.region(region)
        return self.find(f"regions/{region}", "targetPools", name)

    def add_instances(self, region: str, name: str, body: dict[str, Any]) -> Operation:
        pool = self.target_pool(region, name)
        links = self._instance_links(body.get("instances", []), "instances")

        def apply() -> None:
            pool.body["instances"] = list(dict.fromkeys([*pool.body.get("instances", []), *links]))

        return self.modify(pool, "addInstance", apply)

    def remove_instances(self, region: str, name: str, body: dict[str, Any]) -> Operation:
        pool = self.target_pool(region, name)
        links = {
            reference(item.get("instance"), self.project, f"instances[{index}]", "instances")
            for index, item in enumerate(body.get("instances", []))
        }

        def apply() -> None:
            kept = [link for link in pool.body.get("instances", []) if link not in links]
            if kept:
                pool.body["instances"] = kept
            else:
                pool.body.pop("instances", None)

        return self.modify(pool, "removeInstance", apply)

    def add_health_check(self, region: str, name: str, body: dict[str, Any]) -> Operation:
        pool = self.target_pool(region, name)
        links = self._health_check_links(body.get("healthChecks", []), "healthChecks")
        merged = list(dict.fromkeys([*pool.body.get("healthChecks", []), *links]))
        if len(merged) > 1:
            raise Invalid(
                "Invalid value for field 'healthChecks': a target pool can have at most one "
                "health check."
            )

        def apply() -> None:
            pool.body["healthChecks"] = merged

        return self.modify(pool, "addHealthCheck", apply)

    def remove_health_check(self, region: str, name: str, body: dict[str, Any]) -> Operation:
        pool = self.target_pool(region, name)
        links = {
            reference(
                item.get("healthCheck"), self.project, f"healthChecks[{index}]", "httpHealthChecks"
            )
            for index, item in enumerate(body.get("healthChecks", []))
        }

        def apply() -> None:
            kept = [link for link in pool.body.get("healthChecks", []) if link not in links]
            if kept:
                pool.body["healthChecks"] = kept
            else:
                pool.body.pop("healthChecks", None)

        return self.modify(pool, "removeHealthCheck", apply)

    def delete_target_pool(self, region: str, name: str) -> Operation:
        pool = self.target_pool(region, name)
        for rule in self.every("forwardingRules"):
            if rule.body.get("target") == pool.link:
                raise in_use(pool, rule)
        return self.delete(pool)

    # -- forwarding rules ------------------------------------------------------------------

    def insert_forwarding_rule(self, region: str, body: dict[str, Any]) -> Operation:
        self.region(region)
        name = check_name(body.get("name"))
        scheme = body.get("loadBalancingScheme", "EXTERNAL")
        if scheme not in ("EXTERNAL", "INTERNAL"):
            raise Invalid(f"Invalid value for field 'resource.loadBalancingScheme': '{scheme}'.")
        protocol = body.get("IPProtocol", "TCP")
        if protocol not in ("TCP", "UDP", "ESP", "AH", "SCTP", "ICMP", "L3_DEFAULT"):
            raise Invalid(f"Invalid value for field 'resource.IPProtocol': '{protocol}'.")
        stored: dict[str, Any] = {
            "name": name,
            "description": body.get("description", ""),
            "region": Link(f"projects/{self.project}/regions/{region}"),
            "IPProtocol": protocol,
            "loadBalancingScheme": scheme,
            "networkTier": body.get("networkTier", "PREMIUM"),
            "fingerprint": fingerprint([name, region]),
            "labelFingerprint": fingerprint({}),
        }
        subnet: Resource | None = None
        if scheme == "INTERNAL":
            subnet = self._internal_rule_target(region, body, stored)
        else:
            target = reference(body.get("target"), self.project, "resource.target", "targetPools")
            pool = self.require_link(target)
            if pool.scope != f"regions/{region}":
                raise Invalid(
                    f"Invalid value for field 'resource.target': '{body['target']}'. The target "
                    f"pool must be in region '{region}'."
                )
            stored["target"] = target
        if body.get("portRange"):
            stored["portRange"] = self._port_range(str(body["portRange"]))
        if body.get("ports"):
            stored["ports"] = [str(port) for port in body["ports"]]
        static: Resource | None = None
        requested = body.get("IPAddress")
        if requested and (subnet is None or self._reserved_or_none(region, str(requested))):
            static = self._reserved(region, str(requested))
            stored["IPAddress"] = static.body["address"]
        self._check_quota("forwardingRules")
        if static is None and subnet is not None:
            stored["IPAddress"] = self.allocate_internal(subnet, requested or None)
        elif static is None:
            stored["IPAddress"] = self.allocate_external()
        operation = self.create(
            f"regions/{region}", "forwardingRules", stored, kind="compute#forwardingRule"
        )
        rule = self.collection(f"regions/{region}", "forwardingRules")[name]
        if static is not None:
            static.body.update(status="IN_USE", users=[rule.link])
            operation.on_fail = lambda: self._unuse(static)
        elif subnet is not None:
            operation.on_fail = lambda: self.release_internal(subnet.path, stored["IPAddress"])
        else:
            operation.on_fail = lambda: self.release_external(stored["IPAddress"])
        return operation

    def _internal_rule_target(
        self, region: str, body: dict[str, Any], stored: dict[str, Any]
    ) -> Resource:
        """An internal rule's backend service, network and subnetwork (the subnetwork its
        address comes from: the one named, else the network's in the region), and its port
        fields, checked as GCE checks them; returns the subnetwork."""
        if body.get("target"):
            raise Invalid(
                "Invalid value for field 'resource.target': an INTERNAL forwarding rule sends "
                "to a backend service."
            )
        link = reference(
            body.get("backendService"), self.project, "resource.backendService", "backendServices"
        )
        service = self.require_link(link)
        if service.scope != f"regions/{region}" or service.body.get("loadBalancingScheme") != (
            "INTERNAL"
        ):
            raise Invalid(
                f"Invalid value for field 'resource.backendService': '{body['backendService']}'. "
                f"The backend service must be an INTERNAL one in region '{region}'."
            )
        if service.body.get("protocol") != stored["IPProtocol"]:
            raise Invalid(
                f"Invalid value for field 'resource.IPProtocol': '{stored['IPProtocol']}'. "
                "It must match the backend service's protocol."
            )
        subnet: Resource | None = None
        if body.get("subnetwork"):
            subnet = self.require_link(
                reference(body["subnetwork"], self.project, "resource.subnetwork", "subnetworks")
            )
        network_link = (
            reference(body["network"], self.project, "resource.network", "networks")
            if body.get("network")
            else (Link(subnet.body["network"]) if subnet is not None else None)
        )
        if network_link is None:
            network_link = self.require_network(
                Link(f"projects/{self.project}/global/networks/default")
            ).link
        if subnet is None:
            subnet = next(
                (
                    s
                    for s in self.every("subnetworks")
                    if s.body["network"] == network_link and s.scope == f"regions/{region}"
                ),
                None,
            )
            if subnet is None:
                raise Invalid(
                    "Invalid value for field 'resource.subnetwork': ''. The network has no "
                    f"subnetwork in region '{region}'."
                )
        ports = body.get("ports") or []
        if body.get("allPorts") and ports:
            raise Invalid("Invalid value for field 'resource.ports': allPorts is set.")
        if len(ports) > 5:
            raise Invalid(
                "Invalid value for field 'resource.ports': at most 5 ports; use allPorts."
            )
        if not ports and not body.get("allPorts"):
            raise Invalid(
                "Invalid value for field 'resource.ports': ports or allPorts is required."
            )
        stored.update(backendService=link, network=network_link, subnetwork=subnet.link)
        if body.get("allPorts"):
            stored["allPorts"] = True
        if body.get("allowGlobalAccess"):
            stored["allowGlobalAccess"] = True
        return subnet

    def _reserved_or_none(self, region: str, requested: str) -> bool:
        return any(
            requested in (a.body.get("address"), a.path) or requested.endswith("/" + a.path)
            for a in self.every("addresses")
            if a.scope == f"regions/{region}"
        )

    def _reserved(self, region: str, requested: str) -> Resource:
        """The static address ``requested`` names (by address or URL), reserved and unused."""
        for address in self.every("addresses"):
            if requested in (address.body.get("address"), address.path) or requested.endswith(
                "/" + address.path
            ):
                if address.scope != f"regions/{region}":
                    break
                if address.body.get("status") != "RESERVED":
                    user = self.find_link(address.body.get("users", [""])[0])
                    if user is not None:
                        raise in_use(address, user)
                return address
        raise Invalid(
            f"Invalid value for field 'resource.IPAddress': '{requested}'. Specified IP address "
            f"is not reserved in region '{region}'."
        )

    @staticmethod
    def _unuse(address: Resource) -> None:
        address.body["status"] = "RESERVED"
        address.body.pop("users", None)

    @staticmethod
    def _port_range(value: str) -> str:
        match = _PORT_RANGE.fullmatch(value)
        if match is None:
            raise Invalid(f"Invalid value for field 'resource.portRange': '{value}'.")
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if not 1 <= low <= high <= 65535:
            raise Invalid(f"Invalid value for field 'resource.portRange': '{value}'.")
        return f"{low}-{high}"

    def delete_forwarding_rule(self, region: str, name: str) -> Operation:
        self.region(region)
        rule = self.find(f"regions/{region}", "forwardingRules", name)

        def gone() -> None:
            address = rule.body["IPAddress"]
            static = next(
                (
                    a
                    for a in self.every("addresses")
                    if a.body.get("address") == address and a.state != "deleting"
                ),
                None,
            )
            if static is not None:
                self._unuse(static)
            elif rule.body.get("subnetwork"):
                self.release_internal(rule.body["subnetwork"], address)
            else:
                self.release_external(address)

        return self.delete(rule, on_done=gone)
