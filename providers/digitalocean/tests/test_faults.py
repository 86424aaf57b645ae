"""polyccm's fault conformance kit, run for the DigitalOcean provider on the emulator: crash
cycles of ``polyccm --provider digitalocean`` processes, each write of a load balancer's create
and edit failing once (422 from the emulator's fault injection), and a leader cut off (skipped:
the emulator does not say which process called)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from polyccm_digitalocean_emulator.testing import DigitalOceanFaultCloudUnderTest
from polyccm_testing.conformance import FaultConformance


class TestDigitalOceanFaults(FaultConformance):
    @pytest.fixture
    def cloud(self, do: Mapping[str, str]) -> DigitalOceanFaultCloudUnderTest:
        return DigitalOceanFaultCloudUnderTest(do)
