"""Build or find the upstream cloud-controller-managers the switch tests run beside polyccm.

Each peer is cached as ``~/.cache/polyccm/bin/<binary>-<version>`` (the cache of
:mod:`polyccm_testing.devenv.binaries`, ``$POLYCCM_CACHE_DIR`` overrides its root), or named by
``POLYCCM_PEER_<NAME>`` (``POLYCCM_PEER_AWS=/path/to/aws-cloud-controller-manager``).

* AWS, ``k8s.io/cloud-provider-aws`` v1.37.1, is built from the Go module proxy through a
  wrapper module that only requires it: its go.mod replaces ``github.com/google/cel-go`` with a
  module the proxy refuses, and the replace lines of a dependency are ignored, so the wrapper
  builds with ``github.com/google/cel-go`` at the version it names (v0.31.0, the same tree: the
  same hash). ``make test`` builds it once (``python -m polyccm_testing.peers.builds``), as it
  does the control plane.
* DigitalOcean, GCE and Equinix Metal cannot be built from the proxy (it refuses a module each
  needs, see /work/shared/UPSTREAM_PEERS.md of issue 25): :func:`peer_binary` finds them where a
  developer put them, else ``None``; their switch tests replay committed recordings instead.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
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


@dataclass(frozen=True)
class Peer:
    """One upstream CCM: its cache name (``binary``-``version``) and where it comes from."""

    name: str
    binary: str
    version: str
    source: str
    """The module or repository (and tag or commit) it is built from."""
    buildable: bool
    """Whether the Go module proxy alone can build it (then ``make test`` does)."""

    @property
    def cache_path(self) -> Path:
        return cache_dir() / "bin" / f"{self.binary}-{self.version}"

    @property
    def variable(self) -> str:
        """The environment variable that names a binary to use instead of the cache."""
        return f"POLYCCM_PEER_{self.name.upper()}"

    def describe(self) -> dict[str, str]:
        """The peer as recordings name it."""
        return {"name": self.binary, "version": self.version, "source": self.source}


AWS_MODULE = "k8s.io/cloud-provider-aws"
AWS_VERSION = "v1.37.1"
AWS_MAIN = f"{AWS_MODULE}/cmd/aws-cloud-controller-manager"

AWS = Peer("aws", "aws-cloud-controller-manager", AWS_VERSION, f"{AWS_MODULE}@{AWS_VERSION}", True)
DIGITALOCEAN = Peer(
    "digitalocean",
    "digitalocean-cloud-controller-manager",
    "v0.1.68",
    "github.com/digitalocean/digitalocean-cloud-controller-manager@v0.1.68",
    False,
)
GCE = Peer(
    "gce",
    "gce-cloud-controller-manager",
    "v36.3.8",
    "k8s.io/cloud-provider-gcp@v36.3.8 (f67fc7e3), cmd/cloud-controller-manager",
    False,
)
PACKET = Peer(
    "packet",
    "equinix-metal-cloud-controller-manager",
    "38d15e2",
    "sigs.k8s.io/cloud-provider-equinix-metal@38d15e2 (after v3.8.1)",
    False,
)
PEERS: dict[str, Peer] = {peer.name: peer for peer in (AWS, DIGITALOCEAN, GCE, PACKET)}


def peer(name: str) -> Peer:
    """The peer of provider ``name`` (``aws``, ``digitalocean``, ``gce``, ``packet``)."""
    try:
        return PEERS[name]
    except KeyError:
        raise ValueError(f"no upstream peer for {name!r}; known: {', '.join(PEERS)}") from None


def peer_binary(name: str) -> Path | None:
    """The peer of provider ``name`` if this machine has it, never building it: the path in
    ``POLYCCM_PEER_<NAME>``, else the cached binary, else ``None``."""
    wanted = peer(name)
    explicit = os.environ.get(wanted.variable)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise BinaryError(f"{wanted.variable}={explicit} is not an executable file")
        return Path(explicit)
    return wanted.cache_path if os.access(wanted.cache_path, os.X_OK) else None


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


def aws_peer() -> Path:
    """aws-cloud-controller-manager, built from the Go module proxy on first use (about ten
    minutes on two cores; a second caller waits for the first build and takes its result).
    Raises :class:`BinaryError` when Go is missing or the build fails."""
    return peer_binary("aws") or _cached_or_built(AWS.binary, (AWS.version,), build_aws)


def aws_peer_or_reason() -> tuple[Path | None, str]:
    """The AWS peer without building it when Go is missing: ``(path, "")`` or ``(None, why)``."""
    if peer_binary("aws") is None and shutil.which("go") is None:
        return None, (
            f"no {AWS.binary} {AWS.version}: Go is not installed to build it from the module "
            f"proxy, none is cached at {AWS.cache_path} and {AWS.variable} is not set"
        )
    try:
        return aws_peer(), ""
    except BinaryError as error:
        return None, f"{AWS.binary} {AWS.version} did not build: {str(error).splitlines()[0]}"


def main(argv: Sequence[str] | None = None) -> int:
    """``make test``'s step: build (or find) the AWS peer once and print its path. Without Go
    and without a cached peer, say so and succeed: the AWS switch test then skips, saying why.
    A failed build fails."""
    del argv
    found, reason = aws_peer_or_reason()
    if found is None:
        print(f"[polyccm peers] {reason}; tests/test_switch_aws.py skips", file=sys.stderr)
        return 0 if shutil.which("go") is None else 1
    print(f"{AWS.binary}={found}")
    for other in (DIGITALOCEAN, GCE, PACKET):
        path = peer_binary(other.name)
        where = path or f"not here (set {other.variable}; its switch test replays recordings)"
        print(f"{other.binary}={where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
