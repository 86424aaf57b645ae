"""polyccm's conformance kit, run for the DigitalOcean provider on the emulator: instances and
load balancers (no zones on DigitalOcean, no routes), and the operator-tools promises
(OperatorToolsConformance)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from polyccm_digitalocean_emulator.testing import DigitalOceanCloudUnderTest
from polyccm_testing.conformance import (
    CloudUnderTest,
    OperatorToolsConformance,
    ProviderConformance,
)


class TestDigitalOceanConformance(ProviderConformance, OperatorToolsConformance):
    zones = False

    @pytest.fixture
    def cloud(self, do: Mapping[str, str]) -> CloudUnderTest:
        return DigitalOceanCloudUnderTest(do)
