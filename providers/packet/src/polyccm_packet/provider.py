"""The Equinix Metal cloud provider: devices (InstancesV2) and Elastic IPs (LoadBalancer).

Built by the plugin when ``--provider packet`` is chosen; the ``equinix`` SDK's ``metalv1`` is
imported in the background once the term starts (or by the first request), not at start-up.
Settings come from upstream's JSON config (``--cloud-config``) overridden by the ``METAL_*``
variables; the cluster id tagging Elastic IPs is ``--cluster-name`` unless ``METAL_CLUSTER_ID``
says otherwise. Metal has no routes.

``polyccm plan`` and ``polyccm orphans`` get :mod:`polyccm_packet.planning` and
:mod:`polyccm_packet.orphans`. Every call is counted under the ``metalv1`` method's name, and
Metal's reads are its ``find_*`` and ``get_*`` methods, so the core's default classifier
(``CloudProvider.read_only_call``) tells reads from writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from polyccm.cloud import CloudProvider, InstancesV2, LoadBalancer, ProviderContext
from polyccm.ops.contract import LoadBalancerPlanner, Orphans
from polyccm.plugins import ProviderSettings

from polyccm_packet.api import MetalClient
from polyccm_packet.config import MetalConfig, load_config_keys, read_config
from polyccm_packet.instances import MetalInstances
from polyccm_packet.load_balancer import MetalLoadBalancer
from polyccm_packet.orphans import MetalOrphans
from polyccm_packet.planning import MetalLoadBalancerPlanner


def config_from(
    environ: Mapping[str, str], cloud_config: str | Path | None, *, cluster_name: str = "kubernetes"
) -> MetalConfig:
    """The settings of ``cloud_config`` (a path, or ``None``) overridden by ``environ``."""
    return read_config(environ, load_config_keys(cloud_config), cluster_name=cluster_name)


class MetalProvider(CloudProvider):
    """The devices and Elastic IPs of one Metal project."""

    name = "packet"

    def __init__(self, config: MetalConfig, *, api: MetalClient | None = None) -> None:
        self.config = config
        self.api = api or MetalClient(config)
        self._instances = MetalInstances(self.api)
        self._load_balancer = MetalLoadBalancer(self.api)
        self._planner: MetalLoadBalancerPlanner | None = None
        self._orphans = MetalOrphans(self._load_balancer)

    @classmethod
    def from_settings(cls, settings: ProviderSettings) -> MetalProvider:
        return cls(
            config_from(os.environ, settings.cloud_config, cluster_name=settings.cluster_name)
        )

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> MetalProvider:
        return cls(config_from(os.environ if environ is None else environ, None))

    def initialize(self, context: ProviderContext) -> None:
        """Nothing to connect: lookups go to the API; BGP runs as a provider controller. The
        SDK starts loading in the background (start-up does not wait for it), and Elastic IPs
        a former term kept are read again."""
        self.api.load_in_background()
        self._load_balancer.forget()

    def instances_v2(self) -> InstancesV2:
        return self._instances

    def load_balancer(self) -> LoadBalancer | None:
        """The Elastic IPs, or ``None`` when ``METAL_LOAD_BALANCER`` is unset: upstream's
        ``newLoadBalancers`` then makes none, so no Service gets an Elastic IP."""
        return self._load_balancer if self.config.load_balancer else None

    def load_balancer_planner(self) -> LoadBalancerPlanner:
        if self._planner is None:
            self._planner = MetalLoadBalancerPlanner(self.api)
        return self._planner

    def orphans(self) -> Orphans:
        return self._orphans
