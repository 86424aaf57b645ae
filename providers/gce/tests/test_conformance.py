"""polyccm's conformance kit, run for the GCE provider on the in-process emulator: instances,
legacy network load balancers and routes (ProviderConformance)."""

from __future__ import annotations

import pytest
from polyccm_gce.testing import GceCloudUnderTest, RunningEmulator
from polyccm_testing.conformance import CloudUnderTest, ProviderConformance


class TestGceConformance(ProviderConformance):
    @pytest.fixture
    def cloud(self, emulator: RunningEmulator) -> CloudUnderTest:
        return GceCloudUnderTest(emulator)
