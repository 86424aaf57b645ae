"""Locate or build the control-plane binaries (kube-apiserver and etcd), the kube-scheduler that
tests the manifests' scheduling constraints, the pinned kustomize that renders
deploy/kustomize and the pinned helm that renders deploy/helm, for local work and tests.

Lookup order follows the envtest convention: ``TEST_ASSET_KUBE_APISERVER`` / ``TEST_ASSET_ETCD``
/ ``TEST_ASSET_KUSTOMIZE``, then (for the control plane) ``$KUBEBUILDER_ASSETS/<name>``, then a
cache keyed by version under ``$POLYCCM_CACHE_DIR`` (default ``~/.cache/polyccm``). On a cache
miss the binary is built from the Go module proxy with the machine's Go:

* kube-apiserver and kube-scheduler come from the module ``k8s.io/kubernetes``. That module
  requires its staging modules (``k8s.io/api`` and friends) at ``v0.0.0`` and points them at
  ``./staging`` with replace lines, which Go ignores in a dependency; a small wrapper module
  replaces each one with its matching ``v0.Y.Z`` release instead.
* etcd comes from ``go.etcd.io/etcd/server/v3``, whose root package is the etcd main, also
  through a wrapper module (its own replace lines are likewise ignored).
* kustomize comes from ``sigs.k8s.io/kustomize/kustomize/v5``, built with ``go install
  module@version`` so that its own go.mod alone decides the dependency versions (it has no
  replace lines).

Each binary has its own wrapper so their shared dependencies are never merged to versions
neither project tested. This module uses the standard library only so it can run before the
workspace is synced: ``python3 testkit/src/polyccm_testing/devenv/binaries.py``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Releases tried in order; the first that builds with the machine's Go wins.
KUBERNETES_VERSIONS: tuple[str, ...] = ("v1.35.4", "v1.36.3", "v1.37.2", "v1.34.4")
ETCD_VERSIONS: tuple[str, ...] = ("v3.6.16", "v3.6.15", "v3.6.13")
#: v5.8.2 (kustomize/api v0.21.2) is the newest release whose go.mod accepts Go 1.26; v5.8.3
#: asks for Go 1.27.
KUSTOMIZE_VERSIONS: tuple[str, ...] = ("v5.8.2", "v5.8.1")
KUSTOMIZE_MODULE = "sigs.k8s.io/kustomize/kustomize/v5"
#: Helm renders deploy/helm/polyccm in the chart's tests; v3.21.4's go.mod asks for Go 1.26.0
#: and has no replace lines, so ``go install`` builds it.
HELM_VERSIONS: tuple[str, ...] = ("v3.21.4",)
HELM_MODULE = "helm.sh/helm/v3"

_STAGING_LINE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", re.MULTILINE)
_GODEBUG_LINE = re.compile(r"^godebug .*$", re.MULTILINE)
_GO_LINE = re.compile(r"^go (\d+\.\d+(?:\.\d+)?)$", re.MULTILINE)


class BinaryError(RuntimeError):
    """A control-plane binary could not be found or built."""


@dataclass(frozen=True)
class ControlPlaneBinaries:
    """Paths of the two binaries a local control plane needs."""

    kube_apiserver: Path
    etcd: Path


def cache_dir() -> Path:
    """The root of polyccm's cache (binaries, Go module and build caches)."""
    override = os.environ.get("POLYCCM_CACHE_DIR")
    if override:
        return Path(override)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "polyccm"


def _log(message: str) -> None:
    print(f"[polyccm binaries] {message}", file=sys.stderr, flush=True)


def _from_environment(name: str, variable: str, *, assets_dir: bool = True) -> Path | None:
    explicit = os.environ.get(variable)
    if explicit:
        path = Path(explicit)
        if not os.access(path, os.X_OK):
            raise BinaryError(f"{variable}={explicit} is not an executable file")
        return path
    assets = os.environ.get("KUBEBUILDER_ASSETS") if assets_dir else None
    if assets:
        path = Path(assets) / name
        if os.access(path, os.X_OK):
            return path
    return None


