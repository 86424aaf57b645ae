"""The controller manager's settings and the upstream cloud-controller-manager flags that set them.

Every flag of upstream's cloud-controller-manager v1.35 (k8s.io/cloud-provider v0.35.4's
``NewCloudControllerManagerCommand``; a test reads the list from upstream's code) is accepted,
with v1.36's ``--concurrent-node-status-updates``, so that an existing Deployment's ``args`` work
unchanged: ``--flag=value`` and ``--flag value``, booleans as ``--leader-elect=false`` or a bare
``--leader-elect``, durations as ``30s``, ``5m``, ``1h30m``, lists comma separated (a list flag
given twice adds to itself, as pflag's). Each value is parsed as its Go type, and checked as
upstream checks it, so a value upstream refuses is refused here too. The flags polyccm has no use
for (:data:`IGNORED_FLAGS`) change nothing; one set to anything but its default is named in a
warning at start.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyccm import flagtypes
from polyccm import serving as serving_package
from polyccm.app.featuregates import FeatureGates, FeatureGatesAction
from polyccm.serving import delegated, tls

#: Controller names with their upstream aliases, in start order.
CONTROLLER_ALIASES: dict[str, tuple[str, ...]] = {
    "cloud-node": ("cloud-node-controller",),
    "cloud-node-lifecycle": ("cloud-node-lifecycle-controller",),
    "service": ("service-lb-controller", "service-controller"),
    "route": ("node-route-controller", "route-controller"),
}


#: The longest lease a coordination.k8s.io Lease can state: ``leaseDurationSeconds`` is an int32.
MAX_LEASE_SECONDS = 2**31 - 1


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
    logging_format: str = "text"
    """``--logging-format``: ``text`` (klog's) or ``json`` (component-base's)."""
    tls_cert_file: str | None = None
    tls_private_key_file: str | None = None
    cert_dir: str = ""
    tls_min_version: str = ""
    """``--tls-min-version`` by Go's name (``VersionTLS13``); empty: TLS 1.2."""
    tls_cipher_suites: tuple[str, ...] = ()
    """``--tls-cipher-suites`` by Go's names; empty: OpenSSL's defaults."""
    client_ca_file: str | None = None
    """CAs whose client certificates authenticate on the secure port (``--client-ca-file``)."""
    delegated_auth: DelegatedAuth = field(default_factory=DelegatedAuth)
    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    """``--feature-gates`` as parsed (see :mod:`polyccm.app.featuregates`)."""
    ignored_flags: tuple[str, ...] = ()
    """The flags of :data:`IGNORED_FLAGS` the command line set to something other than their
    default, to be named in a warning."""

    @property
    def route_controller_on(self) -> bool:
        """Whether the route controller runs: selected by ``--controllers`` and not switched off
        by ``--configure-cloud-routes=false`` (upstream's ``startRouteController`` checks the
        latter first). Like every controller it also needs its capability, the provider's
        ``Routes``; the manager, ``polyccm plan`` and the start-up checks all ask this."""
        return "route" in self.controllers and self.configure_cloud_routes


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


