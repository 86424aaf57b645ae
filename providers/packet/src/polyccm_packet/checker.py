"""``polyccm check-service`` for Equinix Metal: the checks ensure makes of a service.

:func:`~polyccm_packet.load_balancer.build_spec` (``spec.loadBalancerIP``, the annotations
``metal.equinix.com/eip-metro`` and ``metal.equinix.com/eip-facility``) with the controller's
messages, and the refusal ensure would meet when it has to reserve an address with no metro or
facility to put it in. Built from the cloud config and the ``METAL_METRO``/``METAL_FACILITY``
variables alone: no key, no project, no call. Without either, where the cluster reserves its
addresses is unknown, and that refusal is not predicted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service
from polyccm.ops.contract import Problem, ServiceChecker

from polyccm_packet.config import (
    DEFAULT_EIP_FACILITY,
    DEFAULT_EIP_METRO,
    eip_annotations,
    load_config_keys,
    placement,
)
from polyccm_packet.load_balancer import build_spec, no_placement

if TYPE_CHECKING:
    from polyccm.plugins import ProviderSettings


class MetalServiceChecker(ServiceChecker):
    """Offline validation of Services for the Equinix Metal provider."""

    def __init__(
        self, metro: str, facility: str, *, placement_known: bool,
        annotations: tuple[str, str] = (DEFAULT_EIP_METRO, DEFAULT_EIP_FACILITY),
    ) -> None:  # fmt: skip
        self.metro = metro
        self.facility = facility
        self.annotations = annotations
        self.placement_known = placement_known
        """Whether ``metro`` and ``facility`` are the cluster's (a cloud config or a variable
        said so), so that neither being set is a refusal to predict."""

    @classmethod
    def from_settings(
        cls, settings: ProviderSettings, environ: Mapping[str, str] | None = None
    ) -> MetalServiceChecker:
        """From ``--cloud-config`` and the ``METAL_METRO``/``METAL_FACILITY`` variables,
        without the SDK, a key or any call."""
        cloud_config = settings.cloud_config
        found = os.environ if environ is None else environ
        keys = load_config_keys(cloud_config)
        metro, facility = placement(found, keys)
        return cls(
            metro, facility, placement_known=bool(cloud_config or metro or facility),
            annotations=eip_annotations(found, keys),
        )  # fmt: skip

    def check_service(self, service: Service) -> list[Problem]:
        try:
            spec = build_spec(service, self.metro, self.facility, self.annotations)
        except InvalidServiceSpec as error:
            return [Problem.error(error)]
        problems = list(Problem.warnings(spec.warnings))
        if not spec.address and spec.placement is None and self.placement_known:
            problems.append(Problem.error(no_placement(self.annotations)))
        return problems
