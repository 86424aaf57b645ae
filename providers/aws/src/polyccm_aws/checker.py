"""``polyccm check-service`` for AWS: the checks ensure makes before its first cloud call.

:func:`~polyccm_aws.lb_spec.build_spec` (annotations and spec, upstream's rules) and the
warnings that depend on the cloud config (:func:`~polyccm_aws.lb_spec.config_warnings`), with
the same messages the controller's events carry. Built from the cloud config alone: no client,
no credentials, no call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from polyccm.errors import ImplementedElsewhere, InvalidServiceSpec
from polyccm.objects import Service
from polyccm.ops.contract import Problem, ServiceChecker

from polyccm_aws.config import CloudConfig, load_cloud_config
from polyccm_aws.lb_spec import HealthProbeDefaults, build_spec, config_warnings

if TYPE_CHECKING:
    from polyccm.plugins import ProviderSettings


class AwsServiceChecker(ServiceChecker):
    """Offline validation of Services for the AWS provider."""

    def __init__(self, config: CloudConfig) -> None:
        self._config = config
        self._probe = HealthProbeDefaults.from_config(config)

    @classmethod
    def from_settings(cls, settings: ProviderSettings) -> AwsServiceChecker:
        """The checker of ``polyccm check-service --provider aws``: the cloud config read (its
        health-check defaults and ELB settings count), no boto3."""
        return cls(load_cloud_config(settings.cloud_config))

    def check_service(self, service: Service) -> list[Problem]:
        try:
            spec = build_spec(service, self._probe)
        except ImplementedElsewhere:
            return []  # the AWS Load Balancer Controller's to check
        except InvalidServiceSpec as error:
            return [Problem.error(error)]
        return list(Problem.warnings(spec.warnings + config_warnings(spec, self._config)))