#: The upstream flags polyccm accepts, checks and otherwise ignores, with why.
IGNORED_FLAGS: Mapping[str, str] = {
    "--allocate-node-cidrs": "the core allocates no pod CIDRs (upstream's core CCM does not "
    "either); a provider's node IPAM controller may read it (GCE's nodeipam)",
    "--cidr-allocator-type": "as --allocate-node-cidrs",
    "--use-service-account-credentials": "every controller uses polyccm's own credentials",
    "--external-cloud-volume-plugin": "only the kube-controller-manager's volume loops read it",
    "--controller-start-interval": "controllers start together",
    "--min-resync-period": "polyccm's informers do not resync on a timer",
    "--node-sync-period": "a no-op upstream too",
    "--kube-api-content-type": "polyccm speaks JSON to the API server",
    "--enable-leader-migration": "polyccm takes no part in a kube-controller-manager leader "
    "migration: finish the migration before starting it",
    "--leader-migration-config": "as --enable-leader-migration",
    "--webhooks": "upstream's command serves no webhook either (it knows none)",
    "--webhook-bind-address": "no webhook is served",
    "--webhook-secure-port": "no webhook is served",
    "--webhook-cert-dir": "no webhook is served",
    "--webhook-tls-cert-file": "no webhook is served",
    "--webhook-tls-private-key-file": "no webhook is served",
    "--profiling": "no /debug/pprof handlers",
    "--contention-profiling": "no /debug/pprof handlers",
    "--disable-http2-serving": "the secure port speaks HTTP/1.1 only",
    "--http2-max-streams-per-connection": "the secure port speaks HTTP/1.1 only",
    "--permit-address-sharing": "the secure port always binds with SO_REUSEADDR",
    "--permit-port-sharing": "the secure port never shares its port",
    "--tls-sni-cert-key": "the secure port serves one certificate, whatever the name asked",
    "--requestheader-client-ca-file": "no front-proxy authentication: such requests are anonymous",
    "--requestheader-allowed-names": "no front-proxy authentication",
    "--requestheader-username-headers": "no front-proxy authentication",
    "--requestheader-uid-headers": "no front-proxy authentication",
    "--requestheader-group-headers": "no front-proxy authentication",
    "--requestheader-extra-headers-prefix": "no front-proxy authentication",
    "--authentication-skip-lookup": "polyccm never reads the client CA from the "
    "extension-apiserver-authentication ConfigMap",
    "--authentication-tolerate-lookup-failure": "as --authentication-skip-lookup",
    "--log-flush-frequency": "log lines are written at once",
    "--vmodule": "verbosity is per process (--v)",
    "--log-text-split-stream": "every line goes to stderr",
    "--log-text-info-buffer-size": "log lines are not buffered",
    "--log-json-split-stream": "every line goes to stderr",
    "--log-json-info-buffer-size": "log lines are not buffered",
    "--version": "a version to report (--version=vX.Y.Z) is ignored; --version and "
    "--version=raw print polyccm's",
}

_NEVER_WARNED = frozenset({"--profiling"})
"""Ignored flags whose other value is what polyccm does anyway (it serves no profiles)."""
_GIVEN = "polyccm_given_flags"
"""Namespace attribute: the destinations set on the command line so far."""
_DIFFERENT = "polyccm_ignored_flags"
"""Namespace attribute: ignored flags set to something other than their default."""


