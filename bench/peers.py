"""The Go peers the benchmark runs beside polyccm, built once from the Go module proxy and cached
beside the control-plane binaries (``~/.cache/polyccm/bin``), as
:mod:`polyccm_testing.devenv.binaries` does for kube-apiserver and etcd:

* ``aws-cloud-controller-manager`` from ``k8s.io/cloud-provider-aws`` through a wrapper module
  that only requires it. Its go.mod replaces ``github.com/google/cel-go`` with a module the
  proxy refuses; replace lines of a dependency are ignored, so the wrapper builds with
  ``github.com/google/cel-go`` at the version it names (v0.31.0, the same code: the same hash).
* ``fake-cloud-controller-manager``: our own small main (``bench/peers/fakeccm``) that runs
  ``k8s.io/cloud-provider``'s standard controllers over its fake cloud, the floor of what the
  Go framework costs. Its cache name carries a digest of the sources, so an edit rebuilds it.

Without Go (or when a build fails) :func:`find_peers` says why and the benchmark runs without
them. Nothing fetched is kept in the repository.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from polyccm_testing.devenv.binaries import (
    BinaryError,
    _cached_or_built,
    _module_go_mod,
    _requires_newer_go,
    _run_go,
    cache_dir,
)

AWS_MODULE = "k8s.io/cloud-provider-aws"
AWS_VERSION = "v1.37.1"
AWS_MAIN = f"{AWS_MODULE}/cmd/aws-cloud-controller-manager"
FAKE_SOURCES = Path(__file__).resolve().parent / "peers" / "fakeccm"
FAKE_FILES = ("go.mod", "main.go")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Peers:
    """Paths of the built peers; ``None`` for one that is not available, with the reason."""

    aws: Path | None
    fake: Path | None
    missing: tuple[str, ...] = ()


def _version_ldflags(version: str) -> str:
    minor = version.split(".")[1]
    return " ".join(
        [
            "-s -w",
            f"-X k8s.io/component-base/version.gitVersion={version}",
            "-X k8s.io/component-base/version.gitMajor=1",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
            f"-X main.gitVersion={version}",
        ]
    )


def build_aws(version: str, target: Path) -> None:
    """Build aws-cloud-controller-manager ``version`` into ``target`` through a wrapper module."""
    work = cache_dir() / "build" / f"aws-cloud-controller-manager-{version}"
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "build.log"
    upstream = _module_go_mod(AWS_MODULE, version, work, log_file)
    too_new = _requires_newer_go(upstream)
    if too_new:
        raise BinaryError(f"{AWS_MODULE} {version} needs Go {too_new}")
    go_line = next((line for line in upstream.splitlines() if line.startswith("go ")), "go 1.26.0")
    (work / "go.mod").write_text(
        f"module polyccm.local/aws-cloud-controller-manager-build\n\n{go_line}\n\n"
        f"require {AWS_MODULE} {version}\n"
    )
    (work / "go.sum").touch()
    _run_go(["get", f"{AWS_MAIN}@{version}"], cwd=work, log_file=log_file)
    partial = target.with_name(target.name + ".partial")
    _run_go(
        ["build", "-trimpath", "-ldflags", _version_ldflags(version), "-o", str(partial), AWS_MAIN],
        cwd=work,
        log_file=log_file,
    )
    partial.rename(target)


def fake_version() -> str:
    """The fake peer's cache version: the cloud-provider release and a digest of our sources."""
    digest = hashlib.sha256()
    for name in FAKE_FILES:
        digest.update((FAKE_SOURCES / name).read_bytes())
    return f"v0.37.0-{digest.hexdigest()[:10]}"


def build_fake(version: str, target: Path) -> None:
    """Build bench/peers/fakeccm into ``target`` (``version`` names the cache entry)."""
    work = cache_dir() / "build" / f"fake-cloud-controller-manager-{version}"
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "build.log"
    for name in FAKE_FILES:
        shutil.copyfile(FAKE_SOURCES / name, work / name)
    _run_go(["mod", "tidy"], cwd=work, log_file=log_file)
    partial = target.with_name(target.name + ".partial")
    _run_go(
        ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."],
        cwd=work,
        log_file=log_file,
    )
    partial.rename(target)


def aws_path() -> Path:
    return _cached_or_built("aws-cloud-controller-manager", (AWS_VERSION,), build_aws)


def fake_path() -> Path:
    return _cached_or_built("fake-cloud-controller-manager", (fake_version(),), build_fake)


def find_peers(say: Progress) -> Peers:
    """Both peers, built on first use (minutes); a peer that cannot be had is skipped, said."""
    missing: list[str] = []
    found: dict[str, Path | None] = {}
    for key, finder in (("aws", aws_path), ("fake", fake_path)):
        if shutil.which("go") is None and not _cached_peer(key):
            missing.append(f"{key} peer skipped: Go is not installed")
            found[key] = None
            continue
        say(f"locating the {key} Go peer (built from the Go module proxy on first use)")
        try:
            found[key] = finder()
        except BinaryError as error:
            missing.append(f"{key} peer skipped: {str(error).splitlines()[0]}")
            found[key] = None
    return Peers(aws=found["aws"], fake=found["fake"], missing=tuple(missing))


def _cached_peer(key: str) -> bool:
    name, version = (
        ("aws-cloud-controller-manager", AWS_VERSION)
        if key == "aws"
        else ("fake-cloud-controller-manager", fake_version())
    )
    return (cache_dir() / "bin" / f"{name}-{version}").exists()


def main() -> int:
    """Build (or find) both peers and print their paths."""
    peers = find_peers(lambda message: print(f"[bench peers] {message}", flush=True))
    print(f"aws-cloud-controller-manager={peers.aws or '-'}")
    print(f"fake-cloud-controller-manager={peers.fake or '-'}")
    for reason in peers.missing:
        print(reason)
    return 0 if not peers.missing else 1


if __name__ == "__main__":
    raise SystemExit(main())
