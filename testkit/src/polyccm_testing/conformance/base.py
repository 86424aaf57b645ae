"""What every conformance class shares: the term fixture, and capability look-ups that skip.

The provider's test class supplies one fixture, ``cloud`` (a
:class:`~polyccm_testing.conformance.CloudUnderTest`); the kit's own fixtures are prefixed
``kit_`` so that they do not collide with a provider's. A capability the provider does not
offer makes the tests that need it skip, with a message naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import pytest
from polyccm.kube.api import KubeApi

from polyccm_testing.conformance.cloud_under_test import CloudUnderTest
from polyccm_testing.conformance.cluster import KitCluster

T = TypeVar("T")


class ConformanceBase:
    """Fixtures of the kit; subclasses add the tests."""

    @pytest.fixture
    def kit_cluster(
        self, cloud: CloudUnderTest, kube_api: KubeApi, namespace: str, clean_nodes: None
    ) -> Iterator[KitCluster]:
        """A provider term on the real control plane, with no nodes but the test's own."""
        cluster = KitCluster(cloud, kube_api, namespace)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.close()


def offered(capability: T | None, provider: object, what: str, accessor: str) -> T:
    """``capability``, or skip the test because the provider does not offer ``what``."""
    if capability is None:
        name = getattr(provider, "name", "") or type(provider).__name__
        pytest.skip(f"provider {name} does not offer {what}: {accessor} returned None")
    return capability
