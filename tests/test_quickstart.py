"""docs/quickstart.md works as written: every ``sh`` block of the page, in order, run by bash as
one script (``set -euo pipefail``) in an empty directory, with one change only: the clone's URL
is this repository's checkout (no network here), so the script clones the committed HEAD, makes
its binaries in that clone (a fresh ``.venv``; the control-plane binaries cached in
``~/.cache/polyccm/bin``), starts the real kube-apiserver and the DigitalOcean emulator with
``polyccm-dev up``, and goes on to the tear-down. What it prints is what the page says a
newcomer sees: the node initialised with its droplet's providerID, region and size, a load
balancer's address on the Service, none left after its deletion, and the one-node manifests
accepted by the API server."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from polyccm_testing.workspace import ROOT

QUICKSTART = ROOT / "docs" / "quickstart.md"
CLONE_URL = "https://github.com/polyccm/polyccm.git"
STATE = Path(".state") / "quickstart"


def script() -> str:
    """The page's ``sh`` blocks, in order, as one script."""
    blocks = re.findall(r"^```sh\n(.*?)^```$", QUICKSTART.read_text(), re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 8, "docs/quickstart.md: its sh blocks are its steps"
    return "\n".join(blocks)


def test_the_page_clones_the_address_the_changelog_names() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert CLONE_URL.removesuffix(".git") in changelog  # the project's one public address
    assert script().count(CLONE_URL) == 1


def _environment() -> dict[str, str]:
    """This machine's environment as a newcomer's shell has it: uv and kubectl on PATH, no
    virtualenv of the test run active."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "KUBECONFIG"}}
    uv = shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
    venv_bin = str(Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin")
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    env["PATH"] = os.pathsep.join([str(Path(uv).parent), *path])
    return env


def _tear_down(clone: Path) -> None:
    """What step 8 does, when the script stopped before it."""
    pid_file = clone / STATE / "polyccm.pid"
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
    dev = clone / ".venv" / "bin" / "polyccm-dev"
    if dev.exists():
        subprocess.run(
            [str(dev), "down", "--state-dir", str(clone / STATE)],
            capture_output=True, check=False, timeout=60,
        )  # fmt: skip


def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("kubectl") is None or shutil.which("curl") is None:
        pytest.skip("docs/quickstart.md needs kubectl and curl on PATH")
    # The checkout under the URL's last name, so `git clone` makes the directory the page cds to.
    origin = tmp_path / "origin" / Path(CLONE_URL).name
    origin.parent.mkdir()
    origin.symlink_to(ROOT)
    steps = script().replace(CLONE_URL, str(origin))
    work = tmp_path / "work"
    work.mkdir()
    clone = work / "polyccm"
    try:
        ran = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", steps],
            cwd=work, env=_environment(), capture_output=True, text=True, timeout=600,
            check=False,
        )  # fmt: skip
    finally:
        _tear_down(clone)
    out = ran.stdout
    log = clone / STATE / "polyccm.log"
    polyccm_log = log.read_text() if log.exists() else "(no polyccm log)"
    assert ran.returncode == 0, f"{out}\n--- stderr\n{ran.stderr}\n--- polyccm\n{polyccm_log}"
    assert "droplet created: HTTP 202" in out
    assert "node/node-1 condition met" in out
    # The -o wide row: INTERNAL-IP, EXTERNAL-IP, ..., REGION, INSTANCE-TYPE.
    (row,) = [line for line in out.splitlines() if line.startswith("node-1 ")]
    assert row.split()[-2:] == ["nyc3", "s-2vcpu-4gb"]
    assert re.search(r"^providerID: digitalocean://\d+$", out, re.MULTILINE)
    assert "node.cloudprovider.kubernetes.io/uninitialized" not in out.split("providerID:")[1]
    assert "initialised node-1" in polyccm_log
    assert "service/web condition met" in out
    (web,) = [line for line in out.splitlines() if line.startswith("web ")]
    assert re.search(r"LoadBalancer\s+\S+\s+\d+\.\d+\.\d+\.\d+\s+80:\d+/TCP", web), web
    assert '"status": "active"' in out
    assert '{"load_balancers": []' in out  # deleted with its Service
    assert "replicas: 1" in out  # the single-replica component
    for created in ("deployment.apps/cloud-controller-manager", "secret/digitalocean"):
        assert re.search(rf"^{created}\S* serverside-applied \(server dry run\)$", out, re.M), out
    assert "received SIGTERM" in polyccm_log
