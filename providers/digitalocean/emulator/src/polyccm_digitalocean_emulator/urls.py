"""The routing table: which handler serves which method and path of the API.

Paths are the OpenAPI document's templates and operations its ``operationId``s; the tests
check that this table and the document's operations are the same set.
"""

from __future__ import annotations

from dataclasses import dataclass

from werkzeug.routing import Map, Rule

from polyccm_digitalocean_emulator import responses as r


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    """The OpenAPI path template (``/v2/droplets/{droplet_id}``)."""
    operation: str
    """The OpenAPI ``operationId``: how calls are counted and faults are aimed."""
    handler: r.Handler


ROUTES: tuple[Route, ...] = (
    Route("GET", "/v2/account", "account_get", r.account_get),
    Route("GET", "/v2/regions", "regions_list", r.regions_list),
    Route("GET", "/v2/sizes", "sizes_list", r.sizes_list),
    Route("GET", "/v2/droplets", "droplets_list", r.droplets_list),
    Route("POST", "/v2/droplets", "droplets_create", r.droplets_create),
    Route("DELETE", "/v2/droplets", "droplets_destroy_byTag", r.droplets_destroy_by_tag),
    Route("GET", "/v2/droplets/{droplet_id}", "droplets_get", r.droplets_get),
    Route("DELETE", "/v2/droplets/{droplet_id}", "droplets_destroy", r.droplets_destroy),
    Route("GET", "/v2/droplets/{droplet_id}/actions", "dropletActions_list",
          r.droplet_actions_list),
    Route("POST", "/v2/droplets/{droplet_id}/actions", "dropletActions_post",
          r.droplet_actions_post),
    Route("GET", "/v2/droplets/{droplet_id}/actions/{action_id}", "dropletActions_get",
          r.droplet_actions_get),
    Route("GET", "/v2/actions/{action_id}", "actions_get", r.actions_get),
    Route("GET", "/v2/load_balancers", "loadBalancers_list", r.load_balancers_list),
    Route("POST", "/v2/load_balancers", "loadBalancers_create", r.load_balancers_create),
    Route("GET", "/v2/load_balancers/{lb_id}", "loadBalancers_get", r.load_balancers_get),
    Route("PUT", "/v2/load_balancers/{lb_id}", "loadBalancers_update", r.load_balancers_update),
    Route("DELETE", "/v2/load_balancers/{lb_id}", "loadBalancers_delete",
          r.load_balancers_delete),
    Route("POST", "/v2/load_balancers/{lb_id}/droplets", "loadBalancers_add_droplets",
          r.load_balancers_add_droplets),
    Route("DELETE", "/v2/load_balancers/{lb_id}/droplets", "loadBalancers_remove_droplets",
          r.load_balancers_remove_droplets),
    Route("POST", "/v2/load_balancers/{lb_id}/forwarding_rules",
          "loadBalancers_add_forwardingRules", r.load_balancers_add_rules),
    Route("DELETE", "/v2/load_balancers/{lb_id}/forwarding_rules",
          "loadBalancers_remove_forwardingRules", r.load_balancers_remove_rules),
    Route("GET", "/v2/tags", "tags_list", r.tags_list),
    Route("POST", "/v2/tags", "tags_create", r.tags_create),
    Route("GET", "/v2/tags/{tag_id}", "tags_get", r.tags_get),
    Route("DELETE", "/v2/tags/{tag_id}", "tags_delete", r.tags_delete),
    Route("POST", "/v2/tags/{tag_id}/resources", "tags_assign_resources",
          r.tags_assign_resources),
    Route("DELETE", "/v2/tags/{tag_id}/resources", "tags_unassign_resources",
          r.tags_unassign_resources),
    Route("GET", "/v2/certificates", "certificates_list", r.certificates_list),
    Route("POST", "/v2/certificates", "certificates_create", r.certificates_create),
    Route("GET", "/v2/certificates/{certificate_id}", "certificates_get", r.certificates_get),
    Route("DELETE", "/v2/certificates/{certificate_id}", "certificates_delete",
          r.certificates_delete),
    Route("GET", "/v2/firewalls", "firewalls_list", r.firewalls_list),
    Route("POST", "/v2/firewalls", "firewalls_create", r.firewalls_create),
    Route("GET", "/v2/firewalls/{firewall_id}", "firewalls_get", r.firewalls_get),
    Route("PUT", "/v2/firewalls/{firewall_id}", "firewalls_update", r.firewalls_update),
    Route("DELETE", "/v2/firewalls/{firewall_id}", "firewalls_delete", r.firewalls_delete),
    Route("GET", "/v2/vpcs", "vpcs_list", r.vpcs_list),
    Route("POST", "/v2/vpcs", "vpcs_create", r.vpcs_create),
    Route("GET", "/v2/vpcs/{vpc_id}", "vpcs_get", r.vpcs_get),
    Route("DELETE", "/v2/vpcs/{vpc_id}", "vpcs_delete", r.vpcs_delete),
)  # fmt: skip


def url_map() -> Map:
    """The routes as a werkzeug map; each rule's endpoint is its :class:`Route`."""
    rules = []
    for route in ROUTES:
        pattern = route.template.replace("{", "<").replace("}", ">")
        rules.append(Rule(pattern, methods=[route.method], endpoint=route))
    return Map(rules, strict_slashes=False)
