"""``polyccm check-service`` for DigitalOcean: a Service checked offline by
:func:`~polyccm_digitalocean.annotations.service_spec`, the function ensure calls before any
cloud call, so the messages are the Warning events' own.

The one check it cannot make offline is whether a ``certificate-name`` names a certificate of
the account (ensure asks the certificates API); ``polyccm plan`` makes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service
from polyccm.ops.contract import Problem, ServiceChecker

from polyccm_digitalocean.annotations import DEFAULT_TYPE, service_spec
from polyccm_digitalocean.config import default_lb_type

if TYPE_CHECKING:
    from polyccm.plugins import ProviderSettings


class DigitalOceanServiceChecker(ServiceChecker):
    """No token, no API: DigitalOcean's checks depend on the Service and the default type
    (``DEFAULT_LB_TYPE``) alone. A load balancer that exists keeps its own type, which only
    ``polyccm plan`` can see."""

    def __init__(self, default_type: str = DEFAULT_TYPE) -> None:
        self._default_type = default_type

    @classmethod
    def from_settings(
        cls, settings: ProviderSettings, environ: Mapping[str, str] | None = None
    ) -> DigitalOceanServiceChecker:
        """The default type from ``DEFAULT_LB_TYPE``, as the controller reads it; no token."""
        del settings
        return cls(default_lb_type(os.environ if environ is None else environ))

    def check_service(self, service: Service) -> list[Problem]:
        try:
            spec = service_spec(service, default_type=self._default_type)
        except InvalidServiceSpec as error:
            return [Problem.error(error)]  # ensure stops there: no warning comes with it
        return list(Problem.warnings(spec.warnings))
