"""deploy/images: the per-provider image recipe, checked against the workspace.

The Dockerfile is read as text and compared with the workspace (providers, paths, entrypoints, the
locked dependency set of each image), and its build-stage commands are run on a copy of the build
context. tests/test_image.py builds and runs the image itself with buildah.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from polyccm.app.commandline import parse
from polyccm.plugins import installed_providers, plugin_manager
from polyccm_testing.workspace import (
    ROOT,
    emulator_projects,
    is_emulator,
    provider_projects,
    read_toml,
    workspace_members,
    workspace_providers,
)

IMAGES = ROOT / "deploy" / "images"
DOCKERFILE = IMAGES / "Dockerfile"
DOCKERIGNORE = IMAGES / "Dockerfile.dockerignore"


# -- the workspace ---------------------------------------------------------------------------


PROVIDERS = workspace_providers()


def test_the_workspace_has_the_four_providers() -> None:
    assert PROVIDERS == ["aws", "digitalocean", "gce", "packet"]
    for name, project in provider_projects().items():
        assert project["name"] == f"polyccm-{name}"


def test_each_provider_has_its_emulator_beside_it() -> None:
    emulators = emulator_projects()

    assert sorted(emulators) == PROVIDERS
    for name, project in emulators.items():
        assert project["name"] == f"polyccm-{name}-emulator"
        assert project["entry-points"]["polyccm"] == {
            f"{name}-emulator": f"polyccm_{name}_emulator.plugin"
        }


# -- the Dockerfile --------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        keyword, _, rest = pending.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """Instructions per stage, keyed by stage name (``""`` for the unnamed final stage)."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for keyword, rest in dockerfile_instructions():
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            assert name not in stages, f"stage {name!r} defined twice"
            current = stages[name] = [(keyword, rest)]
        elif current is not None:
            current.append((keyword, rest))
    return stages


def global_args() -> dict[str, str]:
    """The ``ARG`` defaults declared before the first ``FROM``."""
    args: dict[str, str] = {}
    for keyword, rest in dockerfile_instructions():
        if keyword == "FROM":
            break
        if keyword == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
    return args


def test_dockerfile_has_one_entrypoint_stage_per_workspace_provider() -> None:
    stages = dockerfile_stages()
    entrypoints = {}
    for name, instructions in stages.items():
        for keyword, rest in instructions:
            if keyword == "ENTRYPOINT":
                entrypoints[name] = yaml.safe_load(rest)  # exec form is a JSON list
    assert sorted(entrypoints) == [f"provider-{p}" for p in PROVIDERS]
    for provider in PROVIDERS:
        assert entrypoints[f"provider-{provider}"] == ["polyccm", f"--provider={provider}"]
    # The default target picks the stage named after the build argument.
    assert stages[""] == [("FROM", "provider-${PROVIDER}")]
    assert "PROVIDER" in global_args()
    # The build refuses any other PROVIDER with a message, before installing anything.
    run_lines = [rest for keyword, rest in stages["build"] if keyword == "RUN"]
    case = re.search(r'case "\$\{PROVIDER\}" in\s+([\w|]+)\)', run_lines[0])
    assert case is not None, run_lines[0]
    assert sorted(case.group(1).split("|")) == PROVIDERS


def test_entrypoint_provider_names_are_the_installed_providers() -> None:
    # The console script the entrypoint runs is the core's, and each name it passes to
    # --provider is one the installed distributions register.
    assert read_toml(ROOT / "core" / "pyproject.toml")["project"]["scripts"]["polyccm"]
    installed = set(installed_providers(plugin_manager()))
    assert set(PROVIDERS) <= installed, installed
    for provider in PROVIDERS:
        options, _ = parse(
            [f"--provider={provider}", "--cluster-cidr=10.0.0.0/8"], plugin_manager()
        )
        assert options.provider == provider


def run_command(arguments: str) -> str:
    """A ``RUN`` instruction's shell command, without its ``--mount=...`` options."""
    while arguments.startswith("--mount="):
        arguments = arguments.split(None, 1)[1]
    return arguments


