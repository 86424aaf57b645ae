"""The ``firewall`` controller: upstream's public-access firewall controller
(cloud-controller-manager/do/firewall_controller.go@v0.1.68), run when
``PUBLIC_ACCESS_FIREWALL_NAME`` is set.

Any Service added, changed or deleted queues the one key there is; the worker builds the
firewall the Services ask for (:func:`~polyccm_digitalocean.firewall.firewall_request`) and makes
DigitalOcean's match it. Every :data:`~polyccm_digitalocean.firewall.RECONCILE_PERIOD` the
firewall is read again and the key queued, so a rule removed by hand comes back.
"""

from __future__ import annotations

import logging
import threading

from polyccm.controllers import (
    Controller,
    ControllerContext,
    RateLimitingQueue,
    Service,
    process_one,
    run_periodically,
    run_workers,
)

from polyccm_digitalocean.firewall import (
    RECONCILE_PERIOD,
    PublicAccessFirewall,
    firewall_request,
)
from polyccm_digitalocean.provider import DigitalOceanProvider

log = logging.getLogger(__name__)

CONTROLLER = "firewall"
_KEY = "public-access-firewall"


class FirewallController(Controller):
    """Keeps the public-access firewall open to the Services' ports."""

    name = CONTROLLER

    def __init__(self, context: ControllerContext, provider: DigitalOceanProvider) -> None:
        self.context = context
        self.config = provider.config
        self.firewall = PublicAccessFirewall(provider.api, provider.config.firewall_name)
        self.queue = RateLimitingQueue(self.name)

    @classmethod
    def for_term(cls, context: ControllerContext) -> FirewallController | None:
        """The controller, when the provider is DigitalOcean's and a firewall is named."""
        provider = context.provider
        if not isinstance(provider, DigitalOceanProvider) or not provider.config.firewall_name:
            log.info("%s: PUBLIC_ACCESS_FIREWALL_NAME is not set: no firewall to manage",
                     CONTROLLER)  # fmt: skip
            return None
        return cls(context, provider)

    def run(self, stop: threading.Event) -> None:
        log.info("%s: managing firewall %s for droplets tagged %s", self.name,
                 self.config.firewall_name, ",".join(self.config.firewall_tags))  # fmt: skip
        self.context.services.add_handler(
            on_add=lambda raw: self.queue.add(_KEY),
            on_update=lambda old, raw: self.queue.add(_KEY),
            on_delete=lambda raw: self.queue.add(_KEY),
        )
        periodic = threading.Thread(
            target=run_periodically, name=f"{self.name}-resync", daemon=True,
            args=(self.name, "firewall resync", self.resync, RECONCILE_PERIOD, stop),
        )  # fmt: skip
        periodic.start()
        run_workers(
            name=self.name, queue=self.queue, workers=1, stop=stop,
            process=lambda queue: process_one(queue, self._sync, name=self.name),
        )  # fmt: skip
        periodic.join(timeout=10)

    def resync(self) -> None:
        """Read the firewall again and reconcile it."""
        self.firewall.refresh()
        self.queue.add(_KEY)

    def _sync(self, key: str) -> None:
        self.sync()

    def sync(self) -> str:
        """Make the firewall what the cached Services ask for: ``"unchanged"``, ``"updated"``
        or ``"created"``."""
        services = [Service(raw) for raw in self.context.services.list()]
        request = firewall_request(services, name=self.config.firewall_name,
                                   tags=self.config.firewall_tags,
                                   default_type=self.config.default_lb_type)  # fmt: skip
        return self.firewall.ensure(request)
