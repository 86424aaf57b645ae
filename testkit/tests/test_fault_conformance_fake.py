"""The fault conformance kit run on the reference fake cloud (kept in a file, so that it
outlives the ``polyccm`` processes the kit kills): every promise holds. And each deliberately
broken fake (:mod:`polyccm_testing.broken_fakes`) fails exactly the matching fault test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from polyccm_testing.conformance import DurableFakeCloudUnderTest, FaultConformance
from polyccm_testing.pytest_plugin import STATE_DIR_VARIABLE

pytest_plugins = ("pytester",)


class TestFakeCloudFaults(FaultConformance):
    @pytest.fixture
    def cloud(self, tmp_path: Path) -> DurableFakeCloudUnderTest:
        return DurableFakeCloudUnderTest(tmp_path / "cloud.json")


TEST_MODULE = """
import pytest
from polyccm_testing.conformance import DurableFakeCloudUnderTest, FaultConformance


class TestBrokenFake(FaultConformance):
    @pytest.fixture
    def cloud(self, tmp_path):
        return DurableFakeCloudUnderTest(tmp_path / "cloud.json", variant="{variant}")
"""

BROKEN = {
    "leaky": (
        "test_fault_crash_cycles_leave_nothing_behind",
        "*left in the cloud after * crash cycles*",
    ),
    "chatty": (
        "test_fault_a_leader_cut_off_makes_no_call_after_the_new_leaders_first",
        "*the old leader called the cloud after the new leader's first*",
    ),
    "impatient": (
        "test_fault_a_throttled_stretch_backs_off_warns_and_loses_nothing",
        "*calls in a *s throttled stretch, more than *: polyccm does not back off*",
    ),
}


@pytest.mark.parametrize("variant", list(BROKEN))
def test_a_broken_fake_fails_exactly_the_matching_fault_test(
    variant: str, pytester: pytest.Pytester, control_plane: Any
) -> None:
    failing, message = BROKEN[variant]
    pytester.makepyfile(test_broken=TEST_MODULE.format(variant=variant))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STATE_DIR_VARIABLE, str(control_plane.state_dir))
        patch.setenv("POLYCCM_SOAK_CYCLES", "6")
        result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-rfs")

    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1, result.stdout.str()
    assert outcomes.get("passed") == 6, result.stdout.str()
    result.stdout.fnmatch_lines([message, f"FAILED *::TestBrokenFake::{failing}*"])
