"""The ``cluster-tags`` controller: upstream's tags syncer (cloud-controller-manager/do/
resources.go@v0.1.68), run when ``DO_CLUSTER_ID`` is set.

At the start of each term and every :data:`SYNC_PERIOD` after, the load balancer of every
``type: LoadBalancer`` Service (found by its id annotation, else by its name: the ``name``
annotation or the default ``a<uid>``, as upstream's findLoadBalancerID) is tagged
``k8s:<DO_CLUSTER_ID>``, the tag by which upstream (and ``polyccm orphans``) know this cluster's
load balancers. The tag is made first when DigitalOcean does not have it yet. Only load
balancers that lack the tag are sent (upstream resends them all; the state is the same).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from polyccm.cloud import default_load_balancer_name
from polyccm.controllers import Controller, ControllerContext, Service, guarded, run_periodically

from polyccm_digitalocean.annotations import LOAD_BALANCER_ID, NAME
from polyccm_digitalocean.api import DigitalOceanApi, NotFound
from polyccm_digitalocean.orphans import cluster_tag
from polyccm_digitalocean.provider import DigitalOceanProvider

log = logging.getLogger(__name__)

CONTROLLER = "cluster-tags"
#: Seconds between two passes (resources.go:37, controllerSyncTagsPeriod).
SYNC_PERIOD = 15 * 60


def untagged_load_balancers(
    services: Iterable[Service], balancers: Iterable[dict[str, Any]], tag: str
) -> list[str]:
    """The ids of the Services' load balancers that lack ``tag`` (resources.go:160-176)."""
    # Only what is needed is kept: a listing's load balancers carry every droplet id.
    by_id = {str(b.get("id")): {k: b.get(k) for k in ("id", "name", "tags")} for b in balancers}
    by_name = {str(b.get("name")): b for b in by_id.values()}
    found: dict[str, None] = {}
    for service in services:
        if service.type != "LoadBalancer":
            continue
        lb_id = service.annotations.get(LOAD_BALANCER_ID, "").strip()
        names = (service.annotations.get(NAME, ""), default_load_balancer_name(service))
        balancer = by_id.get(lb_id) if lb_id else next(
            (by_name[n] for n in names if n and n in by_name), None
        )  # fmt: skip
        if balancer is not None and tag not in (balancer.get("tags") or []):
            found[str(balancer["id"])] = None
    return list(found)


def tag_load_balancers(api: DigitalOceanApi, tag: str, lb_ids: list[str]) -> None:
    """Tag ``lb_ids`` with ``tag``, making the tag when it does not exist yet
    (resources.go:194-230)."""
    body = {"resources": [{"resource_id": i, "resource_type": "load_balancer"} for i in lb_ids]}
    try:
        api.call("tags.assign_resources", tag_id=tag, body=body)
    except NotFound:
        api.call("tags.create", body={"name": tag})
        api.call("tags.assign_resources", tag_id=tag, body=body)


class ClusterTagsController(Controller):
    """Keeps this cluster's load balancers tagged ``k8s:<DO_CLUSTER_ID>``."""

    name = CONTROLLER

    def __init__(self, context: ControllerContext, provider: DigitalOceanProvider) -> None:
        self.context = context
        self.api = provider.api
        self.tag = cluster_tag(provider.config.cluster_id)

    @classmethod
    def for_term(cls, context: ControllerContext) -> ClusterTagsController | None:
        """The controller, when the provider is DigitalOcean's and knows its cluster id
        (resources.go:135-140: no id, no syncer)."""
        provider = context.provider
        if not isinstance(provider, DigitalOceanProvider) or not provider.config.cluster_id:
            log.info("%s: DO_CLUSTER_ID is not set: no load balancer is tagged", CONTROLLER)
            return None
        return cls(context, provider)

    def run(self, stop: threading.Event) -> None:
        while not self.context.services.wait_for_sync(1.0):
            if stop.is_set():
                return
        if guarded(self.name, "tag sync", self.sync):
            run_periodically(self.name, "tag sync", self.sync, SYNC_PERIOD, stop)

    def sync(self) -> list[str]:
        """Tag the Services' load balancers that lack the tag; their ids."""
        services = [Service(raw) for raw in self.context.services.list()]
        if not any(s.type == "LoadBalancer" for s in services):
            return []
        balancers = self.api.pages("load_balancers.list", "load_balancers")
        lb_ids = untagged_load_balancers(services, balancers, self.tag)
        if lb_ids:
            tag_load_balancers(self.api, self.tag, lb_ids)
            log.info("%s: tagged %d load balancer(s) %s", self.name, len(lb_ids), self.tag)
        return lb_ids
