"""``polyccm orphans`` for DigitalOcean: the cluster's load balancers that no Service accounts
for (DO #224: renamed or re-created Services left one behind).

DigitalOcean's API, as its OpenAPI document publishes it, has no tags on load balancers, and
neither polyccm nor upstream's CCM without ``DO_CLUSTER_ID`` marks them otherwise. So a load
balancer is this cluster's only when one of these holds (:func:`cluster_mark`):

* it carries the tag ``k8s:<DO_CLUSTER_ID>`` that upstream's CCM sets when it knows the cluster
  id (read when the API returns ``tags``; a load balancer tagged for another cluster id is
  never this cluster's), or
* it has the name ``a`` + 31 hex digits that upstream and polyccm give a Service's load
  balancer by default, AND it sends traffic to droplets that are all nodes of this cluster
  (at least one).

Anything else (a hand-made load balancer, one of another cluster in the account, one whose
backends are gone) is never listed, however orphaned it looks. A Service accounts for a load
balancer while it claims one (:func:`~polyccm.ops.contract.claims_load_balancer`) and the load
balancer has its id annotation, its ``name`` annotation or its default name.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence

from polyccm.cloud import default_load_balancer_name
from polyccm.errors import CloudError
from polyccm.objects import Node, Service
from polyccm.ops.contract import CloudResource, Orphans, claims_load_balancer

from polyccm_digitalocean.annotations import LOAD_BALANCER_ID, NAME
from polyccm_digitalocean.api import DigitalOceanApi, NotFound
from polyccm_digitalocean.instances import droplet_id_from_provider_id
from polyccm_digitalocean.load_balancer import Balancer

LOAD_BALANCER = "load-balancer"
#: The default name of a Service's load balancer: ``a`` + its UID without dashes, 32 long.
DEFAULT_NAME = re.compile(r"a[0-9a-f]{31}")
#: Upstream's cluster tag is this prefix + the cluster id (``buildK8sTag``).
CLUSTER_TAG_PREFIX = "k8s:"


def cluster_tag(cluster_id: str) -> str:
    """Upstream's tag for cluster ``cluster_id`` (empty without an id)."""
    return CLUSTER_TAG_PREFIX + cluster_id if cluster_id else ""


def cluster_mark(balancer: Balancer, node_droplets: Iterable[int], tag: str) -> str | None:
    """Why ``balancer`` is this cluster's (see the module's doc), or ``None``. ``node_droplets``
    are the droplets of the cluster's nodes; ``tag`` is :func:`cluster_tag` or empty."""
    tags = [str(t) for t in balancer.get("tags") or ()]
    if tag and tag in tags:
        return f"tag {tag}"
    if any(t.startswith(CLUSTER_TAG_PREFIX) for t in tags):
        return None  # another cluster's
    droplets = sorted(set(balancer.get("droplet_ids") or ()))
    if not DEFAULT_NAME.fullmatch(str(balancer.get("name", ""))) or not droplets:
        return None
    if not set(droplets) <= set(node_droplets):
        return None
    return f"name a<uid>, backends {', '.join(map(str, droplets))} are this cluster's nodes"


class DigitalOceanOrphans(Orphans):
    """Finds and deletes this cluster's leaked load balancers."""

    def __init__(self, api: DigitalOceanApi, *, cluster_id: str = "") -> None:
        self._api = api
        self._tag = cluster_tag(cluster_id)

    def find_orphans(
        self, cluster_name: str, services: Sequence[Service], nodes: Sequence[Node]
    ) -> list[CloudResource]:
        droplets = {droplet_id_from_provider_id(node.provider_id) for node in nodes}
        node_droplets = {d for d in droplets if d is not None}
        claiming = [s for s in services if claims_load_balancer(s)]
        ids = {s.annotations.get(LOAD_BALANCER_ID, "").strip() for s in claiming}
        names = {default_load_balancer_name(s) for s in claiming}
        names |= {s.annotations.get(NAME, "").strip() for s in claiming}
        found: list[CloudResource] = []
        for balancer in self._api.pages("load_balancers.list", "load_balancers"):
            mark = cluster_mark(balancer, node_droplets, self._tag)
            lb_id, name = str(balancer["id"]), str(balancer.get("name", ""))
            if mark is None or lb_id in ids or name in names:
                continue
            found.append(
                CloudResource(
                    kind=LOAD_BALANCER,
                    id=lb_id,
                    name=name,
                    mark=mark,
                    reason=_unclaimed(lb_id, name, services),
                    details={
                        "droplets": ",".join(map(str, sorted(balancer.get("droplet_ids") or ()))),
                        "region": str((balancer.get("region") or {}).get("slug", "")),
                    },
                )
            )
        return found

    def delete_orphan(self, cluster_name: str, resource: CloudResource) -> None:
        if resource.kind != LOAD_BALANCER:
            raise CloudError(f"unknown kind of resource {resource.kind!r}")
        try:
            balancer = self._api.call("load_balancers.get", lb_id=resource.id)["load_balancer"]
        except NotFound:
            return  # gone already: what was asked
        # The backends found then were this cluster's nodes; they must still be.
        listed = {int(d) for d in resource.details.get("droplets", "").split(",") if d}
        if balancer.get("name") != resource.name or not cluster_mark(balancer, listed, self._tag):
            raise CloudError(
                f"load balancer {resource.name} ({resource.id}) changed since it was found "
                "and no longer carries this cluster's marks; kept"
            )
        with contextlib.suppress(NotFound):
            self._api.call("load_balancers.delete", lb_id=resource.id)


def _unclaimed(lb_id: str, name: str, services: Iterable[Service]) -> str:
    """Why no Service accounts for load balancer ``lb_id`` named ``name``."""
    for service in services:
        if lb_id == service.annotations.get(LOAD_BALANCER_ID, "").strip() or name in (
            default_load_balancer_name(service),
            service.annotations.get(NAME, "").strip(),
        ):
            return f"service {service.key} no longer wants a load balancer"
    if DEFAULT_NAME.fullmatch(name):
        return f"no Service has a uid starting {name[1:9]} (deleted, or created again)"
    return "no Service has its id annotation or its name"
