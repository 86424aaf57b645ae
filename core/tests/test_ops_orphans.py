"""``polyccm orphans`` against the real kube-apiserver and the fake cloud: it lists exactly the
load balancers of this cluster that no Service claims, deletes exactly those with ``--delete``
(after a confirmation, or ``--yes``), and never touches another cluster's. The reason a
provider gives for an orphan (``unclaimed_reason``) tells a deleted Service from one made again
and from one that wants no load balancer any more."""

from __future__ import annotations

import pytest
from polyccm.cloud import default_load_balancer_name
from polyccm.kube.api import MERGE_PATCH, SERVICES, KubeApi
from polyccm.objects import LOAD_BALANCER_FINALIZER, Service
from polyccm.ops.orphans import unclaimed_reason
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.fake import FakeCloud, FakeLoadBalancer
from polyccm_testing.fake_main import FakeCloudPlugin
from polyccm_testing.kubeobjects import make_service
from polyccm_testing.opstools import CommandResult, listed_orphans, run_command


def orphans(
    cloud: FakeCloud, control_plane: ControlPlane, *extra: str, stdin: str = ""
) -> CommandResult:
    return run_command(
        "orphans",
        "fake",
        control_plane.kubeconfig,
        "--controllers=*,-route",
        *extra,
        plugins=[FakeCloudPlugin(cloud)],
        stdin=stdin,
    )


@pytest.fixture
def leaky(kube_api: KubeApi, namespace: str) -> FakeCloud:
    """A cloud with: a live service's load balancer, one whose Service was deleted (leaked),
    one whose Service left LoadBalancer without the finalizer (leaked), one held by a
    finalizer (its controller deletes it: not an orphan), and another cluster's."""
    cloud = FakeCloud()
    for name in ("live", "deleted", "retyped", "finalising"):
        make_service(kube_api, namespace, name)
        service = Service(kube_api.get(SERVICES, name, namespace))
        cloud.ensure_load_balancer("kubernetes", service, [])
    kube_api.delete(SERVICES, "deleted", namespace)
    kube_api.patch(
        SERVICES, "retyped", {"spec": {"type": "ClusterIP"}}, namespace, patch_type=MERGE_PATCH
    )
    kube_api.patch(
        SERVICES,
        "finalising",
        {"metadata": {"finalizers": [LOAD_BALANCER_FINALIZER]}, "spec": {"type": "ClusterIP"}},
        namespace,
        patch_type=MERGE_PATCH,
    )
    cloud.load_balancers["foreign"] = FakeLoadBalancer(
        "foreign", "other/web", (80,), (), "192.0.2.99", cluster="another"
    )
    return cloud


def test_lists_exactly_the_leaked_load_balancers(
    leaky: FakeCloud, control_plane: ControlPlane, namespace: str
) -> None:
    result = orphans(leaky, control_plane, "-o", "json")

    assert result.status == 1, result
    found = {o["reason"].split("made for ")[1].rstrip(")") for o in listed_orphans(result)}
    assert found == {f"{namespace}/deleted", f"{namespace}/retyped"}
    assert len(leaky.load_balancers) == 5
    assert leaky.writes == 4  # the four ensures of the fixture, nothing since


def test_delete_with_yes_deletes_exactly_those_and_reports_each(
    leaky: FakeCloud, control_plane: ControlPlane, namespace: str
) -> None:
    result = orphans(leaky, control_plane, "--delete", "--yes")

    assert result.status == 0, result
    deleted = [line for line in result.stdout.splitlines() if line.startswith("deleted ")]
    assert len(deleted) == 2
    left = {b.service_key for b in leaky.load_balancers.values()}
    assert left == {f"{namespace}/live", f"{namespace}/finalising", "other/web"}
    assert orphans(leaky, control_plane).status == 0


def test_delete_asks_first_and_a_no_keeps_everything(
    leaky: FakeCloud, control_plane: ControlPlane
) -> None:
    result = orphans(leaky, control_plane, "--delete", stdin="no\n")

    assert result.status == 1
    assert "Delete these 2 cloud resources?" in result.stderr
    assert "Nothing deleted." in result.stderr
    assert len(leaky.load_balancers) == 5

    confirmed = orphans(leaky, control_plane, "--delete", stdin="yes\n")
    assert confirmed.status == 0
    assert len(leaky.load_balancers) == 3


def test_nothing_leaked_exits_0(control_plane: ControlPlane) -> None:
    result = orphans(FakeCloud(), control_plane)

    assert result.status == 0
    assert result.stdout == "No orphaned cloud resources.\n"


class NoOrphans(FakeCloud):
    def orphans(self) -> None:
        return None


def test_a_provider_without_orphans_is_not_supported(control_plane: ControlPlane) -> None:
    result = orphans(NoOrphans(), control_plane)

    assert result.status == 2
    assert result.stderr == "polyccm orphans: error: not supported by provider fake\n"


def _service(name: str, uid: str, kind: str = "LoadBalancer") -> Service:
    metadata = {"name": name, "namespace": "shop", "uid": uid}
    return Service({"metadata": metadata, "spec": {"type": kind}})


def test_the_reason_tells_gone_from_made_again_from_no_longer_wanted() -> None:
    first_web = _service("web", "11111111-0000-4000-8000-000000000000")
    services = [
        _service("web", "22222222-0000-4000-8000-000000000000"),
        _service("old", "33333333-0000-4000-8000-000000000000", kind="ClusterIP"),
    ]
    name_of = default_load_balancer_name

    def reason(made_for: Service) -> str:
        return unclaimed_reason(name_of(made_for), made_for.key, services, name_of)

    assert reason(first_web) == (
        "service shop/web was created again (its uid is now 22222222-0000-4000-8000-000000000000)"
    )
    assert reason(services[1]) == "service shop/old no longer wants a load balancer"
    assert reason(_service("gone", "44444444-0000-4000-8000-000000000000")) == (
        "service shop/gone no longer exists"
    )
    assert unclaimed_reason("a1", "", services, name_of) == "made for no known service"
