"""``polyccm-dev new-provider NAME``: the generated distribution passes the project's lint and
strict type checks, installs into a fresh environment (offline, from the lock's files in the uv
cache), registers its provider, builds an honest skeleton (no capability offered, so the
conformance kit skips it by name), starts its emulator stub (a distribution of its own, beside
it) and runs the kit green against the FakeCloud; bad or taken names, and existing files, are
refused with one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from polyccm.hookspecs import hookimpl
from polyccm.plugins import ProviderRegistry, plugin_manager
from polyccm_testing.conformance import FaultConformance, ProviderConformance
from polyccm_testing.devenv import cli
from polyccm_testing.provider_template import MAX_NAME_LENGTH

ROOT = Path(__file__).resolve().parents[2]
NAME = "template_check_cloud"
"""The longest name allowed, so the check covers the longest lines the template can produce."""
PACKAGE = f"polyccm_{NAME}"
EMULATOR_PACKAGE = f"{PACKAGE}_emulator"
TITLE = "TemplateCheckCloud"
DISTRIBUTION = f"polyccm-{NAME.replace('_', '-')}"

GENERATED = {
    "pyproject.toml",
    "README.md",
    f"src/{PACKAGE}/__init__.py",
    f"src/{PACKAGE}/plugin.py",
    f"src/{PACKAGE}/config.py",
    f"src/{PACKAGE}/provider.py",
    f"src/{PACKAGE}/instances.py",
    f"src/{PACKAGE}/load_balancer.py",
    f"src/{PACKAGE}/routes.py",
    f"src/{PACKAGE}/py.typed",
    "tests/test_conformance.py",
    "emulator/pyproject.toml",
    "emulator/README.md",
    f"emulator/src/{EMULATOR_PACKAGE}/__init__.py",
    f"emulator/src/{EMULATOR_PACKAGE}/__main__.py",
    f"emulator/src/{EMULATOR_PACKAGE}/plugin.py",
    f"emulator/src/{EMULATOR_PACKAGE}/server.py",
    f"emulator/src/{EMULATOR_PACKAGE}/py.typed",
}

# Points the kit at the generated provider itself, as its author will once the emulator exists:
# every capability accessor returns None, so every test must skip, naming what is missing.
SKELETON_TESTS = f"""
import pytest
from polyccm_testing.conformance import FaultConformance, ProviderConformance
from {PACKAGE}.config import CloudConfig
from {PACKAGE}.provider import {TITLE}Provider


class SkeletonCloud:
    cluster_name = "kubernetes"
    provider = {TITLE}Provider(CloudConfig())

    def __getattr__(self, name):
        raise AssertionError(f"the kit asked the cloud for {{name}} of a provider it skips")


class TestSkeleton(ProviderConformance):
    @pytest.fixture
    def cloud(self):
        return SkeletonCloud()


class TestSkeletonFaults(FaultConformance):
    @pytest.fixture
    def cloud(self):
        return SkeletonCloud()
"""

# Run in the fresh environment: the provider the plugin builds, with no config and with one.
BUILD_PROBE = f"""
import json
from pathlib import Path
from polyccm.errors import ConfigError
from polyccm.plugins import ProviderSettings, build_provider, plugin_manager

manager = plugin_manager()
provider = build_provider(manager, ProviderSettings("{NAME}", None, "kubernetes"))
config = Path("cloud.conf")
config.write_text("# comment\\nregion = somewhere\\n")
try:
    build_provider(manager, ProviderSettings("{NAME}", config, "kubernetes"))
    config_error = ""
except ConfigError as error:
    config_error = str(error)
print(json.dumps({{
    "provider": type(provider).__name__,
    "capabilities": [provider.instances_v2(), provider.load_balancer(), provider.routes()],
    "config_error": config_error,
}}))
"""

# Run in the fresh environment: the emulator as the plugin registers it for polyccm-dev, asked
# for its health, an API it does not serve yet, and a reset.
EMULATOR_PROBE = f"""
import json, socket, subprocess, time, urllib.error, urllib.request
from pathlib import Path
from polyccm.plugins import installed_emulators, plugin_manager

with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
launch = installed_emulators(plugin_manager())["{NAME}"](port, Path("."))


def status(path, method="GET"):
    request = urllib.request.Request(f"http://127.0.0.1:{{port}}{{path}}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


process = subprocess.Popen(list(launch.argv), stdout=subprocess.DEVNULL)
try:
    deadline = time.monotonic() + 20
    while True:
        try:
            health = status(launch.health_path)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    print(json.dumps([health, status("/v1/instances"), status("/_polyccm/reset", "POST")]))
finally:
    process.terminate()
    process.wait(10)
"""


def _uv() -> str:
    """The uv that runs this session (``uv run`` says which), else the one on PATH or the
    workspace's own."""
    for candidate in (os.environ.get("UV"), shutil.which("uv"), str(ROOT / ".tools/bin/uv")):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("uv is needed to build the fresh environment and was not found", pytrace=False)


def _run(*argv: str | Path, cwd: Path | None = None, **extra_env: str) -> str:
    # The outer session's environment must not leak in: the fresh environment is the point, and
    # the kit there starts a control plane of its own.
    leaks = ("VIRTUAL_ENV", "PYTHONPATH", "POLYCCM_TEST_STATE_DIR")
    env = {k: v for k, v in os.environ.items() if k not in leaks} | extra_env
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, argv))} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


