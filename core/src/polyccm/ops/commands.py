"""The operator subcommands of ``polyccm``: ``plan``, ``orphans`` and ``check-service``.

``plan`` and ``orphans`` take the manager's flags (``--provider``, ``--cloud-config``,
``--cluster-name``, ``--kubeconfig``, ``--cluster-cidr``, ``--controllers``...), build the
provider as the manager does, and read the cluster once. They run without leader election
(the fence of :mod:`polyccm.cloudcalls` is open: there is no term to lose) and under its
read-only guard, so a write to the cloud is refused before it is sent; ``orphans --delete``
lifts the guard for the deletions alone. ``check-service`` touches neither cloud nor cluster.

Exit status: 0 nothing to do (no change planned, no orphan, no problem, all deleted), 1
something (changes planned, orphans found or kept, problems found), 2 bad input (a flag, the
cloud config, the kubeconfig, the manifest) or a failure to read the cluster or the cloud, as
one line on stderr.

``plan`` and ``orphans`` read the cluster as kubectl does: an API server that refuses the
connection is said at once (no retry), and one that does not answer within
``--request-timeout`` (10s unless given; per request: to connect, to finish TLS, and for each
part of an answer) is given up; either way one line names the server and the cause.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

import pluggy
import urllib3

from polyccm import cloudcalls, inputs, logredact, plugins
from polyccm.app import helptext
from polyccm.app.commandline import (
    PROG,
    USAGE_ERROR,
    Parser,
    UsageError,
    build_checked_provider,
    configure_logging,
    parse_command_line,
)
from polyccm.app.options import ManagerOptions
from polyccm.cloud import CloudProvider
from polyccm.errors import CloudError, ConfigError, WriteRefused
from polyccm.flagtypes import positive_duration
from polyccm.kube import unreachable
from polyccm.kube.api import (
    NODES,
    SERVICES,
    ApiError,
    KubeApi,
    KubeconfigError,
    Resource,
    RetryPolicy,
)
from polyccm.kube.api import load_configuration as load_kube_configuration
from polyccm.objects import Node, Service
from polyccm.ops import check, orphans, render
from polyccm.ops.contract import ServiceChecker
from polyccm.ops.plan import PlanNotSupported, make_plan

COMMANDS = ("plan", "orphans", "check-service")
_DESCRIPTIONS = {"plan": helptext.PLAN, "orphans": helptext.ORPHANS}
NOTHING, SOMETHING = 0, 1
PAGE = 500
REQUEST_TIMEOUT = "10s"
"""``--request-timeout`` unless given: as long as client-go waits for a TLS handshake."""
ONE_SHOT = replace(RetryPolicy(), connection_budget=0.0)
"""A command run once says at once that the server refuses connections, as kubectl does,
instead of retrying for a few seconds with a warning; ``Retry-After`` is still honoured."""

log = logging.getLogger(PROG)


def requested(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """``(command, the other arguments)`` when ``argv`` asks for an operator command, either
    first or right after ``--provider NAME``; else ``None``."""
    args = list(argv)
    index = 0
    if args and args[0] in ("--provider", "--cloud-provider") and len(args) > 1:
        index = 2
    elif args and args[0].startswith(("--provider=", "--cloud-provider=")):
        index = 1
    if index < len(args) and args[index] in COMMANDS:
        return args[index], args[:index] + args[index + 1 :]
    return None


def run(command: str, argv: Sequence[str], manager: pluggy.PluginManager) -> int:
    """Run operator ``command`` with ``argv`` (the command word removed)."""
    runners: dict[str, Callable[[Sequence[str], pluggy.PluginManager], int]] = {
        "plan": _plan,
        "orphans": _orphans,
        "check-service": _check_service,
    }
    try:
        return runners[command](argv, manager)
    except (UsageError, ConfigError, plugins.PluginError, KubeconfigError) as error:
        print(logredact.error_line(f"{PROG} {command}", error), file=sys.stderr)
        return USAGE_ERROR
    except (
        ApiError,
        ClusterReadFailed,
        CloudError,
        PlanNotSupported,
        WriteRefused,
        OSError,
    ) as error:
        log.debug("%s failed", command, exc_info=True)
        print(logredact.error_line(f"{PROG} {command}", error), file=sys.stderr)
        return USAGE_ERROR


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


class ClusterReadFailed(Exception):
    """The cluster could not be read (refused, timed out, TLS failed, an error answer); the
    message names the API server."""


# -- shared by plan and orphans -------------------------------------------------------------------


def _output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=["table", "json"],
        default="table",
        help="table (default) or json",
    )
    parser.add_argument(
        "--request-timeout",
        type=positive_duration,
        default=positive_duration(REQUEST_TIMEOUT),
        metavar="DURATION",
        help="how long to wait for the API server to connect, to finish TLS and to send each "
        f"part of an answer before giving up (default {REQUEST_TIMEOUT})",
    )


def _connect(
    command: str,
    argv: Sequence[str],
    manager: pluggy.PluginManager,
    extra: Callable[[argparse.ArgumentParser], None],
) -> tuple[ManagerOptions, argparse.Namespace, CloudProvider, KubeApi]:
    """Parse the flags, build the provider as the manager does and connect to the cluster."""
    parsed = parse_command_line(
        argv, manager, prog=f"{PROG} {command}", description=_DESCRIPTIONS[command], extra=extra
    )
    options = parsed.options
    # As at start-up: building may read the cloud (the cluster id), with the provider's own
    # credentials (STS included), before its read_only_call can be asked.
    provider = build_checked_provider(parsed, manager)
    configuration = load_kube_configuration(options.kubeconfig, options.master)
    configure_logging(options.verbosity, configuration, logging_format=options.logging_format)
    if options.verbosity < 4:
        # The provider's own progress lines (what it would create...) are not this output.
        logging.getLogger().setLevel(logging.WARNING)
    api = KubeApi(
        configuration,
        qps=options.kube_api_qps,
        burst=options.kube_api_burst,
        user_agent=f"polyccm-{command}",
        retry=ONE_SHOT,
    )
    return options, parsed.namespace, provider, api


def list_all(api: KubeApi, resource: Resource, timeout: float = 120.0) -> list[dict[str, object]]:
    """Every object of ``resource`` in every namespace, in pages; each request given up after
    ``timeout`` seconds without progress."""
    items: list[dict[str, object]] = []
    token = ""
    while True:
        query: dict[str, Any] = {"limit": PAGE}
        if token:
            query["continue"] = token
        page = api.request("GET", resource.path(None), query=query, timeout=timeout)
        items += page.get("items") or []
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return items


def _cluster(api: KubeApi, timeout: float) -> tuple[list[Node], list[Service]]:
    """Every node and service, else :class:`ClusterReadFailed` naming the server and why."""
    where = unreachable.server(api.configuration.host)
    try:
        nodes = list_all(api, NODES, timeout)
        services = list_all(api, SERVICES, timeout)
    except urllib3.exceptions.HTTPError as error:
        log.debug("reading the cluster failed", exc_info=True)
        why = unreachable.describe(error, timeout=timeout, flag="--request-timeout")
        raise ClusterReadFailed(f"API server {where}: {why}") from None
    except ApiError as error:
        raise ClusterReadFailed(f"API server {where}: {_one_line(error)}") from None
    except (ValueError, AttributeError):
        # An answer that is not a JSON object: not an API server, or a proxy's error page.
        log.debug("reading the cluster failed", exc_info=True)
        raise ClusterReadFailed(
            f"API server {where}: its answer is not a Kubernetes list (is it an API server?)"
        ) from None
    return [Node(o) for o in nodes], [Service(o) for o in services]


# -- plan -----------------------------------------------------------------------------------------


def _plan(argv: Sequence[str], manager: pluggy.PluginManager) -> int:
    options, namespace, provider, api = _connect("plan", argv, manager, _output_flag)
    try:
        with cloudcalls.reads_only(provider.read_only_call):
            nodes, services = _cluster(api, namespace.request_timeout)
            plan = make_plan(provider, options, nodes, services)
    finally:
        api.close()
    output = render.plan_json(plan) if namespace.output == "json" else render.plan_table(plan)
    sys.stdout.write(output)
    return SOMETHING if plan.changes else NOTHING


# -- orphans --------------------------------------------------------------------------------------


def _orphan_flags(parser: argparse.ArgumentParser) -> None:
    _output_flag(parser)
    parser.add_argument(
        "--delete",
        action="store_true",
        help="delete what is found, in dependency order, after a confirmation",
    )
    parser.add_argument(
        "--yes", "-y", action="store_true", help="with --delete: do not ask for confirmation"
    )


def _confirmed(count: int, stdin: TextIO) -> bool:
    sys.stderr.write(f"Delete these {count} cloud resources? Type 'yes' to confirm: ")
    sys.stderr.flush()
    answer = stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _orphans(argv: Sequence[str], manager: pluggy.PluginManager) -> int:
    options, namespace, provider, api = _connect("orphans", argv, manager, _orphan_flags)
    capability = provider.orphans()
    if capability is None:
        api.close()
        raise UsageError(f"not supported by provider {options.provider}")
    try:
        with cloudcalls.reads_only(provider.read_only_call):
            nodes, services = _cluster(api, namespace.request_timeout)
            found = orphans.find(capability, options.cluster_name, services, nodes)
    finally:
        api.close()
    as_json = namespace.output == "json"
    if not namespace.delete or not found:
        sys.stdout.write(render.orphans_json(found) if as_json else render.orphans_table(found))
        return SOMETHING if found else NOTHING
    if not as_json:
        sys.stdout.write(render.orphans_table(found))
        sys.stdout.flush()
    if not namespace.yes and not _confirmed(len(found), sys.stdin):
        print("Nothing deleted.", file=sys.stderr)
        return SOMETHING

    def report(deletion: orphans.Deletion) -> None:
        if not as_json:
            print(render.deletion_line(deletion), flush=True)

    deletions = orphans.delete_all(capability, options.cluster_name, found, report=report)
    if as_json:
        sys.stdout.write(render.orphans_json(found, deletions))
    return SOMETHING if any(d.error for d in deletions) else NOTHING


# -- check-service --------------------------------------------------------------------------------


def _check_service(argv: Sequence[str], manager: pluggy.PluginManager) -> int:
    installed = plugins.installed_providers(manager)
    names = ", ".join(sorted(installed)) or "none"
    parser = _check_parser(names)
    namespace = parser.parse_args(argv)
    if not namespace.provider:
        raise UsageError(f"--provider is required; installed providers: {names}")
    if namespace.provider not in installed:
        raise UsageError(f"unknown provider {namespace.provider!r}; installed providers: {names}")
    settings = plugins.ProviderSettings(
        provider=namespace.provider,
        cloud_config=namespace.cloud_config,
        cluster_name="kubernetes",
        options=namespace,
    )
    if namespace.cloud_config is not None:
        # Read once here so that a missing, oversized or non-UTF-8 file is one line whatever
        # the provider's own reader would make of it.
        inputs.read_text(namespace.cloud_config, what="cloud config")
    source = namespace.filename
    if source == "-":
        text = inputs.read_stream(
            sys.stdin, "stdin", what="manifest", limit=check.MAX_MANIFEST_BYTES
        )
    else:
        text = inputs.read_text(source, what="manifest", limit=check.MAX_MANIFEST_BYTES)
    try:
        services = check.load_services(text, "stdin" if source == "-" else inputs.cut(source, 200))
    except check.ManifestError as error:
        raise UsageError(str(error)) from None
    # Offline: any cloud call at all is refused.
    with cloudcalls.reads_only(lambda _operation: False):
        checker: ServiceChecker | None = manager.hook.polyccm_build_service_checker(
            settings=settings
        )
        if checker is None:
            raise UsageError(f"not supported by provider {namespace.provider}")
        findings = check.check(checker, services)
    sys.stdout.write(render.finding_lines(findings))
    return SOMETHING if findings else NOTHING


def _check_parser(names: str) -> argparse.ArgumentParser:
    parser = Parser(
        prog=f"{PROG} check-service",
        allow_abbrev=False,
        description=helptext.CHECK_SERVICE,
    )
    parser.add_argument(
        "--provider", "--cloud-provider", dest="provider", metavar="NAME", help=f"({names})"
    )
    parser.add_argument(
        "--cloud-config", type=Path, metavar="FILE", help="the provider's cloud config, if any"
    )
    parser.add_argument(
        "-f", "--filename", required=True, metavar="FILE", help="the manifest; '-' for stdin"
    )
    return parser
