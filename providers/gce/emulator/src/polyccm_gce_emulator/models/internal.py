"""The internal passthrough load balancer's parts: zonal unmanaged instance groups, health
checks (the ``healthChecks`` API, not the legacy ``httpHealthChecks``) and regional backend
services.

As on GCE, a resource still referred to cannot be deleted (an instance group behind a backend
service, a health check on one, a backend service behind a forwarding rule); an instance group
takes only instances of its own zone and gets its network from the first one added; a backend
service's update must carry its current fingerprint.
"""

from __future__ import annotations

from typing import Any

from polyccm_gce_emulator.errors import ConditionNotMet, Invalid, Required
from polyccm_gce_emulator.models.base import check_name, reference
from polyccm_gce_emulator.models.common import Link, fingerprint
from polyccm_gce_emulator.models.loadbalancing import (
    HEALTH_CHECKS,
    LoadBalancingMixin,
    in_use,
)
from polyccm_gce_emulator.models.operations import Operation

HEALTH_CHECK_V1_INPUT = (
    "description",
    "type",
    "checkIntervalSec",
    "timeoutSec",
    "unhealthyThreshold",
    "healthyThreshold",
    "httpHealthCheck",
    "httpsHealthCheck",
    "http2HealthCheck",
    "tcpHealthCheck",
    "sslHealthCheck",
    "grpcHealthCheck",
    "logConfig",
    "region",
)
_HEALTH_CHECK_V1_DEFAULTS: dict[str, Any] = {
    "description": "",
    "checkIntervalSec": 5,
    "timeoutSec": 5,
    "unhealthyThreshold": 2,
    "healthyThreshold": 2,
}
_PROTOCOL_FIELD = {
    "HTTP": "httpHealthCheck",
    "HTTPS": "httpsHealthCheck",
    "HTTP2": "http2HealthCheck",
    "TCP": "tcpHealthCheck",
    "SSL": "sslHealthCheck",
    "GRPC": "grpcHealthCheck",
}
BACKEND_SERVICE_INPUT = (
    "description",
    "backends",
    "healthChecks",
    "protocol",
    "sessionAffinity",
    "loadBalancingScheme",
    "timeoutSec",
    "connectionDraining",
    "network",
    "fingerprint",
    "region",
)
INSTANCE_GROUP_INPUT = ("description", "network", "subnetwork", "namedPorts", "zone")


