"""``polyccm --help`` lists the subcommands, each subcommand's ``--help`` says what it does,
whether it changes anything and its exit status; ``polyccm --version`` prints the version of
the installed package (one place: core/pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

SUBCOMMANDS = ("plan", "orphans", "check-service", "rbac")
NEITHER = "Touches neither the cloud nor the cluster"
MANAGER_SENTENCE = "Without a command, runs the cloud-node"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "polyccm.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_help_lists_every_subcommand_with_what_it_does() -> None:
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: polyccm [COMMAND]")
    listing = result.stdout.split("commands (", 1)[1]
    for command in SUBCOMMANDS:
        line = next(x for x in listing.splitlines() if x.strip().startswith(command + " "))
        assert len(line.split()) > 3, line  # the command and a description
    assert MANAGER_SENTENCE in result.stdout
    assert "Exit status:" in result.stdout


@pytest.mark.parametrize(
    ("command", "own", "changes"),
    [
        ("plan", "Show what polyccm would do", "Read-only"),
        ("orphans", "List the cloud resources marked", "Read-only unless --delete"),
        ("check-service", "Check a Service manifest", NEITHER),
        ("rbac", "Print the ClusterRole polyccm needs", NEITHER),
    ],
)
def test_each_subcommand_help_describes_itself(command: str, own: str, changes: str) -> None:
    for args in ([command, "--help"], ["--provider=aws", command, "--help"]):
        result = run_cli(*args)
        assert result.returncode == 0, result.stderr
        text = " ".join(result.stdout.split())
        assert text.startswith(f"usage: polyccm {command}"), text[:80]
        assert own in text
        assert changes in text
        assert "Exit status: 0" in text and ", 2 bad input" in text
        assert MANAGER_SENTENCE not in text  # not the controller manager's description


def test_version_prints_the_installed_package_version_and_exits_0() -> None:
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"polyccm v{metadata.version('polyccm')}\n"
    # Before any other check, as upstream: no provider needed, other flags ignored.
    assert run_cli("--provider=aws", "--version", "--cloud-config=/nonexistent").returncode == 0
