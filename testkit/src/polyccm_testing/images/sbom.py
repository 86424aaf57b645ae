"""The SBOM written beside each image archive: a CycloneDX 1.5 JSON document of the Python
packages the image installs (polyccm, the provider's distribution and their locked runtime
dependencies, no development group), made by uv itself from ``uv.lock`` with the same selection
as the Dockerfile's ``uv sync --frozen --no-dev --no-editable --package polyccm-<provider>``.

It lists the Python packages only; the Debian base's packages are not in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from polyccm_testing.images.tools import ImageError
from polyccm_testing.workspace import ROOT


def sbom_path(archive: Path) -> Path:
    """``dist/polyccm-aws.oci.tar`` -> ``dist/polyccm-aws.cdx.json``."""
    return archive.with_name(archive.name.removesuffix(".oci.tar") + ".cdx.json")


def _uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        raise ImageError("uv not found: the SBOM is made with `uv export`; install uv")
    return found


def write_sbom(provider: str, target: Path) -> Path:
    """Write the CycloneDX SBOM of ``provider``'s image to ``target`` and return it."""
    command = [
        _uv(),
        "export",
        "--format",
        "cyclonedx1.5",
        "--preview-features",
        "sbom-export",
        "--frozen",
        "--no-dev",
        "--no-editable",
        "--package",
        f"polyccm-{provider}",
        "--project",
        str(ROOT),
        "--output-file",
        str(target),
    ]
    target.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise ImageError(f"uv export (SBOM of polyccm-{provider}) failed: {tail[0]}")
    return target
