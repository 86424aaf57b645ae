"""Request parsing and response rendering, one small handler per API method.

A handler gets a :class:`Call` (the project's model, path parameters, query, JSON body and the
base URL the client used) and returns what the API answers: a rendered resource or list, an
:class:`~polyccm_gce_emulator.models.Operation`, or :class:`WaitFor` (``operations.wait``,
which the server answers without holding the models' lock). Bodies are checked for fields the
resource does not have (400, as GCE refuses them); everything else is the models' business.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from polyccm_gce_emulator import filters
from polyccm_gce_emulator.errors import BadRequest, Invalid, Required
from polyccm_gce_emulator.metadata import numeric_project_id
from polyccm_gce_emulator.models import ComputeProject, Operation, Resource, render
from polyccm_gce_emulator.models.common import Link
from polyccm_gce_emulator.models.instances import INSTANCE_INPUT
from polyccm_gce_emulator.models.internal import (
    BACKEND_SERVICE_INPUT,
    HEALTH_CHECK_V1_INPUT,
    INSTANCE_GROUP_INPUT,
)
from polyccm_gce_emulator.models.loadbalancing import HEALTH_CHECK_INPUT
from polyccm_gce_emulator.models.network import FIREWALL_INPUT, NEXT_HOPS

MAX_RESULTS = 500
#: Output-only fields a client may send back (a body it got from ``get``); GCE ignores them.
OUTPUT_ONLY = frozenset({"kind", "id", "creationTimestamp", "selfLink"})


@dataclass
class Call:
    """One API request, as a handler sees it."""

    project: ComputeProject
    params: Mapping[str, str]
    query: Mapping[str, str]
    body: dict[str, Any] | None
    base: str
    """``http://host:port/compute/v1/``: selfLinks are rendered with it."""

    def fields(self, allowed: Iterable[str], where: str = "resource") -> dict[str, Any]:
        """The JSON body, refused (400) when it holds a field ``allowed`` does not name."""
        body = self.body or {}
        known = set(allowed) | OUTPUT_ONLY
        for key in body:
            if key not in known:
                raise BadRequest(
                    f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': "
                    "Cannot find field."
                )
        return body

    def show(self, resource: Resource) -> dict[str, Any]:
        result: dict[str, Any] = render(self.project.view(resource), self.base)
        return result


@dataclass
class WaitFor:
    """Answer with ``operation`` once it is DONE or the wait deadline passes."""

    operation: Operation


Answer = dict[str, Any] | Operation | WaitFor
Handler = Callable[[Call], Answer]


# -- lists ----------------------------------------------------------------------------------


def _order(call: Call) -> tuple[Callable[[dict[str, Any]], Any], bool]:
    order = " ".join(call.query.get("orderBy", "").split())
    if order in ("", "name", "name asc"):
        return (lambda item: item["name"]), False
    if order == "name desc":
        return (lambda item: item["name"]), True
    if order in ("creationTimestamp", "creationTimestamp asc"):
        return (lambda item: (item.get("creationTimestamp", ""), item["name"])), False
    if order == "creationTimestamp desc":
        return (lambda item: (item.get("creationTimestamp", ""), item["name"])), True
    raise Invalid(
        f"Invalid value for field 'orderBy': '{order}'. Sorting by this field is not supported."
    )


def _max_results(call: Call) -> int:
    raw = call.query.get("maxResults", "")
    if not raw:
        return MAX_RESULTS
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_RESULTS:
        raise Invalid(
            f"Invalid value for field 'maxResults': '{raw}'. Must be in the range [0, 500]."
        )
    return value or MAX_RESULTS


def _query_digest(call: Call) -> str:
    key = json.dumps([call.query.get("filter", ""), call.query.get("orderBy", "")])
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _page(
    call: Call, keyed: list[tuple[Any, Any]], *, reverse: bool = False
) -> tuple[list[Any], str | None]:
    """One page of ``(sort key, item)`` pairs, already filtered and sorted (descending when
    ``reverse``): the items after the page token's key, at most maxResults, and the next token
    when more remain. A token holds the last key shown, so pages stay consistent while items
    come and go between calls."""
    limit = _max_results(call)
    digest = _query_digest(call)
    token = call.query.get("pageToken", "")
    start = 0
    if token:
        try:
            state = json.loads(base64.urlsafe_b64decode(token.encode()))
            after, token_digest = state["after"], state["q"]
        except (binascii.Error, ValueError, KeyError, TypeError):
            raise Invalid(f"Invalid value for field 'pageToken': '{token}'.") from None
        if token_digest != digest:
            raise Invalid(
                f"Invalid value for field 'pageToken': '{token}'. The page token was issued "
                "for another filter or order."
            )
        start = next(
            (
                index
                for index, (key, _item) in enumerate(keyed)
                if (_plain(key) < after if reverse else _plain(key) > after)
            ),
            len(keyed),
        )
    chunk = keyed[start : start + limit]
    items = [item for _key, item in chunk]
    if start + limit >= len(keyed):
        return items, None
    state = {"after": _plain(chunk[-1][0]), "q": digest}
    return items, base64.urlsafe_b64encode(json.dumps(state).encode()).decode()


