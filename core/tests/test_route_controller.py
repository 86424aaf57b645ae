"""Route controller, against the real API server and the fake cloud (UPSTREAM.md "Route
controller")."""

from __future__ import annotations

from typing import Any

from polyccm.cloud import NodeAddress, Route
from polyccm.kube.api import NODES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_testing.fake import FakeCloud
from polyccm_testing.kubeobjects import make_node, reasons_for, stays, wait_for


def network_condition(api: KubeApi, name: str) -> tuple[str, str] | None:
    for condition in Node(api.get(NODES, name)).raw["status"].get("conditions") or ():
        if condition["type"] == "NetworkUnavailable":
            return condition["status"], condition["reason"]
    return None


def routes(cloud: FakeCloud) -> set[tuple[str, str]]:
    return {(r.target_node, r.destination_cidr) for r in cloud.cloud_routes.values()}


def test_a_route_per_pod_cidr_and_network_condition_set(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    for i, cidrs in enumerate((("10.244.1.0/24",), ("10.244.2.0/24", "fd00:10:244:2::/64"))):
        instance = fake_cloud.add_instance(f"r{i}")
        make_node(
            kube_api, f"r{i}", tainted=False, provider_id=instance.provider_id, pod_cidrs=cidrs
        )
    start_manager(fake_cloud)
    wait_for(
        lambda: (
            routes(fake_cloud)
            == {("r0", "10.244.1.0/24"), ("r1", "10.244.2.0/24"), ("r1", "fd00:10:244:2::/64")}
        )
    )
    uid = Node(kube_api.get(NODES, "r0")).uid
    assert any(uid in name for name in fake_cloud.cloud_routes), "name hint is the node UID"
    wait_for(lambda: network_condition(kube_api, "r0") == ("False", "RouteCreated"))
    wait_for(lambda: network_condition(kube_api, "r1") == ("False", "RouteCreated"))


def test_stale_routes_are_deleted_only_inside_the_cluster_cidr(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    instance = fake_cloud.add_instance("keep")
    make_node(
        kube_api,
        "keep",
        tainted=False,
        provider_id=instance.provider_id,
        pod_cidrs=("10.244.5.0/24",),
    )
    fake_cloud.cloud_routes.update(
        {
            "stale": Route("stale", "keep", "10.244.9.0/24"),
            "foreign": Route("foreign", "keep", "192.168.0.0/24"),
            "orphan": Route("orphan", "vanished", "10.244.7.0/24"),
        }
    )
    start_manager(fake_cloud)
    wait_for(lambda: routes(fake_cloud) == {("keep", "10.244.5.0/24"), ("keep", "192.168.0.0/24")})
    assert "foreign" in fake_cloud.cloud_routes, "routes outside --cluster-cidr are untouched"


def test_failed_route_creation_warns_and_marks_network_unavailable(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    instance = fake_cloud.add_instance("unlucky")
    make_node(
        kube_api,
        "unlucky",
        tainted=False,
        provider_id=instance.provider_id,
        pod_cidrs=("10.244.3.0/24",),
    )
    fake_cloud.fail_always("create_route", RuntimeError("route quota exceeded"))
    start_manager(fake_cloud)
    wait_for(lambda: "FailedToCreateRoute" in reasons_for(kube_api, "default", "unlucky"))
    wait_for(lambda: network_condition(kube_api, "unlucky") == ("True", "NoRouteCreated"))
    fake_cloud.fail_always("create_route", None)
    wait_for(
        lambda: network_condition(kube_api, "unlucky") == ("False", "RouteCreated"), timeout=15
    )


def test_new_pod_cidr_is_routed_without_waiting_for_the_period(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    instance = fake_cloud.add_instance("late")
    make_node(kube_api, "late", tainted=False, provider_id=instance.provider_id)
    start_manager(fake_cloud, route_reconciliation_period=3600.0)
    kube_api.patch(
        NODES, "late", {"spec": {"podCIDR": "10.244.8.0/24", "podCIDRs": ["10.244.8.0/24"]}}
    )
    wait_for(lambda: ("late", "10.244.8.0/24") in routes(fake_cloud), timeout=10)


def test_steady_state_lists_routes_once_per_period_and_writes_nothing(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    instance = fake_cloud.add_instance("steady")
    make_node(
        kube_api,
        "steady",
        tainted=False,
        provider_id=instance.provider_id,
        pod_cidrs=("10.244.4.0/24",),
    )
    start_manager(fake_cloud, route_reconciliation_period=1.0)
    wait_for(lambda: network_condition(kube_api, "steady") == ("False", "RouteCreated"))
    version = Node(kube_api.get(NODES, "steady")).resource_version
    creates = fake_cloud.count("create_route")
    assert stays(lambda: fake_cloud.count("create_route") == creates, 2.5)
    assert Node(kube_api.get(NODES, "steady")).resource_version == version
    assert fake_cloud.count("list_routes") <= 6


def test_the_provider_is_given_the_node_each_route_is_for(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # The instance's address is the node's (the cloud-node controller's first status pass, at
    # start, would otherwise rewrite the node's addresses).
    instance = fake_cloud.add_instance(
        "gce-like", addresses=(NodeAddress("InternalIP", "10.0.0.6"),)
    )
    make_node(
        kube_api,
        "gce-like",
        tainted=False,
        provider_id=instance.provider_id,
        pod_cidrs=("10.244.6.0/24",),
        addresses=(("InternalIP", "10.0.0.6"),),
    )
    start_manager(fake_cloud)
    wait_for(lambda: fake_cloud.route_targets, what="a route created")

    ((name, target),) = fake_cloud.route_targets.items()
    assert target.name == "gce-like" and target.uid in name
    assert target.provider_id == instance.provider_id, "GCE finds zone and instance by it"
    assert ("InternalIP", "10.0.0.6") in target.addresses


def test_a_new_nodes_network_condition_is_the_route_controllers_alone(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    fake_cloud.add_instance("newcomer")
    make_node(kube_api, "newcomer")  # tainted, no pod CIDR allocated yet
    start_manager(fake_cloud)

    def initialised() -> bool:
        return not Node(kube_api.get(NODES, "newcomer")).has_taint(UNINITIALIZED_TAINT)

    wait_for(initialised, what="the node initialised")
    # The cloud-node controller sets no condition (upstream removed NoRouteCreated from it:
    # kubernetes c11e2ae, cloud-provider 133934d), and a node without a pod CIDR has no route.
    assert stays(lambda: network_condition(kube_api, "newcomer") is None, 1.5)

    kube_api.patch(
        NODES, "newcomer", {"spec": {"podCIDR": "10.244.9.0/24", "podCIDRs": ["10.244.9.0/24"]}}
    )
    wait_for(lambda: ("newcomer", "10.244.9.0/24") in routes(fake_cloud), what="its route")
    wait_for(
        lambda: network_condition(kube_api, "newcomer") == ("False", "RouteCreated"),
        what="the route controller to flip the condition",
    )


def test_a_route_is_the_clusters_when_its_first_or_last_address_is_in_a_cluster_cidr(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # Upstream deletes a route it does not want when the first or the last address of its
    # destination lies in a cluster CIDR (isResponsibleForRoute,
    # controllers/route/route_controller.go:549-568@v0.35.4, used at :361-364), not only when
    # the whole destination does.
    instance = fake_cloud.add_instance("owner")
    make_node(
        kube_api,
        "owner",
        tainted=False,
        provider_id=instance.provider_id,
        pod_cidrs=("10.244.5.0/24",),
    )
    fake_cloud.cloud_routes.update(
        {
            # 10.244.0.0-10.245.255.255: begins in 10.244.0.0/16.
            "begins-inside": Route("begins-inside", "owner", "10.244.0.0/15"),
            # fd00:10:245::-fd00:10:245:1:ffff:ffff:ffff:ffff: ends in fd00:10:245:1::/64.
            "ends-inside": Route("ends-inside", "owner", "fd00:10:245::/63"),
            # 10.240.0.0-10.255.255.255 holds 10.244.0.0/16 but neither end is in it.
            "around": Route("around", "owner", "10.240.0.0/12"),
            "foreign": Route("foreign", "owner", "192.168.0.0/24"),
        }
    )
    start_manager(fake_cloud, cluster_cidrs=("10.244.0.0/16", "fd00:10:245:1::/64"))
    wait_for(
        lambda: (
            routes(fake_cloud)
            == {
                ("owner", "10.244.5.0/24"),
                ("owner", "10.240.0.0/12"),
                ("owner", "192.168.0.0/24"),
            }
        ),
        what="the routes that begin or end in a cluster CIDR deleted, and only those",
    )
    assert stays(lambda: {"around", "foreign"} <= set(fake_cloud.cloud_routes), 1.5)


def test_a_network_condition_another_component_wrote_is_taken_over(
    kube_api: KubeApi, fake_cloud: FakeCloud, start_manager: Any
) -> None:
    # Upstream leaves NetworkUnavailable alone only when both its status and its reason are
    # what it would write (controllers/route/route_controller.go:505,510@v0.36.2; v0.35.4
    # compared the status only, :500,505), and writes False/RouteCreated "RouteController
    # created a route" or True/NoRouteCreated "RouteController failed to create a route"
    # (:524-539@v0.36.2, :519-534@v0.35.4).
    for name, cidr, status, reason in (
        ("cni-up", "10.244.11.0/24", "False", "CalicoIsUp"),
        ("cni-down", "10.244.12.0/24", "True", "CalicoIsDown"),
    ):
        instance = fake_cloud.add_instance(name)
        make_node(
            kube_api, name, tainted=False, provider_id=instance.provider_id, pod_cidrs=(cidr,)
        )
        condition = {"type": "NetworkUnavailable", "status": status, "reason": reason}
        kube_api.patch(NODES, name, {"status": {"conditions": [condition]}}, subresource="status")

    def refuse(subjects: tuple[str, ...]) -> None:
        if subjects[0] == "cni-down":
            raise RuntimeError("route quota exceeded")

    fake_cloud.observe("create_route", refuse)
    start_manager(fake_cloud)

    def condition(name: str) -> tuple[str, str, str] | None:
        for found in Node(kube_api.get(NODES, name)).raw["status"].get("conditions") or ():
            if found["type"] == "NetworkUnavailable":
                return found["status"], found["reason"], found.get("message", "")
        return None

    wait_for(
        lambda: condition("cni-up") == ("False", "RouteCreated", "RouteController created a route"),
        what="the route controller's own False condition",
    )
    wait_for(
        lambda: (
            condition("cni-down")
            == ("True", "NoRouteCreated", "RouteController failed to create a route")
        ),
        what="the route controller's own True condition",
    )
