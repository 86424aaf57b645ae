"""The conformance kit run on the reference fake cloud: every promise holds. And the kit
catches a provider that breaks one: run on a fake cloud broken in one way, exactly the matching
test fails, with a message that says what went wrong."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from polyccm_testing.conformance import (
    CloudUnderTest,
    FakeCloudUnderTest,
    OperatorToolsConformance,
    ProviderConformance,
)
from polyccm_testing.pytest_plugin import STATE_DIR_VARIABLE

pytest_plugins = ("pytester",)


class TestFakeCloudConformance(ProviderConformance, OperatorToolsConformance):
    @pytest.fixture
    def cloud(self) -> CloudUnderTest:
        return FakeCloudUnderTest()


# Each broken cloud: the kit class it is run with, the FakeCloud methods it overrides, the one
# test that must fail and a line of its failure report.
BROKEN = {
    "second ensure writes again": (
        "LoadBalancerConformance",
        """
        def ensure_load_balancer(self, cluster_name, service, nodes):
            status = super().ensure_load_balancer(cluster_name, service, nodes)
            self.writes += 1  # re-sends its whole configuration every time
            return status
        """,
        "test_load_balancer_ensure_twice_makes_nothing_more_and_writes_nothing",
        "*the second ensure wrote to the cloud*",
    ),
    "delete leaves the load balancer": (
        "LoadBalancerConformance",
        """
        def ensure_load_balancer_deleted(self, cluster_name, service):
            pass  # forgets to delete
        """,
        "test_load_balancer_delete_removes_everything_ensure_made",
        "*left behind: *",
    ),
    "update leaves removed nodes behind": (
        "LoadBalancerConformance",
        """
        def update_load_balancer(self, cluster_name, service, nodes):
            balancer = self.balancer_for(service.key)
            kept = list(nodes) + [self.instances[name] for name in balancer.backends]
            balancer.backends = tuple(sorted({n.name for n in kept}))  # only ever adds
        """,
        "test_load_balancer_update_changes_only_the_backends",
        "*backends *; expected the nodes *",
    ),
    "nodes found by name only": (
        "InstancesConformance",
        """
        def _find(self, node):
            instance = self.instances.get(node.name)  # ignores the providerID
            if instance is None:
                raise InstanceNotFound(node.name)
            return instance
        """,
        "test_instances_a_node_is_found_by_provider_id_whatever_its_name",
        "*not found by its providerID*",
    ),
    "route to a gone instance stays live": (
        "RoutesConformance",
        """
        def list_routes(self, cluster_name):
            routes = self.cloud_routes.values()
            return [Route(r.name, r.target_node, r.destination_cidr) for r in routes]
        """,
        "test_routes_a_route_to_a_gone_instance_is_blackholed_or_gone",
        "*a route to a gone instance is live*",
    ),
}

TEST_MODULE = """
import pytest
from polyccm.cloud import Route
from polyccm.errors import InstanceNotFound
from polyccm_testing.conformance import FakeCloudUnderTest, {kit}
from polyccm_testing.fake import FakeCloud


class BrokenCloud(FakeCloud):
{methods}


class TestBrokenCloud({kit}):
    @pytest.fixture
    def cloud(self):
        return FakeCloudUnderTest(BrokenCloud())
"""


def run_kit(pytester: pytest.Pytester, control_plane: Any, kit: str, methods: str) -> Any:
    """Run the kit class ``kit`` on a FakeCloud with ``methods``, in-process, on this
    session's control plane."""
    pytester.makepyfile(
        test_broken=TEST_MODULE.format(
            kit=kit, methods=textwrap.indent(textwrap.dedent(methods).strip(), "    ")
        )
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STATE_DIR_VARIABLE, str(control_plane.state_dir))
        return pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-rfs")


@pytest.mark.parametrize("broken", list(BROKEN))
def test_the_kit_fails_a_cloud_that_breaks_a_promise(
    broken: str, pytester: pytest.Pytester, control_plane: Any
) -> None:
    kit, methods, failing, message = BROKEN[broken]

    result = run_kit(pytester, control_plane, kit, methods)

    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1, result.stdout.str()
    assert outcomes.get("passed", 0) >= 3
    result.stdout.fnmatch_lines([message, f"FAILED *::TestBrokenCloud::{failing}*"])


def test_a_capability_the_provider_lacks_skips_its_tests_naming_it(
    pytester: pytest.Pytester, control_plane: Any
) -> None:
    methods = """
        def routes(self):
            return None
    """

    result = run_kit(pytester, control_plane, "RoutesConformance", methods)

    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines(["*provider fake does not offer Routes: routes() returned None*"])