def _plain(key: Any) -> Any:
    """A sort key as it comes back from a page token (tuples as lists)."""
    return json.loads(json.dumps(key))


def _matching(call: Call, resources: list[Resource]) -> list[dict[str, Any]]:
    """The rendered ``resources`` the call's filter matches. A filter that reads nothing but
    ``name`` is tested on each name first, so only the matches are rendered (a listing of 500
    names among 5,000 instances renders 500, not 5,000); the answer is the same."""
    matches, reads = filters.parse_reading(call.query.get("filter", ""))
    if reads <= {"name"}:
        return [call.show(item) for item in resources if matches({"name": item.name})]
    return [shown for shown in map(call.show, resources) if matches(shown)]


def list_of(call: Call, kind: str, scope: str, collection: str) -> dict[str, Any]:
    """A ``*.list`` answer: filtered, ordered, paginated."""
    key, reverse = _order(call)
    shown = _matching(call, call.project.visible(scope, collection))
    selected = sorted(shown, key=key, reverse=reverse)
    items, token = _page(call, [(key(item), item) for item in selected], reverse=reverse)
    path = f"projects/{call.project.project}/{scope + '/' if scope else ''}{collection}"
    answer: dict[str, Any] = {"kind": kind, "id": path, "selfLink": call.base + path}
    if items:
        answer["items"] = items
    if token:
        answer["nextPageToken"] = token
    return answer


def aggregated_list_of(call: Call, kind: str, collection: str, zonal: bool) -> dict[str, Any]:
    """An ``*.aggregatedList`` answer: every zone's (or region's) items by scope and name,
    paginated together, with GCE's NO_RESULTS_ON_PAGE warning for each scope without items on
    this page."""
    # The project's zones (those Google opened later included) or regions.
    where = "zones" if zonal else "regions"
    scopes = [f"{where}/{name}" for name in call.project.collection("", where)]
    keyed = []
    for scope in sorted(scopes):
        shown = _matching(call, call.project.visible(scope, collection))
        keyed += [((scope, item["name"]), (scope, item)) for item in shown]
    page, token = _page(call, keyed)
    grouped: dict[str, list[dict[str, Any]]] = {}
    for scope, item in page:
        grouped.setdefault(scope, []).append(item)
    items: dict[str, Any] = {}
    for scope in sorted(scopes):
        if scope in grouped:
            items[scope] = {collection: grouped[scope]}
        else:
            items[scope] = {
                "warning": {
                    "code": "NO_RESULTS_ON_PAGE",
                    "message": f"There are no results for scope '{scope}' on this page.",
                    "data": [{"key": "scope", "value": scope}],
                }
            }
    path = f"projects/{call.project.project}/aggregated/{collection}"
    answer: dict[str, Any] = {
        "kind": kind,
        "id": path,
        "items": items,
        "selfLink": call.base + path,
    }
    if token:
        answer["nextPageToken"] = token
    return answer


# -- geography ------------------------------------------------------------------------------


def projects_get(call: Call) -> Answer:
    """The project (asked by name or, as GCE allows, by number): its name and number."""
    name = call.project.project
    body = {
        "kind": "compute#project",
        "id": numeric_project_id(name),
        "creationTimestamp": "2020-01-01T00:00:00.000-08:00",
        "name": name,
        "defaultNetworkTier": "PREMIUM",
        "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS",
        "selfLink": Link(f"projects/{name}"),
    }
    result: dict[str, Any] = render(body, call.base)
    return result


def zones_get(call: Call) -> Answer:
    return call.show(call.project.zone(call.params["zone"]))


def zones_list(call: Call) -> Answer:
    return list_of(call, "compute#zoneList", "", "zones")


def regions_get(call: Call) -> Answer:
    return call.show(call.project.region(call.params["region"]))


def regions_list(call: Call) -> Answer:
    return list_of(call, "compute#regionList", "", "regions")


# -- instances ------------------------------------------------------------------------------

_INSTANCE_OUTPUT = {
    "status",
    "statusMessage",
    "zone",
    "labelFingerprint",
    "fingerprint",
    "cpuPlatform",
    "startRestricted",
    "lastStartTimestamp",
    "lastStopTimestamp",
}


