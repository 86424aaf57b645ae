"""Hook implementations that register the ``aws`` provider with polyccm (its emulator
registers itself from ``polyccm-aws-emulator``).

Imported for every polyccm command, so it imports no cloud SDK: boto3 is imported inside
:func:`polyccm_build_provider`, and only when ``--provider aws`` was chosen.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from polyccm.hookspecs import hookimpl
from polyccm.plugins import ControllerRegistry, ProviderRegistry, ProviderSettings

from polyccm_aws.tagging_options import CONTROLLER as TAGGING
from polyccm_aws.tagging_options import add_tagging_flags

if TYPE_CHECKING:
    from polyccm.cloud import CloudProvider
    from polyccm.controllers import Controller, ControllerContext
    from polyccm.ops.contract import ServiceChecker

PROVIDER = "aws"


@hookimpl
def polyccm_register_providers(registry: ProviderRegistry) -> None:
    """Register the provider name ``aws``."""
    registry.register(PROVIDER, "Amazon Web Services (EC2, ELB, NLB, VPC routes)")


@hookimpl
def polyccm_register_controllers(provider: str, registry: ControllerRegistry) -> None:
    """Register ``tagging``, upstream's tagging controller: off unless selected
    (``--controllers=*,tagging``), as upstream has it."""
    if provider != PROVIDER:
        return

    def build(context: ControllerContext) -> Controller | None:
        from polyccm_aws.tagging_controller import TaggingController  # imports boto3

        return TaggingController.for_term(context)

    # Its writes (node labels) are within the core's rules for nodes.
    registry.register(TAGGING, build, enabled_by_default=False)


@hookimpl
def polyccm_add_options(provider: str, group: argparse._ArgumentGroup) -> None:
    """Upstream's tagging-controller flags (``--tags``, ``--resources``,
    ``--tagging-controller-*``), under upstream's names."""
    if provider == PROVIDER:
        add_tagging_flags(group)


@hookimpl
def polyccm_build_provider(settings: ProviderSettings) -> CloudProvider | None:
    """Build the AWS provider from the cloud config (``None`` for other providers); with the
    ``tagging`` controller selected, its flags checked first (a mistake stops start-up)."""
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