def test_dockerfile_base_image_user_and_install_command() -> None:
    stages = dockerfile_stages()
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", global_args()["PYTHON_IMAGE"])
    # One base for both stages: the environment refers to the base's interpreter by path.
    for stage in ("build", "runtime"):
        assert stages[stage][0] == ("FROM", f"${{PYTHON_IMAGE}} AS {stage}")
    users = [rest for keyword, rest in stages["runtime"] if keyword == "USER"]
    assert users == ["65532:65532"]
    runtime_runs = [run_command(rest) for keyword, rest in stages["runtime"] if keyword == "RUN"]
    assert len(runtime_runs) == 1
    assert "useradd --uid 65532 --gid 65532" in runtime_runs[0]
    # Nothing is installed in the runtime stage, and the base's own pip is taken out.
    assert not re.search(r"\b(apt-get|apt|pip|uv) install\b", runtime_runs[0])
    assert "pip uninstall --yes --quiet pip setuptools wheel" in runtime_runs[0]
    build_runs = [run_command(rest) for keyword, rest in stages["build"] if keyword == "RUN"]
    # uv comes pinned from the package index, into an environment of the build stage only.
    build_args = dict(
        rest.partition("=")[::2] for keyword, rest in stages["build"] if keyword == "ARG"
    )
    assert re.fullmatch(r"\d+\.\d+\.\d+", build_args["UV_VERSION"])
    assert [r for r in build_runs if '"uv==${UV_VERSION}"' in r]
    syncs = [r for r in build_runs if "uv sync" in r]
    assert len(syncs) == 1
    words = shlex.split(syncs[0])
    assert {"--frozen", "--no-dev", "--no-editable"} <= set(words)
    assert words[words.index("--package") + 1] == "polyccm-${PROVIDER}"
    # The runtime stage takes only the environment from the build stage (no uv, no sources).
    copies = [rest for keyword, rest in stages["runtime"] if keyword == "COPY"]
    assert copies == ["--from=build /opt/polyccm /opt/polyccm"]


def stage_env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    """The variables a stage's ``ENV`` instructions set."""
    env: dict[str, str] = {}
    for keyword, rest in instructions:
        if keyword == "ENV":
            env.update(pair.partition("=")[::2] for pair in shlex.split(rest))
    return env


def test_the_image_runs_optimised_from_level_2_byte_code_only() -> None:
    """The image runs with ``PYTHONOPTIMIZE=2`` (no docstrings: ``import pydo`` peaks at 34 MiB
    instead of 69 MiB), from byte code compiled at build time for that level only, since
    nothing in it runs at another; the build's own check of ``polyccm`` runs the same way."""
    stages = dockerfile_stages()
    runtime = stage_env(stages["runtime"])
    assert runtime["PYTHONOPTIMIZE"] == "2"
    assert runtime["PYTHONDONTWRITEBYTECODE"] == "1"
    build = stage_env(stages["build"])
    # uv would compile level-0 byte code, which an optimised interpreter never reads.
    assert build.get("UV_COMPILE_BYTECODE", "0") in ("0", "")
    build_runs = [run_command(rest) for keyword, rest in stages["build"] if keyword == "RUN"]
    compiles = [shlex.split(r) for r in build_runs if "compileall" in r]
    assert len(compiles) == 1
    (words,) = compiles
    assert words[words.index("-o") + 1] == "2" and words.count("-o") == 1
    # Used whatever times the sources have once copied into the runtime stage and shipped.
    assert words[words.index("--invalidation-mode") + 1] == "unchecked-hash"
    assert words[-1] == "/opt/polyccm"
    (check,) = [r for r in build_runs if "--help" in r]
    assert re.match(r"export PYTHONOPTIMIZE=2 PYTHONDONTWRITEBYTECODE=1\s+&&", check), check
    # The base's standard library gets its level-2 byte code in the runtime stage, before the
    # image's user (who could not write it) takes over.
    (runtime_run,) = [run_command(rest) for keyword, rest in stages["runtime"] if keyword == "RUN"]
    assert re.search(
        r"python3 -m compileall -q -j 0 -o 2 --invalidation-mode unchecked-hash .*"
        r"get_path\(\"stdlib\"\)",
        runtime_run,
    )


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """``(excluded, regex)`` per line of the Dockerfile's ignore file, in order."""
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        excluded = not line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = ""
        index = 0
        while index < len(pattern):
            if pattern.startswith("**/", index):
                regex += "(?:.*/)?"
                index += 3
            elif pattern.startswith("**", index):
                regex += ".*"
                index += 2
            elif pattern[index] == "*":
                regex += "[^/]*"
                index += 1
            elif pattern[index] == "?":
                regex += "[^/]"
                index += 1
            else:
                regex += re.escape(pattern[index])
                index += 1
        rules.append((excluded, re.compile(regex)))
    return rules