def instances_insert(call: Call) -> Answer:
    body = call.fields(INSTANCE_INPUT | _INSTANCE_OUTPUT)
    return call.project.insert_instance(call.params["zone"], body)


def instances_get(call: Call) -> Answer:
    return call.show(call.project.instance(call.params["zone"], call.params["instance"]))


def instances_list(call: Call) -> Answer:
    zone = call.params["zone"]
    call.project.zone(zone)
    return list_of(call, "compute#instanceList", f"zones/{zone}", "instances")


def instances_aggregated_list(call: Call) -> Answer:
    return aggregated_list_of(call, "compute#instanceAggregatedList", "instances", zonal=True)


def instances_delete(call: Call) -> Answer:
    return call.project.delete_instance(call.params["zone"], call.params["instance"])


def instances_stop(call: Call) -> Answer:
    return call.project.stop_instance(call.params["zone"], call.params["instance"])


def instances_start(call: Call) -> Answer:
    return call.project.start_instance(call.params["zone"], call.params["instance"])


def instances_set_labels(call: Call) -> Answer:
    body = call.fields(("labels", "labelFingerprint"), "resource")
    return call.project.set_instance_labels(call.params["zone"], call.params["instance"], body)


def instances_update_network_interface(call: Call) -> Answer:
    body = call.fields(("name", "network", "subnetwork", "networkIP", "fingerprint", "kind",
                        "aliasIpRanges", "accessConfigs", "stackType"), "resource")  # fmt: skip
    interface = call.query.get("networkInterface", "")
    if not interface:
        raise Required("networkInterface")
    return call.project.update_network_interface(
        call.params["zone"], call.params["instance"], interface, body
    )


def instances_set_tags(call: Call) -> Answer:
    body = call.fields(("items", "fingerprint"), "resource")
    return call.project.set_instance_tags(call.params["zone"], call.params["instance"], body)


# -- networks and subnetworks ---------------------------------------------------------------


def networks_insert(call: Call) -> Answer:
    body = call.fields(
        ("name", "description", "autoCreateSubnetworks", "IPv4Range", "routingConfig", "mtu")
    )
    return call.project.insert_network(body)


def networks_get(call: Call) -> Answer:
    return call.show(call.project.find("global", "networks", call.params["network"]))


def networks_list(call: Call) -> Answer:
    return list_of(call, "compute#networkList", "global", "networks")


def networks_delete(call: Call) -> Answer:
    return call.project.delete_network(call.params["network"])


def subnetworks_insert(call: Call) -> Answer:
    call.project.region(call.params["region"])
    body = call.fields(
        (
            "name",
            "description",
            "network",
            "ipCidrRange",
            "privateIpGoogleAccess",
            "region",
            "stackType",
            "ipv6AccessType",
            "secondaryIpRanges",
        )
    )
    return call.project.insert_subnetwork(call.params["region"], body)


def subnetworks_get(call: Call) -> Answer:
    region = call.params["region"]
    call.project.region(region)
    return call.show(
        call.project.find(f"regions/{region}", "subnetworks", call.params["subnetwork"])
    )


def subnetworks_list(call: Call) -> Answer:
    region = call.params["region"]
    call.project.region(region)
    return list_of(call, "compute#subnetworkList", f"regions/{region}", "subnetworks")


def subnetworks_delete(call: Call) -> Answer:
    call.project.region(call.params["region"])
    return call.project.delete_subnetwork(call.params["region"], call.params["subnetwork"])


# -- routes and firewalls -------------------------------------------------------------------


def routes_insert(call: Call) -> Answer:
    body = call.fields(
        ("name", "description", "network", "destRange", "priority", "tags", *NEXT_HOPS)
    )
    return call.project.insert_route(body)


def routes_get(call: Call) -> Answer:
    return call.show(call.project.find("global", "routes", call.params["route"]))


def routes_list(call: Call) -> Answer:
    return list_of(call, "compute#routeList", "global", "routes")


def routes_delete(call: Call) -> Answer:
    return call.project.delete_route(call.params["route"])


def firewalls_insert(call: Call) -> Answer:
    return call.project.insert_firewall(call.fields(("name", *FIREWALL_INPUT)))


def firewalls_get(call: Call) -> Answer:
    return call.show(call.project.find("global", "firewalls", call.params["firewall"]))


def firewalls_list(call: Call) -> Answer:
    return list_of(call, "compute#firewallList", "global", "firewalls")


def firewalls_update(call: Call) -> Answer:
    body = call.fields(("name", *FIREWALL_INPUT))
    return call.project.change_firewall(call.params["firewall"], body, replace=True)


