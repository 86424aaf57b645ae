"""What upstream's cloud-controller-manager command accepts, read from upstream's own code.

``main.go`` (next to this file) builds the command as k8s.io/cloud-provider's sample main does,
``app.NewCloudControllerManagerCommand`` with a cloud initializer that is never called, and
prints every flag of it (name, type, default), every gate its ``--feature-gates`` knows at the
release's emulated version, and the names ``--tls-cipher-suites`` and ``--tls-min-version``
take. polyccm's tests compare its command line with that listing, so nothing is copied by hand.

The program is built once per machine and version with the machine's Go from the module proxy,
into ``<cache>/bin/ccm-flags-<version>-<hash of main.go>``, in the same Go module and build
caches as the control-plane binaries (:mod:`polyccm_testing.devenv.binaries`): the modules it
needs are those kube-apiserver's build already fetched, so it builds in a few minutes on 2 cores.
Without Go (or without the proxy, on a machine whose caches lack the modules)
:class:`~polyccm_testing.devenv.binaries.BinaryError` says so: the tests fail, never skip.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyccm_testing.devenv.binaries import BinaryError, _run_go, cache_dir

CLOUD_PROVIDER_VERSION = "v0.35.4"
"""The k8s.io/cloud-provider release whose command polyccm matches (Kubernetes v1.35)."""
MODULE = "k8s.io/cloud-provider"
_PROGRAM = Path(__file__).with_name("main.go")


@dataclass(frozen=True)
class UpstreamFlag:
    """One flag of the upstream command, as pflag describes it."""

    name: str
    type: str
    """pflag's type name: ``bool``, ``string``, ``duration``, ``int32``, ``stringSlice`` ..."""
    default: str
    """The default as pflag prints it (``[a,b]`` for a slice, ``5m0s`` for a duration)."""
    shorthand: str = ""
    no_opt_value: str = ""
    """What the bare ``--flag`` means (``true`` for booleans)."""
    deprecated: str = ""
    hidden: bool = False


@dataclass(frozen=True)
class UpstreamGate:
    """One feature gate at the emulated version (``preRelease`` ``PRE-ALPHA``: not settable)."""

    name: str
    default: bool
    lock_to_default: bool
    pre_release: str
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class Listing:
    """Everything the Go program printed."""

    module: str
    emulation_version: str
    flags: tuple[UpstreamFlag, ...]
    feature_gates: tuple[UpstreamGate, ...]
    tls_cipher_suites: tuple[str, ...]
    insecure_tls_cipher_suites: tuple[str, ...]
    tls_versions: tuple[str, ...]


def listing(version: str = CLOUD_PROVIDER_VERSION) -> Listing:
    """The upstream command's flags and gates; builds the program on the first call."""
    binary = program_path(version)
    completed = subprocess.run(
        [str(binary), version], capture_output=True, text=True, check=False, timeout=60
    )
    if completed.returncode != 0:
        raise BinaryError(f"{binary} failed: {completed.stderr.strip()}")
    return parse_listing(json.loads(completed.stdout))


def parse_listing(raw: dict[str, Any]) -> Listing:
    """A :class:`Listing` from the program's JSON."""
    flags = tuple(
        UpstreamFlag(
            name=item["name"],
            type=item["type"],
            default=item["default"],
            shorthand=item.get("shorthand", ""),
            no_opt_value=item.get("noOptValue", ""),
            deprecated=item.get("deprecated", ""),
            hidden=bool(item.get("hidden", False)),
        )
        for item in raw["flags"]
    )
    gates = tuple(
        UpstreamGate(
            name=item["name"],
            default=bool(item["default"]),
            lock_to_default=bool(item["lockToDefault"]),
            pre_release=item["preRelease"],
            depends_on=tuple(item.get("dependsOn") or ()),
        )
        for item in raw["featureGates"]
    )
    return Listing(
        module=raw["module"],
        emulation_version=raw["emulationVersion"],
        flags=flags,
        feature_gates=gates,
        tls_cipher_suites=tuple(raw["tlsCipherSuites"]),
        insecure_tls_cipher_suites=tuple(raw["insecureTlsCipherSuites"]),
        tls_versions=tuple(raw["tlsVersions"]),
    )


def program_path(version: str = CLOUD_PROVIDER_VERSION) -> Path:
    """The built program for ``version``, building it when this machine has none yet."""
    digest = hashlib.sha256(_PROGRAM.read_bytes()).hexdigest()[:12]
    bin_dir = cache_dir() / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / f"ccm-flags-{version}-{digest}"
    if os.access(target, os.X_OK):
        return target
    # Two test runs missing it at once: the second waits for the first and uses its build.
    with (bin_dir / ".ccm-flags.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.access(target, os.X_OK):
            _build(version, target)
    return target


def _build(version: str, target: Path) -> None:
    if shutil.which("go") is None:
        raise BinaryError(
            "Go is not installed: the upstream flag-list tests build "
            f"{MODULE}@{version}'s command with it (Go and the module proxy are needed once "
            "per machine)"
        )
    work = cache_dir() / "build" / f"ccm-flags-{version}"
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "build.log"
    (work / "main.go").write_bytes(_PROGRAM.read_bytes())
    (work / "go.mod").write_text(
        "module polyccm.local/ccm-flags\n\n"
        "go 1.25.0\n\n"
        "godebug default=go1.25\n\n"
        f"require {MODULE} {version}\n"
    )
    (work / "go.sum").touch()
    _run_go(
        [
            "get",
            f"{MODULE}/app@{version}",
            # The sample main registers the json log format, which adds --log-json-* flags.
            f"k8s.io/component-base/logs/json/register@{version}",
        ],
        cwd=work,
        log_file=log_file,
    )
    partial = target.with_name(target.name + ".partial")
    _run_go(
        ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."],
        cwd=work,
        log_file=log_file,
    )
    partial.rename(target)


def main() -> int:
    """``python -m polyccm_testing.upstreamflags``: print the listing's JSON (builds once)."""
    try:
        binary = program_path()
    except BinaryError as error:
        print(f"error: {error}")
        return 1
    return subprocess.run([str(binary), CLOUD_PROVIDER_VERSION], check=False).returncode
