"""Hook implementations that register the ``aws`` provider and its emulator with polyccm.

Imported for every polyccm command, so it imports no cloud SDK: boto3 is imported inside
:func:`polyccm_build_provider`, and only when ``--provider aws`` was chosen.
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

PROVIDER = "aws"


@hookimpl
def polyccm_register_providers(registry: ProviderRegistry) -> None:
    """Register the provider name ``aws``."""
    registry.register(PROVIDER, "Amazon Web Services (EC2, ELB, NLB, VPC routes)")


@hookimpl
def polyccm_build_provider(settings: ProviderSettings) -> CloudProvider | None:
    """Build the AWS provider from the cloud config (``None`` for other providers)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_aws.config import load_cloud_config
    from polyccm_aws.provider import AwsProvider

    return AwsProvider.discover(
        load_cloud_config(settings.cloud_config), cluster_name=settings.cluster_name
    )


@hookimpl
def polyccm_build_service_checker(settings: ProviderSettings) -> ServiceChecker | None:
    """The offline Service check of ``polyccm check-service`` (no boto3, no call)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_aws.checker import AwsServiceChecker
    from polyccm_aws.config import load_cloud_config

    return AwsServiceChecker(load_cloud_config(settings.cloud_config))


def emulator_launch(port: int, state_dir: Path) -> EmulatorLaunch:
    """moto's server with fault injection on ``127.0.0.1:port``, and the variables to reach it:
    the AWS APIs and the instance metadata service (which describes the instance tagged
    ``polyccm.dev/ccm-host=true``) are both served there."""
    del state_dir  # moto keeps its state in memory
    return EmulatorLaunch(
        argv=[sys.executable, "-m", "polyccm_aws.emulator", "--port", str(port)],
        env={
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{port}/",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        },
        health_path="/_polyccm/health",
    )


@hookimpl
def polyccm_register_emulators(registry: EmulatorRegistry) -> None:
    """Register the ``aws`` emulator for ``polyccm-dev up --cloud aws``."""
    registry.register(PROVIDER, emulator_launch)
