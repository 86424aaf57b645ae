"""Cluster ownership tags: which cloud resources belong to this cluster, as upstream tags them.

A resource belongs to cluster ``<id>`` when it carries ``kubernetes.io/cluster/<id>`` (any value)
or the legacy ``KubernetesCluster=<id>``; resources polyccm creates get
``kubernetes.io/cluster/<id>=owned`` (plus the legacy tag when the config uses it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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
