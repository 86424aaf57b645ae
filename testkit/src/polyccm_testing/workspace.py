"""The uv workspace as the deploy tests see it: its members, the providers they register, and
the emulator distribution beside each provider (``providers/<name>/emulator``)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def read_toml(path: Path) -> dict[str, Any]:
    with path.open("rb") as handle:
        return tomllib.load(handle)


def workspace_members() -> list[Path]:
    """Directories of the uv workspace members, from the root pyproject.toml."""
    patterns = read_toml(ROOT / "pyproject.toml")["tool"]["uv"]["workspace"]["members"]
    members: list[Path] = []
    for pattern in patterns:
        members.extend(sorted(p.parent for p in ROOT.glob(f"{pattern}/pyproject.toml")))
    return members


#: The folder of a provider's emulator distribution, inside the provider's.
EMULATOR_FOLDER = "emulator"


def is_emulator(member: Path) -> bool:
    """Whether ``member`` is a provider's emulator distribution (``providers/<name>/emulator``)."""
    return member.name == EMULATOR_FOLDER and (member.parent / "pyproject.toml").is_file()


def provider_projects() -> dict[str, dict[str, Any]]:
    """Provider name (the entry point in group ``polyccm``) -> its ``[project]`` table: the
    runtime distributions, not their emulators."""
    providers: dict[str, dict[str, Any]] = {}
    for member in workspace_members():
        if is_emulator(member):
            continue
        project = read_toml(member / "pyproject.toml")["project"]
        names = list(project.get("entry-points", {}).get("polyccm", {}))
        if names:
            assert len(names) == 1, f"{member.name} registers several entry points: {names}"
            providers[names[0]] = project
    return providers


def workspace_providers() -> list[str]:
    """The provider names the workspace registers, sorted."""
    return sorted(provider_projects())


def emulator_projects() -> dict[str, dict[str, Any]]:
    """Provider name -> the ``[project]`` table of its emulator distribution."""
    return {
        member.parent.name: read_toml(member / "pyproject.toml")["project"]
        for member in workspace_members()
        if is_emulator(member)
    }
