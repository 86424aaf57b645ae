"""instances.insert costs the same with thousands of instances as with a few (the benchmark
makes 5,000 at a time, twice per scale): an instance that asks for no alias IP range is not
checked against every other instance's aliases. It was quadratic: 5,000 inserts took 30 s of
the emulator's CPU, 6 ms each by the last, where the first took 1 ms."""

from __future__ import annotations

import copy
import time

from polyccm_gce_emulator.app import ComputeEmulator
from polyccm_gce_emulator.testing import FAST, PROJECT, TEST_TOKEN, ZONE
from werkzeug.test import Client

HEADERS = {"Authorization": f"Bearer {TEST_TOKEN}"}


def _body(name: str) -> dict[str, object]:
    return {
        "name": name,
        "machineType": f"zones/{ZONE}/machineTypes/e2-medium",
        "networkInterfaces": [{"network": "global/networks/default",
                               "accessConfigs": [{"type": "ONE_TO_ONE_NAT"}]}],
        "disks": [{"boot": True, "initializeParams": {
            "sourceImage": "projects/debian-cloud/global/images/debian-12"}}],
    }  # fmt: skip


def test_the_thousandth_insert_costs_what_the_first_did() -> None:
    client = Client(ComputeEmulator(copy.deepcopy(FAST)))
    path = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances"

    def insert(first: int, count: int) -> float:
        began = time.process_time()
        for index in range(first, first + count):
            answer = client.post(path, json=_body(f"node-{index:05d}"), headers=HEADERS)
            assert answer.status_code == 200, answer.get_data()[:300]
        return time.process_time() - began

    early = insert(0, 300)
    insert(300, 2200)
    late = insert(2500, 300)
    assert late < 2.5 * early, f"300 inserts took {early:.2f} s first, {late:.2f} s at 2,500"
