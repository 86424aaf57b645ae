"""The Go peers the benchmark runs beside polyccm, built once from the Go module proxy and cached
beside the control-plane binaries (``~/.cache/polyccm/bin``), as
:mod:`polyccm_testing.devenv.binaries` does for kube-apiserver and etcd:

* ``aws-cloud-controller-manager`` from ``k8s.io/cloud-provider-aws``, built and cached by
  :mod:`polyccm_testing.peers.builds` (the switch tests run the same binary).
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

from polyccm_testing.devenv.binaries import BinaryError, _cached_or_built, _run_go, cache_dir
from polyccm_testing.peers.builds import AWS, aws_peer, peer_binary

FAKE_SOURCES = Path(__file__).resolve().parent / "peers" / "fakeccm"
FAKE_FILES = ("go.mod", "main.go")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Peers:
    """Paths of the built peers; ``None`` for one that is not available, with the reason."""

    aws: Path | None
    fake: Path | None
    missing: tuple[str, ...] = ()


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
    return aws_peer()


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
    if key == "aws":
        return peer_binary(AWS.name) is not None
    return (cache_dir() / "bin" / f"fake-cloud-controller-manager-{fake_version()}").exists()


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
