"""The polyccm command line: upstream flag forms, and one-line errors with exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from polyccm.app import commandline
from polyccm.app.options import CONTROLLER_ALIASES, resolve_controllers
from polyccm.plugins import plugin_manager
from polyccm_testing.fake_main import COMMAND as FAKE_MAIN


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "polyccm.cli", *args], capture_output=True, text=True, timeout=60
    )


def parse(*args: str) -> commandline.ManagerOptions:
    options, _ = commandline.parse(list(args), plugin_manager())
    return options


def test_unknown_provider_exits_2_and_lists_installed_providers() -> None:
    result = run_cli("--provider", "nosuch")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "unknown provider 'nosuch'" in result.stderr
    for name in ("aws", "digitalocean", "gce", "packet"):
        assert name in result.stderr


def test_help_lists_the_upstream_flags() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for flag in (
        "--cloud-config",
        "--kubeconfig",
        "--cluster-name",
        "--cluster-cidr",
        "--controllers",
        "--configure-cloud-routes",
        "--leader-elect",
        "--leader-elect-lease-duration",
        "--leader-elect-renew-deadline",
        "--leader-elect-retry-period",
        "--leader-elect-resource-name",
        "--leader-elect-resource-namespace",
        "--concurrent-service-syncs",
        "--concurrent-node-syncs",
        "--node-monitor-period",
        "--route-reconciliation-period",
        "--node-status-update-frequency",
        "--kube-api-qps",
        "--kube-api-burst",
        "--bind-address",
        "--secure-port",
        "--tls-cert-file",
        "--cert-dir",
        "--authentication-kubeconfig",
        "--authorization-kubeconfig",
        "--authentication-token-webhook-cache-ttl",
        "--authorization-webhook-cache-authorized-ttl",
        "--authorization-webhook-cache-unauthorized-ttl",
        "--authorization-always-allow-paths",
        "--authentication-skip-lookup",
        "--authentication-tolerate-lookup-failure",
    ):
        assert flag in result.stdout, flag


def test_help_for_one_provider_does_not_import_other_sdks() -> None:
    code = (
        "import sys\n"
        "from polyccm.cli import main\n"
        "try:\n    main(['--provider', 'gce', '--help'])\n"
        "except SystemExit:\n    pass\n"
        "sdks = ('boto3', 'botocore', 'pydo', 'equinix', 'moto')\n"
        "heavy = [m for m in sdks if m in sys.modules]\n"
        "print('heavy=' + ','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "heavy="


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--leader-elect=maybe"], "invalid boolean 'maybe'"),
        (["--node-monitor-period", "5x"], "invalid duration '5x'"),
        (["--route-reconciliation-period=-1s"], "greater than zero"),
        (["--concurrent-service-syncs=0"], "must be at least 1"),
        (["--kube-api-qps=fast"], "invalid number 'fast'"),
        (["--secure-port=70000"], "out of range"),
        (["--bind-address=localhost:1"], "invalid IP address"),
        (["--cluster-cidr=10.0.0.0/33"], "invalid CIDR"),
        (["--controllers=*,-routez"], "unknown controller 'routez'"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--leader-elect-renew-deadline=20s"], "must be shorter than --leader-elect-lease"),
        (["--tls-cert-file=/etc/tls.crt"], "must be given together"),
        (["--authorization-always-allow-paths=/healthz,metrics"], "'metrics' must start with '/'"),
        (["--authorization-always-allow-paths=/a*/b"], "only a trailing * works"),
        (["--authentication-token-webhook-cache-ttl=-1s"], "must not be negative"),
    ],
)
def test_bad_flag_values_exit_2_with_one_line(args: list[str], message: str) -> None:
    result = run_cli("--provider", "gce", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_missing_cloud_config_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "cloud.conf"
    result = run_cli("--provider", "gce", f"--cloud-config={missing}")
    assert result.returncode == 2
    assert f"cannot read cloud config {missing}" in result.stderr
    assert result.stderr.count("\n") == 1


def test_unreadable_cloud_config_is_a_usage_error(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    directory.mkdir()
    result = run_cli("--provider", "gce", "--cloud-config", str(directory))
    assert result.returncode == 2
    assert "cannot read cloud config" in result.stderr


def test_missing_provider_is_a_usage_error() -> None:
    result = run_cli("--cluster-name=x")
    assert result.returncode == 2
    assert "--provider is required" in result.stderr


def test_upstream_flag_forms_are_accepted() -> None:
    options = parse(
        "--provider=aws",
        "--cloud-provider",
        "aws",
        "--leader-elect=false",
        "--node-monitor-period",
        "10s",
        "--node-status-update-frequency=1h30m",
        "--cluster-cidr=10.244.0.0/16",
        "--configure-cloud-routes",
        "--controllers=*,-route",
        "--kube-api-qps=50",
        "--kube-api-burst",
        "100",
        "--concurrent-service-syncs=4",
        "--use-service-account-credentials",
        "--allocate-node-cidrs=false",
        "--v=4",
    )
    assert options.provider == "aws"
    assert options.leader_election.enabled is False
    assert options.node_monitor_period == 10.0
    assert options.node_status_update_frequency == 5400.0
    assert options.cluster_cidrs == ("10.244.0.0/16",)
    assert options.configure_cloud_routes is True
    assert options.controllers == frozenset({"cloud-node", "cloud-node-lifecycle", "service"})
    assert options.kube_api_qps == 50.0 and options.kube_api_burst == 100
    assert options.concurrent_service_syncs == 4
    assert options.verbosity == 4


def test_defaults_match_upstream() -> None:
    options = parse("--provider", "aws")
    assert options.cluster_name == "kubernetes"
    assert options.route_reconciliation_period == 10.0
    assert options.node_monitor_period == 5.0
    assert options.node_status_update_frequency == 300.0
    assert options.concurrent_service_syncs == 1 and options.concurrent_node_syncs == 1
    assert options.kube_api_qps == 20.0 and options.kube_api_burst == 30
    assert options.secure_port == 10258
    assert options.cert_dir == ""  # a self-signed certificate in memory
    auth = options.delegated_auth
    assert auth.always_allow_paths == ("/healthz", "/readyz", "/livez")
    assert (auth.token_cache_ttl, auth.authorized_cache_ttl, auth.unauthorized_cache_ttl) == (
        10,
        10,
        10,
    )
    assert auth.authentication_kubeconfig is None and auth.authorization_kubeconfig is None
    election = options.leader_election
    assert election.enabled
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (15, 10, 2)
    assert election.resource_name == "cloud-controller-manager"
    assert election.resource_namespace == "kube-system"
    assert options.controllers == frozenset(CONTROLLER_ALIASES)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("*", {"cloud-node", "cloud-node-lifecycle", "service", "route"}),
        ("service,route", {"service", "route"}),
        ("*,-service-lb-controller", {"cloud-node", "cloud-node-lifecycle", "route"}),
        ("cloud-node-controller", {"cloud-node"}),
        ("-route", set()),
    ],
)
def test_controller_selection_follows_upstream(spec: str, expected: set[str]) -> None:
    assert resolve_controllers(spec) == frozenset(expected)


def run_fake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *FAKE_MAIN,
            "--configure-cloud-routes=false",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot load kubeconfig"),
        ("clusters: [\n", "cannot load kubeconfig"),
        ("apiVersion: v1\nkind: Config\n", "cannot load kubeconfig"),
    ],
)
def test_unusable_kubeconfig_exits_2_with_one_line(
    tmp_path: Path, content: str | None, message: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_text(content)
    result = run_fake(f"--kubeconfig={kubeconfig}", "--secure-port=0")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and str(kubeconfig) in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def _unreachable_kubeconfig(tmp_path: Path) -> Path:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    return kubeconfig


def test_a_port_already_in_use_exits_2_naming_it(tmp_path: Path) -> None:
    import socket

    kubeconfig = _unreachable_kubeconfig(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_fake(
            f"--kubeconfig={kubeconfig}", "--bind-address=127.0.0.1", f"--secure-port={port}"
        )
    assert result.returncode == 2
    assert f"cannot serve on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--authentication-kubeconfig", "--authorization-kubeconfig"])
def test_an_unusable_review_kubeconfig_exits_2_naming_the_flag(tmp_path: Path, flag: str) -> None:
    missing = tmp_path / "missing.kubeconfig"
    result = run_fake(
        f"--kubeconfig={_unreachable_kubeconfig(tmp_path)}", f"{flag}={missing}", "--secure-port=0"
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"polyccm: error: {flag}: cannot load kubeconfig {missing}")
    assert result.stderr.count("\n") == 1, result.stderr


def test_a_cert_dir_that_cannot_be_written_exits_2_with_one_line(tmp_path: Path) -> None:
    import socket

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run_fake(
        f"--kubeconfig={_unreachable_kubeconfig(tmp_path)}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={blocker}/certs",
    )
    assert result.returncode == 2
    assert f"cannot write a self-signed certificate to --cert-dir {blocker}/certs" in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def _checked(*args: str) -> None:
    """Parse ``args`` for the fake provider and check them as at start-up."""
    from polyccm_testing.fake_main import FakeCloudPlugin

    manager = plugin_manager([FakeCloudPlugin()])
    commandline.build_checked_provider(
        commandline.parse_command_line(["--provider=fake", *args], manager), manager
    )


@pytest.mark.parametrize(
    "cidrs",
    [
        "10.244.0.0/16,10.245.0.0/16",  # two of one family
        "fd00:1::/64,fd00:2::/64",
        "10.244.0.0/16,fd00:10:244::/56,10.245.0.0/16",  # three, dual-stack
    ],
)
def test_cluster_cidrs_the_route_controller_refuses_exit_2(cidrs: str) -> None:
    # k8s.io/cloud-provider v0.35.4 app/core.go:115-129 (startRouteController): more than one
    # CIDR must be dual-stack (netutils.IsDualStackCIDRs: one of each family), and 2 at most.
    with pytest.raises(commandline.UsageError, match="--cluster-cidr has"):
        _checked(f"--cluster-cidr={cidrs}")
    result = run_fake("--configure-cloud-routes=true", f"--cluster-cidr={cidrs}")
    assert result.returncode == 2
    assert "--cluster-cidr has" in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_cluster_cidrs_are_only_checked_for_a_route_controller_that_runs() -> None:
    _checked("--cluster-cidr=10.244.0.0/16,fd00:10:244::/56")
    _checked("--cluster-cidr=fd00:10:244::/56")
    # app/core.go:103-113: no route controller, no check (upstream parses them only there).
    _checked("--cluster-cidr=10.244.0.0/16,10.245.0.0/16", "--configure-cloud-routes=false")
    _checked("--cluster-cidr=10.244.0.0/16,10.245.0.0/16", "--controllers=*,-route")


@pytest.mark.parametrize("flag", ["--version", "--version=true", "--version=raw"])
def test_version_prints_polyccms_and_exits_0_before_any_check(flag: str) -> None:
    # component-base v0.35.4 version/verflag/verflag.go:125-134 (PrintAndExitIfRequested runs
    # first in the command's RunE).
    result = run_cli(flag)  # no --provider
    assert result.returncode == 0, result.stderr
    assert "0.1.0" in result.stdout and result.stdout.count("\n") == 1


def test_help_takes_a_boolean_as_pflag() -> None:
    assert run_cli("--provider=gce", "--help=true").stdout.startswith("usage: polyccm")
    options = parse("--provider=gce", "--help=false", "--cluster-name=x")
    assert options.cluster_name == "x"
    result = run_cli("--provider=gce", "--help=perhaps")
    assert result.returncode == 2 and "invalid boolean 'perhaps'" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # cloud-provider v0.35.4 options/webhook.go (Validate); app.AllWebhooks is empty.
        (["--webhooks=foo"], "'foo' is not in the list of known webhooks"),
        (["--webhook-secure-port=10258"], "cannot be the same value as --secure-port"),
        # controller-manager v0.35.4 options/generic.go (Validate).
        (["--leader-elect-resource-lock=endpoints"], 'must be "leases"'),
        # apiserver v0.35.4 pkg/server/options/authentication.go:67-108.
        (["--requestheader-username-headers=X-Remote-User, "], "empty value"),
        (["--requestheader-uid-headers=X-Uid"], "without the standard X-Remote-Uid header"),
        (
            [
                "--requestheader-uid-headers=X-Remote-Uid",
                "--feature-gates=RemoteRequestHeaderUID=false",
            ],
            "requires the RemoteRequestHeaderUID feature gate",
        ),
        # component-base v0.35.4 logs/api/v1/options.go:139-190.
        (["--logging-format=yaml"], "unsupported log format"),
        (["--vmodule=x=2", "--logging-format=json"], "only supported for the text log format"),
        (["--log-flush-frequency=0s"], "must be greater than zero"),
        (["--enable-leader-migration", "--leader-migration-config=/no/such/file"], "cannot read"),
    ],
)
def test_values_upstream_refuses_after_parsing_exit_2(args: list[str], message: str) -> None:
    result = run_cli("--provider=gce", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_a_list_flag_given_twice_adds_to_itself_as_pflags() -> None:
    options = parse(
        "--provider=gce",
        "--authorization-always-allow-paths=/healthz",
        "--authorization-always-allow-paths=/metrics,/livez",
    )
    assert options.delegated_auth.always_allow_paths == ("/healthz", "/metrics", "/livez")
    options = parse("--provider=gce", "--leader-elect=false", "--leader-elect-resource-lock=x")
    assert options.leader_election.enabled is False  # upstream checks the lock only when electing


def test_ignored_flags_set_are_named_in_a_warning_at_start(tmp_path: Path) -> None:
    options = parse(
        "--provider=gce",
        "--enable-leader-migration",
        "--controller-start-interval=10s",
        "--webhooks=*",
        "--profiling=false",  # what polyccm does anyway
        "--kube-api-content-type=application/json",  # polyccm's default
    )
    assert options.ignored_flags == (
        "--controller-start-interval",
        "--enable-leader-migration",
        "--webhooks",
    )
    # The whole process says so once logging is set up, before it connects anywhere.
    process = subprocess.Popen(
        [
            *FAKE_MAIN,
            "--configure-cloud-routes=false",
            f"--kubeconfig={_unreachable_kubeconfig(tmp_path)}",
            "--secure-port=0",
            "--enable-leader-migration",
            "--feature-gates=APIServerTracing=true",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(60, process.kill)
    watchdog.start()
    seen = []
    try:
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            if "setting GA feature gate" in line:
                break
    finally:
        watchdog.cancel()
        process.terminate()
        process.wait(timeout=30)
    output = "".join(seen)
    assert "--enable-leader-migration is accepted for compatibility and ignored" in output
    assert "setting GA feature gate APIServerTracing=true" in output


# -- values that cannot mean anything (issue 22) ------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Go's time.Duration is an int64 of nanoseconds (about 292 years): time.ParseDuration
        # (go1.26 src/time/format.go:1702-1727) calls anything longer an invalid duration.
        (["--route-reconciliation-period=99999999999999999999h"], "longer than Go's longest"),
        (["--node-monitor-period=2562048h"], "longer than Go's longest"),
        (["--node-status-update-frequency=9223372036854775808ns"], "longer than Go's longest"),
        # client-go v0.35.4 rest/config.go:370-383: NaN is no rate (client-go ends up with no
        # limiter only because every comparison with NaN is false). 1e309 is ErrRange in Go.
        (["--kube-api-qps=nan"], "'nan' is not a number of queries per second"),
        (["--kube-api-qps=NaN"], "'NaN' is not a number of queries per second"),
        (["--kube-api-qps=1e309"], "'1e309' is out of range"),
        # int32 flags (controller-manager's NodeController.ConcurrentNodeSyncs is an int32).
        (["--concurrent-node-syncs=99999999999999999999"], "out of range"),
        (["--concurrent-service-syncs=2147483648"], "out of range"),
        # client-go v0.35.4 rest/url_utils.go:30-48 (DefaultServerURL) refuses these when
        # upstream builds its clients at start; today's polyccm retried them every 2 s forever.
        (["--master=not a url"], "'not a url' is not an API server URL"),
        (["--master=https://[::1"], "is not an API server URL"),
        (["--master=10.0.0.1:6443/api"], "a host:port pair has no path"),
        (["--master=ftp://10.0.0.1"], "scheme 'ftp' is not http or https"),
        # client-go v0.35.4 tools/leaderelection/resourcelock/leaselock.go:150: the lease
        # duration becomes the Lease's int32 leaseDurationSeconds.
        (["--leader-elect-lease-duration=1000000h"], "longer than a Lease holds"),
    ],
)
def test_flag_values_that_cannot_mean_anything_exit_2_with_one_line(
    args: list[str], message: str
) -> None:
    result = run_cli("--provider", "gce", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == ""


def test_qps_values_client_go_takes_for_no_limit_lift_it() -> None:
    # client-go v0.35.4 rest/config.go:117-122 ("a negative value will disable client-side
    # ratelimiting") and :370-383; an infinite rate never waits in x/time/rate either.
    from polyccm.ratelimit import TokenBucket

    for text in ("-1", "inf", "+Inf"):
        qps = parse("--provider=gce", f"--kube-api-qps={text}").kube_api_qps
        bucket = TokenBucket(qps, 1)
        assert [bucket.reserve() for _ in range(100)] == [0.0] * 100, text


def _stderr_until(args: list[str], wanted: list[str], *, env: dict[str, str] | None = None) -> str:
    """Run the fake-cloud polyccm with ``args`` and read its stderr until every one of
    ``wanted`` was seen (or it exits, or 60 s pass); then stop it."""
    process = subprocess.Popen(
        [*FAKE_MAIN, "--configure-cloud-routes=false", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    watchdog = threading.Timer(60, process.kill)
    watchdog.start()
    seen = []
    try:
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            if all(any(text in got for got in seen) for text in wanted):
                break
    finally:
        watchdog.cancel()
        process.terminate()
        try:
            rest = process.communicate(timeout=30)[1]  # drained, so it can log its way out
        except subprocess.TimeoutExpired:
            process.kill()
            rest = process.communicate()[1]
    return "".join(seen) + (rest or "")


def test_values_upstream_accepts_start_with_a_warning_saying_what_they_do(tmp_path: Path) -> None:
    warnings = [
        # cloud-provider v0.35.4 app/controllermanager.go:305-307 starts with every controller
        # disabled (controller-manager's Validate finds no unknown name in an empty list).
        "] --controllers selects no controller: polyccm starts, as upstream does, but "
        "no controller will run",
        "] --kube-api-qps=-1: no client-side limit on requests to the API server",
        # cloud-provider v0.35.4 options/kubecloudshared.go:101-111 validates nothing of it.
        "] --cluster-name is empty: accepted, as upstream accepts it",
    ]
    output = _stderr_until(
        [
            f"--kubeconfig={_unreachable_kubeconfig(tmp_path)}",
            "--secure-port=0",
            "--controllers=",
            "--kube-api-qps=-1",
            "--cluster-name=",
        ],
        warnings,
    )
    for warning in warnings:
        assert warning in output, output


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_cluster_name_is_refused_where_it_alone_marks_the_cloud_resources(
    name: str,
) -> None:
    # Upstream validates nothing of --cluster-name; but without a cluster id polyccm's
    # --allow-untagged-cloud tags with the cluster name (AWS: kubernetes.io/cluster/<name>),
    # and an empty one marks nothing as this cluster's.
    from polyccm_testing.fake import FakeCloud
    from polyccm_testing.fake_main import FakeCloudPlugin

    class Untagged(FakeCloud):
        def has_cluster_id(self) -> bool:
            return False

    manager = plugin_manager([FakeCloudPlugin(Untagged())])
    argv = [
        "--provider=fake",
        "--configure-cloud-routes=false",
        "--allow-untagged-cloud",
        f"--cluster-name={name}",
    ]
    with pytest.raises(
        commandline.UsageError, match="--cluster-name is empty: the fake provider found no"
    ):
        commandline.build_checked_provider(commandline.parse_command_line(argv, manager), manager)
    commandline.build_checked_provider(
        commandline.parse_command_line([*argv[:3], "--cluster-name=prod"], manager), manager
    )


def _serving_pair(directory: Path, name: str) -> tuple[Path, Path]:
    from polyccm.serving import certs

    chain, key = certs.generate_self_signed("127.0.0.1")
    crt, key_file = directory / f"{name}.crt", directory / f"{name}.key"
    crt.write_bytes(chain)
    key_file.write_bytes(key)
    return crt, key_file


def _encrypted(key_file: Path, directory: Path) -> Path:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    encrypted = directory / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    return encrypted


@pytest.mark.parametrize(
    ("cert", "key", "message"),
    [
        ("random", "good", "--tls-cert-file {cert} holds no PEM certificate"),
        ("good", "random", "--tls-private-key-file {key} holds no PEM private key"),
        ("empty", "good", "--tls-cert-file {cert} is empty"),
        ("good", "empty", "--tls-private-key-file {key} is empty"),
        ("directory", "good", "cannot read --tls-cert-file {cert}: Is a directory"),
        ("good", "missing", "cannot read --tls-private-key-file {key}: No such file"),
        ("good", "other", "--tls-private-key-file {key} does not match the certificate in"),
        ("key", "good", "--tls-cert-file {cert} holds a private key, not a certificate"),
        ("good", "cert", "--tls-private-key-file {key} holds a certificate, not a PEM private"),
        ("good", "encrypted", "--tls-private-key-file {key} is encrypted"),
    ],
)
def test_unusable_tls_files_exit_2_at_start_naming_the_file_and_why(
    tmp_path: Path, cert: str, key: str, message: str
) -> None:
    # apiserver v0.35.4 pkg/server/dynamiccertificates/dynamic_serving_content.go:85-102 loads
    # both files when the command starts (readable, not empty, tls.X509KeyPair: PEM blocks and a
    # key that matches the certificate) and stops on any error.
    crt, key_file = _serving_pair(tmp_path, "good")
    other_key = _serving_pair(tmp_path, "other")[1]
    (tmp_path / "random").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "directory").mkdir()
    files = {
        "good": crt if cert == "good" else key_file,
        "random": tmp_path / "random",
        "empty": tmp_path / "empty",
        "directory": tmp_path / "directory",
        "missing": tmp_path / "missing",
        "other": other_key,
        "key": key_file,
        "cert": crt,
        "encrypted": _encrypted(key_file, tmp_path),
    }
    cert_path = files[cert]
    key_path = key_file if key == "good" else files[key]
    result = run_fake(
        f"--kubeconfig={_unreachable_kubeconfig(tmp_path)}",
        "--bind-address=127.0.0.1",
        "--secure-port=1",  # never bound: the files are refused first
        f"--tls-cert-file={cert_path}",
        f"--tls-private-key-file={key_path}",
    )
    assert result.returncode == 2, result.stderr
    expected = "polyccm: error: " + message.format(cert=cert_path, key=key_path)
    assert result.stderr.startswith(expected), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


# -- one redaction for every message (issue 22) -------------------------------------------------

DO_TOKEN = "dop_v1_0123456789abcdef0123456789abcdef"
METAL_KEY = "metal-api-key-0123456789"
BGP_PASSWORD = "Bgp0password9"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def _isolated(tmp_path: Path, **variables: str) -> dict[str, str]:
    """An environment with nothing of this machine's clouds or kubeconfig: ``variables`` only."""
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **variables}


