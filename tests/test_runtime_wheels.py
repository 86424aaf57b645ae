"""Each provider's runtime wheel holds only what runs in a cluster.

The wheel is built from the workspace (``uv build --wheel --offline``: hatchling from the uv
cache, as ``uv sync`` left it) and opened: no emulator, moto patch, demo, test support or test
module is in it, none of its modules imports moto, werkzeug, openapi-core, the test kit or an
emulator, and its metadata names none of them (no ``emulator`` extra either). The emulator, its
demo and its test support are ``polyccm-<name>-emulator``, beside it in
``providers/<name>/emulator``.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import zipfile
from email.parser import Parser
from pathlib import Path, PurePosixPath

import pytest
from polyccm_testing.workspace import ROOT, workspace_providers

PROVIDERS = workspace_providers()
#: Distributions no runtime wheel may depend on: the emulators' servers and the test kit.
FORBIDDEN_DISTRIBUTIONS = {"moto", "werkzeug", "openapi-core", "polyccm-testing", "pytest"}
#: Top-level modules no runtime module may import.
FORBIDDEN_IMPORTS = {"moto", "werkzeug", "openapi_core", "polyccm_testing", "pytest"}
#: Words in a file's path that mark what is not run in a cluster.
FORBIDDEN_NAMES = ("emulator", "moto", "werkzeug", "openapi", "testing", "demo", "upstream_made")


def _uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.fail("uv is needed to build the wheels (run under `uv run`)", pytrace=False)
    return found


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The runtime wheel of every provider, built once."""
    out = tmp_path_factory.mktemp("wheels")
    built: dict[str, Path] = {}
    for provider in PROVIDERS:
        target = out / provider
        subprocess.run(
            [_uv(), "build", "--wheel", "--offline", "--quiet", "--out-dir", str(target),
             str(ROOT / "providers" / provider)],
            check=True, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        (built[provider],) = target.glob("*.whl")
    return built


def _is_test_module(path: PurePosixPath) -> bool:
    return (
        path.name.startswith("test_")
        or path.stem.endswith("_test")
        or path.name == "conftest.py"
        or "tests" in path.parts
    )


def _imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_runtime_wheel_holds_no_emulator_and_no_test_code(
    provider: str, wheels: dict[str, Path]
) -> None:
    package = f"polyccm_{provider}"
    with zipfile.ZipFile(wheels[provider]) as wheel:
        names = [PurePosixPath(name) for name in wheel.namelist()]
        sources = {name: wheel.read(str(name)).decode() for name in names if name.suffix == ".py"}

    code = [name for name in names if not name.parts[0].endswith(".dist-info")]
    assert {name.parts[0] for name in code} == {package}
    assert f"{package}/plugin.py" in {str(name) for name in code}
    assert not [n for n in code if any(word in str(n) for word in FORBIDDEN_NAMES)], code
    assert not [n for n in code if _is_test_module(n)], code
    assert not [n for n in code if n.suffix not in (".py", ".typed", ".json")], code
    imports = {name: _imported_roots(text) & FORBIDDEN_IMPORTS for name, text in sources.items()}
    assert not {name: found for name, found in imports.items() if found}
    emulator_imports = {
        str(name): sorted(r for r in _imported_roots(text) if r.endswith("_emulator"))
        for name, text in sources.items()
    }
    assert not {name: found for name, found in emulator_imports.items() if found}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_runtime_wheel_depends_on_no_emulator_nor_test_kit(
    provider: str, wheels: dict[str, Path]
) -> None:
    with zipfile.ZipFile(wheels[provider]) as wheel:
        info = f"polyccm_{provider}-0.1.0.dist-info"
        metadata = Parser().parsestr(wheel.read(f"{info}/METADATA").decode())
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()

    requires = [str(r) for r in metadata.get_all("Requires-Dist") or []]
    names = {r.split(";")[0].split("[")[0].split(">")[0].split("=")[0].strip() for r in requires}
    assert "polyccm" in names
    assert not names & FORBIDDEN_DISTRIBUTIONS, requires
    assert not [n for n in names if n.endswith("-emulator")], requires
    assert metadata.get_all("Provides-Extra") is None
    # One entry point: the provider itself (the emulator registers from its own distribution).
    lines = [line.strip() for line in entry_points.splitlines() if line.strip()]
    assert lines == ["[polyccm]", f"{provider} = polyccm_{provider}.plugin"]
