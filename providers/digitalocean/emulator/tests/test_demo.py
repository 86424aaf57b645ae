"""`make demo PROVIDER=digitalocean`: nodes initialised from droplets, a load balancer with its
id annotation, and nothing left in the cloud."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_demo_initialises_nodes_serves_a_load_balancer_and_cleans_up() -> None:
    result = subprocess.run([sys.executable, "-m", "polyccm_digitalocean_emulator.demo"],
                            capture_output=True, text=True, timeout=110)  # fmt: skip

    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    rows = re.findall(r"^worker-\d-0\s+digitalocean://\d+\s+nyc3\s+(\S+)\s+InternalIP=", out, re.M)
    assert sorted(rows) == ["s-1vcpu-1gb", "s-1vcpu-2gb", "s-2vcpu-4gb"], out
    assert re.search(r"ingress\[0\]\.ip = 198\.18\.\d+\.\d+", out), out
    assert re.search(r"load-balancer-id = [0-9a-f-]{36}", out), out
    assert "load balancers left in the cloud: 0" in out
