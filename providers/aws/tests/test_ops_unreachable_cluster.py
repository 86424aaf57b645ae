"""``polyccm plan`` and ``polyccm orphans --provider aws`` when the API server never answers: one
line naming the server and why, exit 2, instead of urllib3's traceback (70 lines), at once for a
refused connection and after ``--request-timeout`` for a silent one."""

from __future__ import annotations

from pathlib import Path

import pytest
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_testing.opstools import QUICK_TIMEOUT, run_command, unanswering_api_servers


@pytest.mark.parametrize("command", ["plan", "orphans"])
def test_an_api_server_that_never_answers_is_one_line(
    command: str, aws: EmulatorControl, cloud_config: Path, tmp_path: Path
) -> None:
    with unanswering_api_servers(tmp_path) as servers:
        for server in servers:
            result = run_command(
                command,
                "aws",
                server.kubeconfig,
                "--controllers=*,-route",
                f"--request-timeout={QUICK_TIMEOUT}",
                cloud_config=cloud_config,
            )

            assert (result.status, result.stdout) == (2, ""), result.stderr
            assert result.stderr == (
                f"polyccm {command}: error: API server {server.server}: {server.cause}\n"
            )
