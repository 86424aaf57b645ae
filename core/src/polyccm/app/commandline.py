"""What every ``polyccm`` command shares: the command line (upstream-compatible flags, the
provider chosen and asked for its controllers and flags, the provider built and checked as at
start-up) and the logging set-up every command starts with.

:mod:`polyccm.cli` (the manager and ``polyccm rbac``) and :mod:`polyccm.ops.commands` (``plan``,
``orphans``, ``check-service``) both stand on this module; neither imports the other's insides.
A user mistake raises :class:`UsageError`, which the commands print as one line (exit 2).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import platform
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import pluggy

from polyccm import flagtypes, logformat, logredact, plugins, version
from polyccm.app import helptext
from polyccm.app.options import (
    ManagerOptions,
    add_manager_flags,
    cluster_cidr_problem,
    options_from_namespace,
)
from polyccm.cloud import CloudProvider
from polyccm.kube.config import Configuration

USAGE_ERROR = 2
PROG = "polyccm"
# Upstream (k8s.io/cloud-provider) refuses to start without a cluster id for the same reason:
# the id scopes every cloud resource the controllers make, adopt or delete.
_NO_CLUSTER_ID = (
    "no cluster id: the {provider} provider found none, neither in --cloud-config nor in the tags "
    "of the cloud instance polyccm runs on; set one in either place, or pass "
    "--allow-untagged-cloud to run without one"
)

# Upstream accepts an empty --cluster-name (cloud-provider v0.35.4 options/kubecloudshared.go
# validates nothing of it); polyccm refuses it only where it is the one thing that tags.
_EMPTY_CLUSTER_NAME = (
    "--cluster-name is empty: the {provider} provider found no cluster id, so with "
    "--allow-untagged-cloud the cluster name is what marks the cluster's cloud resources, and "
    "an empty one marks none; give the cluster a name"
)


class UsageError(Exception):
    """A user mistake on the command line; printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line instead of usage plus message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


class _Formatter(argparse.HelpFormatter):
    """argparse's help, with the epilog's lines (the list of commands) kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" not in text:
            return super()._fill_text(text, width, indent)
        return "\n".join(indent + line for line in text.splitlines())


_HELP_VALUE = re.compile(r"(-h|--help)=(.*)", re.DOTALL)


def _help_values_resolved(argv: Sequence[str]) -> list[str]:
    """``argv`` with upstream's ``--help=BOOL`` (pflag's help is a bool flag) turned into a bare
    ``--help`` when true and dropped when false."""
    resolved = []
    for arg in argv:
        match = _HELP_VALUE.fullmatch(arg)
        if match is None:
            resolved.append(arg)
            continue
        try:
            wanted = flagtypes.parse_bool(match.group(2))
        except argparse.ArgumentTypeError as error:
            raise UsageError(f"argument {match.group(1)}: {error}") from None
        if wanted:
            resolved.append("--help")
    return resolved


def _provider_parser() -> Parser:
    parser = Parser(prog=PROG, add_help=False, allow_abbrev=False)
    parser.add_argument("--provider", "--cloud-provider", dest="provider")
    parser.add_argument("-h", "--help", action="store_true")
    return parser


def split_provider(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The ``--provider`` (or ``--cloud-provider``) in ``argv``, unchecked, and the arguments
    left once it (and ``--help``) are taken out."""
    first, rest = _provider_parser().parse_known_args(_help_values_resolved(argv))
    return first.provider, rest


