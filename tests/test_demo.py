"""`make demo` end to end: it must show initialised nodes, a served load balancer, and leave
nothing behind in the cloud."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.timeout(240)
def test_demo_initialises_nodes_serves_a_load_balancer_and_cleans_up() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "polyccm_aws_emulator.demo"],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    node_rows = re.findall(
        r"^ip-10-0-\d+-\d+\.ec2\.internal\s+aws:///(us-east-1[ab])/i-\w+\s+"
        r"us-east-1[ab]\s+(\S+)\s+InternalIP=",
        out,
        re.MULTILINE,
    )
    assert len(node_rows) == 3, out
    assert {zone for zone, _ in node_rows} == {"us-east-1a", "us-east-1b"}
    assert {kind for _, kind in node_rows} == {"m5.large", "c5.xlarge"}
    assert re.search(r"hostname = a[0-9a-f]{31}\.us-east-1\.elb\.amazonaws\.com", out), out
    assert "load balancers left in the cloud: 0; ELB security groups left: 0" in out
    assert "Traceback" not in result.stderr
