"""polyccm's conformance kit, run for the Equinix Metal provider on the emulator: instances
(no zones: upstream v3.8+ gives none, metal/devices.go:73-96@38d15e2), load balancers (Elastic
IPs) and the operator tools (plan, orphans); Metal has no routes."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from polyccm_packet_emulator.testing import MetalCloudUnderTest
from polyccm_testing.conformance import (
    CloudUnderTest,
    OperatorToolsConformance,
    ProviderConformance,
)

NO_BACKENDS = (
    "an Elastic IP has no backends in the cloud: the cluster's BGP speakers announce it, so "
    "there is no node set to compare (repeated ensures: test_load_balancer.py; sessions per "
    "node: tests/test_packet_e2e.py)"
)


class TestMetalConformance(ProviderConformance, OperatorToolsConformance):
    zones = False

    @pytest.fixture
    def cloud(self, metal: Mapping[str, str]) -> CloudUnderTest:
        return MetalCloudUnderTest(metal)

    @pytest.mark.skip(reason=NO_BACKENDS)
    def test_load_balancer_update_changes_only_the_backends(self) -> None: ...

    @pytest.mark.skip(reason=NO_BACKENDS)
    def test_load_balancer_ensure_twice_makes_nothing_more_and_writes_nothing(self) -> None: ...

    @pytest.mark.skip(reason=NO_BACKENDS)
    def test_load_balancer_ensure_recreates_one_deleted_behind_its_back(self) -> None: ...
