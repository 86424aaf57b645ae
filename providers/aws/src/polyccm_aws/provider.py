"""The AWS cloud provider: wires the capabilities to one set of clients and shared caches.

Built by the plugin when ``--provider aws`` is chosen; importing this module imports boto3.
The cluster id used for ownership tags and target-group names is found as cloud-provider-aws
finds it (:meth:`AwsProvider.discover`): ``KubernetesClusterTag`` or ``KubernetesClusterID``
from the cloud config, else the cluster tag of the instance polyccm runs on, named by the
instance metadata service. Without either the provider has no cluster id
(:meth:`AwsProvider.has_cluster_id` is false: ``polyccm`` then refuses to start unless
``--allow-untagged-cloud`` is given) and tags with ``--cluster-name``.

At the start of each leadership term :meth:`AwsProvider.initialize` logs the cluster id in use
and points the node directory (node name <-> instance id, for route targets) at the term's
shared node cache; the provider never lists nodes itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import botocore.session
from botocore.exceptions import BotoCoreError, InvalidIMDSEndpointError
from botocore.utils import IMDSFetcher, resolve_imds_endpoint_mode
from polyccm.cloud import CloudProvider, InstancesV2, LoadBalancer, ProviderContext, Routes
from polyccm.cloudcalls import looks_like_read
from polyccm.errors import ConfigError
from polyccm.ops.contract import LoadBalancerPlanner, Orphans

from polyccm_aws.api import AwsApi, AwsApiError, resolve_region
from polyccm_aws.config import CloudConfig, load_cloud_config
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


def own_instance_id() -> str | None:
    """The id of the EC2 instance this process runs on, or ``None`` when no instance metadata
    service answers (not on EC2, or ``AWS_EC2_METADATA_DISABLED=true``).

    botocore's IMDS fetcher does the work, configured as boto3 configures it for credentials:
    ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` (the emulator's in tests), the endpoint mode, the
    timeout and attempts (``AWS_METADATA_SERVICE_TIMEOUT``/``..._NUM_ATTEMPTS``, 1 s and 1 by
    default), an IMDSv2 token with fallback to v1 unless v1 is disabled.
    """
    session = botocore.session.get_session()
    config = {
        "ec2_metadata_service_endpoint": session.get_config_variable(
            "ec2_metadata_service_endpoint"
        ),
        "ec2_metadata_service_endpoint_mode": resolve_imds_endpoint_mode(session),
        "ec2_metadata_v1_disabled": session.get_config_variable("ec2_metadata_v1_disabled"),
    }
    try:
        fetcher = IMDSFetcher(
            timeout=session.get_config_variable("metadata_service_timeout"),
            num_attempts=session.get_config_variable("metadata_service_num_attempts"),
            config=config,
            user_agent="polyccm",
        )
    except InvalidIMDSEndpointError as error:
        raise ConfigError(f"instance metadata service: {error}") from None
    # botocore has no public call for an arbitrary metadata path; its own fetchers (region,
    # credentials) are built on these two methods.
    try:
        token = fetcher._fetch_metadata_token()
        response = fetcher._get_request("latest/meta-data/instance-id", None, token)
    except (BotoCoreError, fetcher._RETRIES_EXCEEDED_ERROR_CLS) as error:
        log.debug("no instance metadata: %s", error or type(error).__name__)
        return None
    instance_id = str(response.text).strip()
    return instance_id or None


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
        """The provider ``polyccm --provider aws`` runs: the cloud config read, then
        :meth:`discover`."""
        config = load_cloud_config(settings.cloud_config)
        return cls.discover(config, cluster_name=settings.cluster_name)

    @classmethod
    def discover(
        cls,
        config: CloudConfig,
        *,
        cluster_name: str = "kubernetes",
        instance_id: Callable[[], str | None] = own_instance_id,
    ) -> AwsProvider:
        """The provider with its cluster id found as upstream finds it: from the cloud config,
        else from the tags of the instance ``instance_id()`` names (the metadata service's
        answer; asked only when the config has no id)."""
        api = AwsApi(config, resolve_region(config))
        cluster = resolve_cluster_id(config, lambda: read_own_instance(api, instance_id()))
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