@dataclass(frozen=True)
class Generated:
    """A provider generated by ``polyccm-dev`` of a fresh environment, then installed there."""

    dest: Path
    venv: Path
    work: Path

    def run(self, command: str, *arguments: str | Path, **extra_env: str) -> str:
        """Run a command of the fresh environment, in a scratch directory."""
        return _run(self.venv / "bin" / command, *arguments, cwd=self.work, **extra_env)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Generated:
    root = tmp_path_factory.mktemp("new-provider")
    uv, venv, dest, work = _uv(), root / "venv", root / NAME, root / "work"
    work.mkdir()
    # Offline, from what `uv sync --locked` put in the uv cache: the lock's own files (exported
    # with their URLs, so no index page is needed to find them), then the two local
    # distributions without resolving anything. Resolving `core testkit` offline instead needs
    # the index pages of every dependency, which a sync from the lock never fetches: on a
    # machine with a fresh cache it found no pytest.
    install = (uv, "pip", "install", "--quiet", "--offline", "--no-sources", "--python", venv)
    lock = root / "pylock.toml"
    export = ("export", "--quiet", "--frozen", "--no-dev", "--no-emit-workspace")
    _run(
        uv, *export, "--package", "polyccm-testing", "--format", "pylock.toml", "-o", lock, cwd=ROOT
    )
    _run(uv, "venv", "--quiet", "--python", sys.executable, venv)
    _run(*install, "-r", lock)
    _run(*install, "--no-deps", ROOT / "core", ROOT / "testkit")
    # The installed wheel of polyccm-testing generates it: the template ships with it.
    _run(venv / "bin" / "polyccm-dev", "new-provider", NAME, "--dest", dest)
    # Both distributions: the provider, and its emulator beside it.
    _run(*install, dest, dest / "emulator")
    return Generated(dest, venv, work)


