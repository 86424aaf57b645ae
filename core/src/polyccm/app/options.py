"""The controller manager's settings and the upstream cloud-controller-manager flags that set them.

Flag names, defaults and value forms match the Go cloud-controller-manager so that an existing
Deployment's ``args`` work unchanged: ``--flag=value`` and ``--flag value``, booleans as
``--leader-elect=false`` or a bare ``--leader-elect``, durations as ``30s``, ``5m``, ``1h30m``.
A few upstream flags that only matter to Go (``--profiling``, ``--v``) are accepted too, so a
copied command line never fails on them.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from polyccm import flagtypes
from polyccm import serving as serving_package
from polyccm.serving import delegated

#: Controller names with their upstream aliases, in start order.
CONTROLLER_ALIASES: dict[str, tuple[str, ...]] = {
    "cloud-node": ("cloud-node-controller",),
    "cloud-node-lifecycle": ("cloud-node-lifecycle-controller",),
    "service": ("service-lb-controller", "service-controller"),
    "route": ("node-route-controller", "route-controller"),
}


@dataclass(frozen=True)
class LeaderElection:
    """Leader election on a coordination.k8s.io Lease (``--leader-elect*``)."""

    enabled: bool = True
    """Run controllers only while holding the lease."""
    lease_duration: float = 15.0
    """Seconds a lease is valid after its last renewal."""
    renew_deadline: float = 10.0
    """Seconds the leader keeps trying to renew before it gives up leading."""
    retry_period: float = 2.0
    """Seconds between attempts to acquire or renew."""
    resource_name: str = "cloud-controller-manager"
    """Name of the Lease object."""
    resource_namespace: str = "kube-system"
    """Namespace of the Lease object."""


@dataclass(frozen=True)
class DelegatedAuth:
    """Who may read the secure port (``--authentication-*``, ``--authorization-*``): see
    :mod:`polyccm.serving.delegated`."""

    authentication_kubeconfig: str | None = None
    """API server for TokenReviews; ``None``: the one of ``--kubeconfig`` (or in-cluster)."""
    authorization_kubeconfig: str | None = None
    """API server for SubjectAccessReviews; ``None``: as above."""
    token_cache_ttl: float = 10.0
    authorized_cache_ttl: float = 10.0
    unauthorized_cache_ttl: float = 10.0
    always_allow_paths: tuple[str, ...] = delegated.DEFAULT_ALWAYS_ALLOW_PATHS


@dataclass(frozen=True)
class ManagerOptions:
    """Everything the controller manager needs besides the provider."""

    provider: str
    cloud_config: Path | None = None
    kubeconfig: str | None = None
    master: str | None = None
    cluster_name: str = "kubernetes"
    allow_untagged_cloud: bool = False
    cluster_cidrs: tuple[str, ...] = ()
    configure_cloud_routes: bool = True
    controllers: frozenset[str] = frozenset(CONTROLLER_ALIASES)
    route_reconciliation_period: float = 10.0
    node_monitor_period: float = 5.0
    node_status_update_frequency: float = 300.0
    concurrent_service_syncs: int = 1
    concurrent_node_syncs: int = 1
    concurrent_node_status_updates: int = 0
    """Nodes whose status is refreshed at once (``--concurrent-node-status-updates``); 0 means
    ``concurrent_node_syncs``, as upstream's nodecontroller options read it."""
    kube_api_qps: float = 20.0
    kube_api_burst: int = 30
    bind_address: str = "0.0.0.0"
    secure_port: int = 10258
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    verbosity: int = 2
    tls_cert_file: str | None = None
    tls_private_key_file: str | None = None
    cert_dir: str = ""
    delegated_auth: DelegatedAuth = field(default_factory=DelegatedAuth)


def resolve_controllers(
    spec: str, provider_controllers: Mapping[str, bool] | None = None
) -> frozenset[str]:
    """Controllers selected by ``--controllers`` as upstream reads it.

    ``*`` means every controller enabled by default; ``name`` enables one, ``-name`` disables
    one; names may be the short ones (``service``) or the upstream long ones
    (``service-lb-controller``). ``provider_controllers`` maps the names of the provider's own
    controllers to whether they are enabled by default; they are selected the same way.
    """
    extra = dict(provider_controllers or {})
    lookup = {name: name for name in CONTROLLER_ALIASES}
    for name, aliases in CONTROLLER_ALIASES.items():
        lookup.update({alias: name for alias in aliases})
    lookup.update({name: name for name in extra})
    enabled: set[str] = set()
    disabled: set[str] = set()
    star = False
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        if item == "*":
            star = True
            continue
        negate = item.startswith("-")
        canonical = lookup.get(item.lstrip("-"))
        if canonical is None:
            known = ", ".join(sorted(lookup))
            raise argparse.ArgumentTypeError(
                f"unknown controller {item.lstrip('-')!r} (known: {known})"
            )
        (disabled if negate else enabled).add(canonical)
    defaults = {*CONTROLLER_ALIASES, *(name for name, on in extra.items() if on)}
    base = defaults if star else set()
    return frozenset((base | enabled) - disabled)


