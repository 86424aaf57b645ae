"""``polyccm check-service`` for GCE: the validation ``ensure_load_balancer`` runs first
(:func:`polyccm_gce.service_spec.validate_service`), offline, with its messages. The network
load balancer returns no warnings, so a problem is the one error ensure would raise; a Service
another controller builds (GKE's regional backend-service load balancer) is not checked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from polyccm.errors import ImplementedElsewhere, InvalidServiceSpec
from polyccm.objects import Service
from polyccm.ops.contract import Problem, ServiceChecker

from polyccm_gce.config import load_cloud_config
from polyccm_gce.service_options import network_tier, source_ranges
from polyccm_gce.service_spec import validate_service

if TYPE_CHECKING:
    from polyccm.plugins import ProviderSettings


class GceServiceChecker(ServiceChecker):
    """Checks Services with the provider's own validation; no cloud, no cluster."""

    @classmethod
    def from_settings(cls, settings: ProviderSettings) -> GceServiceChecker:
        """gce.conf, when given, is read (a broken one is reported as the manager reports it)
        but changes nothing: the network load balancer's validation depends on the Service
        alone."""
        load_cloud_config(settings.cloud_config)
        return cls()

    def check_service(self, service: Service) -> list[Problem]:
        try:
            validate_service(service)
            source_ranges(service)
            network_tier(service)
        except ImplementedElsewhere:
            return []  # the other controller's to check
        except InvalidServiceSpec as error:
            return [Problem.error(error)]
        return []