class _Store(argparse.Action):
    """``store``, as pflag's flags behave: a list flag (``list_value``) given again adds to
    the list its first occurrence replaced the default with; an ignored flag notes whether it
    was set to something other than its default."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        list_value: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.list_value = list_value

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given: set[str] = getattr(namespace, _GIVEN, set())
        if self.list_value and self.dest in given:
            values = (*getattr(namespace, self.dest), *values)
        given.add(self.dest)
        setattr(namespace, _GIVEN, given)
        setattr(namespace, self.dest, values)
        flag = self.option_strings[-1]
        if flag in IGNORED_FLAGS and flag not in _NEVER_WARNED:
            different: dict[str, bool] = getattr(namespace, _DIFFERENT, {})
            different[flag] = values != self.default
            setattr(namespace, _DIFFERENT, different)


def _ignored_help(flag: str, help_text: str = "accepted for compatibility") -> str:
    return f"{help_text}; ignored: {IGNORED_FLAGS[flag]}"


def _bool_flag(parser: argparse._ArgumentGroup, name: str, default: bool, help_text: str) -> None:
    parser.add_argument(
        name,
        action=_Store,
        type=flagtypes.parse_bool,
        nargs="?",
        const=True,
        default=default,
        metavar="BOOL",
        help=f"{help_text} (default {str(default).lower()})",
    )


def _ignored_bool(parser: argparse._ArgumentGroup, name: str, default: bool = False) -> None:
    _bool_flag(parser, name, default, _ignored_help(name))


def _ignored_value(
    parser: argparse._ArgumentGroup,
    name: str,
    default: Any = "",
    *,
    kind: Callable[[str], Any] = str,
    metavar: str = "VALUE",
    list_value: bool = False,
) -> None:
    parser.add_argument(
        name,
        action=_Store,
        type=kind,
        default=default,
        metavar=metavar,
        list_value=list_value,
        help=_ignored_help(name),
    )


def _list_of(item: Callable[[str], str]) -> Callable[[str], tuple[str, ...]]:
    """A pflag ``stringSlice`` whose items ``item`` checks."""

    def parse(text: str) -> tuple[str, ...]:
        return tuple(item(part) for part in flagtypes.string_slice(text))

    return parse


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
        action=_Store,
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
        help="CIDR ranges of pods in the cluster, one or one per IP family; required by the "
        "route controller",
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
    generic.add_argument(
        "--feature-gates",
        action=FeatureGatesAction,
        default=FeatureGates(),
        metavar="NAME=BOOL,...",
        help="feature gates, as upstream v1.35's (an unknown gate, or a locked one set to the "
        "other value, is refused); polyccm reads AllowParsingUserUIDFromCertAuth, "
        "LoggingAlphaOptions, LoggingBetaOptions and RemoteRequestHeaderUID",
    )
    _ignored_bool(generic, "--allocate-node-cidrs")
    _ignored_value(generic, "--cidr-allocator-type", "RangeAllocator", metavar="TYPE")
    _ignored_bool(generic, "--use-service-account-credentials")
    _ignored_value(generic, "--external-cloud-volume-plugin", metavar="NAME")
    _ignored_value(
        generic,
        "--controller-start-interval",
        0.0,
        kind=flagtypes.parse_duration,
        metavar="DURATION",
    )

    kube = parser.add_argument_group("kubernetes API flags")
    kube.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig file; in-cluster config when absent"
    )
    kube.add_argument(
        "--master",
        type=flagtypes.server_url,
        metavar="URL",
        help="API server address (a URL or host:port), overriding the kubeconfig",
    )
    kube.add_argument(
        "--kube-api-qps",
        type=_kube_api_qps,
        default=20.0,
        metavar="QPS",
        help="queries per second to the API server; negative or inf: no client-side limit, as "
        "client-go (default 20)",
    )
    kube.add_argument(
        "--kube-api-burst",
        type=flagtypes.non_negative_int32,
        default=30,
        metavar="N",
        help="burst of queries to the API server (default 30)",
    )
    _ignored_value(kube, "--kube-api-content-type", "application/json", metavar="TYPE")

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
        type=flagtypes.positive_int32,
        default=1,
        metavar="N",
        help="services synced at once (default 1)",
    )
    periods.add_argument(
        "--concurrent-node-syncs",
        type=flagtypes.positive_int32,
        default=1,
        metavar="N",
        help="nodes synced at once (default 1)",
    )
    periods.add_argument(
        "--concurrent-node-status-updates",
        type=flagtypes.non_negative_int32,
        default=0,
        metavar="N",
        help="nodes whose addresses are refreshed at once; 0: --concurrent-node-syncs (default 0)",
    )
    _ignored_value(
        periods,
        "--min-resync-period",
        43200.0,
        kind=flagtypes.parse_duration,
        metavar="DURATION",
    )
    _ignored_value(
        periods, "--node-sync-period", 0.0, kind=flagtypes.parse_duration, metavar="DURATION"
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
        metavar="TYPE",
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
    migration = parser.add_argument_group("leader migration flags")
    _ignored_bool(migration, "--enable-leader-migration")
    _ignored_value(migration, "--leader-migration-config", metavar="FILE")

    webhook = parser.add_argument_group("webhook flags")
    _ignored_value(webhook, "--webhooks", (), kind=_list_of(str), metavar="NAMES", list_value=True)
    _ignored_value(
        webhook, "--webhook-bind-address", "0.0.0.0", kind=flagtypes.ip_address, metavar="IP"
    )
    _ignored_value(webhook, "--webhook-secure-port", 10260, kind=flagtypes.port, metavar="PORT")
    for flag in ("--webhook-cert-dir", "--webhook-tls-cert-file", "--webhook-tls-private-key-file"):
        _ignored_value(webhook, flag, metavar="PATH")

    _add_serving_flags(parser)
    _add_logging_flags(parser)


def _kube_api_qps(text: str) -> float:
    """``--kube-api-qps``: a float32 as pflag reads it (so ``inf`` and ``nan`` parse). client-go
    (rest/config.go, RESTClientFor) builds no rate limiter for a QPS that is not above zero once
    0 is defaulted, and its token bucket never waits at an infinite rate: a negative QPS and
    ``inf`` both mean "no client-side limit" there, and here (:func:`unlimited_qps`, warned
    about at start). NaN is no rate at all: client-go only ends up unlimited because every
    comparison with NaN is false, so it is refused."""
    value = flagtypes.float32(text)
    if math.isnan(value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of queries per second (a negative value turns the "
            "client-side limit off)"
        )
    return value


def unlimited_qps(qps: float) -> bool:
    """Whether ``--kube-api-qps`` turns the client-side limit off (negative or infinite)."""
    return qps < 0 or math.isinf(qps)


def _add_serving_flags(parser: argparse.ArgumentParser) -> None:
    """The secure port's flags."""
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
    serving.add_argument(
        "--tls-min-version",
        type=tls.min_version,
        default="",
        metavar="VERSION",
        help=f"oldest TLS version served: {', '.join(tls.VERSIONS)} (default VersionTLS12)",
    )
    serving.add_argument(
        "--tls-cipher-suites",
        action=_Store,
        list_value=True,
        type=_list_of(tls.cipher_suite),
        default=(),
        metavar="NAMES",
        help="TLS 1.2 (and older) cipher suites served, by Go's names (e.g. "
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); TLS 1.3 suites are accepted and change "
        "nothing, as upstream (default: OpenSSL's)",
    )
    _ignored_value(
        serving,
        "--tls-sni-cert-key",
        (),
        kind=lambda text: (flagtypes.named_cert_key(text),),
        metavar="CERT,KEY[:NAMES]",
        list_value=True,
    )
    _ignored_bool(serving, "--disable-http2-serving")
    _ignored_value(
        serving, "--http2-max-streams-per-connection", 0, kind=flagtypes.go_int, metavar="N"
    )
    _ignored_bool(serving, "--permit-address-sharing")
    _ignored_bool(serving, "--permit-port-sharing")
    _bool_flag(serving, "--profiling", True, _ignored_help("--profiling"))
    _ignored_bool(serving, "--contention-profiling")

    auth = parser.add_argument_group(
        "secure port authentication and authorization flags",
        "Each request to the secure port is authenticated (with --client-ca-file, by its "
        "client certificate: CommonName the user, Organizations the groups; else by the API "
        "server's TokenReview of its bearer token; with neither: user system:anonymous) and "
        "authorized by the API server (SubjectAccessReview of the path, verb get), as "
        "upstream's delegated auth. polyccm's ServiceAccount needs the ClusterRole "
        "system:auth-delegator.",
    )
    auth.add_argument(
        "--client-ca-file",
        metavar="FILE",
        help="CA certificates (PEM): a client certificate one of them signed authenticates "
        "its CommonName; one that does not verify fails the TLS handshake",
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
        action=_Store,
        list_value=True,
        type=delegated.parse_always_allow_paths,
        default=delegated.DEFAULT_ALWAYS_ALLOW_PATHS,
        metavar="PATHS",
        help="paths answered without an access review, so without a token (one that is sent "
        "is still reviewed: a rejected token is 401); each starts with '/', a trailing * "
        f"makes a prefix (default {','.join(delegated.DEFAULT_ALWAYS_ALLOW_PATHS)})",
    )
    _ignored_bool(auth, "--authentication-skip-lookup")
    _ignored_bool(auth, "--authentication-tolerate-lookup-failure")
    _ignored_value(auth, "--requestheader-client-ca-file", metavar="FILE")
    for flag, default in (
        ("--requestheader-allowed-names", ()),
        ("--requestheader-username-headers", ("x-remote-user",)),
        ("--requestheader-uid-headers", ()),
        ("--requestheader-group-headers", ("x-remote-group",)),
        ("--requestheader-extra-headers-prefix", ("x-remote-extra-",)),
    ):
        _ignored_value(auth, flag, default, kind=_list_of(str), metavar="NAMES", list_value=True)


