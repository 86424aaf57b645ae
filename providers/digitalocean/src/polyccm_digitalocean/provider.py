"""The DigitalOcean cloud provider: droplets (InstancesV2) and load balancers; no routes; the
planning and leaked-load-balancer search of ``polyccm plan`` and ``polyccm orphans``.

Built by the plugin when ``--provider digitalocean`` is chosen; its calls go through pydo
(:mod:`polyccm_digitalocean.api`), imported when the first call (the region check) is made. The
region comes from ``REGION`` or, without it, from the droplet metadata service (the droplet
polyccm runs on), and is checked against the regions API at start-up, as upstream does.
The cluster id is ``DO_CLUSTER_ID`` when set.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from polyccm.cloud import CloudProvider, InstancesV2, LoadBalancer, ProviderContext
from polyccm.errors import ConfigError
from polyccm.ops.contract import LoadBalancerPlanner, Orphans

from polyccm_digitalocean.api import DigitalOceanApi, DigitalOceanApiError, RateLimited
from polyccm_digitalocean.config import DigitalOceanConfig, read_environment
from polyccm_digitalocean.instances import DigitalOceanInstances
from polyccm_digitalocean.load_balancer import DigitalOceanLoadBalancer
from polyccm_digitalocean.orphans import DigitalOceanOrphans
from polyccm_digitalocean.planning import DigitalOceanLoadBalancerPlanner

if TYPE_CHECKING:
    import contextlib

    from polyccm.plugins import ProviderSettings

log = logging.getLogger(__name__)


def region_from_metadata(metadata_url: str, *, timeout: float = 2.0) -> str:
    """The region of the droplet this process runs on, from the metadata service."""
    url = metadata_url.rstrip("/") + "/region"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return str(answer.read().decode().strip())
    except (OSError, urllib.error.URLError) as error:
        raise ConfigError(
            f"REGION is not set and the droplet metadata service ({url}) did not answer: {error}"
        ) from None


#: Waits between tries of the start-up region check while DigitalOcean answers 429 (about a
#: minute in all, DigitalOcean's shorter budget window); each no longer than its reset asks.
START_THROTTLE_WAITS = (2.0, 4.0, 8.0, 16.0, 30.0)


def check_region(
    api: DigitalOceanApi,
    region: str,
    *,
    waits: Sequence[float] = START_THROTTLE_WAITS,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """``region`` is one of the account's regions (a ConfigError otherwise). A throttled
    listing is tried again after each of ``waits`` (the API's own warning names the throttle),
    then refused in one line rather than a traceback."""
    for attempt in range(len(waits) + 1):
        try:
            slugs = {str(r.get("slug")) for r in api.pages("regions.list", "regions")}
            break
        except DigitalOceanApiError as error:
            raise ConfigError(f"cannot list DigitalOcean regions: {error}") from None
        except RateLimited as error:
            if attempt == len(waits):
                raise ConfigError(
                    f"cannot list DigitalOcean regions: still rate limited after "
                    f"{sum(waits):.0f} s ({error})"
                ) from None
            sleep(min(waits[attempt], error.delay))
    if region not in slugs:
        known = ", ".join(sorted(slugs))
        raise ConfigError(f"REGION {region!r} is not a DigitalOcean region ({known})")


class DigitalOceanProvider(CloudProvider):
    """Droplets and load balancers of one region."""

    name = "digitalocean"

    def __init__(self, config: DigitalOceanConfig, *, region: str,
                 api: DigitalOceanApi | None = None) -> None:  # fmt: skip
        self.config = config
        self.region = region
        self.api = api or DigitalOceanApi(config)
        self._instances = DigitalOceanInstances(self.api)
        self._load_balancer = DigitalOceanLoadBalancer(
            self.api, region=region, vpc_id=config.vpc_id
        )

    @classmethod
    def from_settings(cls, settings: ProviderSettings) -> DigitalOceanProvider:
        """The provider ``polyccm --provider digitalocean`` runs: as upstream, from the
        environment alone (no cloud config is read)."""
        del settings
        return cls.from_environment()

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        region_lookup: Callable[[str], str] = region_from_metadata,
    ) -> DigitalOceanProvider:
        """The provider as upstream builds it: settings from the environment, the region from
        ``REGION`` or the metadata service, checked against the regions API."""
        config = read_environment(os.environ if environ is None else environ)
        region = config.region or region_lookup(config.metadata_url)
        api = DigitalOceanApi(config)
        check_region(api, region)
        log.info("DigitalOcean: region %s, API %s, cluster id %r, limit %g requests/s, "
                 "new load balancers %s unless annotated", region, config.api_url,
                 config.cluster_id, config.qps, config.default_lb_type)  # fmt: skip
        return cls(config, region=region, api=api)

    def initialize(self, context: ProviderContext) -> None:
        """Nothing to connect: lookups go to the API, the node cache is not needed."""

    def serve(self, serving: contextlib.ExitStack) -> None:
        """``METRICS_ADDR`` and ``DEBUG_ADDR``, upstream's plain-HTTP servers
        (:mod:`polyccm_digitalocean.servers`)."""
        from polyccm_digitalocean import servers

        servers.start(serving, self.api)

    def instances_v2(self) -> InstancesV2:
        return self._instances

    def load_balancer(self) -> LoadBalancer:
        return self._load_balancer

    def load_balancer_planner(self) -> LoadBalancerPlanner:
        return DigitalOceanLoadBalancerPlanner(self.api, region=self.region,
                                               vpc_id=self.config.vpc_id)  # fmt: skip

    def orphans(self) -> Orphans:
        return DigitalOceanOrphans(self.api, cluster_id=self.config.cluster_id)

    def has_cluster_id(self) -> bool:
        # Load balancers are found by id and name, not by a cluster tag, so the id is optional
        # (upstream starts without DO_CLUSTER_ID too).
        return True
