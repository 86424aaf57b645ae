"""The architecture an image is built for (``amd64`` or ``arm64``, Debian's and OCI's names) and
whether this machine can run that architecture's programs, which both debootstrap and
``buildah bud`` must do for a foreign one: through qemu-user-static registered with binfmt_misc.
"""

from __future__ import annotations

import platform
from pathlib import Path

from polyccm_testing.images.tools import ImageError

#: Debian/OCI architecture -> the binfmt_misc entry Debian's qemu-user-static registers for it.
ARCHES: dict[str, str] = {"amd64": "qemu-x86_64", "arm64": "qemu-aarch64"}
_MACHINES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
BINFMT = Path("/proc/sys/fs/binfmt_misc")


class UnknownArch(ImageError):
    """The architecture named is not one images are built for."""


class ForeignArchUnsupported(ImageError):
    """A foreign architecture was asked for and this machine cannot run its programs."""


def host_arch() -> str:
    machine = platform.machine().lower()
    return _MACHINES.get(machine, machine)


def check_arch(arch: str) -> None:
    if arch not in ARCHES:
        raise UnknownArch(f"unknown architecture {arch!r}: ARCH must be one of {', '.join(ARCHES)}")


def is_foreign(arch: str) -> bool:
    return arch != host_arch()


def check_emulation(arch: str, *, binfmt: Path | None = None) -> None:
    """Return when this machine runs ``arch``'s programs, natively or through qemu; else raise
    :class:`ForeignArchUnsupported` saying what to install."""
    check_arch(arch)
    if not is_foreign(arch):
        return
    directory = binfmt or BINFMT
    entry = directory / ARCHES[arch]
    try:
        enabled = entry.read_text().splitlines()[:1] == ["enabled"]
    except OSError:
        enabled = False
    if enabled:
        return
    needs = f"building {arch} on {host_arch()} needs qemu-user-static registered with binfmt_misc"
    install = "apt-get install qemu-user-static binfmt-support"
    if not (directory / "register").exists():
        # Not mounted (a VM or container whose init did not): the packages cannot register.
        raise ForeignArchUnsupported(
            f"{needs} ({directory} is not mounted): as root, mount -t binfmt_misc binfmt_misc"
            f" {directory}, then {install}"
        )
    raise ForeignArchUnsupported(f"{needs} ({entry} is missing or disabled): {install}")