def sent_to_builder(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker sends ``path`` (relative to the context): the last rule that matches the
    path or one of its parent directories decides, as in Docker's ignore files."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    sent = True
    for excluded, regex in rules:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            sent = not excluded
    return sent


def tracked_files() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in listing.stdout.splitlines() if (ROOT / line).is_file()]


def build_context() -> list[str]:
    rules = dockerignore_patterns()
    return [path for path in tracked_files() if sent_to_builder(path, rules)]


def test_dockerfile_copies_existing_paths_and_the_context_holds_every_source() -> None:
    context = set(build_context())
    for stage in dockerfile_stages().values():
        for keyword, rest in stage:
            if keyword != "COPY" or rest.startswith("--from="):
                continue
            *sources, _destination = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: no such path"
                prefix = source.rstrip("/")
                assert any(p == prefix or p.startswith(prefix + "/") for p in context), source
    # What hatchling builds the wheels from (sources, READMEs) is sent; tests and the rest are not.
    for member in workspace_members():
        relative = member.relative_to(ROOT).as_posix()
        project = read_toml(member / "pyproject.toml")["project"]
        assert f"{relative}/pyproject.toml" in context
        assert f"{relative}/{project['readme']}" in context
        sources = [p for p in tracked_files() if p.startswith(f"{relative}/src/")]
        if project["name"] == "polyccm-testing" or is_emulator(member):
            # Its metadata reads the lock; its code (dev control plane, fake cloud, emulators)
            # stays out.
            assert sources and not set(sources) & context, relative
            continue
        assert sources and set(sources) <= context, relative
    assert {"pyproject.toml", "uv.lock"} <= context
    assert not [p for p in context if "/tests/" in p or p.startswith(("tests/", "deploy/"))]
    assert not [p for p in context if "__pycache__" in p or p.endswith(".pyc")]


def uv_command() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.fail("uv is needed to check the image's locked dependencies (run under `uv run`)")
    return found


def exported_requirements(provider: str) -> set[str]:
    """Distribution names the image of ``provider`` installs, from the workspace lock."""
    return _exported_names(f"polyccm-{provider}")


