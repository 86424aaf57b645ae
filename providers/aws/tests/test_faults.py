"""polyccm's fault conformance kit, run for the AWS provider on the emulator: crash cycles of
``polyccm --provider aws`` processes (classic ELBs), each write of a classic ELB's create and
edit failing once (``ValidationError`` from the emulator's fault injection), and a leader cut
off (skipped here: tests/test_ha_failover.py shows AWS's hand-over, with calls told apart by
their User-Agent)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import AwsFaultCloudUnderTest
from polyccm_testing.conformance import FaultConformance


class TestAwsFaults(FaultConformance):
    @pytest.fixture
    def cloud(self, aws: EmulatorControl, emulator: Mapping[str, str]) -> AwsFaultCloudUnderTest:
        return AwsFaultCloudUnderTest(aws, emulator)
