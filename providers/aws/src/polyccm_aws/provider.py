"""The AWS cloud provider: wires the capabilities to one set of clients and shared caches.

Built by the plugin when ``--provider aws`` is chosen; importing this module imports boto3.
The cluster id used for ownership tags and target-group names is found as cloud-provider-aws
finds it (:meth:`AwsProvider.discover`): ``KubernetesClusterTag`` or ``KubernetesClusterID``
from the cloud config, else the cluster tag of the instance polyccm runs on, named by the
instance metadata service (:mod:`polyccm_aws.imds`), which also gives the region and the VPC
when nothing configures them, as upstream's default deployment (its Helm chart: no cloud
config, no region variable) needs. Without a cluster id the provider has none
(:meth:`AwsProvider.has_cluster_id` is false: ``polyccm`` then refuses to start unless
``--allow-untagged-cloud`` is given) and tags with ``--cluster-name``.

At the start of each leadership term :meth:`AwsProvider.initialize` logs the cluster id in use
and points the node directory (node name <-> instance id, for route targets) at the term's
shared node cache; the provider never lists nodes itself.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from polyccm.cloud import CloudProvider, InstancesV2, LoadBalancer, ProviderContext, Routes
from polyccm.cloudcalls import looks_like_read
from polyccm.errors import ConfigError
from polyccm.ops.contract import LoadBalancerPlanner, Orphans

from polyccm_aws.api import AwsApi, AwsApiError, resolve_region
from polyccm_aws.config import CloudConfig, load_cloud_config
from polyccm_aws.imds import InstanceMetadata, own_instance_id
from polyccm_aws.instance_store import InstanceStore
from polyccm_aws.instances import AwsInstances
from polyccm_aws.load_balancer import AwsLoadBalancer
from polyccm_aws.node_directory import NodeDirectory
from polyccm_aws.orphans import AwsOrphans
from polyccm_aws.planning import AwsLoadBalancerPlanner
from polyccm_aws.routes import AwsRoutes
from polyccm_aws.tagging import ClusterId, ClusterTagging, OwnInstance, resolve_cluster_id
from polyccm_aws.tagging_options import TaggingOptions
from polyccm_aws.topology import InstanceTopology
from polyccm_aws.zones import Zones

if TYPE_CHECKING:
    from polyccm.plugins import ProviderSettings

log = logging.getLogger(__name__)

__all__ = ["AwsProvider", "own_instance_id", "read_own_instance", "with_own_network"]


def read_own_instance(api: AwsApi, instance_id: str | None) -> OwnInstance | None:
    """``instance_id`` and its tags, from one DescribeInstances; ``None`` without an id.

    The metadata service named this instance, so failing to read it is a misconfiguration
    (another region, missing ``ec2:DescribeInstances``): it stops the start, as upstream."""
    if not instance_id:
        return None
    try:
        answer = api.call("ec2", "describe_instances", InstanceIds=[instance_id])
    except AwsApiError as error:
        raise ConfigError(
            f"cannot read the tags of instance {instance_id} (this machine, says the instance "
            f"metadata service) in region {api.region}: {error}"
        ) from None
    for reservation in answer.get("Reservations", ()):
        for instance in reservation.get("Instances", ()):
            if instance.get("InstanceId") == instance_id:
                tags: list[Mapping[str, Any]] = list(instance.get("Tags") or ())
                return instance_id, tags
    raise ConfigError(
        f"instance {instance_id} (this machine, says the instance metadata service) is not "
        f"found in region {api.region}"
    )


def with_own_network(config: CloudConfig, metadata: InstanceMetadata) -> CloudConfig:
    """``config`` with ``VPC`` and ``SubnetID``, when it names none, those of this instance's
    primary interface: upstream's VPC is its own instance's (cloud-provider-aws v1.37.1
    aws.go:636-642, aws_instance.go:63-64), and so is the subnet it falls back to when no
    subnet is tagged (aws.go:1672-1680). Without metadata, the config is unchanged (the VPC is
    then found from the backend instances or the tagged subnets)."""
    if config.vpc and config.subnet_id:
        return config
    own = metadata.network()
    if own is None:
        return config
    vpc = config.vpc or own.vpc_id
    subnet = config.subnet_id or (own.subnet_id if vpc == own.vpc_id else "")
    if vpc != config.vpc:
        log.info("AWS: VPC %s (of this instance, from the instance metadata service)", vpc)
    return dataclasses.replace(config, vpc=vpc, subnet_id=subnet)


class AwsProvider(CloudProvider):
    """EC2 instances, classic ELB and NLB load balancers, and VPC route-table routes."""

    name = "aws"
    tagging_options: TaggingOptions | None = None
    """What the ``tagging`` controller tags with, when it was selected (set by the plugin)."""

    def __init__(
        self,
        config: CloudConfig,
        *,
        cluster_name: str = "kubernetes",
        cluster: ClusterId | None = None,
        api: AwsApi | None = None,
        cache_ttl: float = 10.0,
        max_attempts: int = 5,
    ) -> None:
        """``cluster`` is the id :meth:`discover` found; without it, the cloud config's id is
        used, else ``cluster_name`` (and :meth:`has_cluster_id` is false)."""
        self.config = config
        region = api.region if api is not None else resolve_region(config)
        self.api = api or AwsApi(config, region, max_attempts=max_attempts)
        self.cluster = cluster or resolve_cluster_id(config, lambda: None)
        self.tagging = self.cluster.tagging() if self.cluster else ClusterTagging(cluster_name)
        self.store = InstanceStore(
            self.api,
            ttl=cache_ttl,
            name_filter_tagging=self.tagging if self.cluster else None,
        )
        self.zones = Zones(self.api)
        self.directory = NodeDirectory()
        self._instances = AwsInstances(
            self.store,
            self.zones,
            self.directory,
            region=region,
            families=config.node_ip_families,
            api=self.api,
            vpc_id=config.vpc,
            topology=InstanceTopology(
                self.api, region=region, pattern=config.supported_topology_instance_type_pattern
            ),
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
        self._planner = AwsLoadBalancerPlanner(
            self.api,
            config,
            self.tagging,
            store=self.store,
            zones=self.zones,
            directory=self.directory,
        )
        self._orphans = AwsOrphans(self.api, config, self.tagging, self.zones)

    @classmethod
    def from_settings(cls, settings: ProviderSettings) -> AwsProvider:
        """The provider ``polyccm --provider aws`` runs: with the ``tagging`` controller
        selected, its flags checked first (a mistake stops start-up); the cloud config read,
        then :meth:`discover`."""
        from polyccm_aws.tagging_options import CONTROLLER, tagging_options

        selected = CONTROLLER in (getattr(settings.options, "controllers", None) or ())
        options = tagging_options(settings.options) if selected else None
        config = load_cloud_config(settings.cloud_config)
        provider = cls.discover(config, cluster_name=settings.cluster_name)
        provider.tagging_options = options
        return provider

    @classmethod
    def discover(
        cls,
        config: CloudConfig,
        *,
        cluster_name: str = "kubernetes",
        instance_id: Callable[[], str | None] | None = None,
        metadata: InstanceMetadata | None = None,
    ) -> AwsProvider:
        """The provider with what the config leaves open found as upstream finds it, on the
        instance metadata service of the machine polyccm runs on (``metadata``), each asked
        only when needed: the region (:func:`~polyccm_aws.api.resolve_region`); the cluster id
        from the tags of the instance ``instance_id()`` names (default: the metadata's); the
        VPC and fallback subnet from its primary interface (:func:`with_own_network`)."""
        metadata = metadata or InstanceMetadata()
        api = AwsApi(config, resolve_region(config, metadata.region))
        own_id = instance_id or metadata.instance_id
        cluster = resolve_cluster_id(config, lambda: read_own_instance(api, own_id()))
        config = with_own_network(config, metadata)
        return cls(config, cluster_name=cluster_name, cluster=cluster, api=api)

    def has_cluster_id(self) -> bool:
        return self.cluster is not None

    def initialize(self, context: ProviderContext) -> None:
        """Say which cluster id is in use; let the node directory follow this term's node
        cache."""
        if self.cluster is not None:
            log.info("AWS cluster id %r (from %s)", self.cluster.value, self.cluster.source)
        else:
            log.info(
                "AWS: no cluster id; resources are tagged %s (from --cluster-name)",
                self.tagging.tag_key,
            )
        self.directory.follow(context.nodes)

    def instances_v2(self) -> InstancesV2:
        return self._instances

    def load_balancer(self) -> LoadBalancer:
        return self._load_balancer

    def routes(self) -> Routes:
        return self._routes

    def load_balancer_planner(self) -> LoadBalancerPlanner:
        return self._planner

    def orphans(self) -> Orphans:
        return self._orphans

    def read_only_call(self, operation: str) -> bool:
        """Describe/Get/List calls, and STS AssumeRole (credentials for ``RoleARN``, which
        changes nothing)."""
        return looks_like_read(operation) or operation == "sts:AssumeRole"
