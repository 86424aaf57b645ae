"""The Go peers the benchmark runs beside polyccm, cached beside the control-plane binaries
(``~/.cache/polyccm/bin``), as :mod:`polyccm_testing.devenv.binaries` does for kube-apiserver
and etcd:

* each provider's upstream CCM, found by :mod:`polyccm_testing.peers.builds` (the switch tests
  run the same binaries): ``aws-cloud-controller-manager`` is built from the Go module proxy on
  first use; GCE's, DigitalOcean's and Equinix Metal's cannot be (the proxy refuses a module
  each needs), so they run only where a developer built them into the cache (or named one with
  ``POLYCCM_PEER_<NAME>``), and are skipped, with one line saying so, elsewhere (CI);
* with AWS, ``fake-cloud-controller-manager``: our own small main (``bench/peers/fakeccm``)
  that runs ``k8s.io/cloud-provider``'s standard controllers over its fake cloud, the floor of
  what the Go framework costs. Its cache name carries a digest of the sources, so an edit
  rebuilds it.

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
from polyccm_testing.peers.builds import AWS, aws_peer, peer, peer_binary

FAKE_SOURCES = Path(__file__).resolve().parent / "peers" / "fakeccm"
FAKE_FILES = ("go.mod", "main.go")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Peers:
    """Paths of one provider's peers: its upstream CCM and (AWS) the framework floor; ``None``
    for one that is not available, with the reason in ``missing``."""

    upstream: Path | None
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


def unbuildable_reason(provider: str) -> str:
    """The line that says why ``provider``'s upstream CCM is skipped when it is not here."""
    wanted = peer(provider)
    return (
        f"{provider} peer skipped: {wanted.binary}-{wanted.version} is not in "
        f"{wanted.cache_path.parent} and {wanted.variable} is not set (the Go module proxy "
        "cannot build it: bench/README.md, The Go peers)"
    )


def upstream_path(provider: str) -> tuple[Path | None, str]:
    """``provider``'s upstream CCM and ``""``, or ``None`` and why not; never builds one the
    Go module proxy cannot."""
    try:
        found = peer_binary(provider)
    except BinaryError as error:
        return None, f"{provider} peer skipped: {error}"
    return (found, "") if found is not None else (None, unbuildable_reason(provider))


def find_peers(provider: str, say: Progress) -> Peers:
    """``provider``'s peers: for AWS the upstream CCM and the framework floor, built on first
    use (minutes); for the others their upstream CCM if this machine has it. A peer that
    cannot be had is skipped, said."""
    if provider != AWS.name:
        path, reason = upstream_path(provider)
        if path is not None:
            say(f"{provider}: the upstream Go CCM is {path}")
        return Peers(upstream=path, fake=None, missing=(reason,) if reason else ())
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
    return Peers(upstream=found["aws"], fake=found["fake"], missing=tuple(missing))


def _cached_peer(key: str) -> bool:
    if key == "aws":
        return peer_binary(AWS.name) is not None
    return (cache_dir() / "bin" / f"fake-cloud-controller-manager-{fake_version()}").exists()


def main() -> int:
    """Build (or find) every peer and print their paths; 1 when an AWS one (the ones the Go
    module proxy can build) could not be had."""
    from polyccm_testing.peers.builds import PEERS

    def say(message: str) -> None:
        print(f"[bench peers] {message}", flush=True)

    failed = False
    for provider in PEERS:
        peers = find_peers(provider, say)
        print(f"{peer(provider).binary}={peers.upstream or '-'}")
        if provider == AWS.name:
            print(f"fake-cloud-controller-manager={peers.fake or '-'}")
            failed = bool(peers.missing)
        for reason in peers.missing:
            print(reason)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