def _full_parser(
    manager: pluggy.PluginManager,
    provider: str | None,
    available: Sequence[str],
    controllers: Mapping[str, plugins.ControllerInfo],
    *,
    prog: str = PROG,
    description: str = helptext.MANAGER,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> Parser:
    installed = f"installed providers: {', '.join(available) or 'none'}"
    parser = Parser(
        prog=prog,
        allow_abbrev=False,
        usage=f"{PROG} [COMMAND] --provider NAME [flags]" if prog == PROG else None,
        description=description,
        epilog=f"{helptext.commands_epilog()}\n\n{installed}" if prog == PROG else installed,
        formatter_class=_Formatter,
    )
    parser.add_argument(
        "--provider",
        "--cloud-provider",
        dest="provider",
        metavar="NAME",
        help=f"the cloud provider to run (installed: {', '.join(available) or 'none'})",
    )
    add_manager_flags(parser, {name: info.enabled_by_default for name, info in controllers.items()})
    if provider:
        group = parser.add_argument_group(f"{provider} provider flags")
        manager.hook.polyccm_add_options(provider=provider, group=group)
    if extra is not None:
        extra(parser)
    return parser


@dataclass(frozen=True)
class CommandLine:
    """What the command line asks for."""

    options: ManagerOptions
    namespace: argparse.Namespace
    """Every parsed option, the provider's own included (handed to the provider's plugin)."""
    controllers: Mapping[str, plugins.ControllerInfo]
    """The chosen provider's own controllers (selected or not: see ``options.controllers``)."""


def parse(
    argv: Sequence[str], manager: pluggy.PluginManager
) -> tuple[ManagerOptions, argparse.Namespace]:
    """Parse ``argv``; raise :class:`UsageError` for any user mistake.

    ``--help`` prints the help text and exits 0, as usual.
    """
    parsed = parse_command_line(argv, manager)
    return parsed.options, parsed.namespace


def chosen_provider(
    argv: Sequence[str], manager: pluggy.PluginManager
) -> tuple[str | None, list[str], Mapping[str, plugins.ProviderInfo]]:
    """The ``--provider`` in ``argv`` (checked to be installed), what else ``argv`` holds, and
    every installed provider."""
    try:
        installed = plugins.installed_providers(manager)
    except plugins.PluginError as error:
        raise UsageError(str(error)) from None
    provider, rest = split_provider(argv)
    if provider is not None and provider not in installed:
        raise UsageError(
            f"unknown provider {provider!r}; installed providers: "
            f"{', '.join(sorted(installed)) or 'none'}"
        )
    return provider, rest, installed


def controllers_of(
    manager: pluggy.PluginManager, provider: plugins.ProviderInfo | None
) -> Mapping[str, plugins.ControllerInfo]:
    """The controllers ``provider`` registers of its own (none without a provider);
    :class:`UsageError` when its plugin registers them wrongly."""
    if provider is None:
        return {}
    try:
        return plugins.provider_controllers(manager, provider)
    except plugins.PluginError as error:
        raise UsageError(str(error)) from None


def parse_command_line(
    argv: Sequence[str],
    manager: pluggy.PluginManager,
    *,
    prog: str = PROG,
    description: str = helptext.MANAGER,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> CommandLine:
    """Parse ``argv``, asking the chosen provider for its controllers; raise
    :class:`UsageError` for any user mistake. ``description`` is what ``--help`` says of the
    command; ``extra`` adds a subcommand's own flags."""
    provider, _, installed = chosen_provider(argv, manager)
    available = sorted(installed)
    controllers = controllers_of(manager, installed.get(provider) if provider else None)
    parser = _full_parser(
        manager, provider, available, controllers, prog=prog, description=description, extra=extra
    )
    namespace = parser.parse_args(_help_values_resolved(argv))
    if namespace.version in ("true", "raw"):
        # As upstream, before any check: the version is printed whatever else is missing.
        print(_version_text(raw=namespace.version == "raw"))
        raise SystemExit(0)
    if provider is None:
        raise UsageError(
            f"--provider is required; installed providers: {', '.join(available) or 'none'}"
        )
    try:
        options = options_from_namespace(provider, namespace)
    except argparse.ArgumentTypeError as error:
        raise UsageError(str(error)) from None
    if options.cloud_config is not None:
        try:
            with options.cloud_config.open("rb"):
                pass
        except OSError as error:
            raise UsageError(
                f"cannot read cloud config {options.cloud_config}: {error.strerror}"
            ) from None
    return CommandLine(options, namespace, controllers)


def _version_text(*, raw: bool) -> str:
    """``--version``: polyccm's version; ``--version=raw``: with the Python running it."""
    current = version.version()
    if not raw:
        return f"{PROG} v{current}"
    info = {
        "gitVersion": f"v{current}",
        "pythonVersion": platform.python_version(),
        "platform": version.platform_name(),
    }
    return json.dumps(info)


def build_checked_provider(parsed: CommandLine, manager: pluggy.PluginManager) -> CloudProvider:
    """The provider ``parsed`` names, built by its plugin and checked as at start-up: the
    route controller's ``--cluster-cidr`` and the cluster id (:class:`UsageError` otherwise)."""
    options = parsed.options
    settings = plugins.ProviderSettings(
        provider=options.provider,
        cloud_config=options.cloud_config,
        cluster_name=options.cluster_name,
        options=parsed.namespace,
    )
    provider = plugins.build_provider(manager, settings)
    from polyccm.app.manager import route_controller_problem

    problem = route_controller_problem(options, provider)
    if not problem and options.route_controller_on and provider.routes() is not None:
        problem = cluster_cidr_problem(options.cluster_cidrs)
    if problem:
        raise UsageError(problem)
    if not provider.has_cluster_id():
        if not options.allow_untagged_cloud:
            raise UsageError(_NO_CLUSTER_ID.format(provider=options.provider))
        if not options.cluster_name.strip():
            raise UsageError(_EMPTY_CLUSTER_NAME.format(provider=options.provider))
    return provider


def _kube_secrets(configuration: Configuration) -> list[str]:
    """What the Kubernetes connection authenticates with: token, password, client key."""
    found = [str(v) for v in (configuration.api_key or {}).values() if v]
    if configuration.password:
        found.append(str(configuration.password))
    if configuration.key_file:
        try:
            key = Path(configuration.key_file).read_bytes()
        except OSError:
            key = b""
        if key:
            # As the PEM file, as a kubeconfig's client-key-data, and line by line.
            found += [key.decode(errors="replace"), base64.b64encode(key).decode()]
            found += [line for line in key.decode(errors="replace").splitlines() if "-" not in line]
    return found


def _log_uncaught(
    kind: type[BaseException], error: BaseException, traceback: TracebackType | None
) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, traceback)
        return
    logging.getLogger(PROG).critical("uncaught exception", exc_info=(kind, error, traceback))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return  # as the default hook: a thread that exits is no error
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger(PROG).critical(
        "uncaught exception in thread %s", name, exc_info=args.exc_value
    )


_HANDLER = "polyccm-stderr"
"""The name of the stderr handler :func:`start_logging` sets up."""


def start_logging() -> None:
    """Before anything is read: log to stderr in klog's text format (warnings only until
    ``--v`` is known), every record through :mod:`polyccm.logredact`, the secrets of the
    environment known to it, and uncaught exceptions through the same masked handlers instead
    of straight to stderr."""
    root = logging.getLogger()
    if not root.handlers:  # as logging.basicConfig: a host's own handlers are left alone
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logformat.formatter("text"))
        handler.set_name(_HANDLER)
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
    for value in logredact.secrets_in_environment(os.environ):
        logredact.add_secret(value, guessed=True)
    logredact.install(root.handlers)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread


def configure_logging(
    verbosity: int, *configurations: Configuration | None, logging_format: str = "text"
) -> None:
    """Log to stderr in ``logging_format`` (``--logging-format``: klog's text or
    component-base's JSON, :mod:`polyccm.logformat`); ``--v>=4`` is DEBUG, ``--v>=6`` adds the
    libraries' wire logs.

    Whatever the level and format, records pass :mod:`polyccm.logredact` on the way out, so no
    credential is printed: the secrets in the environment and of the Kubernetes connections are
    masked by value, anything shaped like a secret (an STS answer, a signed request's headers)
    by shape."""
    start_logging()
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbosity >= 4 else logging.INFO)
    for handler in root.handlers:
        if handler.get_name() == _HANDLER:
            handler.setFormatter(logformat.formatter(logging_format))
    for configuration in configurations:
        for value in _kube_secrets(configuration) if configuration is not None else ():
            logredact.add_secret(value)
    if verbosity < 6:
        for noisy in ("urllib3", "botocore", "boto3", "kubernetes"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
