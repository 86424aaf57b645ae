"""``polyccm-dev``: start, inspect and stop a local control plane and cloud emulators.

    polyccm-dev up     [--state-dir DIR] [--cloud NAME ...] [--timeout SECONDS]
    polyccm-dev status [--state-dir DIR]
    polyccm-dev down   [--state-dir DIR]
    polyccm-dev new-provider NAME [--dest DIR]

``up`` leaves etcd, kube-apiserver and the emulators running in the background and writes
``DIR/kubeconfig`` and ``DIR/env`` (``set -a; . DIR/env; set +a`` exports them). ``new-provider``
writes a provider distribution ``polyccm-NAME`` and its emulator's ``polyccm-NAME-emulator``
from the template (:mod:`polyccm_testing.provider_template`), by default into
``providers/NAME`` (and ``providers/NAME/emulator``) of the workspace.
User mistakes (unknown cloud, bad flags, a taken provider name) exit with status 2 and one line;
a start that fails exits 1 with the last lines of the failing log.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from polyccm_testing import provider_template
from polyccm_testing.devenv import controlplane
from polyccm_testing.devenv.state import ENV_FILE, KUBECONFIG_FILE

if TYPE_CHECKING:
    import pluggy

DEFAULT_STATE_DIR = Path(".state") / "dev"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="polyccm-dev",
        description="Run a real local Kubernetes control plane (etcd, kube-apiserver) and "
        "cloud emulators for developing and testing polyccm.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        command = commands.add_parser(name, help=help_text, description=help_text)
        command.add_argument(
            "--state-dir",
            type=Path,
            default=DEFAULT_STATE_DIR,
            metavar="DIR",
            help=f"where pids, logs, kubeconfig and env live (default: {DEFAULT_STATE_DIR})",
        )
        return command

    up = add("up", "start the control plane (and emulators) unless it already runs")
    up.add_argument(
        "--cloud",
        action="append",
        default=[],
        metavar="NAME",
        help="also start the emulator of this cloud (repeatable)",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=controlplane.DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="how long etcd and kube-apiserver may take to become ready (default: %(default)s)",
    )
    add("status", "show what runs; exit 0 when everything is alive, 1 otherwise")
    add("down", "stop everything and remove the runtime files (logs are kept)")
    new_provider = commands.add_parser(
        "new-provider",
        help="write a new provider distribution from the template",
        description="Write the distribution polyccm-NAME (package polyccm_NAME): entry point, "
        "plugin, provider skeleton, emulator stub, README and a test module that runs the "
        "conformance kit. Existing files are never overwritten.",
    )
    new_provider.add_argument(
        "name", metavar="NAME", help="the provider name, a lowercase identifier (mycloud)"
    )
    new_provider.add_argument(
        "--dest",
        type=Path,
        metavar="DIR",
        help="where to write it (default: providers/NAME in the polyccm workspace)",
    )
    return parser


def _progress(message: str) -> None:
    print(f"polyccm-dev: {message}", file=sys.stderr, flush=True)


def _error(message: str) -> None:
    print(f"polyccm-dev: error: {message}", file=sys.stderr, flush=True)


def _failed(error: controlplane.ControlPlaneError) -> int:
    """Say ``error``; exit 2 for bad input (an unknown cloud, an unreadable state file), else 1."""
    _error(str(error))
    bad_input = (controlplane.UnknownEmulatorError, controlplane.StateFileError)
    return EXIT_USAGE if isinstance(error, bad_input) else EXIT_FAILED


def _up(arguments: argparse.Namespace, manager: pluggy.PluginManager | None) -> int:
    if arguments.timeout <= 0:
        _error("--timeout must be positive")
        return EXIT_USAGE
    try:
        plane = controlplane.start(
            arguments.state_dir,
            arguments.cloud,
            manager,
            timeout=arguments.timeout,
            progress=_progress,
        )
    except controlplane.ControlPlaneError as error:
        return _failed(error)
    directory = plane.state_dir
    if plane.reused:
        added = f"; started {', '.join(plane.started_clouds)}" if plane.started_clouds else ""
        print(f"already up in {directory} at {plane.api_url}{added}")
    else:
        print(f"up in {directory} at {plane.api_url}")
    print(f"kubeconfig: {directory / KUBECONFIG_FILE}")
    print(f"environment: set -a; . {directory / ENV_FILE}; set +a")
    return EXIT_OK


def _status(arguments: argparse.Namespace) -> int:
    try:
        components = controlplane.status(arguments.state_dir)
    except controlplane.ControlPlaneError as error:
        return _failed(error)
    if not components:
        print(f"not up: nothing runs from {arguments.state_dir}")
        return EXIT_FAILED
    width = max(len(item.name) for item in components)
    for item in components:
        state = "alive" if item.alive else "dead"
        print(f"{item.name:<{width}}  pid {item.pid:<7}  {item.url}  {state}")
    return EXIT_OK if all(item.alive for item in components) else EXIT_FAILED


def _down(arguments: argparse.Namespace) -> int:
    try:
        stopped = controlplane.stop(arguments.state_dir)
    except controlplane.ControlPlaneError as error:
        return _failed(error)
    print("stopped" if stopped else f"nothing was running from {arguments.state_dir}")
    return EXIT_OK


def _new_provider(arguments: argparse.Namespace, manager: pluggy.PluginManager | None) -> int:
    from polyccm.plugins import installed_providers, plugin_manager

    taken = installed_providers(manager or plugin_manager())
    destination: Path | None = arguments.dest
    workspace = provider_template.find_workspace(Path.cwd())
    try:
        names = provider_template.check_name(arguments.name, taken)
        if destination is None:
            if workspace is None:
                raise provider_template.TemplateError(
                    "not inside the polyccm workspace: give --dest DIR"
                )
            destination = workspace / "providers" / names.name
        written = provider_template.write_provider(names, destination)
    except provider_template.TemplateError as error:
        _error(str(error))
        return EXIT_USAGE
    print(f"wrote {names.distribution} ({len(written)} files) in {destination}")
    print("next:")
    emulator = destination / "emulator"
    if workspace is not None and destination.resolve().is_relative_to(workspace.resolve()):
        print(
            f"  uv lock && uv sync --all-packages    # install {names.distribution} and "
            f"{names.emulator_distribution} too"
        )
        print(f"  uv run --no-sync pytest {destination} -q   # the conformance kit")
        print(
            f"  add {names.package} and {names.emulator_package} to mypy's files and "
            "import-linter's contracts, and their tests to testpaths, in the workspace's "
            "pyproject.toml"
        )
    else:
        print(
            f"  pip install -e {destination} -e {emulator}   # where polyccm and "
            "polyccm-testing are installed"
        )
        print(f"  pytest {destination / 'tests'} -q   # the conformance kit")
    print("  then replace the TODOs, starting with the emulator and instances")
    return EXIT_OK


def main(argv: Sequence[str] | None = None, manager: pluggy.PluginManager | None = None) -> int:
    """Run ``polyccm-dev``; ``manager`` replaces the installed plugins (tests inject one)."""
    arguments = _parser().parse_args(argv)
    try:
        if arguments.command == "up":
            return _up(arguments, manager)
        if arguments.command == "status":
            return _status(arguments)
        if arguments.command == "new-provider":
            return _new_provider(arguments, manager)
        return _down(arguments)
    except OSError as error:
        _error(str(error))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _error("interrupted")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
