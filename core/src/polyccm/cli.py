"""The ``polyccm`` command: parse upstream-compatible flags, build the provider, run the manager.

User mistakes (an unknown provider, flag or controller, a bad value, an unreadable or malformed
cloud config, unusable serving certificate files) print one line to stderr and exit with status
2; they never produce a traceback. That line, and every log line from the first, pass
:mod:`polyccm.logredact`: a secret echoed in another setting's error is masked there too.
``polyccm rbac --provider NAME`` prints the ClusterRole that provider's process needs instead
(``polyccm --provider=NAME rbac`` too, as an image's entry point writes it);
``polyccm plan``, ``orphans`` and ``check-service`` are the operator commands of
:mod:`polyccm.ops.commands`.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import logging
import os
import platform
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import pluggy

from polyccm import flagtypes, logredact, plugins, rbac
from polyccm.app.options import (
    IGNORED_FLAGS,
    ManagerOptions,
    add_manager_flags,
    cluster_cidr_problem,
    options_from_namespace,
    resolve_controllers,
    unlimited_qps,
)
from polyccm.cloud import CloudProvider
from polyccm.errors import ConfigError
from polyccm.kube.api import KubeconfigError, load_configuration
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


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line instead of usage plus message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


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


def _provider_parser() -> _Parser:
    parser = _Parser(prog=PROG, add_help=False, allow_abbrev=False)
    parser.add_argument("--provider", "--cloud-provider", dest="provider")
    parser.add_argument("-h", "--help", action="store_true")
    return parser


def _full_parser(
    manager: pluggy.PluginManager,
    provider: str | None,
    available: Sequence[str],
    controllers: Mapping[str, plugins.ControllerInfo],
    *,
    prog: str = PROG,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> _Parser:
    parser = _Parser(
        prog=prog,
        allow_abbrev=False,
        description="A Kubernetes cloud-controller-manager. Runs the cloud-node, "
        "cloud-node-lifecycle, service and route controllers for one cloud provider.",
        epilog=f"installed providers: {', '.join(available) or 'none'}",
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


def _chosen_provider(
    argv: Sequence[str], manager: pluggy.PluginManager
) -> tuple[str | None, list[str], Mapping[str, plugins.ProviderInfo]]:
    """The ``--provider`` in ``argv`` (checked to be installed), what else ``argv`` holds, and
    every installed provider."""
    try:
        installed = plugins.installed_providers(manager)
    except plugins.PluginError as error:
        raise UsageError(str(error)) from None
    first, rest = _provider_parser().parse_known_args(_help_values_resolved(argv))
    provider = first.provider
    if provider is not None and provider not in installed:
        raise UsageError(
            f"unknown provider {provider!r}; installed providers: "
            f"{', '.join(sorted(installed)) or 'none'}"
        )
    return provider, rest, installed


def _controllers_of(
    manager: pluggy.PluginManager, provider: plugins.ProviderInfo | None
) -> Mapping[str, plugins.ControllerInfo]:
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
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> CommandLine:
    """Parse ``argv``, asking the chosen provider for its controllers; raise
    :class:`UsageError` for any user mistake. ``extra`` adds a subcommand's own flags."""
    provider, _, installed = _chosen_provider(argv, manager)
    available = sorted(installed)
    controllers = _controllers_of(manager, installed.get(provider) if provider else None)
    parser = _full_parser(manager, provider, available, controllers, prog=prog, extra=extra)
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
    version = metadata.version("polyccm")
    if not raw:
        return f"{PROG} v{version}"
    info = {
        "gitVersion": f"v{version}",
        "pythonVersion": platform.python_version(),
        "platform": f"{sys.platform}/{platform.machine()}",
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


def _rbac_requested(argv: Sequence[str]) -> list[str] | None:
    """The arguments of ``rbac`` when ``argv`` asks for it (``rbac --provider X`` or
    ``--provider X rbac``), else ``None``."""
    _, rest = _provider_parser().parse_known_args(_help_values_resolved(argv))
    if rest and rest[0] == "rbac":
        return rest[1:]
    return None


def print_rbac(argv: Sequence[str], manager: pluggy.PluginManager) -> None:
    """``polyccm rbac``: print the ClusterRole for ``--provider`` (and ``--controllers``)."""
    provider, _, installed = _chosen_provider(argv, manager)
    available = ", ".join(sorted(installed)) or "none"
    controllers = _controllers_of(manager, installed.get(provider) if provider else None)
    defaults = {name: info.enabled_by_default for name, info in controllers.items()}
    parser = _Parser(
        prog=f"{PROG} rbac",
        allow_abbrev=False,
        description="Print the ClusterRole polyccm needs for one provider: the core's rules "
        "(those of deploy/kustomize/base/rbac.yaml) plus those of the provider's selected "
        "controllers. Apply it after the provider's overlay (deploy/kustomize/overlays), whose "
        "ClusterRole it replaces.",
    )
    parser.add_argument("command", choices=["rbac"], help=argparse.SUPPRESS)
    parser.add_argument(
        "--provider",
        "--cloud-provider",
        dest="provider",
        metavar="NAME",
        help=f"the cloud provider (installed: {available})",
    )
    parser.add_argument(
        "--controllers",
        type=functools.partial(resolve_controllers, provider_controllers=defaults),
        default=resolve_controllers("*", defaults),
        metavar="NAMES",
        help="the controllers the Deployment runs, as its --controllers (default '*')",
    )
    selected = parser.parse_args(argv).controllers
    if provider is None:
        raise UsageError(f"rbac needs --provider; installed providers: {available}")
    chosen = [info for name, info in controllers.items() if name in selected and info.rbac_rules]
    command = f"polyccm rbac --provider={provider}"
    if selected != resolve_controllers("*", defaults):
        command += f" --controllers={','.join(sorted(selected))}"
    header = (
        f"Generated by `{command}`: the ClusterRole of polyccm\n"
        "with the core's rules (those of deploy/kustomize/base/rbac.yaml), then those of\n"
        "the provider's own controllers. Apply it after the provider's overlay\n"
        "(deploy/kustomize/overlays), whose ClusterRole it replaces."
    )
    extra = [
        (f"{info.name}: a controller of provider {provider} ({info.plugin}).", info.rbac_rules)
        for info in chosen
    ]
    sys.stdout.write(rbac.render_cluster_role(extra, header=header))


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


def _review_configuration(flag: str, kubeconfig: str | None) -> Configuration | None:
    """The connection ``flag`` names for the secure port's reviews; ``None`` without one (the
    reviews then go where the controllers' requests go)."""
    if not kubeconfig:
        return None
    try:
        return load_configuration(kubeconfig)
    except KubeconfigError as error:
        raise UsageError(f"{flag}: {error}") from None


_LOG_FORMAT = "%(asctime)s %(levelname).1s %(name)s] %(message)s"


def _start_logging() -> None:
    """Before anything is read: log to stderr (warnings only until ``--v`` is known), every
    record through :mod:`polyccm.logredact`, the secrets of the environment known to it, and
    uncaught exceptions through the same masked handlers instead of straight to stderr."""
    logging.basicConfig(level=logging.WARNING, format=_LOG_FORMAT, stream=sys.stderr)
    for value in logredact.secrets_in_environment(os.environ):
        logredact.add_secret(value, guessed=True)
    logredact.install(logging.getLogger().handlers)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread


def _configure_logging(verbosity: int, *configurations: Configuration | None) -> None:
    """Log to stderr; ``--v>=4`` is DEBUG, ``--v>=6`` adds the libraries' wire logs.

    Whatever the level, records pass :mod:`polyccm.logredact` on the way out, so no credential
    is printed: the secrets in the environment and of the Kubernetes connections are masked by
    value, anything shaped like a secret (an STS answer, a signed request's headers) by shape."""
    _start_logging()
    logging.getLogger().setLevel(logging.DEBUG if verbosity >= 4 else logging.INFO)
    for configuration in configurations:
        for value in _kube_secrets(configuration) if configuration is not None else ():
            logredact.add_secret(value)
    if verbosity < 6:
        for noisy in ("urllib3", "botocore", "boto3", "kubernetes"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def _warn_about_flags(options: ManagerOptions, provider: CloudProvider, *more: str) -> None:
    """Say which flags set change nothing here, what upstream warns about the gates, and which
    values upstream accepts that do less than they seem to (``more``: other such warnings)."""
    log = logging.getLogger(PROG)
    for flag in options.ignored_flags:
        log.warning("%s is accepted for compatibility and ignored: %s", flag, IGNORED_FLAGS[flag])
    for warning in options.feature_gates.warnings():
        log.warning("%s", warning)
    if not options.controllers:
        # Upstream (cloud-provider v0.35.4 app/controllermanager.go:305-307) starts and warns
        # that each controller is disabled.
        log.warning(
            "--controllers selects no controller: polyccm starts, as upstream does, but no "
            "controller will run (give '*' for the default ones)"
        )
    if unlimited_qps(options.kube_api_qps):
        log.warning(
            "--kube-api-qps=%g: no client-side limit on requests to the API server (as "
            "client-go, for a negative or infinite QPS)",
            options.kube_api_qps,
        )
    if not options.cluster_name.strip() and provider.has_cluster_id():
        log.warning(
            "--cluster-name is empty: accepted, as upstream accepts it; the provider's cluster "
            "id marks the cluster's cloud resources, but names made from the cluster name "
            "(route names, for one) start with nothing"
        )
    for warning in more:
        log.warning("%s", warning)


def _check_serving_files(options: ManagerOptions) -> list[str]:
    """The secure port's files checked at start, as upstream loads them before anything runs
    (``--tls-cert-file`` and its key, ``--client-ca-file``); :class:`UsageError` naming the
    file at fault; the warnings about a certificate out of its validity."""
    if not options.secure_port:
        return []  # upstream reads none of them without a secure port
    from polyccm.serving import certs

    try:
        return certs.check_files(
            options.tls_cert_file, options.tls_private_key_file, options.client_ca_file
        )
    except certs.CertificateError as error:
        raise UsageError(str(error)) from None


def main(argv: Sequence[str] | None = None, manager: pluggy.PluginManager | None = None) -> int:
    """Entry point of ``polyccm``; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    _start_logging()
    try:
        manager = manager or plugins.plugin_manager()
        rbac_args = _rbac_requested(args)
        if rbac_args is not None:
            print_rbac(args, manager)
            return 0
        from polyccm.ops import commands

        operator_command = commands.requested(args)
        if operator_command is not None:
            return commands.run(*operator_command, manager)
        parsed = parse_command_line(args, manager)
        options = parsed.options
        serving_warnings = _check_serving_files(options)
        provider = build_checked_provider(parsed, manager)
        configuration = load_configuration(options.kubeconfig, options.master)
        authentication = _review_configuration(
            "--authentication-kubeconfig", options.delegated_auth.authentication_kubeconfig
        )
        authorization = _review_configuration(
            "--authorization-kubeconfig", options.delegated_auth.authorization_kubeconfig
        )
    except (UsageError, ConfigError, plugins.PluginError, KubeconfigError) as error:
        print(logredact.error_line(PROG, error), file=sys.stderr)
        return USAGE_ERROR
    _configure_logging(options.verbosity, configuration, authentication, authorization)
    _warn_about_flags(options, provider, *serving_warnings)
    if not provider.has_cluster_id():
        logging.getLogger(PROG).warning(
            "no cluster id found; running without one as --allow-untagged-cloud allows "
            "(--cluster-name %r stands in for it)",
            options.cluster_name,
        )
    from polyccm.app.manager import run_manager

    return run_manager(
        options,
        provider,
        configuration,
        provider_controllers={name: info.constructor for name, info in parsed.controllers.items()},
        authentication=authentication,
        authorization=authorization,
    )


if __name__ == "__main__":
    raise SystemExit(main())