def _go_environment(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-mod=mod")
    env["CGO_ENABLED"] = "0"
    env["GOWORK"] = "off"
    # Never let a newer toolchain be fetched silently: the release list handles Go versions.
    env.setdefault("GOTOOLCHAIN", "local")
    env.setdefault("GOPATH", str(Path.home() / "go"))
    env["GOBIN"] = str(work / "gobin")
    return env


def _run_go(arguments: Sequence[str], *, cwd: Path, log_file: Path) -> None:
    env = _go_environment(cwd)
    _log(f"go {' '.join(arguments)}")
    with log_file.open("a") as log:
        log.write(f"$ go {' '.join(arguments)}\n")
        log.flush()
        completed = subprocess.run(
            ["go", *arguments],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if completed.returncode != 0:
        tail = log_file.read_text(errors="replace").splitlines()[-25:]
        raise BinaryError(f"go {arguments[0]} failed in {cwd}:\n" + "\n".join(tail))


def _module_go_mod(module: str, version: str, work: Path, log_file: Path) -> str:
    """Download ``module@version`` and return the text of its go.mod."""
    env = _go_environment(work)
    completed = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    with log_file.open("a") as log:
        log.write(completed.stdout + completed.stderr)
    if completed.returncode != 0:
        raise BinaryError(f"cannot download {module}@{version}: {completed.stdout.strip()}")
    info = json.loads(completed.stdout)
    return Path(info["GoMod"]).read_text()


def _machine_go_version() -> tuple[int, ...]:
    output = subprocess.run(
        ["go", "env", "GOVERSION"], capture_output=True, text=True, check=False
    ).stdout
    match = re.search(r"go(\d+)\.(\d+)(?:\.(\d+))?", output)
    if not match:
        raise BinaryError("go is not installed (needed to build kube-apiserver and etcd)")
    return tuple(int(part or 0) for part in match.groups())


def _requires_newer_go(go_mod: str) -> str | None:
    match = _GO_LINE.search(go_mod)
    if not match:
        return None
    wanted = tuple(int(part) for part in match.group(1).split("."))
    have = _machine_go_version()
    return match.group(1) if wanted > have[: len(wanted)] else None


def build_kube_apiserver(version: str, target: Path) -> None:
    """Build kube-apiserver ``version`` (``vX.Y.Z``) into ``target`` through a wrapper module."""
    _build_kubernetes_command("kube-apiserver", version, target)


def build_kube_scheduler(version: str, target: Path) -> None:
    """Build kube-scheduler ``version`` (``vX.Y.Z``) into ``target``, as kube-apiserver is built
    (most of its packages are kube-apiserver's, so Go's build cache makes it quick after it)."""
    _build_kubernetes_command("kube-scheduler", version, target)


def _build_kubernetes_command(command: str, version: str, target: Path) -> None:
    """Build ``k8s.io/kubernetes/cmd/<command>`` at ``version`` through a wrapper module."""
    work = cache_dir() / "build" / f"{command}-{version}"
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "build.log"
    upstream = _module_go_mod("k8s.io/kubernetes", version, work, log_file)
    too_new = _requires_newer_go(upstream)
    if too_new:
        raise BinaryError(f"k8s.io/kubernetes {version} needs Go {too_new}")
    staging = sorted(set(_STAGING_LINE.findall(upstream)))
    if not staging:
        raise BinaryError(f"k8s.io/kubernetes {version}: no staging modules found in its go.mod")
    minor = version.split(".", 1)[1]  # "35.4" from "v1.35.4"
    godebug = _GODEBUG_LINE.search(upstream)
    go_line = _GO_LINE.search(upstream)
    lines = [
        f"module polyccm.local/{command}-build",
        "",
        f"go {go_line.group(1) if go_line else '1.24'}",
        "",
    ]
    if godebug:
        lines += [godebug.group(0), ""]
    lines += [f"require k8s.io/kubernetes {version}", "", "replace ("]
    lines += [f"\t{name} => {name} v0.{minor}" for name in staging]
    lines += [")", ""]
    (work / "go.mod").write_text("\n".join(lines))
    (work / "go.sum").touch()
    _log(
        f"building {command} {version} ({len(staging)} staging modules replaced); "
        f"the first build takes several minutes, log: {log_file}"
    )
    _run_go(["get", f"k8s.io/kubernetes/cmd/{command}@{version}"], cwd=work, log_file=log_file)
    ldflags = " ".join(
        [
            "-s -w",
            f"-X k8s.io/component-base/version.gitVersion={version}",
            "-X k8s.io/component-base/version.gitMajor=1",
            f"-X k8s.io/component-base/version.gitMinor={minor.split('.')[0]}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
        ]
    )
    partial = target.with_name(target.name + ".partial")
    _run_go(
        [
            "build",
            "-trimpath",
            "-tags",
            "selinux,notest",
            "-ldflags",
            ldflags,
            "-o",
            str(partial),
            f"k8s.io/kubernetes/cmd/{command}",
        ],
        cwd=work,
        log_file=log_file,
    )
    partial.rename(target)


def build_etcd(version: str, target: Path) -> None:
    """Build etcd ``version`` (``v3.6.x``) into ``target`` through a wrapper module."""
    work = cache_dir() / "build" / f"etcd-{version}"
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "build.log"
    upstream = _module_go_mod("go.etcd.io/etcd/server/v3", version, work, log_file)
    too_new = _requires_newer_go(upstream)
    if too_new:
        raise BinaryError(f"etcd {version} needs Go {too_new}")
    go_line = _GO_LINE.search(upstream)
    (work / "go.mod").write_text(
        "module polyccm.local/etcd-build\n\n"
        f"go {go_line.group(1) if go_line else '1.24'}\n\n"
        f"require go.etcd.io/etcd/server/v3 {version}\n"
    )
    (work / "go.sum").touch()
    _log(f"building etcd {version}; log: {log_file}")
    _run_go(["get", f"go.etcd.io/etcd/server/v3@{version}"], cwd=work, log_file=log_file)
    partial = target.with_name(target.name + ".partial")
    _run_go(
        [
            "build",
            "-trimpath",
            "-ldflags",
            "-s -w",
            "-o",
            str(partial),
            "go.etcd.io/etcd/server/v3",
        ],
        cwd=work,
        log_file=log_file,
    )
    partial.rename(target)


def build_kustomize(version: str, target: Path) -> None:
    """Build kustomize ``version`` (``v5.Y.Z``) into ``target`` with ``go install``."""
    work = cache_dir() / "build" / f"kustomize-{version}"
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "build.log"
    too_new = _requires_newer_go(_module_go_mod(KUSTOMIZE_MODULE, version, work, log_file))
    if too_new:
        raise BinaryError(f"kustomize {version} needs Go {too_new}")
    _log(f"building kustomize {version}; log: {log_file}")
    _run_go(
        ["install", "-trimpath", "-ldflags", "-s -w", f"{KUSTOMIZE_MODULE}@{version}"],
        cwd=work,
        log_file=log_file,
    )
    (work / "gobin" / "kustomize").replace(target)


def build_helm(version: str, target: Path) -> None:
    """Build helm ``version`` (``v3.Y.Z``) into ``target`` with ``go install``, its version
    stamped as its release Makefile stamps it."""
    work = cache_dir() / "build" / f"helm-{version}"
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "build.log"
    go_mod = _module_go_mod(HELM_MODULE, version, work, log_file)
    too_new = _requires_newer_go(go_mod)
    if too_new:
        raise BinaryError(f"helm {version} needs Go {too_new}")
    # The Kubernetes release helm assumes without a cluster (`helm template`: a chart's
    # kubeVersion is checked against it) is its client-go's, as its Makefile stamps it;
    # unstamped, it would be 1.20.
    client_go = re.search(r"^\s*k8s\.io/client-go v0\.(\d+)\.", go_mod, re.MULTILINE)
    if not client_go:
        raise BinaryError(f"helm {version}: no k8s.io/client-go in its go.mod")
    _log(f"building helm {version}; log: {log_file}")
    stamp = " ".join(
        [
            f"-s -w -X {HELM_MODULE}/internal/version.version={version}",
            *(
                f"-X {HELM_MODULE}/pkg/{package}.k8sVersion{part}={value}"
                for package in ("chartutil", "lint/rules")
                for part, value in (("Major", "1"), ("Minor", client_go.group(1)))
            ),
        ]
    )
    _run_go(
        ["install", "-trimpath", "-ldflags", stamp, f"{HELM_MODULE}/cmd/helm@{version}"],
        cwd=work,
        log_file=log_file,
    )
    (work / "gobin" / "helm").replace(target)


def _cached(bin_dir: Path, name: str, versions: Sequence[str]) -> Path | None:
    for version in versions:
        candidate = bin_dir / f"{name}-{version}"
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _cached_or_built(
    name: str, versions: Sequence[str], builder: Callable[[str, Path], None]
) -> Path:
    bin_dir = cache_dir() / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    found = _cached(bin_dir, name, versions)
    if found:
        return found
    # Two sessions (or test runs) missing the same binary must not build into the same files
    # at once: the second waits for the first and then finds its result.
    with (bin_dir / f".{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _cached(bin_dir, name, versions)
        if found:
            return found
        return _build_first_release(bin_dir, name, versions, builder)


def _build_first_release(
    bin_dir: Path, name: str, versions: Sequence[str], builder: Callable[[str, Path], None]
) -> Path:
    if shutil.which("go") is None:
        raise BinaryError(
            f"{name} not found: set TEST_ASSET_{name.upper().replace('-', '_')} (or "
            "KUBEBUILDER_ASSETS for the control plane), or install Go so it can be built"
        )
    failures: list[str] = []
    for version in versions:
        target = bin_dir / f"{name}-{version}"
        try:
            builder(version, target)
        except BinaryError as error:
            _log(f"{name} {version} did not build: {str(error).splitlines()[0]}")
            failures.append(f"--- {name} {version}:\n{error}")
            continue
        _log(f"{name} {version} ready at {target}")
        return target
    raise BinaryError(f"no release of {name} built with this Go:\n" + "\n".join(failures))


def kube_apiserver_path() -> Path:
    """Path of a kube-apiserver binary, building one when none is available."""
    found = _from_environment("kube-apiserver", "TEST_ASSET_KUBE_APISERVER")
    return found or _cached_or_built("kube-apiserver", KUBERNETES_VERSIONS, build_kube_apiserver)


def kube_scheduler_path() -> Path:
    """Path of a kube-scheduler binary (the manifests' scheduling tests), building one when none
    is available: the release of the kube-apiserver in use first, so both agree."""
    found = _from_environment("kube-scheduler", "TEST_ASSET_KUBE_SCHEDULER")
    if found:
        return found
    apiserver = kube_apiserver_path().name.removeprefix("kube-apiserver-")
    versions = sorted(KUBERNETES_VERSIONS, key=lambda version: version != apiserver)
    return _cached_or_built("kube-scheduler", versions, build_kube_scheduler)


def etcd_path() -> Path:
    """Path of an etcd binary, building one when none is available."""
    found = _from_environment("etcd", "TEST_ASSET_ETCD")
    return found or _cached_or_built("etcd", ETCD_VERSIONS, build_etcd)


def kustomize_path() -> Path:
    """Path of the pinned kustomize, building it when none is available. Only
    ``TEST_ASSET_KUSTOMIZE`` overrides it: an envtest assets directory does not pin one."""
    found = _from_environment("kustomize", "TEST_ASSET_KUSTOMIZE", assets_dir=False)
    return found or _cached_or_built("kustomize", KUSTOMIZE_VERSIONS, build_kustomize)


def helm_path() -> Path:
    """Path of the pinned helm, building it when none is available (``TEST_ASSET_HELM``
    overrides it)."""
    found = _from_environment("helm", "TEST_ASSET_HELM", assets_dir=False)
    return found or _cached_or_built("helm", HELM_VERSIONS, build_helm)


def ensure_binaries() -> ControlPlaneBinaries:
    """Find or build both binaries."""
    return ControlPlaneBinaries(kube_apiserver=kube_apiserver_path(), etcd=etcd_path())


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: ensure the binaries (and kustomize) exist and print their paths."""
    del argv
    try:
        binaries = ensure_binaries()
        kustomize = kustomize_path()
        scheduler = kube_scheduler_path()
        helm = helm_path()
    except BinaryError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"kube-apiserver={binaries.kube_apiserver}")
    print(f"etcd={binaries.etcd}")
    print(f"kustomize={kustomize}")
    print(f"kube-scheduler={scheduler}")
    print(f"helm={helm}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
