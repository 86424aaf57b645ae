"""polyccm's fault conformance kit, run for the DigitalOcean provider on the emulator: crash
cycles of ``polyccm --provider digitalocean`` processes, each write of a load balancer's create
and edit failing once (422 from the emulator's fault injection), and a leader cut off, with the
``firewall`` and ``cluster-tags`` controllers on (the emulator tells the processes apart by the
leader-election identity in pydo's User-Agent, polyccm.useragent)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from polyccm_digitalocean_emulator.testing import DigitalOceanFaultCloudUnderTest
from polyccm_testing.conformance import FaultConformance


class TestDigitalOceanFaults(FaultConformance):
    @pytest.fixture
    def cloud(self, do: Mapping[str, str]) -> DigitalOceanFaultCloudUnderTest:
        return DigitalOceanFaultCloudUnderTest(do)
