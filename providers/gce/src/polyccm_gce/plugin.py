"""Hook implementations that register the ``gce`` provider and its emulator with polyccm.

Imported for every polyccm command, so it imports no cloud SDK and no web framework:
google-auth is imported inside :func:`polyccm_build_provider`, and only for ``--provider gce``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from polyccm.hookspecs import hookimpl
from polyccm.plugins import EmulatorLaunch, EmulatorRegistry, ProviderRegistry, ProviderSettings

if TYPE_CHECKING:
    from polyccm.cloud import CloudProvider

PROVIDER = "gce"


@hookimpl
def polyccm_register_providers(registry: ProviderRegistry) -> None:
    """Register the provider name ``gce``."""
    registry.register(PROVIDER, "Google Compute Engine (instances, network load balancers, routes)")


@hookimpl
def polyccm_build_provider(settings: ProviderSettings) -> CloudProvider | None:
    """Build the GCE provider from gce.conf (``None`` for other providers)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_gce.config import load_cloud_config
    from polyccm_gce.provider import GceProvider

    return GceProvider.discover(
        load_cloud_config(settings.cloud_config), cluster_name=settings.cluster_name
    )


def emulator_launch(port: int, state_dir: Path) -> EmulatorLaunch:
    """The compute API and metadata emulator on ``127.0.0.1:port``, and the variables that
    point google-auth and google-cloud-compute at it (see
    :func:`polyccm_gce.emulator.launch_environment`).

    polyccm-dev writes ``DIR/gce.conf`` (project-id, network-name, api-endpoint) beside the
    ``env`` file, and removes it on ``down``.
    """
    from polyccm_gce.emulator.devconfig import CONFIG_FILE, dev_config, launch_environment

    env = launch_environment(port, state_dir)
    Path(env["CLOUDSDK_CONFIG"]).mkdir(parents=True, exist_ok=True)
    return EmulatorLaunch(
        argv=[sys.executable, "-m", "polyccm_gce.emulator", "--port", str(port)],
        env=env,
        health_path="/_polyccm/health",
        files={CONFIG_FILE: dev_config(port)},
    )


@hookimpl
def polyccm_register_emulators(registry: EmulatorRegistry) -> None:
    """Register the ``gce`` emulator for ``polyccm-dev up --cloud gce``."""
    registry.register(PROVIDER, emulator_launch)