class InternalLoadBalancingMixin(LoadBalancingMixin):
    """instanceGroups (zonal), healthChecks and regionBackendServices."""

    #: The instances of each unmanaged group, by the group's path, in the order added.
    group_members: dict[str, list[Link]]

    def view(self, resource: Any) -> dict[str, Any]:
        body = super().view(resource)
        if resource.collection == "instanceGroups":
            body["size"] = len(self._members(resource.path))
        return body

    def _members(self, path: str) -> list[Link]:
        if not hasattr(self, "group_members"):
            self.group_members = {}
        return self.group_members.setdefault(path, [])

    # -- instance groups -------------------------------------------------------------------

    def insert_instance_group(self, zone: str, body: dict[str, Any]) -> Operation:
        self.zone(zone)
        stored: dict[str, Any] = {
            "name": check_name(body.get("name")),
            "description": body.get("description", ""),
            "zone": Link(f"projects/{self.project}/zones/{zone}"),
            "fingerprint": fingerprint([body.get("name"), zone]),
        }
        if body.get("network"):
            link = reference(body["network"], self.project, "resource.network", "networks")
            stored["network"] = self.require_network(link).link
        if body.get("namedPorts"):
            stored["namedPorts"] = body["namedPorts"]
        operation = self.create(
            f"zones/{zone}", "instanceGroups", stored, kind="compute#instanceGroup"
        )
        self._members(self.path(f"zones/{zone}", "instanceGroups", stored["name"])).clear()
        return operation

    def instance_group(self, zone: str, name: str) -> Any:
        self.zone(zone)
        return self.find(f"zones/{zone}", "instanceGroups", name)

    def delete_instance_group(self, zone: str, name: str) -> Operation:
        group = self.instance_group(zone, name)
        for service in self.every("backendServices"):
            if any(b.get("group") == group.link for b in service.body.get("backends", [])):
                raise in_use(group, service)
        return self.delete(group, on_done=lambda: self._members(group.path).clear())

    def _group_instances(self, zone: str, items: list[Any], field_name: str) -> list[Link]:
        links = []
        for index, item in enumerate(items):
            value = item.get("instance") if isinstance(item, dict) else item
            link = reference(value, self.project, f"{field_name}[{index}].instance", "instances")
            instance = self.require_link(link)
            if instance.scope != f"zones/{zone}":
                raise Invalid(
                    f"Invalid value for field '{field_name}[{index}].instance': '{value}'. "
                    "Instance must be in the instance group's zone."
                )
            links.append(link)
        return links

    def add_group_instances(self, zone: str, name: str, body: dict[str, Any]) -> Operation:
        group = self.instance_group(zone, name)
        links = self._group_instances(zone, body.get("instances", []), "instances")
        members = self._members(group.path)
        for link in links:
            if link in members:
                raise Invalid(f"The resource '{link}' is already a member of '{group.path}'")

        def apply() -> None:
            members.extend(link for link in links if link not in members)
            if links and "network" not in group.body:
                nic = self.require_link(links[0]).body["networkInterfaces"][0]
                group.body["network"] = Link(nic["network"])
                if nic.get("subnetwork"):
                    group.body["subnetwork"] = Link(nic["subnetwork"])

        return self.modify(group, "addInstances", apply)

    def remove_group_instances(self, zone: str, name: str, body: dict[str, Any]) -> Operation:
        group = self.instance_group(zone, name)
        links = {
            reference(
                item.get("instance"), self.project, f"instances[{index}].instance", "instances"
            )
            for index, item in enumerate(body.get("instances", []))
        }
        members = self._members(group.path)

        def apply() -> None:
            members[:] = [link for link in members if link not in links]

        return self.modify(group, "removeInstances", apply)

    def group_instances(self, zone: str, name: str, state: str) -> list[dict[str, Any]]:
        """``listInstances``: each member with its status (``RUNNING`` only: the members
        running; ``ALL``: every one)."""
        if state not in ("ALL", "RUNNING"):
            raise Invalid(f"Invalid value for field 'instanceState': '{state}'.")
        group = self.instance_group(zone, name)
        shown = []
        for link in self._members(group.path):
            instance = self.find_link(link)
            status = instance.body.get("status", "RUNNING") if instance else "TERMINATED"
            if state == "ALL" or status == "RUNNING":
                shown.append({"instance": link, "status": status})
        return shown

    # -- health checks (v1) ----------------------------------------------------------------

    def _health_check_v1_fields(self, body: dict[str, Any]) -> dict[str, Any]:
        fields = {key: body[key] for key in HEALTH_CHECK_V1_INPUT if key in body}
        for key in ("checkIntervalSec", "timeoutSec", "unhealthyThreshold", "healthyThreshold"):
            if key in fields:
                try:
                    fields[key] = int(fields[key])
                except (TypeError, ValueError):
                    raise Invalid(
                        f"Invalid value for field 'resource.{key}': '{fields[key]}'."
                    ) from None
        kind = fields.get("type")
        if kind is None:
            raise Required("resource.type")
        field_name = _PROTOCOL_FIELD.get(str(kind))
        if field_name is None:
            raise Invalid(f"Invalid value for field 'resource.type': '{kind}'.")
        settings = dict(fields.get(field_name) or {})
        if "port" in settings:
            port = int(settings["port"])
            if not 1 <= port <= 65535:
                raise Invalid(f"Invalid value for field 'resource.{field_name}.port': '{port}'.")
            settings["port"] = port
        settings.setdefault("port", 443 if kind in ("HTTPS", "SSL") else 80)
        if kind in ("HTTP", "HTTPS", "HTTP2"):
            settings.setdefault("requestPath", "/")
        settings.setdefault("proxyHeader", "NONE")
        fields[field_name] = settings
        return fields

    def insert_health_check(self, body: dict[str, Any]) -> Operation:
        return self.insert_any_health_check(
            HEALTH_CHECKS, body, defaults=_HEALTH_CHECK_V1_DEFAULTS,
            fields_of=self._health_check_v1_fields,
        )  # fmt: skip

    def change_health_check(self, name: str, body: dict[str, Any], *, replace: bool) -> Operation:
        return self.change_any_health_check(
            HEALTH_CHECKS, name, body, replace=replace, inputs=HEALTH_CHECK_V1_INPUT,
            defaults=_HEALTH_CHECK_V1_DEFAULTS, fields_of=self._health_check_v1_fields,
        )  # fmt: skip

    def delete_health_check(self, name: str) -> Operation:
        return self.delete_any_health_check(HEALTH_CHECKS, name, users="backendServices")

    # -- regional backend services ---------------------------------------------------------

    def _backend_service_fields(self, region: str, body: dict[str, Any]) -> dict[str, Any]:
        scheme = body.get("loadBalancingScheme", "INTERNAL_MANAGED")
        if scheme not in ("INTERNAL", "EXTERNAL", "INTERNAL_MANAGED", "EXTERNAL_MANAGED"):
            raise Invalid(f"Invalid value for field 'resource.loadBalancingScheme': '{scheme}'.")
        protocol = body.get("protocol", "TCP" if scheme in ("INTERNAL", "EXTERNAL") else "HTTP")
        if protocol not in ("TCP", "UDP", "HTTP", "HTTPS", "HTTP2", "SSL", "GRPC", "UNSPECIFIED"):
            raise Invalid(f"Invalid value for field 'resource.protocol': '{protocol}'.")
        checks = []
        for index, value in enumerate(body.get("healthChecks", [])):
            link = reference(value, self.project, f"resource.healthChecks[{index}]", "healthChecks")
            self.require_link(link)
            checks.append(link)
        if len(checks) > 1:
            raise Invalid(
                "Invalid value for field 'resource.healthChecks': a backend service can have "
                "at most one health check."
            )
        backends = []
        for index, backend in enumerate(body.get("backends", [])):
            group = reference(
                backend.get("group"),
                self.project,
                f"resource.backends[{index}].group",
                "instanceGroups",
            )
            found = self.require_link(group)
            if found.scope.removeprefix("zones/").rsplit("-", 1)[0] != region:
                raise Invalid(
                    f"Invalid value for field 'resource.backends[{index}].group': '{group}'. "
                    f"The instance group must be in region '{region}'."
                )
            backends.append(
                {
                    **backend,
                    "group": group,
                    "balancingMode": backend.get("balancingMode") or "CONNECTION",
                }
            )
        fields: dict[str, Any] = {
            "description": body.get("description", ""),
            "protocol": protocol,
            "loadBalancingScheme": scheme,
            "sessionAffinity": body.get("sessionAffinity", "NONE"),
            "timeoutSec": int(body.get("timeoutSec", 30)),
            "connectionDraining": body.get("connectionDraining") or {"drainingTimeoutSec": 0},
        }
        if checks:
            fields["healthChecks"] = checks
        if backends:
            fields["backends"] = backends
        if body.get("network"):
            fields["network"] = reference(
                body["network"], self.project, "resource.network", "networks"
            )
        return fields

    def insert_region_backend_service(self, region: str, body: dict[str, Any]) -> Operation:
        self.region(region)
        name = check_name(body.get("name"))
        stored = {
            "name": name,
            "region": Link(f"projects/{self.project}/regions/{region}"),
            **self._backend_service_fields(region, body),
        }
        stored["fingerprint"] = fingerprint([name, stored])
        return self.create(
            f"regions/{region}", "backendServices", stored, kind="compute#backendService"
        )

    def region_backend_service(self, region: str, name: str) -> Any:
        self.region(region)
        return self.find(f"regions/{region}", "backendServices", name)

    def update_region_backend_service(
        self, region: str, name: str, body: dict[str, Any]
    ) -> Operation:
        service = self.region_backend_service(region, name)
        if "name" in body and body["name"] != name:
            raise Invalid(f"Invalid value for field 'resource.name': '{body['name']}'.")
        if body.get("fingerprint") and body["fingerprint"] != service.body["fingerprint"]:
            raise ConditionNotMet(
                "Invalid fingerprint: the backend service changed since it was read."
            )
        fields = self._backend_service_fields(region, body)
        for key in ("backends", "healthChecks", "network"):
            fields.setdefault(key, None)

        def apply() -> None:
            for key, value in fields.items():
                if value is None:
                    service.body.pop(key, None)
                else:
                    service.body[key] = value
            service.body["fingerprint"] = fingerprint([name, service.body])

        return self.modify(service, "update", apply)

    def delete_region_backend_service(self, region: str, name: str) -> Operation:
        service = self.region_backend_service(region, name)
        for rule in self.every("forwardingRules"):
            if rule.body.get("backendService") == service.link:
                raise in_use(service, rule)
        return self.delete(service)
