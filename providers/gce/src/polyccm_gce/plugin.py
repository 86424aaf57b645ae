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
    from polyccm.ops.contract import ServiceChecker

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
    from polyccm_gce.provider import GceProvider, cluster_id_from_kubeconfig

    options = settings.options
    return GceProvider.discover(
        load_cloud_config(settings.cloud_config),
        cluster_name=settings.cluster_name,
        # Read only outside a term (polyccm plan, orphans); a term reads it in initialize.
        cluster_id_source=lambda: cluster_id_from_kubeconfig(
            getattr(options, "kubeconfig", None), getattr(options, "master", None)
        ),
    )


@hookimpl
def polyccm_build_service_checker(settings: ProviderSettings) -> ServiceChecker | None:
    """The offline Service check of ``polyccm check-service --provider gce``. gce.conf, when
    given, is read (a broken one is reported as the manager reports it) but changes nothing:
    the network load balancer's validation depends on the Service alone."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_gce.checker import GceServiceChecker
    from polyccm_gce.config import load_cloud_config

    load_cloud_config(settings.cloud_config)
    return GceServiceChecker()


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
