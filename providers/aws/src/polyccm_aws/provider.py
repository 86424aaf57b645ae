"""The AWS cloud provider: wires the capabilities to one set of clients and shared caches.

Built by the plugin when ``--provider aws`` is chosen; importing this module imports boto3.
The cluster id used for ownership tags and target-group names is ``KubernetesClusterTag`` or
``KubernetesClusterID`` from the cloud config, else ``--cluster-name``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from polyccm.cloud import CloudProvider, InstancesV2, LoadBalancer, Routes

from polyccm_aws.api import AwsApi, resolve_region
from polyccm_aws.config import CloudConfig
from polyccm_aws.instance_store import InstanceStore
from polyccm_aws.instances import AwsInstances
from polyccm_aws.load_balancer import AwsLoadBalancer
from polyccm_aws.node_directory import NodeDirectory
from polyccm_aws.routes import AwsRoutes
from polyccm_aws.tagging import ClusterTagging
from polyccm_aws.zones import Zones

log = logging.getLogger(__name__)


class AwsProvider(CloudProvider):
    """EC2 instances, classic ELB and NLB load balancers, and VPC route-table routes."""

    name = "aws"

    def __init__(
        self,
        config: CloudConfig,
        *,
        cluster_name: str = "kubernetes",
        api: AwsApi | None = None,
        cache_ttl: float = 10.0,
        max_attempts: int = 5,
    ) -> None:
        self.config = config
        region = api.region if api is not None else resolve_region(config)
        self.api = api or AwsApi(config, region, max_attempts=max_attempts)
        self.tagging = ClusterTagging(
            config.cluster_id or cluster_name, legacy=config.uses_legacy_tags
        )
        self.store = InstanceStore(
            self.api,
            ttl=cache_ttl,
            name_filter_tagging=self.tagging if config.cluster_id else None,
        )
        self.zones = Zones(self.api)
        self.directory = NodeDirectory()
        self._instances = AwsInstances(
            self.store,
            self.zones,
            self.directory,
            region=region,
            families=config.node_ip_families,
        )
        self._load_balancer = AwsLoadBalancer(
            self.api,
            config,
            self.tagging,
            store=self.store,
            zones=self.zones,
            directory=self.directory,
        )
        self._routes = AwsRoutes(self.api, config, self.tagging, self.store, self.directory)

    def initialize(self, kube_client: object | None = None) -> None:
        """Let the node directory list nodes through the core's Kubernetes client."""
        lister = getattr(kube_client, "list", None)
        if lister is None:
            return
        from polyccm.kube.api import NODES

        def list_nodes() -> Iterable[Mapping[str, Any]]:
            answer = lister(NODES)
            items: Iterable[Mapping[str, Any]] = answer.get("items", ())
            return items

        self.directory.set_lister(list_nodes)

    def instances_v2(self) -> InstancesV2:
        return self._instances

    def load_balancer(self) -> LoadBalancer:
        return self._load_balancer

    def routes(self) -> Routes:
        return self._routes