def _exported_names(package: str) -> set[str]:
    """Distribution names ``uv sync --package PACKAGE --no-dev`` installs, from the lock."""
    answer = subprocess.run(
        [
            uv_command(),
            "export",
            "--frozen",
            "--no-dev",
            "--no-hashes",
            "--no-header",
            "--no-annotate",
            "--package",
            package,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    names = set()
    for line in answer.stdout.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-e "):
            path = ROOT / line[3:].strip()
            names.add(read_toml(path / "pyproject.toml")["project"]["name"])
        else:
            names.add(_requirement_name(line))
    return names


def _requirement_name(requirement: str) -> str:
    return re.split(r"[=<>!~;\s\[]", requirement, maxsplit=1)[0].lower()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_each_image_installs_the_core_and_its_provider_only(provider: str) -> None:
    names = exported_requirements(provider)
    projects = provider_projects()
    assert {"polyccm", f"polyccm-{provider}"} <= names
    # What the core brings anyway (the kubernetes client needs requests and google-auth) is
    # nobody's SDK.
    core = _exported_names("polyccm")
    for other, project in projects.items():
        if other == provider:
            continue
        assert project["name"] not in names
        sdks = {_requirement_name(d) for d in project["dependencies"]} - {"polyccm"}
        own = {_requirement_name(d) for d in projects[provider]["dependencies"]}
        assert not (sdks - own - core) & names, f"{provider}'s image would carry {other}'s SDK"
    # Neither an emulator (nor what emulators need) nor the developer tools.
    assert not [name for name in names if name.endswith("-emulator")], names
    assert not names & {
        "moto",
        "werkzeug",
        "openapi-core",
        "pytest",
        "ruff",
        "mypy",
        "import-linter",
        "flask",
        "polyccm-testing",
    }


def test_build_stage_commands_install_one_provider_from_a_copy_of_the_context(
    tmp_path: Path,
) -> None:
    """The build stage's RUN lines, relocated from /opt/polyccm and /tmp/uv-tool to a scratch
    directory and from the image's python to this one, on the files the ignore file lets
    through. The CA secret is absent, as in a build not given one."""
    provider = "aws"
    source = tmp_path / "src"
    for path in build_context():
        target = source / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, target)
    environment = tmp_path / "opt-polyccm"
    relocated = {"/opt/polyccm": str(environment), "/tmp/uv-tool": str(tmp_path / "uv-tool")}
    build = dockerfile_stages()["build"]
    env = dict(os.environ)
    for key in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH"):
        env.pop(key, None)
    for keyword, rest in build:
        if keyword == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = value.replace("/opt/polyccm", str(environment))
        elif keyword == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            env[key] = value
    env["PROVIDER"] = provider
    env["UV_PYTHON"] = getattr(sys, "_base_executable", sys.executable)
    runs = [run_command(rest) for keyword, rest in build if keyword == "RUN"]
    assert runs
    for command in runs:
        for path, scratch in relocated.items():
            command = command.replace(path, scratch)
        result = subprocess.run(
            ["sh", "-c", command], cwd=source, env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    optimised = {**env, "PYTHONOPTIMIZE": "2", "PYTHONDONTWRITEBYTECODE": "1"}
    installed = subprocess.run(
        [str(environment / "bin" / "polyccm"), "--help"],
        capture_output=True,
        text=True,
        env=optimised,
    )
    assert installed.returncode == 0, installed.stderr
    assert "installed providers: aws" in installed.stdout
    # Every module of the environment has its level-2 byte code and none has any other: what
    # an optimised interpreter imports is read, never compiled at each start.
    (site_packages,) = environment.glob("lib/python3*/site-packages")
    sources = [p for p in site_packages.rglob("*.py") if "__pycache__" not in p.parts]
    assert len(sources) > 1000
    tag = sys.implementation.cache_tag
    missing = [
        p for p in sources if not (p.parent / "__pycache__" / f"{p.stem}.{tag}.opt-2.pyc").exists()
    ]
    assert not missing, missing[:5]
    compiled = list(site_packages.rglob("*.pyc"))
    assert compiled and all(p.name.endswith(".opt-2.pyc") for p in compiled), [
        p for p in compiled if not p.name.endswith(".opt-2.pyc")
    ][:5]
    # Hash-based and unchecked (PEP 552 flags 0b01): used even when the sources' times change,
    # as they do when the environment is copied into the runtime stage.
    checked = [p for p in compiled if p.read_bytes()[4:8] != b"\x01\x00\x00\x00"]
    assert not checked, checked[:5]
    # A wrong PROVIDER stops the build at the first RUN.
    refused = subprocess.run(
        ["sh", "-c", runs[0]],
        cwd=source,
        env={**env, "PROVIDER": "azure"},
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "azure" in refused.stderr


# -- make image ------------------------------------------------------------------------------


def test_make_image_runs_from_the_test_kit_sources_without_syncing_the_workspace(
    tmp_path: Path,
) -> None:
    """``make image`` runs ``polyccm_testing.images`` on the standard library alone (no
    site-packages, only testkit/src on the path), so it needs no ``uv sync`` of the
    development workspace: what the image needs is installed inside the build, from uv.lock."""
    makefile = (ROOT / "Makefile").read_text()
    for target in ("image", "image-tools"):
        (line,) = re.findall(rf"^{target}:(.*)$", makefile, re.MULTILINE)
        assert "sync" not in line.split(), f"make {target} depends on {line.strip()}"
    assert "PYTHONPATH=$(CURDIR)/testkit/src" in makefile
    completed = subprocess.run(
        [sys.executable, "-S", "-m", "polyccm_testing.images", "build", "not-a-provider"],
        env={"PYTHONPATH": str(ROOT / "testkit" / "src"), "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,
    )
    # Imported and run (an unknown provider is refused before any tool is looked for).
    assert completed.returncode == 2, completed.stderr
    assert "not-a-provider" in completed.stderr and "Traceback" not in completed.stderr
