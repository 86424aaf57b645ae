"""The HTTP layer's handlers: one per operation, from parsed request to rendered answer.

Each handler gets a :class:`Call` whose request already matched the OpenAPI document, asks the
:class:`~polyccm_digitalocean_emulator.backend.Backend`, and returns a :class:`Reply`. Shapes
follow the document's responses (``{"droplet": {...}}``, lists with ``links`` and ``meta``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from polyccm_digitalocean_emulator import catalog
from polyccm_digitalocean_emulator.backend import Backend
from polyccm_digitalocean_emulator.droplets import Action, Droplet
from polyccm_digitalocean_emulator.pagination import Page, paginated
from polyccm_digitalocean_emulator.resources import render_tag


@dataclass
class Call:
    backend: Backend
    path: dict[str, str]
    query: dict[str, str]
    body: Any
    base_url: str
    """``https://host:port`` the client used: links in answers point back at it."""
    url: str
    """The request's absolute URL without its query."""


@dataclass
class Reply:
    status: int
    body: Mapping[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Call], Reply]


def _listed(call: Call, key: str, items: list[Any]) -> Reply:
    page = Page.from_query(call.query)
    return Reply(200, paginated(key, items, page, url=call.url, query=call.query))


def _paged(call: Call, key: str, items: list[Any], render: Callable[[Any], Any]) -> Reply:
    """List answers render only the requested page (a page of 200 costs 200 renders, not N)."""
    page = Page.from_query(call.query)
    body = paginated(key, items, page, url=call.url, query=call.query)
    body[key] = [render(item) for item in body[key]]
    return Reply(200, body)


def _action_link(call: Call, action: Action, rel: str) -> dict[str, Any]:
    return {"id": action.id, "rel": rel, "href": f"{call.base_url}/v2/actions/{action.id}"}


# -- account, regions, sizes ------------------------------------------------------------------


def account_get(call: Call) -> Reply:
    return Reply(200, {"account": call.backend.account()})


def regions_list(call: Call) -> Reply:
    return _listed(call, "regions", [catalog.render_region(slug) for slug in catalog.REGIONS])


def sizes_list(call: Call) -> Reply:
    return _listed(call, "sizes", [size.render() for size in catalog.SIZES.values()])


# -- droplets ---------------------------------------------------------------------------------


def droplets_list(call: Call) -> Reply:
    found = call.backend.list_droplets(
        tag_name=call.query.get("tag_name"),
        name=call.query.get("name"),
        kind=call.query.get("type"),
    )
    return _paged(call, "droplets", found, Droplet.render)


def droplets_create(call: Call) -> Reply:
    body = call.body
    names = [body["name"]] if "name" in body else list(body["names"])
    created = call.backend.create_droplets(names, body)
    actions = [call.backend.droplet_actions(d.id)[0] for d in created]
    links = {"actions": [_action_link(call, action, "create") for action in actions]}
    if "name" in body:
        return Reply(202, {"droplet": created[0].render(), "links": links})
    return Reply(202, {"droplets": [d.render() for d in created], "links": links})


def droplets_get(call: Call) -> Reply:
    return Reply(200, {"droplet": call.backend.droplet(int(call.path["droplet_id"])).render()})


def droplets_destroy(call: Call) -> Reply:
    call.backend.delete_droplet(int(call.path["droplet_id"]))
    return Reply(204)


def droplets_destroy_by_tag(call: Call) -> Reply:
    call.backend.delete_droplets_by_tag(call.query["tag_name"])
    return Reply(204)


def droplet_actions_post(call: Call) -> Reply:
    action = call.backend.droplet_action(int(call.path["droplet_id"]), call.body)
    return Reply(201, {"action": action.render()})


def droplet_actions_list(call: Call) -> Reply:
    found = call.backend.droplet_actions(int(call.path["droplet_id"]))
    return _paged(call, "actions", found, Action.render)


def droplet_actions_get(call: Call) -> Reply:
    action = call.backend.action(int(call.path["action_id"]), int(call.path["droplet_id"]))
    return Reply(200, {"action": action.render()})


def actions_get(call: Call) -> Reply:
    return Reply(200, {"action": call.backend.action(int(call.path["action_id"])).render()})


# -- load balancers ---------------------------------------------------------------------------


def _lb_body(call: Call, lb_id: str) -> dict[str, Any]:
    lb = call.backend.load_balancer(lb_id)
    return {"load_balancer": lb.render(call.backend.lb_droplet_ids(lb))}


def load_balancers_create(call: Call) -> Reply:
    lb = call.backend.create_load_balancer(call.body)
    return Reply(202, _lb_body(call, lb.id))


