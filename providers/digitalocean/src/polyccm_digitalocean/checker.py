"""``polyccm check-service`` for DigitalOcean: a Service checked offline by
:func:`~polyccm_digitalocean.annotations.service_spec`, the function ensure calls before any
cloud call, so the messages are the Warning events' own.

The one check it cannot make offline is whether a ``certificate-name`` names a certificate of
the account (ensure asks the certificates API); ``polyccm plan`` makes it.
"""

from __future__ import annotations

from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service
from polyccm.ops.contract import Problem, ServiceChecker

from polyccm_digitalocean.annotations import service_spec


class DigitalOceanServiceChecker(ServiceChecker):
    """No cloud config, no token: DigitalOcean's checks depend on the Service alone."""

    def check_service(self, service: Service) -> list[Problem]:
        try:
            spec = service_spec(service)
        except InvalidServiceSpec as error:
            return [Problem.error(error)]  # ensure stops there: no warning comes with it
        return list(Problem.warnings(spec.warnings))
