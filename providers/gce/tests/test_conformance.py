"""polyccm's conformance kit, run for the GCE provider on the in-process emulator: instances,
legacy network load balancers and routes (ProviderConformance), and the operator tools'
planner and orphans (OperatorToolsConformance)."""

from __future__ import annotations

import pytest
from polyccm_gce_emulator.testing import GceCloudUnderTest, RunningEmulator
from polyccm_testing.conformance import (
    CloudUnderTest,
    OperatorToolsConformance,
    ProviderConformance,
)


class TestGceConformance(ProviderConformance, OperatorToolsConformance):
    # cloud-provider-gcp v36.3.8 providers/gce/gce_instances.go:277-285: InstanceShutdown and
    # InstanceShutdownByProviderID return cloudprovider.NotImplemented.
    tells_shutdown = False

    @pytest.fixture
    def cloud(self, emulator: RunningEmulator) -> CloudUnderTest:
        return GceCloudUnderTest(emulator)