def _bool_flag(parser: argparse._ArgumentGroup, name: str, default: bool, help_text: str) -> None:
    parser.add_argument(
        name,
        type=flagtypes.parse_bool,
        nargs="?",
        const=True,
        default=default,
        metavar="BOOL",
        help=f"{help_text} (default {str(default).lower()})",
    )


def _duration_flag(
    parser: argparse._ArgumentGroup,
    name: str,
    default: str,
    help_text: str,
    kind: Callable[[str], float] = flagtypes.positive_duration,
) -> None:
    """A Go-style duration flag (positive unless ``kind`` says otherwise) whose default is
    written once, as users write it."""
    parser.add_argument(
        name,
        type=kind,
        default=flagtypes.parse_duration(default),
        metavar="DURATION",
        help=f"{help_text} (default {default})",
    )


def add_manager_flags(
    parser: argparse.ArgumentParser, provider_controllers: Mapping[str, bool] | None = None
) -> None:
    """Add the upstream cloud-controller-manager flags to ``parser``; ``provider_controllers``
    (name: enabled by default) are the provider's own controllers ``--controllers`` knows."""
    extra = dict(provider_controllers or {})
    selectable = ", ".join(
        [*CONTROLLER_ALIASES, *(n if on else f"{n} (off by default)" for n, on in extra.items())]
    )
    generic = parser.add_argument_group("generic flags")
    generic.add_argument(
        "--cloud-config",
        type=Path,
        metavar="FILE",
        help="path to the cloud provider configuration file",
    )
    generic.add_argument(
        "--cluster-name",
        default="kubernetes",
        help="instance prefix for the cluster (default kubernetes)",
    )
    _bool_flag(
        generic,
        "--allow-untagged-cloud",
        False,
        "start even when the provider finds no cluster id (upstream's legacy mode); "
        "cloud resources are then tagged with --cluster-name",
    )
    generic.add_argument(
        "--cluster-cidr",
        type=flagtypes.cidr_list,
        default=(),
        metavar="CIDRS",
        help="CIDR ranges of pods in the cluster; required by the route controller",
    )
    _bool_flag(generic, "--configure-cloud-routes", True, "create routes for each node's pod CIDR")
    generic.add_argument(
        "--controllers",
        type=functools.partial(resolve_controllers, provider_controllers=extra),
        default=resolve_controllers("*", extra),
        metavar="NAMES",
        help="controllers to run: '*' for all enabled by default, 'name' to enable, '-name' to "
        f"disable ({selectable}); default '*'",
    )
    _bool_flag(
        generic,
        "--allocate-node-cidrs",
        False,
        "accepted for compatibility; polyccm allocates no CIDRs",
    )
    generic.add_argument("--cidr-allocator-type", default="RangeAllocator", help=argparse.SUPPRESS)
    _bool_flag(generic, "--use-service-account-credentials", False, "accepted for compatibility")

    kube = parser.add_argument_group("kubernetes API flags")
    kube.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig file; in-cluster config when absent"
    )
    kube.add_argument(
        "--master", metavar="URL", help="API server address, overriding the kubeconfig"
    )
    kube.add_argument(
        "--kube-api-qps",
        type=flagtypes.non_negative_float,
        default=20.0,
        metavar="QPS",
        help="queries per second to the API server (default 20)",
    )
    kube.add_argument(
        "--kube-api-burst",
        type=flagtypes.non_negative_int,
        default=30,
        metavar="N",
        help="burst of queries to the API server (default 30)",
    )
    kube.add_argument("--kube-api-content-type", default="application/json", help=argparse.SUPPRESS)

    periods = parser.add_argument_group("controller flags")
    _duration_flag(
        periods, "--route-reconciliation-period", "10s", "period of route reconciliation"
    )
    _duration_flag(periods, "--node-monitor-period", "5s", "period of the node lifecycle check")
    _duration_flag(
        periods, "--node-status-update-frequency", "5m", "how often node addresses are refreshed"
    )
    periods.add_argument(
        "--concurrent-service-syncs",
        type=flagtypes.positive_int,
        default=1,
        metavar="N",
        help="services synced at once (default 1)",
    )
    periods.add_argument(
        "--concurrent-node-syncs",
        type=flagtypes.positive_int,
        default=1,
        metavar="N",
        help="nodes synced at once (default 1)",
    )
    periods.add_argument(
        "--concurrent-node-status-updates",
        type=flagtypes.non_negative_int,
        default=0,
        metavar="N",
        help="nodes whose addresses are refreshed at once; 0: --concurrent-node-syncs (default 0)",
    )
    periods.add_argument(
        "--min-resync-period",
        type=flagtypes.parse_duration,
        default=43200.0,
        help=argparse.SUPPRESS,
    )
    periods.add_argument(
        "--node-sync-period", type=flagtypes.parse_duration, default=0.0, help=argparse.SUPPRESS
    )

    election = parser.add_argument_group("leader election flags")
    _bool_flag(
        election, "--leader-elect", True, "run controllers only while holding the leader lease"
    )
    _duration_flag(election, "--leader-elect-lease-duration", "15s", "lease duration")
    _duration_flag(election, "--leader-elect-renew-deadline", "10s", "renew deadline")
    _duration_flag(election, "--leader-elect-retry-period", "2s", "retry period")
    election.add_argument(
        "--leader-elect-resource-lock",
        default="leases",
        choices=["leases"],
        help="lock type; only leases (default leases)",
    )
    election.add_argument(
        "--leader-elect-resource-name",
        default="cloud-controller-manager",
        metavar="NAME",
        help="lease name (default cloud-controller-manager)",
    )
    election.add_argument(
        "--leader-elect-resource-namespace",
        default="kube-system",
        metavar="NAMESPACE",
        help="lease namespace (default kube-system)",
    )

    _add_serving_flags(parser)


