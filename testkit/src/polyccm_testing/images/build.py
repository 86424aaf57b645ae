"""Build one provider's image from ``deploy/images/Dockerfile`` with buildah, on the local
Debian base, and write it as an OCI archive (``dist/polyccm-<provider>.oci.tar``, or
``dist/polyccm-<provider>-<arch>.oci.tar`` when an architecture is asked for) with its SBOM
beside it (``.cdx.json``, :mod:`.sbom`).

The host's CA bundle is given to the build as the secret ``ca-certificates``, so that the
build reaches the package index through whatever the host trusts (a TLS-intercepting proxy
included); it is never stored in a layer.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from polyccm_testing.images.arch import check_emulation
from polyccm_testing.images.base import base_image
from polyccm_testing.images.buildah import ISOLATION, buildah, image_id, remove_image, unpacked_size
from polyccm_testing.images.sbom import sbom_path, write_sbom
from polyccm_testing.images.tools import ImageError, ensure_tools, log
from polyccm_testing.workspace import ROOT, workspace_providers

DOCKERFILE = ROOT / "deploy" / "images" / "Dockerfile"
IGNOREFILE = ROOT / "deploy" / "images" / "Dockerfile.dockerignore"
DIST = ROOT / "dist"
_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


class UnknownProvider(ImageError):
    """The provider named is not one of the workspace's."""


@dataclass(frozen=True)
class BuiltImage:
    provider: str
    name: str
    """The local image (``localhost/polyccm-<provider>:<tag>``)."""
    id: str
    archive: Path
    size: int
    """Bytes of the image's layers unpacked."""
    base_size: int
    """Bytes of those that are the base image's."""
    archive_size: int
    """Bytes of the OCI archive (compressed layers: what a registry stores and sends)."""
    sbom: Path | None = None
    """The CycloneDX SBOM beside the archive."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time of each step: base, build, archive."""

    def summary(self) -> str:
        steps = ", ".join(f"{step} {spent:.0f} s" for step, spent in self.seconds.items())
        return (
            f"{self.name}: {megabytes(self.size)} unpacked (the base {megabytes(self.base_size)}),"
            f" archive {self.archive} {megabytes(self.archive_size)}"
            + (f", SBOM {self.sbom}" if self.sbom else "")
            + f"; {steps}"
        )


def megabytes(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


def check_provider(provider: str) -> None:
    providers = workspace_providers()
    if provider not in providers:
        raise UnknownProvider(
            f"unknown provider {provider!r}: PROVIDER must be one of {', '.join(providers)}"
        )


def host_ca_bundle() -> Path | None:
    """The CA bundle this machine trusts (``SSL_CERT_FILE``, else the system's), if any."""
    for candidate in (os.environ.get("SSL_CERT_FILE"), *_CA_BUNDLES):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def suffix(arch: str | None) -> str:
    """What names of images and archives built for ``arch`` end with ("" for this machine's)."""
    return f"-{arch}" if arch is not None else ""


def archive_path(output: Path, provider: str, arch: str | None = None) -> Path:
    return output / f"polyccm-{provider}{suffix(arch)}.oci.tar"


def bud_command(provider: str, base: str, name: str, arch: str | None = None) -> list[str]:
    """``buildah bud``'s command line, without the CA secret and the context directory."""
    return [
        "buildah",
        "bud",
        "--isolation",
        ISOLATION,
        *(["--platform", f"linux/{arch}"] if arch is not None else []),
        "--file",
        str(DOCKERFILE),
        "--ignorefile",
        str(IGNOREFILE),
        # The provider's stage by name: buildah 1.28 leaves a working container behind for a
        # final stage that is a bare FROM, the Dockerfile's default target.
        "--target",
        f"provider-{provider}",
        "--build-arg",
        f"PROVIDER={provider}",
        "--build-arg",
        f"PYTHON_IMAGE={base}",
        "--tag",
        name,
        # polyccm's version from its one place (core/pyproject.toml, read back from the installed
        # package's metadata as `polyccm --version` and polyccm_build_info read it).
        "--label",
        f"org.opencontainers.image.version={metadata.version('polyccm')}",
    ]


def build_image(
    provider: str,
    *,
    output: Path = DIST,
    tag: str = "dev",
    build_log: Path | None = None,
    arch: str | None = None,
) -> BuiltImage:
    """Build ``provider``'s image and write ``output/polyccm-<provider>.oci.tar`` and its SBOM.

    ``arch`` (``amd64`` or ``arm64``; None: this machine's) names the image, the archive and the
    base ``<...>-<arch>``; a foreign one is refused, saying why, unless qemu-user-static is
    registered (:func:`.arch.check_emulation`). buildah's output goes to ``build_log`` when
    given, else to this process's stderr. Missing tools are installed first when we are root
    (:func:`ensure_tools`)."""
    check_provider(provider)
    if arch is not None:
        check_emulation(arch)
    ensure_tools()
    seconds: dict[str, float] = {}
    started = time.monotonic()
    base = base_image(arch=arch)
    seconds["base"] = time.monotonic() - started

    name = f"localhost/polyccm-{provider}:{tag}{suffix(arch)}"
    previous = image_id(name)
    command = bud_command(provider, base, name, arch)
    bundle = host_ca_bundle()
    if bundle is not None:
        command += ["--secret", f"id=ca-certificates,src={bundle}"]
    command.append(str(ROOT))
    log(f"building {name} on {base}" + (f"; log: {build_log}" if build_log else ""))
    started = time.monotonic()
    _run_build(command, build_log)
    seconds["build"] = time.monotonic() - started
    built = image_id(name)
    if built is None:
        raise ImageError(f"buildah bud succeeded but left no image {name}")
    if previous is not None and previous != built:
        remove_image(previous)  # the tag moved on: the old image is only disk now

    output.mkdir(parents=True, exist_ok=True)
    archive = archive_path(output, provider, arch)
    archive.unlink(missing_ok=True)
    started = time.monotonic()
    buildah("push", "--quiet", name, f"oci-archive:{archive}:polyccm-{provider}:{tag}")
    seconds["archive"] = time.monotonic() - started
    sbom = write_sbom(provider, sbom_path(archive))
    return BuiltImage(
        provider=provider,
        name=name,
        id=built,
        archive=archive,
        size=unpacked_size(name),
        base_size=unpacked_size(base),
        archive_size=archive.stat().st_size,
        sbom=sbom,
        seconds=seconds,
    )


def _run_build(command: list[str], build_log: Path | None) -> None:
    if build_log is None:
        done = subprocess.run(command, stdout=2, check=False)  # progress on stderr
        if done.returncode != 0:
            raise ImageError(f"buildah bud failed (exit status {done.returncode}); see above")
        return
    build_log.parent.mkdir(parents=True, exist_ok=True)
    with build_log.open("w") as handle:
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = build_log.read_text(errors="replace").strip().splitlines()[-1:]
        raise ImageError(f"buildah bud failed: {' '.join(tail)} (log: {build_log})")
