"""polyccm's fault conformance kit, run for the GCE provider on the emulator: crash cycles of
``polyccm --provider gce`` processes, each write of a network load balancer's create and edit
failing once (400 ``invalid`` from the emulator's fault injection), and a leader cut off (the
emulator tells the processes apart by the leader-election identity the SDK's ``client_info``
puts in ``x-goog-api-client``, polyccm.useragent).

An edit that adds a port (5 writes) holds the rule's address as the static address ``<lb>``
while it makes the rule again. When write 4 or 5 fails once, the next ensure serves the Service
but keeps ``<lb>`` reserved until the Service is deleted, as upstream does: an address that
already existed is not released unless the rule was made again (cloud-provider-gcp
providers/gce/gce_loadbalancer_external.go:197-210, and the deferred release at 171-189,
@4e24531, v36.0.0-101). The adapter declares it
(``held_until_deleted``); deletion must still release it."""

from __future__ import annotations

import pytest
from polyccm_gce_emulator.testing import GceFaultCloudUnderTest, RunningEmulator
from polyccm_testing.conformance import FaultConformance


class TestGceFaults(FaultConformance):
    @pytest.fixture
    def cloud(self, emulator: RunningEmulator) -> GceFaultCloudUnderTest:
        return GceFaultCloudUnderTest(emulator)
