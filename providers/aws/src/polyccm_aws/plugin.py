"""Hook implementations that register the ``aws`` provider with polyccm (its emulator
registers itself from ``polyccm-aws-emulator``).

Imported for every polyccm command, so it imports no cloud SDK: boto3 is imported inside
:func:`polyccm_build_provider`, and only when ``--provider aws`` was chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from polyccm.hookspecs import hookimpl
from polyccm.plugins import ProviderRegistry, ProviderSettings

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
    from polyccm_aws.provider import AwsProvider

    return AwsProvider.from_settings(settings)


@hookimpl
def polyccm_build_service_checker(settings: ProviderSettings) -> ServiceChecker | None:
    """The offline Service check of ``polyccm check-service`` (no boto3, no call)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_aws.checker import AwsServiceChecker

    return AwsServiceChecker.from_settings(settings)
