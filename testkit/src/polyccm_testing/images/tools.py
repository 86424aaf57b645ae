"""buildah and debootstrap on this machine: found, or installed with apt-get when we are root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

#: The commands an image build needs, each with the Debian package that brings it.
TOOLS: dict[str, str] = {"buildah": "buildah", "debootstrap": "debootstrap"}


class ImageError(RuntimeError):
    """An image could not be built or run: one line saying why and what to do."""


class ToolsMissing(ImageError):
    """buildah or debootstrap is not installed and could not be installed here."""


def log(message: str) -> None:
    print(f"[polyccm images] {message}", file=sys.stderr, flush=True)


def missing_tools() -> list[str]:
    return [command for command in TOOLS if shutil.which(command) is None]


def ensure_tools(*, install: bool = True) -> None:
    """Return when every tool is on PATH; install the missing ones first if ``install``.

    Raises :class:`ToolsMissing` saying why they cannot be had (not root, no apt-get, apt-get
    failed)."""
    missing = missing_tools()
    if not missing:
        return
    packages = sorted({TOOLS[command] for command in missing})
    wanted = " ".join(packages)
    if not install:
        raise ToolsMissing(f"{wanted} not installed: run `make image-tools` as root")
    if os.geteuid() != 0:
        raise ToolsMissing(
            f"{wanted} not installed, and installing them needs root: sudo apt-get install {wanted}"
        )
    if shutil.which("apt-get") is None:
        raise ToolsMissing(f"{wanted} not installed and no apt-get here: install {wanted}")
    log(f"installing {wanted} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise ToolsMissing(f"{' '.join(command)} failed: {' '.join(tail) or done.returncode}")
    still = missing_tools()
    if still:
        raise ToolsMissing(f"apt-get installed {wanted}, yet {' '.join(still)} is not on PATH")