def _add_serving_flags(parser: argparse.ArgumentParser) -> None:
    """The secure port's flags (and ``--v``, which upstream lists among them)."""
    serving = parser.add_argument_group("serving flags")
    serving.add_argument(
        "--bind-address",
        type=flagtypes.ip_address,
        default="0.0.0.0",
        metavar="IP",
        help="address of the secure port (default 0.0.0.0)",
    )
    serving.add_argument(
        "--secure-port",
        type=flagtypes.port,
        default=10258,
        metavar="PORT",
        help="HTTPS port for /healthz, /livez, /readyz and /metrics; 0 disables (default 10258)",
    )
    serving.add_argument(
        "--tls-cert-file",
        metavar="FILE",
        help="certificate (chain) to serve HTTPS with, with --tls-private-key-file; without "
        "them a self-signed one is used (see --cert-dir)",
    )
    serving.add_argument(
        "--tls-private-key-file", metavar="FILE", help="the key of --tls-cert-file"
    )
    serving.add_argument(
        "--cert-dir",
        default="",
        metavar="DIR",
        help=f"where the self-signed certificate {serving_package.PAIR_NAME}.crt/.key is kept: "
        "made there when absent or expired, reused across restarts; empty (the default): "
        "made in memory at each start; ignored with --tls-cert-file",
    )
    _bool_flag(serving, "--profiling", True, "accepted for compatibility")

    auth = parser.add_argument_group(
        "secure port authentication and authorization flags",
        "Each request to the secure port is authenticated by the API server (TokenReview of "
        "its bearer token; no token: user system:anonymous) and authorized by it "
        "(SubjectAccessReview of the path, verb get), as upstream's delegated auth. "
        "polyccm's ServiceAccount needs the ClusterRole system:auth-delegator.",
    )
    auth.add_argument(
        "--authentication-kubeconfig",
        metavar="FILE",
        help="kubeconfig of the API server that reviews bearer tokens (tokenreviews); default: "
        "the connection of --kubeconfig (in-cluster config without it)",
    )
    auth.add_argument(
        "--authorization-kubeconfig",
        metavar="FILE",
        help="kubeconfig of the API server that reviews access (subjectaccessreviews); "
        "default: the connection of --kubeconfig (in-cluster config without it)",
    )
    _duration_flag(
        auth,
        "--authentication-token-webhook-cache-ttl",
        "10s",
        "how long a token review's answer is reused",
        flagtypes.non_negative_duration,
    )
    _duration_flag(
        auth,
        "--authorization-webhook-cache-authorized-ttl",
        "10s",
        "how long an allowing access review is reused",
        flagtypes.non_negative_duration,
    )
    _duration_flag(
        auth,
        "--authorization-webhook-cache-unauthorized-ttl",
        "10s",
        "how long a denying access review is reused",
        flagtypes.non_negative_duration,
    )
    auth.add_argument(
        "--authorization-always-allow-paths",
        type=delegated.parse_always_allow_paths,
        default=delegated.DEFAULT_ALWAYS_ALLOW_PATHS,
        metavar="PATHS",
        help="paths answered without an access review, so without a token (one that is sent "
        "is still reviewed: a rejected token is 401); each starts with '/', a trailing * "
        f"makes a prefix (default {','.join(delegated.DEFAULT_ALWAYS_ALLOW_PATHS)})",
    )
    for flag in ("--authentication-skip-lookup", "--authentication-tolerate-lookup-failure"):
        _bool_flag(
            auth,
            flag,
            False,
            "accepted for compatibility: upstream's client-CA ConfigMap lookup; polyccm "
            "authenticates bearer tokens only, never client certificates",
        )
    serving.add_argument(
        "-v",
        "--v",
        type=flagtypes.non_negative_int,
        default=2,
        metavar="LEVEL",
        help="log verbosity, as klog (default 2)",
    )


