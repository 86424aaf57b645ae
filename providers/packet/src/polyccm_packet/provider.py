"""The Equinix Metal cloud provider: devices (InstancesV2) and Elastic IPs (LoadBalancer).

Built by the plugin when ``--provider packet`` is chosen; the ``equinix`` SDK's ``metalv1`` is
imported in the background once the term starts (or by the first request), not at start-up.
Settings come from upstream's JSON config (``--cloud-config``) overridden by the ``METAL_*``
variables; the cluster id tagging Elastic IPs is the ``kube-system`` namespace's UID, as
upstream's, unless ``METAL_CLUSTER_ID`` says otherwise (:mod:`polyccm_packet.identity`). Metal
has no routes.

``polyccm plan`` and ``polyccm orphans`` get :mod:`polyccm_packet.planning` and
:mod:`polyccm_packet.orphans`. Every call is counted under the ``metalv1`` method's name, and
Metal's reads are its ``find_*`` and ``get_*`` methods, so the core's default classifier
(``CloudProvider.read_only_call``) tells reads from writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from polyccm.cloud import CloudProvider, InstancesV2, LoadBalancer, ProviderContext
from polyccm.ops.contract import LoadBalancerPlanner, Orphans
from polyccm.plugins import ProviderSettings

from polyccm_packet.api import MetalClient
from polyccm_packet.config import MetalConfig, load_config_keys, read_config
from polyccm_packet.identity import ClusterId, uid_from_kubeconfig
from polyccm_packet.instances import MetalInstances
from polyccm_packet.load_balancer import MetalLoadBalancer
from polyccm_packet.orphans import MetalOrphans
from polyccm_packet.planning import MetalLoadBalancerPlanner


def config_from(environ: Mapping[str, str], cloud_config: str | Path | None) -> MetalConfig:
    """The settings of ``cloud_config`` (a path, or ``None``) overridden by ``environ``."""
    return read_config(environ, load_config_keys(cloud_config))


class MetalProvider(CloudProvider):
    """The devices and Elastic IPs of one Metal project."""

    name = "packet"

    def __init__(
        self,
        config: MetalConfig,
        *,
        api: MetalClient | None = None,
        uid_source: Callable[[], str] | None = None,
    ) -> None:
        self.config = config
        self.api = api or MetalClient(config)
        self.cluster_id = ClusterId(config.cluster_id, uid_source)
        self._instances = MetalInstances(self.api)
        self._load_balancer = MetalLoadBalancer(self.api, cluster_id=self.cluster_id)
        self._planner: MetalLoadBalancerPlanner | None = None
        self._orphans = MetalOrphans(self._load_balancer)

    @classmethod
    def from_settings(cls, settings: ProviderSettings) -> MetalProvider:
        options = settings.options
        return cls(
            config_from(os.environ, settings.cloud_config),
            # Read only outside a term (polyccm plan, orphans); a term reads it in initialize.
            uid_source=lambda: uid_from_kubeconfig(
                getattr(options, "kubeconfig", None), getattr(options, "master", None)
            ),
        )

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> MetalProvider:
        return cls(config_from(os.environ if environ is None else environ, None))

    def initialize(self, context: ProviderContext) -> None:
        """Nothing to connect: lookups go to the API; BGP runs as a provider controller. The
        SDK starts loading in the background (start-up does not wait for it), the cluster's
        id (the ``kube-system`` UID) is read, and Elastic IPs a former term kept are read
        again."""
        self.api.load_in_background()
        self.cluster_id.learn(context.api)
        self._load_balancer.kube = context.api
        self._load_balancer.forget()

    def instances_v2(self) -> InstancesV2:
        return self._instances

    def load_balancer(self) -> LoadBalancer | None:
        """The Elastic IPs, or ``None`` when ``METAL_LOAD_BALANCER`` is unset: upstream's
        ``newLoadBalancers`` then makes none, so no Service gets an Elastic IP."""
        return self._load_balancer if self.config.load_balancer else None

    def load_balancer_planner(self) -> LoadBalancerPlanner:
        if self._planner is None:
            self._planner = MetalLoadBalancerPlanner(self.api, self.cluster_id)
        return self._planner

    def orphans(self) -> Orphans:
        return self._orphans
