"""polyccm's version, from one place: the installed package's metadata (``version`` in
core/pyproject.toml). ``polyccm --version`` prints it, ``polyccm_build_info`` exports it, and
the image's ``org.opencontainers.image.version`` label is read from the same metadata."""

from __future__ import annotations

import platform
import sys
from importlib import metadata

from polyccm import metrics

DISTRIBUTION = "polyccm"


def version() -> str:
    """The version of the installed ``polyccm`` distribution (``0.1.0``)."""
    return metadata.version(DISTRIBUTION)


def platform_name() -> str:
    """``linux/x86_64``: the system and machine, as component-base's ``platform``."""
    return f"{sys.platform}/{platform.machine()}"


def export_build_info(provider: str) -> None:
    """Set ``polyccm_build_info{version, python_version, platform, provider} 1`` (as
    component-base's ``kubernetes_build_info``, metrics/prometheus/version/metrics.go)."""
    metrics.build_info.labels(
        version=version(),
        python_version=platform.python_version(),
        platform=platform_name(),
        provider=provider,
    ).set(1)