def firewalls_patch(call: Call) -> Answer:
    body = call.fields(("name", *FIREWALL_INPUT))
    return call.project.change_firewall(call.params["firewall"], body, replace=False)


def firewalls_delete(call: Call) -> Answer:
    return call.project.delete_firewall(call.params["firewall"])


# -- load balancing -------------------------------------------------------------------------


def addresses_insert(call: Call) -> Answer:
    body = call.fields(
        (
            "name",
            "description",
            "address",
            "addressType",
            "networkTier",
            "subnetwork",
            "purpose",
            "region",
            "status",
            "users",
            "labelFingerprint",
        )
    )
    return call.project.insert_address(call.params["region"], body)


def addresses_get(call: Call) -> Answer:
    region = call.params["region"]
    call.project.region(region)
    return call.show(call.project.find(f"regions/{region}", "addresses", call.params["address"]))


def addresses_list(call: Call) -> Answer:
    region = call.params["region"]
    call.project.region(region)
    return list_of(call, "compute#addressList", f"regions/{region}", "addresses")


def addresses_delete(call: Call) -> Answer:
    call.project.region(call.params["region"])
    return call.project.delete_address(call.params["region"], call.params["address"])


def forwarding_rules_insert(call: Call) -> Answer:
    body = call.fields(
        (
            "name",
            "description",
            "IPAddress",
            "IPProtocol",
            "portRange",
            "ports",
            "target",
            "backendService",
            "network",
            "subnetwork",
            "allPorts",
            "allowGlobalAccess",
            "loadBalancingScheme",
            "networkTier",
            "region",
            "fingerprint",
            "labelFingerprint",
        )
    )
    return call.project.insert_forwarding_rule(call.params["region"], body)


def forwarding_rules_get(call: Call) -> Answer:
    region = call.params["region"]
    call.project.region(region)
    return call.show(
        call.project.find(f"regions/{region}", "forwardingRules", call.params["forwardingRule"])
    )


def forwarding_rules_list(call: Call) -> Answer:
    region = call.params["region"]
    call.project.region(region)
    return list_of(call, "compute#forwardingRuleList", f"regions/{region}", "forwardingRules")


def forwarding_rules_delete(call: Call) -> Answer:
    return call.project.delete_forwarding_rule(call.params["region"], call.params["forwardingRule"])


def target_pools_insert(call: Call) -> Answer:
    body = call.fields(
        (
            "name",
            "description",
            "instances",
            "healthChecks",
            "sessionAffinity",
            "failoverRatio",
            "region",
        )
    )
    return call.project.insert_target_pool(call.params["region"], body)


def target_pools_get(call: Call) -> Answer:
    return call.show(call.project.target_pool(call.params["region"], call.params["targetPool"]))


def target_pools_list(call: Call) -> Answer:
    region = call.params["region"]
    call.project.region(region)
    return list_of(call, "compute#targetPoolList", f"regions/{region}", "targetPools")


def target_pools_delete(call: Call) -> Answer:
    return call.project.delete_target_pool(call.params["region"], call.params["targetPool"])


def target_pools_add_instance(call: Call) -> Answer:
    body = call.fields(("instances",))
    return call.project.add_instances(call.params["region"], call.params["targetPool"], body)


def target_pools_remove_instance(call: Call) -> Answer:
    body = call.fields(("instances",))
    return call.project.remove_instances(call.params["region"], call.params["targetPool"], body)


def target_pools_add_health_check(call: Call) -> Answer:
    body = call.fields(("healthChecks",))
    return call.project.add_health_check(call.params["region"], call.params["targetPool"], body)


def target_pools_remove_health_check(call: Call) -> Answer:
    body = call.fields(("healthChecks",))
    return call.project.remove_health_check(call.params["region"], call.params["targetPool"], body)


def http_health_checks_insert(call: Call) -> Answer:
    return call.project.insert_http_health_check(call.fields(("name", *HEALTH_CHECK_INPUT)))


def http_health_checks_get(call: Call) -> Answer:
    return call.show(
        call.project.find("global", "httpHealthChecks", call.params["httpHealthCheck"])
    )


def http_health_checks_list(call: Call) -> Answer:
    return list_of(call, "compute#httpHealthCheckList", "global", "httpHealthChecks")


def http_health_checks_update(call: Call) -> Answer:
    body = call.fields(("name", *HEALTH_CHECK_INPUT))
    return call.project.change_http_health_check(call.params["httpHealthCheck"], body, replace=True)