def test_the_generated_distribution_has_the_shape_of_a_provider(generated: Generated) -> None:
    dest = generated.dest
    assert {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()} == GENERATED
    pyproject = tomllib.loads((dest / "pyproject.toml").read_text())
    emulator = tomllib.loads((dest / "emulator" / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["polyccm"] == {NAME: f"{PACKAGE}.plugin"}
    assert pyproject["project"]["dependencies"] == ["polyccm"]
    assert "optional-dependencies" not in pyproject["project"]
    assert pyproject["dependency-groups"]["test"] == ["polyccm-testing", f"{DISTRIBUTION}-emulator"]
    assert emulator["project"]["name"] == f"{DISTRIBUTION}-emulator"
    assert emulator["project"]["dependencies"] == [DISTRIBUTION, "polyccm-testing"]
    assert emulator["project"]["entry-points"]["polyccm"] == {
        f"{NAME}-emulator": f"{EMULATOR_PACKAGE}.plugin"
    }


def test_the_provider_wheel_holds_no_emulator(generated: Generated) -> None:
    wheels = generated.work / "wheels"
    build = ("build", "--wheel", "--offline", "--no-sources", "--quiet", "--out-dir", wheels)
    _run(_uv(), *build, generated.dest)
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as opened:
        code = {n for n in opened.namelist() if not n.split("/")[0].endswith(".dist-info")}

    assert {n.split("/")[0] for n in code} == {PACKAGE}
    assert not [n for n in code if "emulator" in n or "test" in n], code


def test_the_generated_code_passes_ruff_and_strict_mypy(generated: Generated) -> None:
    dest, config = generated.dest, ROOT / "pyproject.toml"
    _run(sys.executable, "-m", "ruff", "check", "--no-cache", "--config", config, dest)
    _run(sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "--config", config, dest)
    mypy = (sys.executable, "-m", "mypy", "--strict", "--config-file", config)
    # From the workspace root, so the cache `make lint` left makes this take seconds.
    sources = (dest / "src", dest / "emulator" / "src")
    paths = os.pathsep.join(map(str, sources))
    _run(*mypy, dest / "src" / PACKAGE, sources[1] / EMULATOR_PACKAGE, dest / "tests", cwd=ROOT,
         MYPYPATH=paths)  # fmt: skip


def test_installing_it_registers_the_provider(generated: Generated) -> None:
    help_text = generated.run("polyccm", "--provider", NAME, "--help")

    assert f"installed providers: {NAME}" in help_text


def test_its_plugin_builds_a_provider_that_offers_no_capability_yet(generated: Generated) -> None:
    probe = json.loads(generated.run("python", "-c", BUILD_PROBE))

    assert probe["provider"] == f"{TITLE}Provider"
    assert probe["capabilities"] == [None, None, None]
    assert "cloud.conf:2: unknown setting 'region = somewhere'" in probe["config_error"]


def test_its_emulator_stub_starts_as_polyccm_dev_would_start_it(generated: Generated) -> None:
    health, unserved, reset = json.loads(generated.run("python", "-c", EMULATOR_PROBE))

    assert (health, unserved, reset) == (200, 501, 200)


@pytest.fixture(scope="module")
def kit_outcomes(generated: Generated) -> tuple[dict[str, str], dict[str, str]]:
    """One pytest run in the fresh environment: the generated tests, and the kit pointed at
    the generated provider itself (:data:`SKELETON_TESTS`)."""
    skeleton = generated.work / "skeleton"
    skeleton.mkdir()
    (skeleton / "test_skeleton.py").write_text(textwrap.dedent(SKELETON_TESTS))
    report = generated.work / "report.xml"
    generated.run(
        "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        generated.dest / "tests",
        skeleton,
        POLYCCM_SOAK_CYCLES="5",  # the inherited fault suite, shortened: the kit's own run has 25
    )
    return _outcomes(report)


def test_its_tests_run_the_conformance_kit_green(
    kit_outcomes: tuple[dict[str, str], dict[str, str]],
) -> None:
    generated, _ = kit_outcomes

    kit = {*dir(ProviderConformance), *dir(FaultConformance)}
    assert set(generated) == {n for n in kit if n.startswith("test_")}
    assert set(generated.values()) == {"passed"}, generated


def test_the_kit_skips_the_skeleton_naming_each_missing_capability(
    kit_outcomes: tuple[dict[str, str], dict[str, str]],
) -> None:
    generated, skeleton_skips = kit_outcomes

    assert set(skeleton_skips) == set(generated)
    assert all(NAME in message for message in skeleton_skips.values())
    messages = " ".join(skeleton_skips.values())
    for accessor in ("instances_v2()", "load_balancer()", "routes()"):
        assert accessor in messages, f"no skip names the missing {accessor}: {messages}"


def _outcomes(report: Path) -> tuple[dict[str, str], dict[str, str]]:
    """From a JUnit report: the generated module's tests and their outcomes, and the skeleton's
    skipped tests and their skip messages (a skeleton test that did not skip is left out)."""
    generated: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        name = case.get("name", "")
        result = next(iter(case), None)
        if case.get("classname", "").endswith(("TestSkeleton", "TestSkeletonFaults")):
            if result is not None and result.tag == "skipped":
                skipped[name] = result.get("message", "")
        else:
            generated[name] = "passed" if result is None else result.tag
    return generated, skipped


class _Claims:
    """A plugin that already registers the provider name ``taken``."""

    @hookimpl
    def polyccm_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register("taken", "someone else's")


def _new_provider(*arguments: str) -> int:
    return cli.main(["new-provider", *arguments], plugin_manager([_Claims()]))


@pytest.mark.parametrize(
    "name",
    ["MyCloud", "my-cloud", "1cloud", "_cloud", "my.cloud", "x" * (MAX_NAME_LENGTH + 1), "taken"],
)
def test_a_bad_or_taken_name_is_refused_with_one_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "dest"

    assert _new_provider(name, "--dest", str(dest)) == cli.EXIT_USAGE

    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("polyccm-dev: error: ")
    assert repr(name) in error
    assert not dest.exists()


def test_existing_files_are_never_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "mycloud"
    (dest / "tests").mkdir(parents=True)
    mine = dest / "tests" / "test_conformance.py"
    mine.write_text("# the author's own tests\n")

    assert _new_provider("mycloud", "--dest", str(dest)) == cli.EXIT_USAGE

    assert f"{mine} already exists; nothing was written" in capsys.readouterr().err
    assert mine.read_text() == "# the author's own tests\n"
    assert sorted(p.name for p in dest.rglob("*")) == ["test_conformance.py", "tests"]


def test_the_default_destination_is_providers_name_in_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "core").mkdir(parents=True)
    (workspace / "pyproject.toml").write_text(
        '[tool.uv.workspace]\nmembers = ["core", "providers/*", "testkit"]\n'
    )
    monkeypatch.chdir(workspace / "core")

    assert _new_provider("mycloud") == cli.EXIT_OK

    written = workspace / "providers" / "mycloud"
    assert (written / "src" / "polyccm_mycloud" / "plugin.py").is_file()
    assert (written / "emulator" / "src" / "polyccm_mycloud_emulator" / "plugin.py").is_file()
    assert "uv lock" in capsys.readouterr().out


def test_outside_a_workspace_the_destination_must_be_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)

    assert _new_provider("mycloud") == cli.EXIT_USAGE

    assert "give --dest DIR" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
