"""The ``cluster-tags`` controller (upstream's tags syncer) against the real kube-apiserver and
the emulator: with ``DO_CLUSTER_ID`` the load balancers of LoadBalancer Services, found by id
annotation or by name, are tagged ``k8s:<DO_CLUSTER_ID>`` (the tag made first when missing);
others are left alone."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from polyccm.cloud import default_load_balancer_name
from polyccm.kube.api import KubeApi
from polyccm.objects import Service
from polyccm_digitalocean import annotations as ann
from polyccm_digitalocean_emulator.testing import (
    DigitalOceanApi,
    provider_for,
    upstream_load_balancer,
)
from polyccm_testing.controllers import provider_controllers, registered_controller
from polyccm_testing.kubeobjects import make_service, wait_for

CLUSTER_ID = "c0ffee00-0000-4000-8000-000000000001"
TAG = f"k8s:{CLUSTER_ID}"


@contextmanager
def tags_term(kube_api: KubeApi, provider: Any) -> Iterator[Any]:
    """The provider's ``cluster-tags`` controller, as the plugin registers it, in a term of
    its own as the manager runs it."""
    constructor = registered_controller("digitalocean", "cluster-tags")
    with provider_controllers(kube_api, provider, constructor) as (controller,):
        yield controller


def tags_of(cloud: DigitalOceanApi, lb_id: str) -> list[str]:
    return list(cloud.ok("GET", f"/v2/load_balancers/{lb_id}")["load_balancer"].get("tags") or [])


def test_the_services_load_balancers_are_tagged_with_the_cluster_id(
    do: Mapping[str, str], kube_api: KubeApi, namespace: str
) -> None:
    # resources.go:134-230@v0.1.68 (Run, syncTags, tagResources): with a cluster id, every
    # LoadBalancer Service's load balancer (findLoadBalancerID, loadbalancers.go:506-518: the id
    # annotation, else the name) is tagged buildK8sTag(clusterID) (loadbalancers.go:98-100),
    # the tag created when the API answers 404 (resources.go:199-214).
    provider = provider_for(do, DO_CLUSTER_ID=CLUSTER_ID)
    cloud = DigitalOceanApi(do)
    backends = [d["id"] for d in cloud.create_droplets(1, prefix="tags")]
    by_name = Service(make_service(kube_api, namespace, "by-name"))
    named = upstream_load_balancer(cloud, default_load_balancer_name(by_name), backends, {80: 1})
    by_id = upstream_load_balancer(cloud, "hand-named", backends, {80: 2})
    make_service(kube_api, namespace, "by-id", lambda s: s["metadata"]["annotations"].update(
        {ann.LOAD_BALANCER_ID: by_id["id"]}))  # fmt: skip
    stranger = upstream_load_balancer(cloud, "a" + uuid.uuid4().hex[:31], backends, {80: 3})
    assert TAG not in {t["name"] for t in cloud.ok("GET", "/v2/tags")["tags"]}

    with tags_term(kube_api, provider) as controller:
        wait_for(lambda: TAG in tags_of(cloud, named["id"]) and TAG in tags_of(cloud, by_id["id"]),
                 what="both load balancers tagged")  # fmt: skip
        assert TAG not in tags_of(cloud, stranger["id"]), "a load balancer of no Service"
        assert controller.sync() == [], "tagged load balancers were sent again"