def _add_logging_flags(parser: argparse.ArgumentParser) -> None:
    """component-base's logging flags and the global ones (``--v``, ``--version``)."""
    logs = parser.add_argument_group("logging flags")
    logs.add_argument(
        "-v",
        "--v",
        type=flagtypes.log_level,
        default=2,
        metavar="LEVEL",
        help="log verbosity, as klog: 4 and up debug, 6 and up the libraries' wire logs "
        "(default 2)",
    )
    logs.add_argument(
        "--logging-format",
        action=_Store,
        default="text",
        metavar="FORMAT",
        help="log format: text (klog's header, 'I1203 04:05:06.123456   12345 file.py:12] ') "
        "or json (component-base's JSON lines: ts, caller, msg, v or err) (default text)",
    )
    _ignored_value(
        logs, "--log-flush-frequency", 5.0, kind=flagtypes.parse_duration, metavar="DURATION"
    )
    _ignored_value(logs, "--vmodule", (), kind=flagtypes.vmodule, metavar="PATTERN=N,...")
    for stream in ("text", "json"):
        _ignored_bool(logs, f"--log-{stream}-split-stream")
        _ignored_value(
            logs,
            f"--log-{stream}-info-buffer-size",
            "0",
            kind=flagtypes.quantity,
            metavar="QUANTITY",
        )
    logs.add_argument(
        "--version",
        action=_Store,
        type=flagtypes.version_request,
        nargs="?",
        const="true",
        default="false",
        metavar="true|raw",
        help="print polyccm's version and exit",
    )


