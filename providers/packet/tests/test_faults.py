"""polyccm's fault conformance kit, run for the Equinix Metal provider on the emulator: crash
cycles of ``polyccm --provider packet`` processes, each write of an Elastic IP's create and edit
failing once (422 from the emulator's fault injection), and a leader cut off (skipped: the
emulator does not say which process called)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from polyccm_packet_emulator.testing import MetalFaultCloudUnderTest
from polyccm_testing.conformance import FaultConformance


class TestMetalFaults(FaultConformance):
    @pytest.fixture
    def cloud(self, metal: Mapping[str, str]) -> MetalFaultCloudUnderTest:
        return MetalFaultCloudUnderTest(metal)
