"""polyccm's fault conformance kit, run for the Equinix Metal provider on the emulator: crash
cycles of ``polyccm --provider packet`` processes, each write of an Elastic IP's create and edit
failing once (422 from the emulator's fault injection), and a leader cut off, the ``packet-bgp``
controller running (``METAL_LOAD_BALANCER=empty://``; the emulator tells the processes apart by
the leader-election identity in the SDK's User-Agent, polyccm.useragent)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from polyccm_packet_emulator.testing import MetalFaultCloudUnderTest
from polyccm_testing.conformance import FaultConformance


class TestMetalFaults(FaultConformance):
    @pytest.fixture
    def cloud(self, metal: Mapping[str, str]) -> MetalFaultCloudUnderTest:
        return MetalFaultCloudUnderTest(metal)
