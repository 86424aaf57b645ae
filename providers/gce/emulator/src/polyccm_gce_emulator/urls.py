"""The methods the emulator serves: discovery method id, HTTP method, path, handler.

Paths are written as the discovery document's ``flatPath`` (below ``compute/v1/``), so a test
can hold each one against the document; the server turns them into werkzeug rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from werkzeug.routing import Map, Rule

from polyccm_gce_emulator import responses as r

API_PREFIX = "/compute/v1/"


@dataclass(frozen=True)
class ApiMethod:
    """One served method of the compute v1 API."""

    id: str
    """The discovery id, e.g. ``compute.instances.insert``; calls are counted under it."""
    http_method: str
    path: str
    """The discovery ``flatPath``, e.g. ``projects/{project}/zones/{zone}/instances``."""
    handler: r.Handler

    @property
    def rule(self) -> str:
        return API_PREFIX + re.sub(r"\{(\w+)\}", r"<\1>", self.path)


_P = "projects/{project}"
_ZONE = f"{_P}/zones/{{zone}}"
_REGION = f"{_P}/regions/{{region}}"
_GLOBAL = f"{_P}/global"
_POOL = f"{_REGION}/targetPools/{{targetPool}}"
_GROUP = f"{_ZONE}/instanceGroups/{{instanceGroup}}"
_CHECK = f"{_GLOBAL}/healthChecks/{{healthCheck}}"
_BACKEND = f"{_REGION}/backendServices/{{backendService}}"

METHODS: tuple[ApiMethod, ...] = (
    ApiMethod("compute.projects.get", "GET", _P, r.projects_get),
    ApiMethod("compute.zones.list", "GET", f"{_P}/zones", r.zones_list),
    ApiMethod("compute.zones.get", "GET", _ZONE, r.zones_get),
    ApiMethod("compute.regions.list", "GET", f"{_P}/regions", r.regions_list),
    ApiMethod("compute.regions.get", "GET", _REGION, r.regions_get),
    ApiMethod("compute.instances.insert", "POST", f"{_ZONE}/instances", r.instances_insert),
    ApiMethod("compute.instances.list", "GET", f"{_ZONE}/instances", r.instances_list),
    ApiMethod(
        "compute.instances.aggregatedList",
        "GET",
        f"{_P}/aggregated/instances",
        r.instances_aggregated_list,
    ),
    ApiMethod("compute.instances.get", "GET", f"{_ZONE}/instances/{{instance}}", r.instances_get),
    ApiMethod(
        "compute.instances.delete", "DELETE", f"{_ZONE}/instances/{{instance}}", r.instances_delete
    ),
    ApiMethod(
        "compute.instances.stop", "POST", f"{_ZONE}/instances/{{instance}}/stop", r.instances_stop
    ),
    ApiMethod(
        "compute.instances.start",
        "POST",
        f"{_ZONE}/instances/{{instance}}/start",
        r.instances_start,
    ),
    ApiMethod(
        "compute.instances.setLabels",
        "POST",
        f"{_ZONE}/instances/{{instance}}/setLabels",
        r.instances_set_labels,
    ),
    ApiMethod(
        "compute.instances.updateNetworkInterface",
        "PATCH",
        f"{_ZONE}/instances/{{instance}}/updateNetworkInterface",
        r.instances_update_network_interface,
    ),
    ApiMethod(
        "compute.instances.setTags",
        "POST",
        f"{_ZONE}/instances/{{instance}}/setTags",
        r.instances_set_tags,
    ),
    ApiMethod("compute.networks.insert", "POST", f"{_GLOBAL}/networks", r.networks_insert),
    ApiMethod("compute.networks.list", "GET", f"{_GLOBAL}/networks", r.networks_list),
    ApiMethod("compute.networks.get", "GET", f"{_GLOBAL}/networks/{{network}}", r.networks_get),
    ApiMethod(
        "compute.networks.delete", "DELETE", f"{_GLOBAL}/networks/{{network}}", r.networks_delete
    ),
    ApiMethod("compute.subnetworks.insert", "POST", f"{_REGION}/subnetworks", r.subnetworks_insert),
    ApiMethod("compute.subnetworks.list", "GET", f"{_REGION}/subnetworks", r.subnetworks_list),
    ApiMethod(
        "compute.subnetworks.get",
        "GET",
        f"{_REGION}/subnetworks/{{subnetwork}}",
        r.subnetworks_get,
    ),
    ApiMethod(
        "compute.subnetworks.delete",
        "DELETE",
        f"{_REGION}/subnetworks/{{subnetwork}}",
        r.subnetworks_delete,
    ),
    ApiMethod("compute.routes.insert", "POST", f"{_GLOBAL}/routes", r.routes_insert),
    ApiMethod("compute.routes.list", "GET", f"{_GLOBAL}/routes", r.routes_list),
    ApiMethod("compute.routes.get", "GET", f"{_GLOBAL}/routes/{{route}}", r.routes_get),
    ApiMethod("compute.routes.delete", "DELETE", f"{_GLOBAL}/routes/{{route}}", r.routes_delete),
    ApiMethod("compute.firewalls.insert", "POST", f"{_GLOBAL}/firewalls", r.firewalls_insert),
    ApiMethod("compute.firewalls.list", "GET", f"{_GLOBAL}/firewalls", r.firewalls_list),
    ApiMethod("compute.firewalls.get", "GET", f"{_GLOBAL}/firewalls/{{firewall}}", r.firewalls_get),
    ApiMethod(
        "compute.firewalls.update", "PUT", f"{_GLOBAL}/firewalls/{{firewall}}", r.firewalls_update
    ),
    ApiMethod(
        "compute.firewalls.patch", "PATCH", f"{_GLOBAL}/firewalls/{{firewall}}", r.firewalls_patch
    ),
    ApiMethod(
        "compute.firewalls.delete",
        "DELETE",
        f"{_GLOBAL}/firewalls/{{firewall}}",
        r.firewalls_delete,
    ),
    ApiMethod("compute.addresses.insert", "POST", f"{_REGION}/addresses", r.addresses_insert),
    ApiMethod("compute.addresses.list", "GET", f"{_REGION}/addresses", r.addresses_list),
    ApiMethod("compute.addresses.get", "GET", f"{_REGION}/addresses/{{address}}", r.addresses_get),
    ApiMethod(
        "compute.addresses.delete",
        "DELETE",
        f"{_REGION}/addresses/{{address}}",
        r.addresses_delete,
    ),
    ApiMethod(
        "compute.forwardingRules.insert",
        "POST",
        f"{_REGION}/forwardingRules",
        r.forwarding_rules_insert,
    ),
    ApiMethod(
        "compute.forwardingRules.list", "GET", f"{_REGION}/forwardingRules", r.forwarding_rules_list
    ),
    ApiMethod(
        "compute.forwardingRules.get",
        "GET",
        f"{_REGION}/forwardingRules/{{forwardingRule}}",
        r.forwarding_rules_get,
    ),
    ApiMethod(
        "compute.forwardingRules.delete",
        "DELETE",
        f"{_REGION}/forwardingRules/{{forwardingRule}}",
        r.forwarding_rules_delete,
    ),
    ApiMethod(
        "compute.targetPools.insert", "POST", f"{_REGION}/targetPools", r.target_pools_insert
    ),
    ApiMethod("compute.targetPools.list", "GET", f"{_REGION}/targetPools", r.target_pools_list),
    ApiMethod("compute.targetPools.get", "GET", _POOL, r.target_pools_get),
    ApiMethod("compute.targetPools.delete", "DELETE", _POOL, r.target_pools_delete),
    ApiMethod(
        "compute.targetPools.addInstance",
        "POST",
        f"{_POOL}/addInstance",
        r.target_pools_add_instance,
    ),
    ApiMethod(
        "compute.targetPools.removeInstance",
        "POST",
        f"{_POOL}/removeInstance",
        r.target_pools_remove_instance,
    ),
    ApiMethod(
        "compute.targetPools.addHealthCheck",
        "POST",
        f"{_POOL}/addHealthCheck",
        r.target_pools_add_health_check,
    ),
    ApiMethod(
        "compute.targetPools.removeHealthCheck",
        "POST",
        f"{_POOL}/removeHealthCheck",
        r.target_pools_remove_health_check,
    ),
    ApiMethod(
        "compute.httpHealthChecks.insert",
        "POST",
        f"{_GLOBAL}/httpHealthChecks",
        r.http_health_checks_insert,
    ),
    ApiMethod(
        "compute.httpHealthChecks.list",
        "GET",
        f"{_GLOBAL}/httpHealthChecks",
        r.http_health_checks_list,
    ),
    ApiMethod(
        "compute.httpHealthChecks.get",
        "GET",
        f"{_GLOBAL}/httpHealthChecks/{{httpHealthCheck}}",
        r.http_health_checks_get,
    ),
    ApiMethod(
        "compute.httpHealthChecks.update",
        "PUT",
        f"{_GLOBAL}/httpHealthChecks/{{httpHealthCheck}}",
        r.http_health_checks_update,
    ),
    ApiMethod(
        "compute.httpHealthChecks.patch",
        "PATCH",
        f"{_GLOBAL}/httpHealthChecks/{{httpHealthCheck}}",
        r.http_health_checks_patch,
    ),
    ApiMethod(
        "compute.httpHealthChecks.delete",
        "DELETE",
        f"{_GLOBAL}/httpHealthChecks/{{httpHealthCheck}}",
        r.http_health_checks_delete,
    ),
    ApiMethod(
        "compute.instanceGroups.insert", "POST", f"{_ZONE}/instanceGroups", r.instance_groups_insert
    ),
    ApiMethod(
        "compute.instanceGroups.list", "GET", f"{_ZONE}/instanceGroups", r.instance_groups_list
    ),
    ApiMethod("compute.instanceGroups.get", "GET", _GROUP, r.instance_groups_get),
    ApiMethod("compute.instanceGroups.delete", "DELETE", _GROUP, r.instance_groups_delete),
    ApiMethod(
        "compute.instanceGroups.addInstances",
        "POST",
        f"{_GROUP}/addInstances",
        r.instance_groups_add_instances,
    ),
    ApiMethod(
        "compute.instanceGroups.removeInstances",
        "POST",
        f"{_GROUP}/removeInstances",
        r.instance_groups_remove_instances,
    ),
    ApiMethod(
        "compute.instanceGroups.listInstances",
        "POST",
        f"{_GROUP}/listInstances",
        r.instance_groups_list_instances,
    ),
    ApiMethod(
        "compute.healthChecks.insert", "POST", f"{_GLOBAL}/healthChecks", r.health_checks_insert
    ),
    ApiMethod("compute.healthChecks.list", "GET", f"{_GLOBAL}/healthChecks", r.health_checks_list),
    ApiMethod("compute.healthChecks.get", "GET", _CHECK, r.health_checks_get),
    ApiMethod("compute.healthChecks.update", "PUT", _CHECK, r.health_checks_update),
    ApiMethod("compute.healthChecks.patch", "PATCH", _CHECK, r.health_checks_patch),
    ApiMethod("compute.healthChecks.delete", "DELETE", _CHECK, r.health_checks_delete),
    ApiMethod(
        "compute.regionBackendServices.insert",
        "POST",
        f"{_REGION}/backendServices",
        r.region_backend_services_insert,
    ),
    ApiMethod(
        "compute.regionBackendServices.list",
        "GET",
        f"{_REGION}/backendServices",
        r.region_backend_services_list,
    ),
    ApiMethod("compute.regionBackendServices.get", "GET", _BACKEND, r.region_backend_services_get),
    ApiMethod(
        "compute.regionBackendServices.update", "PUT", _BACKEND, r.region_backend_services_update
    ),
    ApiMethod(
        "compute.regionBackendServices.delete",
        "DELETE",
        _BACKEND,
        r.region_backend_services_delete,
    ),
    ApiMethod(
        "compute.zoneOperations.get", "GET", f"{_ZONE}/operations/{{operation}}", r.operations_get
    ),
    ApiMethod(
        "compute.zoneOperations.wait",
        "POST",
        f"{_ZONE}/operations/{{operation}}/wait",
        r.operations_wait,
    ),
    ApiMethod(
        "compute.regionOperations.get",
        "GET",
        f"{_REGION}/operations/{{operation}}",
        r.operations_get,
    ),
    ApiMethod(
        "compute.regionOperations.wait",
        "POST",
        f"{_REGION}/operations/{{operation}}/wait",
        r.operations_wait,
    ),
    ApiMethod(
        "compute.globalOperations.get",
        "GET",
        f"{_GLOBAL}/operations/{{operation}}",
        r.operations_get,
    ),
    ApiMethod(
        "compute.globalOperations.wait",
        "POST",
        f"{_GLOBAL}/operations/{{operation}}/wait",
        r.operations_wait,
    ),
)


def url_map() -> Map:
    """werkzeug rules for :data:`METHODS`; each rule's endpoint is its :class:`ApiMethod`.

    Path segments may hold any character but ``/`` (names never do), so a bad name reaches
    the handler and gets GCE's own answer rather than a bare 404.
    """
    return Map(
        [Rule(method.rule, methods=[method.http_method], endpoint=method) for method in METHODS],
        strict_slashes=False,
        merge_slashes=False,
    )
