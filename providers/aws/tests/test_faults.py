"""polyccm's fault conformance kit, run for the AWS provider on the emulator: crash cycles of
``polyccm --provider aws`` processes (classic ELBs), each write of a classic ELB's create and
edit failing once (``ValidationError`` from the emulator's fault injection), and a leader cut
off: the emulator tells the two processes' calls apart by the leader-election identity
botocore's ``user_agent_extra`` carries (polyccm.useragent). tests/test_ha_failover.py shows
more of AWS's hand-over."""

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
