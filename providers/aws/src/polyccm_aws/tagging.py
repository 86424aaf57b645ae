"""Cluster ownership tags: which cloud resources belong to this cluster, as upstream tags them.

A resource belongs to cluster ``<id>`` when it carries ``kubernetes.io/cluster/<id>`` (any value)
or the legacy ``KubernetesCluster=<id>``; resources polyccm creates get
``kubernetes.io/cluster/<id>=owned`` (plus the legacy tag when the config uses it).

The cluster id itself is found as cloud-provider-aws finds it (:func:`resolve_cluster_id`): the
cloud config's ``KubernetesClusterTag``/``KubernetesClusterID``, else the cluster tag of the
instance polyccm runs on. It is part of target-group names and of every ownership check, so a
CCM replacing cloud-provider-aws must arrive at the same id from the same cloud.conf.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from polyccm.errors import ConfigError

from polyccm_aws.config import CloudConfig

CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
LEGACY_CLUSTER_TAG = "KubernetesCluster"
SERVICE_NAME_TAG = "kubernetes.io/service-name"
ROLE_ELB_TAG = "kubernetes.io/role/elb"
ROLE_INTERNAL_ELB_TAG = "kubernetes.io/role/internal-elb"
OWNED = "owned"


def tag_map(tags: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    """AWS ``[{"Key": k, "Value": v}]`` as a dict."""
    return {str(t.get("Key", "")): str(t.get("Value", "")) for t in tags or ()}


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    """A dict as AWS ``[{"Key": k, "Value": v}]``, in key order."""
    return [{"Key": key, "Value": tags[key]} for key in sorted(tags)]


@dataclass(frozen=True)
class ClusterTagging:
    """The cluster id and how to recognise and mark this cluster's resources."""

    cluster_id: str
    legacy: bool = False

    @property
    def tag_key(self) -> str:
        return CLUSTER_TAG_PREFIX + self.cluster_id

    def has_cluster_tag(self, tags: Iterable[Mapping[str, Any]] | None) -> bool:
        found = tag_map(tags)
        return self.tag_key in found or found.get(LEGACY_CLUSTER_TAG) == self.cluster_id

    def is_owned(self, tags: Iterable[Mapping[str, Any]] | None) -> bool:
        found = tag_map(tags)
        return found.get(self.tag_key) == OWNED or found.get(LEGACY_CLUSTER_TAG) == self.cluster_id

    def owned_tags(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """``extra`` plus this cluster's ownership tags."""
        tags = dict(extra or {})
        if self.legacy:
            tags[LEGACY_CLUSTER_TAG] = self.cluster_id
        tags[self.tag_key] = OWNED
        return tags

    def tag_filter(self) -> dict[str, Any]:
        """A DescribeX filter that narrows results to resources that may carry our tag."""
        return {"Name": "tag-key", "Values": [self.tag_key, LEGACY_CLUSTER_TAG]}


def has_no_cluster_tag(tags: Iterable[Mapping[str, Any]] | None) -> bool:
    """True when a resource is tagged for no cluster at all (upstream treats it as shared)."""
    return not any(key.startswith(CLUSTER_TAG_PREFIX) for key in tag_map(tags))


@dataclass(frozen=True)
class ClusterId:
    """The cluster id, whether it is a legacy ``KubernetesCluster`` one, and where it was found."""

    value: str
    legacy: bool
    source: str

    def tagging(self) -> ClusterTagging:
        return ClusterTagging(self.value, legacy=self.legacy)


#: The instance polyccm runs on: its id and its tags, or ``None`` when it cannot be known.
OwnInstance = tuple[str, Iterable[Mapping[str, Any]]]


def cluster_id_from_tags(tags: Iterable[Mapping[str, Any]] | None, source: str) -> ClusterId | None:
    """The cluster id carried by a resource's tags, or ``None``.

    As upstream: one ``kubernetes.io/cluster/<id>`` key and/or one ``KubernetesCluster`` value;
    the legacy tag wins and makes polyccm tag legacy-style too; two ids that disagree are an error.
    """
    new = [str(t.get("Key", ""))[len(CLUSTER_TAG_PREFIX) :] for t in tags or () if _is_new(t)]
    legacy = [str(t.get("Value", "")) for t in tags or () if t.get("Key") == LEGACY_CLUSTER_TAG]
    if len(new) > 1:
        raise ConfigError(
            f"{source} has several {CLUSTER_TAG_PREFIX}<id> tags ({', '.join(sorted(new))}); "
            "keep one, or set KubernetesClusterID in the cloud config"
        )
    if len(legacy) > 1:
        raise ConfigError(f"{source} has several {LEGACY_CLUSTER_TAG} tags")
    if legacy and new and legacy[0] != new[0]:
        raise ConfigError(
            f"{source} is tagged for two clusters: {LEGACY_CLUSTER_TAG}={legacy[0]} and "
            f"{CLUSTER_TAG_PREFIX}{new[0]}"
        )
    if legacy and legacy[0]:
        return ClusterId(legacy[0], legacy=True, source=f"tag {LEGACY_CLUSTER_TAG} of {source}")
    if new and new[0]:
        return ClusterId(
            new[0], legacy=False, source=f"tag {CLUSTER_TAG_PREFIX}{new[0]} of {source}"
        )
    return None


def _is_new(tag: Mapping[str, Any]) -> bool:
    return str(tag.get("Key", "")).startswith(CLUSTER_TAG_PREFIX)


def resolve_cluster_id(
    config: CloudConfig, own_instance: Callable[[], OwnInstance | None]
) -> ClusterId | None:
    """The cluster id in upstream's order, or ``None`` when there is none to be found.

    1. ``KubernetesClusterTag`` (legacy) or ``KubernetesClusterID`` from the cloud config;
    2. else the cluster tag of the instance polyccm runs on (``own_instance`` is asked only
       then: it costs a metadata lookup and a DescribeInstances).

    ``None`` leaves the choice to the caller: upstream refuses to start unless
    ``--allow-untagged-cloud`` is given.
    """
    if config.cluster_id:
        return ClusterId(
            config.cluster_id,
            legacy=config.uses_legacy_tags,
            source="KubernetesClusterTag in the cloud config"
            if config.uses_legacy_tags
            else "KubernetesClusterID in the cloud config",
        )
    found = own_instance()
    if found is None:
        return None
    instance_id, tags = found
    return cluster_id_from_tags(tags, f"instance {instance_id}")
