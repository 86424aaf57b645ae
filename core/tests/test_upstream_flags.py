"""A command line copied from upstream's cloud-controller-manager starts polyccm: every flag of
k8s.io/cloud-provider v0.35.4's command, as upstream's own code lists it, is accepted with a
value of its type, and refused with a malformed one, as upstream refuses it.

The list comes from a Go program that builds ``app.NewCloudControllerManagerCommand``
(k8s.io/cloud-provider v0.35.4 app/controllermanager.go:82-153: options.Flags, options.go:146,
plus verflag, logs and klog's global flags, and cobra's --help) and prints every flag of it
(polyccm_testing.upstreamflags; built once per machine with Go from the module proxy). Without
Go these tests fail, saying so: they never skip.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from polyccm.app import commandline, featuregates
from polyccm.plugins import plugin_manager
from polyccm.serving import tls
from polyccm_testing import upstreamflags
from polyccm_testing.devenv.binaries import BinaryError
from polyccm_testing.upstreamflags import Listing, UpstreamFlag


@pytest.fixture(scope="module")
def upstream() -> Listing:
    try:
        return upstreamflags.listing()
    except BinaryError as error:
        pytest.fail(f"cannot list upstream's cloud-controller-manager flags: {error}")


def test_the_listing_is_upstreams_v1_35_command(upstream: Listing) -> None:
    names = {flag.name for flag in upstream.flags}
    # A few from each of upstream's flag sets, so an empty or partial listing cannot pass.
    assert {
        "cloud-provider",  # generic (KubeCloudShared)
        "concurrent-node-syncs",  # cloud-node-controller
        "enable-leader-migration",  # leader-migration
        "webhook-secure-port",  # webhook serving
        "tls-cipher-suites",  # secure serving
        "requestheader-client-ca-file",  # authentication
        "authorization-always-allow-paths",  # authorization
        "feature-gates",
        "logging-format",
        "vmodule",
        "version",
        "help",
    } <= names
    assert len(names) >= 75
    assert upstream.emulation_version == featuregates.emulation_version() == "1.35"


_PROBLEM_FREE: dict[str, tuple[str, ...]] = {
    # Values upstream checks, and flags that need another to be valid.
    "cloud-provider": ("--cloud-provider=gce",),
    "cluster-cidr": ("--cluster-cidr=10.244.0.0/16,fd00:10:244::/56",),
    "feature-gates": ("--feature-gates=AllBeta=false,ContextualLogging=true",),
    "tls-min-version": ("--tls-min-version=VersionTLS13",),
    "tls-cipher-suites": (
        "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256",
    ),
    "tls-cert-file": ("--tls-cert-file=/etc/tls/tls.crt", "--tls-private-key-file=/etc/tls/k"),
    "tls-private-key-file": ("--tls-cert-file=/etc/tls/c", "--tls-private-key-file=/etc/k.key"),
    "tls-sni-cert-key": ("--tls-sni-cert-key=/etc/sni.crt,/etc/sni.key:example.com",),
    "webhooks": ("--webhooks=*",),
    "requestheader-uid-headers": ("--requestheader-uid-headers=X-Remote-Uid",),
    "logging-format": ("--logging-format=json",),
    "vmodule": ("--vmodule=route*=4,node=2",),
    "log-text-split-stream": (
        "--log-text-split-stream",
        "--feature-gates=LoggingAlphaOptions=true",
    ),
    "log-json-split-stream": (
        "--log-json-split-stream",
        "--feature-gates=LoggingAlphaOptions=true",
    ),
    "log-text-info-buffer-size": (
        "--log-text-info-buffer-size=64Ki",
        "--feature-gates=LoggingAlphaOptions=true",
    ),
    "log-json-info-buffer-size": (
        "--log-json-info-buffer-size=1M",
        "--feature-gates=LoggingAlphaOptions=true",
    ),
    "version": ("--version=false",),
    "help": ("--help=false",),
}

_BY_TYPE = {
    "bool": "true",
    "string": "some-value",
    "duration": "1m30s",
    "int": "3",
    "int32": "3",
    "float32": "12.5",
    "ip": "::",
    "stringSlice": "a,b",
    "Level": "4",
}


def _sample(flag: UpstreamFlag, cloud_config: Path) -> tuple[str, ...]:
    """The flag with a sensible value for its type: upstream's default when it has one."""
    if flag.name in _PROBLEM_FREE:
        return _PROBLEM_FREE[flag.name]
    if flag.name == "cloud-config":
        return (f"--cloud-config={cloud_config}",)
    default = flag.default.strip("[]") if flag.type == "stringSlice" else flag.default
    if default in ("", "0", "0s"):
        default = _BY_TYPE[flag.type]
    return (f"--{flag.name}={default}",)