@pytest.mark.parametrize(
    ("provider", "variables", "conf", "secret", "names"),
    [
        (
            "digitalocean",
            {"DO_ACCESS_TOKEN": DO_TOKEN, "DO_OVERRIDE_URL": f"http://api.example/{DO_TOKEN}"},
            None,
            DO_TOKEN,
            "DO_OVERRIDE_URL",
        ),
        (
            "digitalocean",
            {"DO_ACCESS_TOKEN": DO_TOKEN, "DEFAULT_LB_TYPE": DO_TOKEN},
            None,
            DO_TOKEN,
            "DEFAULT_LB_TYPE",
        ),
        (
            "digitalocean",
            {"DO_ACCESS_TOKEN_FILE": "{token_file}", "DEFAULT_LB_TYPE": f"x{DO_TOKEN}"},
            None,
            DO_TOKEN,
            "DEFAULT_LB_TYPE",
        ),
        (
            "digitalocean",
            {"DO_ACCESS_TOKEN": DO_TOKEN, "DO_OVERRIDE_URL": "http://ops:s3cr3t-pw@api.example/"},
            None,
            "s3cr3t-pw",
            "DO_OVERRIDE_URL",
        ),
        (
            "packet",
            {
                "METAL_API_KEY": METAL_KEY,
                "METAL_PROJECT_ID": "p",
                "METAL_API_URL": f"ftp://{METAL_KEY}",
            },
            None,
            METAL_KEY,
            "METAL_API_URL",
        ),
        (
            "packet",
            {
                "METAL_API_KEY": METAL_KEY,
                "METAL_PROJECT_ID": "p",
                "METAL_BGP_PASS": BGP_PASSWORD,
                "METAL_LOCAL_ASN": BGP_PASSWORD,
            },
            None,
            BGP_PASSWORD,
            "METAL_LOCAL_ASN",
        ),
        (
            "aws",
            {"AWS_SECRET_ACCESS_KEY": AWS_SECRET},
            f"[Global]\nNLBSecurityGroupMode = {AWS_SECRET}\n",
            AWS_SECRET,
            "NLBSecurityGroupMode",
        ),
        (
            "aws",
            {},
            '[ServiceOverride "1"]\nService = ec2\nRegion = us-east-1\n'
            "URL = ftp://admin:s3cr3t-pw@ec2.example\nSigningRegion = us-east-1\n",
            "s3cr3t-pw",
            "URL",
        ),
    ],
)
def test_a_secret_echoed_in_another_settings_error_is_masked(
    tmp_path: Path,
    provider: str,
    variables: dict[str, str],
    conf: str | None,
    secret: str,
    names: str,
) -> None:
    # The secret polyccm read (or a URL's password) pasted into another setting: that
    # setting's one-line error passes the log's redaction.
    token_file = tmp_path / "token"
    token_file.write_text(DO_TOKEN)
    args = [f"--provider={provider}", "--kubeconfig=/nonexistent"]
    if conf is not None:
        (tmp_path / "cloud.conf").write_text(conf)
        args.append(f"--cloud-config={tmp_path / 'cloud.conf'}")
    env = {k: v.format(token_file=token_file) for k, v in variables.items()}
    result = subprocess.run(
        [sys.executable, "-m", "polyccm.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=_isolated(tmp_path, **env),
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    # Masked (***), or, for a URL's user information, left out where the URL is echoed (…@).
    masked = "***" in result.stderr or "…@" in result.stderr
    assert names in result.stderr and masked, result.stderr
    assert secret not in result.stderr


def test_a_warning_before_logging_is_set_up_is_masked_too(tmp_path: Path) -> None:
    # The AWS cloud config is read before --v is applied; its warnings went to stderr unmasked.
    secret = AWS_SECRET.replace("/", "")  # the key name of a line pasted without its "Key ="
    conf = tmp_path / "cloud.conf"
    conf.write_text(f"[Global]\n{secret} = 1\n")
    result = subprocess.run(
        [sys.executable, "-m", "polyccm.cli", "--provider=aws", f"--cloud-config={conf}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_isolated(tmp_path, AWS_SECRET_ACCESS_KEY=secret),
    )
    assert result.returncode == 2, result.stderr
    assert "unknown key '***' in [Global] is ignored" in result.stderr, result.stderr
    assert secret not in result.stderr


def test_a_short_kubernetes_password_is_masked_in_the_log_at_v10(tmp_path: Path) -> None:
    # Shorter than MIN_SECRET_LENGTH, so never masked before; a secret named as one is masked
    # as a whole word whatever its length (from 3 characters).
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {username: admin, password: pw-42}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    output = _stderr_until(
        [
            f"--kubeconfig={kubeconfig}",
            "--secure-port=0",
            "--v=10",
            "--leader-elect-resource-name=pw-42",
        ],
        ["campaigning for lease kube-system/"],
        env=_isolated(tmp_path),
    )
    assert "campaigning for lease kube-system/***" in output, output
    assert "pw-42" not in output