def options_from_namespace(provider: str, ns: argparse.Namespace) -> ManagerOptions:
    """Build :class:`ManagerOptions` from parsed flags."""
    if bool(ns.tls_cert_file) != bool(ns.tls_private_key_file):
        raise argparse.ArgumentTypeError(
            "--tls-cert-file and --tls-private-key-file must be given together"
        )
    if ns.leader_elect_renew_deadline >= ns.leader_elect_lease_duration:
        raise argparse.ArgumentTypeError(
            "--leader-elect-renew-deadline must be shorter than --leader-elect-lease-duration"
        )
    if ns.leader_elect_retry_period * 1.2 >= ns.leader_elect_renew_deadline:
        raise argparse.ArgumentTypeError(
            "--leader-elect-renew-deadline must be more than 1.2 times --leader-elect-retry-period"
        )
    return ManagerOptions(
        provider=provider,
        cloud_config=ns.cloud_config,
        kubeconfig=ns.kubeconfig,
        master=ns.master,
        cluster_name=ns.cluster_name,
        allow_untagged_cloud=ns.allow_untagged_cloud,
        cluster_cidrs=tuple(ns.cluster_cidr),
        configure_cloud_routes=ns.configure_cloud_routes,
        controllers=ns.controllers,
        route_reconciliation_period=ns.route_reconciliation_period,
        node_monitor_period=ns.node_monitor_period,
        node_status_update_frequency=ns.node_status_update_frequency,
        concurrent_service_syncs=ns.concurrent_service_syncs,
        concurrent_node_syncs=ns.concurrent_node_syncs,
        concurrent_node_status_updates=ns.concurrent_node_status_updates,
        kube_api_qps=ns.kube_api_qps,
        kube_api_burst=ns.kube_api_burst,
        bind_address=ns.bind_address,
        secure_port=ns.secure_port,
        leader_election=LeaderElection(
            enabled=ns.leader_elect,
            lease_duration=ns.leader_elect_lease_duration,
            renew_deadline=ns.leader_elect_renew_deadline,
            retry_period=ns.leader_elect_retry_period,
            resource_name=ns.leader_elect_resource_name,
            resource_namespace=ns.leader_elect_resource_namespace,
        ),
        verbosity=ns.v,
        tls_cert_file=ns.tls_cert_file,
        tls_private_key_file=ns.tls_private_key_file,
        cert_dir=ns.cert_dir,
        delegated_auth=DelegatedAuth(
            authentication_kubeconfig=ns.authentication_kubeconfig,
            authorization_kubeconfig=ns.authorization_kubeconfig,
            token_cache_ttl=ns.authentication_token_webhook_cache_ttl,
            authorized_cache_ttl=ns.authorization_webhook_cache_authorized_ttl,
            unauthorized_cache_ttl=ns.authorization_webhook_cache_unauthorized_ttl,
            always_allow_paths=ns.authorization_always_allow_paths,
        ),
    )