def _check_logging(ns: argparse.Namespace, gates: FeatureGates) -> None:
    """Upstream's logging checks (component-base logs/api/v1 Validate)."""
    if ns.log_flush_frequency <= 0:
        raise argparse.ArgumentTypeError("--log-flush-frequency must be greater than zero")
    if ns.logging_format not in ("text", "json"):
        raise argparse.ArgumentTypeError(
            f"--logging-format {ns.logging_format!r}: unsupported log format (text or json)"
        )
    if ns.logging_format == "json" and not gates.enabled("LoggingBetaOptions"):
        raise argparse.ArgumentTypeError(
            "--logging-format json is disabled, see the LoggingBetaOptions feature gate"
        )
    if ns.vmodule and ns.logging_format != "text":
        raise argparse.ArgumentTypeError("--vmodule is only supported for the text log format")
    if not gates.enabled("LoggingAlphaOptions"):
        for stream in ("text", "json"):
            if getattr(ns, f"log_{stream}_split_stream") or not flagtypes.quantity_is_zero(
                getattr(ns, f"log_{stream}_info_buffer_size")
            ):
                raise argparse.ArgumentTypeError(
                    f"--log-{stream}-split-stream and --log-{stream}-info-buffer-size need the "
                    "LoggingAlphaOptions feature gate"
                )


def _check_request_header(ns: argparse.Namespace, gates: FeatureGates) -> None:
    """Upstream's RequestHeaderAuthenticationOptions.Validate."""
    for name in ("username_headers", "group_headers", "extra_headers_prefix", "allowed_names"):
        if any(not value.strip() for value in getattr(ns, f"requestheader_{name}")):
            flag = f"requestheader-{name.replace('_', '-')}"
            raise argparse.ArgumentTypeError(f"empty value in {flag!r}")
    uid_headers = ns.requestheader_uid_headers
    if not gates.enabled("RemoteRequestHeaderUID"):
        if uid_headers:
            raise argparse.ArgumentTypeError(
                "--requestheader-uid-headers requires the RemoteRequestHeaderUID feature gate"
            )
    elif any(not value.strip() for value in uid_headers):
        raise argparse.ArgumentTypeError("empty value in 'requestheader-uid-headers'")
    elif uid_headers and not any(value.lower() == "x-remote-uid" for value in uid_headers):
        raise argparse.ArgumentTypeError(
            "--requestheader-uid-headers is set without the standard X-Remote-Uid header"
        )


