"""polyccm's fault conformance kit, run for the GCE provider on the emulator: crash cycles of
``polyccm --provider gce`` processes, each write of a network load balancer's create and edit
failing once (400 ``invalid`` from the emulator's fault injection), and a leader cut off
(skipped: the emulator does not say which process called)."""

from __future__ import annotations

import pytest
from polyccm_gce_emulator.testing import GceFaultCloudUnderTest, RunningEmulator
from polyccm_testing.conformance import FaultConformance


class TestGceFaults(FaultConformance):
    @pytest.fixture
    def cloud(self, emulator: RunningEmulator) -> GceFaultCloudUnderTest:
        return GceFaultCloudUnderTest(emulator)
