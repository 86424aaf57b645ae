"""The GCE cloud provider: wires the capabilities to one API client of one project.

Built by the plugin when ``--provider gce`` is chosen (importing this module imports
google-auth, not google-cloud-compute: :mod:`polyccm_gce.sdk` loads what it uses of that in the
background).
:meth:`GceProvider.discover` finds what gce.conf leaves out as cloud-provider-gcp does:
credentials are ``token-url``'s (:mod:`polyccm_gce.token_source`), else Google's
application-default credentials (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's, or the metadata
server's service account on a VM); the project is ``project-id`` (a project number turned into
its name), else the credentials' project, else the metadata server's; the local zone is
``local-zone``, else the metadata server's ``instance/zone``; the network is ``network-name``,
else the metadata server's (:mod:`polyccm_gce.network`). The cluster's zones are the local zone,
or every zone of its region with ``multizone`` or ``regional``, listed again when a node appears
in a zone not yet known (:mod:`polyccm_gce.zones`); the load balancers live in its region.

The cluster id (the ``<cluster-id>`` of the shared health check ``k8s-<cluster-id>-node``) is
upstream's: the ``provider-uid`` of the ConfigMap ``kube-system/ingress-uid``, else its ``uid``,
the ConfigMap made with a fresh id for both when it does not exist (one that exists with
neither is an error, never replaced by a new id at each start). It is read in
:meth:`GceProvider.initialize`, so :meth:`has_cluster_id` is always true, as upstream's is.
The operator commands (``polyccm plan``, ``orphans``) run no ``initialize``: there the id is
read once, read-only, through ``cluster_id_source`` (the plugin gives one on the command's
kubeconfig), so that they name the shared health check as the controllers do.

The operator tools' parts are :mod:`polyccm_gce.planning` (``plan``) and
:mod:`polyccm_gce.orphans` (``orphans``); they read with the same clients.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from polyccm.cloud import CloudProvider, InstancesV2, LoadBalancer, ProviderContext, Routes
from polyccm.errors import ConfigError
from polyccm.inputs import quoted
from polyccm.kube.api import CONFIGMAPS, ApiError, KubeApi, load_configuration
from polyccm.urls import plain_url

from polyccm_gce.api import SCOPES, GceApi
from polyccm_gce.config import ILB_SUBSETS, CloudConfig, load_cloud_config
from polyccm_gce.instances import GceInstances, InstanceLookup
from polyccm_gce.load_balancer import GceLoadBalancer
from polyccm_gce.naming import NodeDirectory, last, region_of
from polyccm_gce.network import (
    METADATA_NETWORK,
    network_from_metadata,
    network_url,
    project_name,
    subnetwork_url,
)
from polyccm_gce.orphans import GceOrphans
from polyccm_gce.planning import GceLoadBalancerPlanner
from polyccm_gce.routes import GceRoutes
from polyccm_gce.sdk import compute_v1, load_in_background
from polyccm_gce.token_source import credentials_for
from polyccm_gce.zones import ManagedZones

if TYPE_CHECKING:
    from polyccm.ops.contract import LoadBalancerPlanner, Orphans
    from polyccm.plugins import ProviderSettings

    from polyccm_gce.nodeipam_settings import NodeIpamSettings

log = logging.getLogger(__name__)

CLUSTER_ID_CONFIGMAP = ("kube-system", "ingress-uid")
CLUSTER_ID_KEY = "uid"
PROVIDER_UID_KEY = "provider-uid"


def metadata_root() -> str:
    """``http://HOST`` of the metadata server: google-auth's ``GCE_METADATA_HOST`` (or the
    older ``GCE_METADATA_ROOT``), else metadata.google.internal; :class:`ConfigError` when the
    variable is no ``host[:port]`` (``[::1`` made urllib raise at the first request)."""
    for variable in ("GCE_METADATA_HOST", "GCE_METADATA_ROOT"):
        host = os.environ.get(variable)
        if host:
            try:
                return plain_url(f"http://{host}", variable)
            except ConfigError:
                raise ConfigError(f"{variable} {quoted(host)} is no host[:port]") from None
    return "http://metadata.google.internal"


def metadata(path: str) -> str | None:
    """``/computeMetadata/v1/<path>`` from the metadata server (``GCE_METADATA_HOST``, else
    metadata.google.internal), or None when none answers (not on GCE); :class:`ConfigError`
    when the variable names no host."""
    request = urllib.request.Request(
        f"{metadata_root()}/computeMetadata/v1/{path}", headers={"Metadata-Flavor": "Google"}
    )
    try:
        with urllib.request.urlopen(request, timeout=3) as answer:
            return str(answer.read().decode()).strip() or None
    except (OSError, urllib.error.URLError):
        return None


def existing_cluster_id(api: KubeApi) -> str | None:
    """The cluster id in ConfigMap ``kube-system/ingress-uid``: its ``provider-uid`` (set when
    the cluster is federated), else its ``uid``, as upstream's ``ClusterID.GetID``; None when
    there is no such ConfigMap, :class:`ConfigError` when it holds neither."""
    namespace, name = CLUSTER_ID_CONFIGMAP
    try:
        found = api.get(CONFIGMAPS, name, namespace)
    except ApiError as error:
        if error.not_found:
            return None
        raise
    data = found.get("data") or {}
    for key in (PROVIDER_UID_KEY, CLUSTER_ID_KEY):
        if key in data:
            return str(data[key])
    raise ConfigError(
        f"ConfigMap {namespace}/{name} has neither {PROVIDER_UID_KEY} nor {CLUSTER_ID_KEY}: "
        "the cluster id that names the shared health check k8s-<cluster-id>-node"
    )


def cluster_id_from_kubeconfig(kubeconfig: str | None, master: str | None) -> str | None:
    """:func:`existing_cluster_id` through its own connection (``--kubeconfig``,
    ``--master``), for the operator commands; never writes. :class:`ConfigError` when the
    ConfigMap cannot be read."""
    api = KubeApi(load_configuration(kubeconfig, master), user_agent="polyccm-gce")
    namespace, name = CLUSTER_ID_CONFIGMAP
    try:
        return existing_cluster_id(api)
    except ApiError as error:
        raise ConfigError(
            f"cannot read the GCE cluster id from ConfigMap {namespace}/{name}: {error}"
        ) from None
    finally:
        api.close()


def application_default_credentials() -> tuple[Any, str | None]:
    """google-auth's application-default credentials and their project."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, project = google.auth.default(scopes=list(SCOPES))
    except DefaultCredentialsError as error:
        raise ConfigError(f"no Google credentials: {error}") from None
    return credentials, project


class GceProvider(CloudProvider):
    """GCE instances, legacy network load balancers and routes of one project."""

    name = "gce"
    #: Read by ``nodeipam`` (:mod:`polyccm_gce.nodeipam_settings`).
    reads_flags = frozenset({"--allocate-node-cidrs", "--cidr-allocator-type"})

    def __init__(
        self,
        config: CloudConfig,
        *,
        api: GceApi,
        local_zone: str,
        zones: Collection[str] = (),
        cluster_name: str = "kubernetes",
        route_inserts_per_second: float = 10.0,
        route_insert_burst: int = 20,
        cluster_id_source: Callable[[], str | None] | None = None,
    ) -> None:
        self.config = config
        self.api = api
        self.cluster_name = cluster_name
        self.local_zone = local_zone
        self.region = region_of(local_zone)
        network_project = config.network_project_id or api.project
        network = config.network_name or "default"
        self.network_url = network_url(api.endpoint, network_project, network)
        self._cluster_id: str | None = None
        self._cluster_id_lock = threading.Lock()
        self._cluster_id_source = cluster_id_source
        self.lookup = InstanceLookup(api, zones or (local_zone,))
        self.directory = NodeDirectory()
        self._instances = GceInstances(self.lookup, config.stack_type)
        self._routes = GceRoutes(
            api,
            self.lookup,
            self.directory,
            network_url=self.network_url,
            network_project=network_project,
            inserts_per_second=route_inserts_per_second,
            insert_burst=route_insert_burst,
        )
        self._load_balancer = GceLoadBalancer(
            api,
            self.lookup,
            region=self.region,
            network_url=self.network_url,
            node_tags=config.node_tags,
            cluster_id=self.cluster_id,
            network_project=network_project,
        )
        if config.subnetwork_name:
            subnet = subnetwork_url(
                api.endpoint, network_project, self.region, config.subnetwork_name
            )
            self._load_balancer.subnetwork_name = last(subnet)
            self._load_balancer.subnetwork_url = subnet
        self._load_balancer.ilb_subsets = ILB_SUBSETS in config.alpha_features
        self._planner = GceLoadBalancerPlanner(self._load_balancer)
        self._orphans = GceOrphans(self._load_balancer, self._routes)
        self.nodeipam: NodeIpamSettings | None = None
        """How the ``nodeipam`` controller runs (:mod:`polyccm_gce.nodeipam`); ``None``: off."""

    @classmethod
    def from_settings(cls, settings: ProviderSettings) -> GceProvider:
        """The provider ``polyccm --provider gce`` runs: the deny-firewall and node IPAM flags
        checked first (a refused one stops start-up), gce.conf read, then :meth:`discover`,
        with the cluster id read from the cluster the command line names."""
        from polyccm_gce.flags import deny_flags
        from polyccm_gce.nodeipam_settings import nodeipam_settings

        options = settings.options
        deny, cleanup = deny_flags(options)
        nodeipam = nodeipam_settings(options)
        provider = cls.discover(
            load_cloud_config(settings.cloud_config),
            cluster_name=settings.cluster_name,
            # Read only outside a term (polyccm plan, orphans); a term reads it in initialize.
            cluster_id_source=lambda: cluster_id_from_kubeconfig(
                getattr(options, "kubeconfig", None), getattr(options, "master", None)
            ),
        )
        provider.load_balancer_impl.deny_firewall = deny
        provider.load_balancer_impl.deny_cleanup = cleanup
        provider.nodeipam = nodeipam
        return provider

    @classmethod
    def discover(
        cls,
        config: CloudConfig,
        *,
        cluster_name: str = "kubernetes",
        cluster_id_source: Callable[[], str | None] | None = None,
    ) -> GceProvider:
        """The provider with credentials, project and zones found as upstream finds them;
        google-cloud-compute starts loading in the background (:mod:`polyccm_gce.sdk`)."""
        load_in_background()
        credentials: Any = credentials_for(config.token_url, config.token_body, metadata)
        adc_project: str | None = None
        if credentials is None:
            credentials, adc_project = application_default_credentials()
        project = config.project_id or adc_project or metadata("project/project-id")
        if not project:
            raise ConfigError("no GCE project: set project-id in [global] of gce.conf")
        zone = config.local_zone or last(metadata("instance/zone") or "")
        if not zone:
            raise ConfigError(
                "no GCE zone: set local-zone in [global] of gce.conf (not on a GCE VM whose "
                "metadata server names one)"
            )
        network = config.network_name or network_from_metadata(metadata(METADATA_NETWORK))
        api = GceApi(project, config.endpoint, credentials)
        api.project = project_name(api, project)
        network_project = config.network_project_id
        if network_project and network_project != project:
            network_project = project_name(api, network_project)
        elif network_project:
            network_project = api.project
        config = dataclasses.replace(
            config, network_name=network, network_project_id=network_project
        )
        zones: Collection[str] = (zone,)
        if config.multizone or config.regional:
            region = region_of(zone)

            def listed() -> list[str]:
                found: list[compute_v1.Zone] = api.items(
                    api.client(compute_v1.ZonesClient).list, filter=f'name eq "{region}-.*"'
                )
                return sorted(item.name for item in found)

            zones = ManagedZones(listed() or (zone,), listed)
        return cls(
            config,
            api=api,
            local_zone=zone,
            zones=zones,
            cluster_name=cluster_name,
            cluster_id_source=cluster_id_source,
        )

    def has_cluster_id(self) -> bool:
        return True

    def cluster_id(self) -> str:
        """The cluster id read in :meth:`initialize`; without a term, the one
        ``cluster_id_source`` reads (once); else the cluster name."""
        if self._cluster_id is None and self._cluster_id_source is not None:
            with self._cluster_id_lock:
                if self._cluster_id is None and self._cluster_id_source is not None:
                    self._cluster_id = self._cluster_id_source()
                    self._cluster_id_source = None
                    if self._cluster_id is None:
                        log.warning(
                            "no ConfigMap %s/%s: polyccm would make a new cluster id; "
                            "the shared health check is named after %r meanwhile",
                            *CLUSTER_ID_CONFIGMAP,
                            self.cluster_name,
                        )
        return self._cluster_id or self.cluster_name

    def initialize(self, context: ProviderContext) -> None:
        """Read (or make) the cluster id; let the node directory follow the node cache; give
        the load balancer the term's API (for upstream's finalizer)."""
        with self._cluster_id_lock:
            self._cluster_id = self._read_cluster_id(context)
        log.info(
            "GCE project %s, zone %s, cluster id %s",
            self.api.project,
            self.local_zone,
            self._cluster_id,
        )
        self.directory.follow(context.nodes)
        self.lookup.managed.follow(context.nodes)
        self._load_balancer.kube = context.api
        self._load_balancer.recorder = context.recorder

    def _read_cluster_id(self, context: ProviderContext) -> str:
        namespace, name = CLUSTER_ID_CONFIGMAP
        found_id = existing_cluster_id(context.api)
        if found_id:
            return found_id
        new = secrets.token_hex(8)
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {CLUSTER_ID_KEY: new, PROVIDER_UID_KEY: new},
        }
        try:
            context.api.create(CONFIGMAPS, body, namespace)
        except ApiError as error:
            if error.status != 409:
                raise
            # Made meanwhile (by upstream's controller or another replica): its id.
            return existing_cluster_id(context.api) or new
        return new

    def load_balancer_planner(self) -> LoadBalancerPlanner:
        return self._planner

    def orphans(self) -> Orphans:
        return self._orphans

    def instances_v2(self) -> InstancesV2:
        return self._instances

    def load_balancer(self) -> LoadBalancer:
        return self._load_balancer

    @property
    def load_balancer_impl(self) -> GceLoadBalancer:
        """The load balancer with its GCE settings (the plugin sets the flags' on it)."""
        return self._load_balancer

    def routes(self) -> Routes:
        return self._routes