def load_balancers_list(call: Call) -> Reply:
    backend = call.backend
    found = list(backend.load_balancers.values())
    return _paged(call, "load_balancers", found, lambda lb: lb.render(backend.lb_droplet_ids(lb)))


def load_balancers_get(call: Call) -> Reply:
    return Reply(200, _lb_body(call, call.path["lb_id"]))


def load_balancers_update(call: Call) -> Reply:
    lb = call.backend.update_load_balancer(call.path["lb_id"], call.body)
    return Reply(200, _lb_body(call, lb.id))


def load_balancers_delete(call: Call) -> Reply:
    call.backend.delete_load_balancer(call.path["lb_id"])
    return Reply(204)


def load_balancers_add_droplets(call: Call) -> Reply:
    call.backend.add_lb_droplets(call.path["lb_id"], list(call.body.get("droplet_ids", [])))
    return Reply(204)


def load_balancers_remove_droplets(call: Call) -> Reply:
    call.backend.remove_lb_droplets(call.path["lb_id"], list(call.body.get("droplet_ids", [])))
    return Reply(204)


def load_balancers_add_rules(call: Call) -> Reply:
    call.backend.add_lb_rules(call.path["lb_id"], list(call.body["forwarding_rules"]))
    return Reply(204)


def load_balancers_remove_rules(call: Call) -> Reply:
    call.backend.remove_lb_rules(call.path["lb_id"], list(call.body["forwarding_rules"]))
    return Reply(204)


# -- tags -------------------------------------------------------------------------------------


def _tag_body(call: Call, name: str) -> dict[str, Any]:
    return render_tag(name, call.backend.tagged_droplets(name), call.base_url)


def tags_list(call: Call) -> Reply:
    return _paged(call, "tags", list(call.backend.tags), lambda name: _tag_body(call, name))


def tags_create(call: Call) -> Reply:
    name = call.backend.create_tag(call.body["name"])
    return Reply(201, {"tag": _tag_body(call, name)})


def tags_get(call: Call) -> Reply:
    return Reply(200, {"tag": _tag_body(call, call.backend.tag(call.path["tag_id"]))})


def tags_delete(call: Call) -> Reply:
    call.backend.delete_tag(call.path["tag_id"])
    return Reply(204)


def tags_assign_resources(call: Call) -> Reply:
    call.backend.tag_resources(call.path["tag_id"], call.body["resources"], add=True)
    return Reply(204)


def tags_unassign_resources(call: Call) -> Reply:
    call.backend.tag_resources(call.path["tag_id"], call.body["resources"], add=False)
    return Reply(204)


# -- certificates -----------------------------------------------------------------------------


def certificates_list(call: Call) -> Reply:
    found = call.backend.list_certificates(call.query.get("name") or None)
    return _paged(call, "certificates", found, lambda c: c.render())


def certificates_create(call: Call) -> Reply:
    return Reply(201, {"certificate": call.backend.create_certificate(call.body).render()})


def certificates_get(call: Call) -> Reply:
    certificate = call.backend.certificate(call.path["certificate_id"])
    return Reply(200, {"certificate": certificate.render()})


def certificates_delete(call: Call) -> Reply:
    call.backend.delete_certificate(call.path["certificate_id"])
    return Reply(204)


# -- firewalls --------------------------------------------------------------------------------


def firewalls_list(call: Call) -> Reply:
    return _paged(call, "firewalls", list(call.backend.firewalls.values()), lambda f: f.render())


def firewalls_create(call: Call) -> Reply:
    return Reply(202, {"firewall": call.backend.create_firewall(call.body).render()})


def firewalls_get(call: Call) -> Reply:
    return Reply(200, {"firewall": call.backend.firewall(call.path["firewall_id"]).render()})


def firewalls_update(call: Call) -> Reply:
    firewall = call.backend.update_firewall(call.path["firewall_id"], call.body)
    return Reply(200, {"firewall": firewall.render()})


def firewalls_delete(call: Call) -> Reply:
    call.backend.delete_firewall(call.path["firewall_id"])
    return Reply(204)


# -- VPCs -------------------------------------------------------------------------------------


def vpcs_list(call: Call) -> Reply:
    return _paged(call, "vpcs", list(call.backend.vpcs.values()), lambda v: v.render())


def vpcs_create(call: Call) -> Reply:
    return Reply(201, {"vpc": call.backend.create_vpc(call.body).render()})


def vpcs_get(call: Call) -> Reply:
    return Reply(200, {"vpc": call.backend.vpc(call.path["vpc_id"]).render()})


def vpcs_delete(call: Call) -> Reply:
    call.backend.delete_vpc(call.path["vpc_id"])
    return Reply(204)