def _check_webhooks(ns: argparse.Namespace) -> None:
    """Upstream's WebhookOptions and WebhookServingOptions checks; its command knows no
    webhook (app.AllWebhooks is empty), so any name is unknown."""
    for name in ns.webhooks:
        if name != "*":
            raise argparse.ArgumentTypeError(
                f"{name.removeprefix('-')!r} is not in the list of known webhooks (none)"
            )
    if ns.webhook_secure_port and ns.webhook_secure_port == ns.secure_port:
        raise argparse.ArgumentTypeError(
            "--webhook-secure-port cannot be the same value as --secure-port"
        )


def _check_leader_migration(ns: argparse.Namespace) -> None:
    """Upstream reads --leader-migration-config when the migration is enabled."""
    if ns.enable_leader_migration and ns.leader_migration_config:
        try:
            with open(ns.leader_migration_config, "rb"):
                pass
        except OSError as error:
            raise argparse.ArgumentTypeError(
                f"cannot read --leader-migration-config {ns.leader_migration_config}: "
                f"{error.strerror}"
            ) from None


def cluster_cidr_problem(cidrs: Sequence[str]) -> str | None:
    """Why the route controller refuses ``--cluster-cidr``, as upstream's startRouteController
    does: more than one CIDR must be dual-stack (one of each IP family), and two at most."""
    if len(cidrs) > 1:
        families = {ipaddress.ip_network(cidr).version for cidr in cidrs}
        if families != {4, 6}:
            return (
                f"--cluster-cidr has {len(cidrs)} CIDRs that are not dual-stack: give one, or "
                "one IPv4 and one IPv6"
            )
    if len(cidrs) > 2:
        return f"--cluster-cidr has {len(cidrs)} CIDRs, more than the 2 allowed (one per family)"
    return None


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
    if ns.leader_elect and ns.leader_elect_lease_duration > MAX_LEASE_SECONDS:
        # client-go v0.35.4 tools/leaderelection/resourcelock/leaselock.go:150 converts the
        # whole seconds to the Lease's int32 leaseDurationSeconds, where a longer one wraps.
        raise argparse.ArgumentTypeError(
            f"--leader-elect-lease-duration is longer than a Lease holds ({MAX_LEASE_SECONDS}s, "
            "about 68 years: leaseDurationSeconds is an int32)"
        )
    if ns.leader_elect and ns.leader_elect_resource_lock != "leases":
        raise argparse.ArgumentTypeError('--leader-elect-resource-lock must be "leases"')
    gates: FeatureGates = ns.feature_gates
    _check_logging(ns, gates)
    _check_request_header(ns, gates)
    _check_webhooks(ns)
    _check_leader_migration(ns)
    different: dict[str, bool] = getattr(ns, _DIFFERENT, {})
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
        logging_format=ns.logging_format,
        tls_cert_file=ns.tls_cert_file,
        tls_private_key_file=ns.tls_private_key_file,
        cert_dir=ns.cert_dir,
        tls_min_version=ns.tls_min_version,
        tls_cipher_suites=tuple(ns.tls_cipher_suites),
        client_ca_file=ns.client_ca_file or None,
        delegated_auth=DelegatedAuth(
            authentication_kubeconfig=ns.authentication_kubeconfig,
            authorization_kubeconfig=ns.authorization_kubeconfig,
            token_cache_ttl=ns.authentication_token_webhook_cache_ttl,
            authorized_cache_ttl=ns.authorization_webhook_cache_authorized_ttl,
            unauthorized_cache_ttl=ns.authorization_webhook_cache_unauthorized_ttl,
            always_allow_paths=tuple(ns.authorization_always_allow_paths),
        ),
        feature_gates=gates,
        ignored_flags=tuple(sorted(flag for flag, changed in different.items() if changed)),
    )
