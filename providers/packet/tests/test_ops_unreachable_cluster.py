"""``polyccm plan`` and ``polyccm orphans --provider packet`` (Equinix Metal) when the API server
never answers: one line naming the server and why, exit 2, instead of urllib3's traceback (70
lines), at once for a refused connection and after ``--request-timeout`` for a silent one."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from polyccm_testing.opstools import QUICK_TIMEOUT, run_command, unanswering_api_servers


@pytest.mark.parametrize("command", ["plan", "orphans"])
def test_an_api_server_that_never_answers_is_one_line(
    command: str, metal: Mapping[str, str], tmp_path: Path
) -> None:
    with unanswering_api_servers(tmp_path) as servers:
        for server in servers:
            result = run_command(
                command, "packet", server.kubeconfig, f"--request-timeout={QUICK_TIMEOUT}"
            )

            assert (result.status, result.stdout) == (2, ""), result.stderr
            assert result.stderr == (
                f"polyccm {command}: error: API server {server.server}: {server.cause}\n"
            )
