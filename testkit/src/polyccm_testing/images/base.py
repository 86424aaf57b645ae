"""The local Debian base for images built here: a debootstrap root filesystem with Python,
kept as a tarball in the cache and imported into buildah as ``localhost/polyccm-base:<key>``.

It stands in for ``python:3.11-slim-bookworm``, which cannot be pulled where only Debian's
package archive is reachable: the same Debian release, its ``python3`` (3.11) with ``venv``.
The cache key covers the suite, the package list and this recipe, so a change to either makes a
new base; delete ``~/.cache/polyccm/images`` to make a fresh one (security updates).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from polyccm_testing.devenv.binaries import cache_dir
from polyccm_testing.images.buildah import buildah, image_id
from polyccm_testing.images.tools import ImageError, log

SUITE = "bookworm"
#: python3-venv brings ensurepip, with which the build stage makes a throwaway environment for
#: uv; the runtime stage has no pip module on this base.
PACKAGES: tuple[str, ...] = ("python3", "python3-venv")
MIRROR_VARIABLE = "POLYCCM_DEBIAN_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: Bump when what the base holds changes for the same suite and packages.
RECIPE = 1
#: Emptied in the base: manuals and translations (documentation too, but the licences).
_EMPTIED = ("usr/share/man", "usr/share/info", "usr/share/locale")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def images_cache() -> Path:
    return cache_dir() / "images"


def base_key(
    suite: str = SUITE, packages: Sequence[str] = PACKAGES, arch: str | None = None
) -> str:
    """The cache key; ``arch`` (None: this machine's) is in it only when given, so that the
    host's base keeps the key it had before architectures could be chosen."""
    recipe = json.dumps([RECIPE, suite, sorted(packages)])
    suffix = f"-{arch}" if arch is not None else ""
    return f"{suite}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}{suffix}"


def debootstrap_command(
    suite: str, packages: Sequence[str], root: Path, mirror: str, arch: str | None = None
) -> list[str]:
    """debootstrap's command line; ``--arch`` when an architecture is asked for (a foreign one
    runs its packages' scripts through qemu-user-static, see :mod:`.arch`)."""
    return [
        "debootstrap",
        "--variant=minbase",
        *([f"--arch={arch}"] if arch is not None else []),
        f"--include={','.join(packages)}",
        suite,
        str(root),
        mirror,
    ]


def base_image(
    suite: str = SUITE, packages: Sequence[str] = PACKAGES, arch: str | None = None
) -> str:
    """The name of the local base image, made (or imported from the cached tarball) if needed;
    for ``arch`` (Debian's name; None: this machine's)."""
    key = base_key(suite, packages, arch)
    name = f"localhost/polyccm-base:{key}"
    if image_id(name) is not None:
        return name
    tarball = rootfs_tarball(suite, packages, arch)
    log(f"importing {tarball.name} into buildah as {name}")
    container = buildah("from", "--quiet", "scratch").strip()
    try:
        buildah("add", "--quiet", container, str(tarball), "/")
        buildah(
            "config",
            *(["--arch", arch] if arch is not None else []),
            "--env",
            f"PATH={_PATH}",
            "--cmd",
            '["python3"]',
            "--label",
            f"org.opencontainers.image.description=Debian {suite} ({', '.join(packages)}) "
            "made with debootstrap, for polyccm images",
            container,
        )
        buildah("commit", "--quiet", "--rm", container, name)
    except BaseException:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
        raise
    return name


def rootfs_tarball(
    suite: str = SUITE, packages: Sequence[str] = PACKAGES, arch: str | None = None
) -> Path:
    """The cached root filesystem tarball, made with debootstrap on a miss."""
    cache = images_cache()
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"debian-{base_key(suite, packages, arch)}.tar"
    # One lock per base: an emulated arm64 debootstrap (tens of minutes under qemu) does not
    # hold up a build that needs the host's base, already cached.
    with _locked(tarball.with_suffix(".lock")):
        if tarball.exists():
            return tarball
        mirror = os.environ.get(MIRROR_VARIABLE) or DEFAULT_MIRROR
        work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=cache))
        root = work / "root"
        started = time.monotonic()
        log(f"debootstrap {suite} ({', '.join(packages)}) from {mirror}; log: {work}.log")
        try:
            with Path(f"{work}.log").open("w") as output:
                done = subprocess.run(
                    debootstrap_command(suite, packages, root, mirror, arch),
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    check=False,
                )
            if done.returncode != 0:
                tail = Path(f"{work}.log").read_text(errors="replace").strip().splitlines()[-1:]
                raise ImageError(f"debootstrap {suite} failed: {' '.join(tail)}")
            _trim(root)
            partial = tarball.with_suffix(".partial")
            subprocess.run(
                ["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], check=True
            )
            partial.rename(tarball)
        finally:
            _remove(work)
        Path(f"{work}.log").unlink(missing_ok=True)
        log(f"base root filesystem made in {time.monotonic() - started:.0f} s: {tarball}")
        return tarball


def _trim(root: Path) -> None:
    """Leave out what a container never reads: downloaded packages, package indexes (apt-get
    update brings them back), manuals, translations, and documentation but the licences."""
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*"):
        for path in root.glob(pattern):
            path.unlink()
    for relative in _EMPTIED:
        for child in (root / relative).glob("*"):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    for path in (root / "usr/share/doc").rglob("*"):
        if (path.is_file() or path.is_symlink()) and path.name != "copyright":
            path.unlink()


def _mounts_below(work: Path) -> list[str]:
    points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    return sorted((p for p in points if p.startswith(f"{work}/")), reverse=True)


def _remove(work: Path) -> None:
    """Remove debootstrap's work directory, unmounting first whatever a failed run left mounted
    below it (/proc, /sys), so that nothing of the host is deleted through a mount."""
    for point in _mounts_below(work):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    if _mounts_below(work):
        raise ImageError(f"{work} still has mounts below it; unmount and remove it by hand")
    shutil.rmtree(work, ignore_errors=True)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