def http_health_checks_patch(call: Call) -> Answer:
    body = call.fields(("name", *HEALTH_CHECK_INPUT))
    return call.project.change_http_health_check(
        call.params["httpHealthCheck"], body, replace=False
    )


def http_health_checks_delete(call: Call) -> Answer:
    return call.project.delete_http_health_check(call.params["httpHealthCheck"])


# -- the internal load balancer's parts -----------------------------------------------------


def instance_groups_insert(call: Call) -> Answer:
    body = call.fields(("name", "fingerprint", "size", *INSTANCE_GROUP_INPUT))
    return call.project.insert_instance_group(call.params["zone"], body)


def instance_groups_get(call: Call) -> Answer:
    return call.show(call.project.instance_group(call.params["zone"], call.params["instanceGroup"]))


def instance_groups_list(call: Call) -> Answer:
    zone = call.params["zone"]
    call.project.zone(zone)
    return list_of(call, "compute#instanceGroupList", f"zones/{zone}", "instanceGroups")


def instance_groups_delete(call: Call) -> Answer:
    return call.project.delete_instance_group(call.params["zone"], call.params["instanceGroup"])


def instance_groups_add_instances(call: Call) -> Answer:
    body = call.fields(("instances",))
    return call.project.add_group_instances(call.params["zone"], call.params["instanceGroup"], body)


def instance_groups_remove_instances(call: Call) -> Answer:
    body = call.fields(("instances",))
    return call.project.remove_group_instances(
        call.params["zone"], call.params["instanceGroup"], body
    )


def instance_groups_list_instances(call: Call) -> Answer:
    body = call.fields(("instanceState",))
    zone, name = call.params["zone"], call.params["instanceGroup"]
    members = call.project.group_instances(zone, name, body.get("instanceState", "ALL"))
    path = f"projects/{call.project.project}/zones/{zone}/instanceGroups/{name}"
    answer: dict[str, Any] = {
        "kind": "compute#instanceGroupsListInstances",
        "id": path,
        "selfLink": call.base + path + "/listInstances",
    }
    items, token = _page(call, [(m["instance"], m) for m in members])
    if items:
        answer["items"] = [render(item, call.base) for item in items]
    if token:
        answer["nextPageToken"] = token
    return answer


def health_checks_insert(call: Call) -> Answer:
    return call.project.insert_health_check(call.fields(("name", *HEALTH_CHECK_V1_INPUT)))


def health_checks_get(call: Call) -> Answer:
    return call.show(call.project.find("global", "healthChecks", call.params["healthCheck"]))


def health_checks_list(call: Call) -> Answer:
    return list_of(call, "compute#healthCheckList", "global", "healthChecks")


def health_checks_update(call: Call) -> Answer:
    body = call.fields(("name", *HEALTH_CHECK_V1_INPUT))
    return call.project.change_health_check(call.params["healthCheck"], body, replace=True)


def health_checks_patch(call: Call) -> Answer:
    body = call.fields(("name", *HEALTH_CHECK_V1_INPUT))
    return call.project.change_health_check(call.params["healthCheck"], body, replace=False)


def health_checks_delete(call: Call) -> Answer:
    return call.project.delete_health_check(call.params["healthCheck"])


def region_backend_services_insert(call: Call) -> Answer:
    body = call.fields(("name", *BACKEND_SERVICE_INPUT))
    return call.project.insert_region_backend_service(call.params["region"], body)


def region_backend_services_get(call: Call) -> Answer:
    return call.show(
        call.project.region_backend_service(call.params["region"], call.params["backendService"])
    )


def region_backend_services_list(call: Call) -> Answer:
    region = call.params["region"]
    call.project.region(region)
    return list_of(call, "compute#backendServiceList", f"regions/{region}", "backendServices")


def region_backend_services_update(call: Call) -> Answer:
    body = call.fields(("name", *BACKEND_SERVICE_INPUT))
    return call.project.update_region_backend_service(
        call.params["region"], call.params["backendService"], body
    )


def region_backend_services_delete(call: Call) -> Answer:
    return call.project.delete_region_backend_service(
        call.params["region"], call.params["backendService"]
    )


# -- operations -----------------------------------------------------------------------------


def _operation_scope(call: Call) -> str:
    if "zone" in call.params:
        call.project.zone(call.params["zone"])
        return f"zones/{call.params['zone']}"
    if "region" in call.params:
        call.project.region(call.params["region"])
        return f"regions/{call.params['region']}"
    return "global"


def operations_get(call: Call) -> Answer:
    return call.project.operation(_operation_scope(call), call.params["operation"])


def operations_wait(call: Call) -> Answer:
    return WaitFor(call.project.operation(_operation_scope(call), call.params["operation"]))
