"""polyccm's conformance kit, run for the AWS provider on the emulator: instances, classic ELB
load balancers and VPC routes (ProviderConformance), and NLBs (LoadBalancerConformance with
the NLB annotation); with both, the operator-tools promises (OperatorToolsConformance)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import AwsCloudUnderTest
from polyccm_testing.conformance import (
    CloudUnderTest,
    LoadBalancerConformance,
    OperatorToolsConformance,
    ProviderConformance,
)


class TestAwsConformance(ProviderConformance, OperatorToolsConformance):
    @pytest.fixture
    def cloud(self, aws: EmulatorControl) -> CloudUnderTest:
        return AwsCloudUnderTest(aws)


class TestAwsNlbConformance(LoadBalancerConformance, OperatorToolsConformance):
    @pytest.fixture
    def cloud(self, aws: EmulatorControl) -> CloudUnderTest:
        return AwsCloudUnderTest(aws)

    @pytest.fixture
    def kit_service_annotations(self) -> Mapping[str, str]:
        return {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
