"""buildah as the image build and its tests use it: images, their configuration and size, and
working containers run with chroot isolation (the host's network; no OCI runtime is needed).

Storage is buildah's own default (``/var/lib/containers/storage`` for root); buildah reads
``STORAGE_DRIVER`` (e.g. ``vfs`` where overlay mounts are refused) from the environment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from polyccm_testing.images.tools import ImageError

#: Processes of a container run as children of the host's, on the host's network.
ISOLATION = "chroot"
#: What buildah runs a container's command under; the command is its child.
_EXEC_HELPER = b"buildah-chroot-exec"


def buildah(*arguments: str, timeout: float = 600) -> str:
    """Run ``buildah ARGUMENTS`` and return its output; its last error line if it fails."""
    done = subprocess.run(
        ["buildah", *arguments], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise ImageError(f"buildah {arguments[0]} failed: {lines[-1]}")
    return done.stdout


def image_id(name: str) -> str | None:
    """The id of the local image ``name``, or None when there is none."""
    done = subprocess.run(
        ["buildah", "images", "--quiet", "--no-trunc", name],
        capture_output=True,
        text=True,
        check=False,
    )
    ids = done.stdout.split()
    return ids[0] if done.returncode == 0 and ids else None


@dataclass(frozen=True)
class ImageConfig:
    """What a runtime takes from an image: user, entrypoint, environment, and its layers."""

    id: str
    user: str
    entrypoint: tuple[str, ...]
    env: Mapping[str, str]
    layers: tuple[str, ...]
    """Digests of the layers' contents (``diff_ids``), the same however they are shipped."""
    labels: Mapping[str, str] = field(default_factory=dict)


def inspect_image(name: str) -> ImageConfig:
    data = json.loads(buildah("inspect", "--type", "image", name))
    config = data["OCIv1"].get("config") or {}
    return ImageConfig(
        id=str(data["FromImageID"]),
        user=str(config.get("User") or ""),
        entrypoint=tuple(config.get("Entrypoint") or ()),
        env=dict(pair.partition("=")[::2] for pair in config.get("Env") or ()),
        layers=tuple(data["OCIv1"]["rootfs"]["diff_ids"]),
        labels=dict(config.get("Labels") or {}),
    )


def unpacked_size(name: str) -> int:
    """Bytes of an image's layers unpacked (what it takes on a node's disk), for an image
    built or committed here: buildah keeps those layers uncompressed, with their sizes."""
    manifest = json.loads(json.loads(buildah("inspect", "--type", "image", name))["Manifest"])
    layers = manifest["layers"]
    if any(not layer["mediaType"].endswith(".tar") for layer in layers):
        raise ImageError(f"{name} was not built here: its layers are stored compressed")
    return sum(int(layer["size"]) for layer in layers)


def remove_image(reference: str) -> None:
    """Remove a local image, if nothing uses it any more; a failure is not an error."""
    subprocess.run(["buildah", "rmi", reference], capture_output=True, check=False)


class Container:
    """A working container of an image (``buildah from``), removed on leaving the ``with``.

    Commands run in it as the image's user, with the image's environment, on the host's network;
    files of the host are given to them read-only with ``volumes`` (host path -> path inside)."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.name = ""

    def __enter__(self) -> Container:
        self.name = buildah("from", "--quiet", self.image).strip()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        subprocess.run(["buildah", "rm", self.name], capture_output=True, check=False)

    def command(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        volumes: Mapping[Path, str] | None = None,
    ) -> list[str]:
        """The ``buildah run`` command line that runs ``argv`` in this container."""
        line = ["buildah", "run", "--isolation", ISOLATION]
        for key, value in (env or {}).items():
            line += ["--env", f"{key}={value}"]
        for source, target in (volumes or {}).items():
            line += ["--volume", f"{source}:{target}:ro"]
        return [*line, self.name, "--", *argv]

    def run(self, argv: Sequence[str], *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` to completion; its output and exit status."""
        return subprocess.run(
            self.command(argv), capture_output=True, text=True, timeout=timeout, check=False
        )


def stop(process: subprocess.Popen[bytes], *, timeout: float = 30) -> int:
    """SIGTERM the command that ``process`` (a ``buildah run``) runs, as a kubelet stops a
    container, and return buildah's exit status (the command's). buildah forwards no signal
    with chroot isolation, so the command itself, its helper's child, is signalled."""
    for pid in _commands_under(process.pid):
        os.kill(pid, signal.SIGTERM)
    return process.wait(timeout=timeout)


def command_pids(process: subprocess.Popen[bytes]) -> list[int]:
    """The processes ``process`` (a ``buildah run``) runs: its command, once started."""
    return _commands_under(process.pid)


def _commands_under(root: int) -> list[int]:
    """Processes below ``root`` whose parent is buildah's exec helper."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    below = {root}
    changed = True
    while changed:
        found = {pid for pid, parent in parents.items() if parent in below} - below
        below |= found
        changed = bool(found)
    commands = []
    for pid in below - {root}:
        try:
            argv0 = (Path("/proc") / str(parents[pid]) / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if argv0 == _EXEC_HELPER:
            commands.append(pid)
    return commands