def _refusal(argv: list[str]) -> str | None:
    try:
        commandline.parse(["--provider=gce", *argv], plugin_manager())
    except commandline.UsageError as error:
        return str(error)
    return None


def test_every_upstream_flag_is_accepted(upstream: Listing, tmp_path: Path) -> None:
    cloud_config = tmp_path / "cloud.conf"
    cloud_config.write_text("[global]\nproject-id = p\n")
    refused = {}
    for flag in upstream.flags:
        forms = [list(_sample(flag, cloud_config))]
        if flag.no_opt_value == "true" and flag.name not in ("help", "version"):
            forms.append([f"--{flag.name}", *forms[0][1:]])  # bare, as pflag's booleans
        if flag.shorthand and flag.name != "help":
            value = forms[0][0].partition("=")[2]
            forms += [[f"-{flag.shorthand}", value], [f"-{flag.shorthand}={value}"]]
        for argv in forms:
            problem = _refusal(argv)
            if problem is not None:
                refused[" ".join(argv)] = problem
    assert not refused, f"upstream flags polyccm refuses: {json.dumps(refused, indent=1)}"


_MALFORMED = {
    "bool": "maybe",
    "duration": "90x",
    "int": "three",
    "int32": "2147483648",  # one past int32
    "float32": "fast",
    "ip": "300.1.1.1",
    "Level": "-1",
    "quantity": "12XB",
    "mapStringBool": "ContextualLogging",  # no value
    "pattern=N,...": "route*",
    "namedCertKey": "only-a-certificate.crt",
    "version": "maybe",
}


def test_a_malformed_value_of_each_typed_upstream_flag_exits_2(upstream: Listing) -> None:
    accepted = []
    checked = 0
    for flag in upstream.flags:
        bad = _MALFORMED.get(flag.type)
        if bad is None or flag.name == "help":
            continue  # strings and lists take anything at parse time, upstream too
        checked += 1
        if _refusal([f"--{flag.name}={bad}"]) is None:
            accepted.append(f"--{flag.name}={bad}")
    assert checked >= 40
    assert not accepted, f"malformed values polyccm accepts: {accepted}"


def test_upstream_v1_36s_concurrent_node_status_updates_is_accepted() -> None:
    # k8s.io/cloud-provider v0.36.2 options/nodecontroller.go: Int32Var
    # "concurrent-node-status-updates" (AddFlags), refused when negative (Validate, ~line 56).
    options, _ = commandline.parse(
        ["--provider=gce", "--concurrent-node-syncs=3", "--concurrent-node-status-updates=8"],
        plugin_manager(),
    )
    assert options.concurrent_node_status_updates == 8
    with pytest.raises(commandline.UsageError, match="must not be negative"):
        commandline.parse(
            ["--provider=gce", "--concurrent-node-status-updates=-1"], plugin_manager()
        )


def test_the_shipped_feature_gates_are_upstreams(upstream: Listing) -> None:
    shipped = {
        name: (spec.default, spec.lock_to_default, spec.pre_release, spec.depends_on)
        for name, spec in featuregates.known_gates().items()
    }
    real = {
        gate.name: (gate.default, gate.lock_to_default, gate.pre_release, gate.depends_on)
        for gate in upstream.feature_gates
    }
    assert shipped == real


def test_the_tls_names_are_upstreams(upstream: Listing) -> None:
    assert set(tls.CIPHER_SUITES) == set(upstream.tls_cipher_suites)
    assert set(tls.VERSIONS) == set(upstream.tls_versions)
