"""`make demo PROVIDER=packet`: nodes from devices, their BGP peers, an Elastic IP on a
service and released after it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_demo_shows_nodes_bgp_peers_and_an_elastic_ip_released_after() -> None:
    result = subprocess.run([sys.executable, "-m", "polyccm_packet_emulator.demo"],
                            capture_output=True, text=True, timeout=110)  # fmt: skip

    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    rows = re.findall(r"^worker-\d-0\s+equinixmetal://[0-9a-f-]{36}\s+da\s+(\S+)\s+Ext", out,
                      re.M)  # fmt: skip
    assert sorted(rows) == ["c3.small.x86", "c3.small.x86", "m3.large.x86"], out
    assert "worker-2-0: metal.equinix.com/bgp-peers-1-peer-ip=169.254.255.2" in out
    assert re.search(r"ingress\[0\]\.ip = 198\.19\.\d+\.\d+", out), out
    assert "usage=cloud-provider-equinix-metal-auto" in out
    assert "Elastic IPs left in the project: 0" in out
