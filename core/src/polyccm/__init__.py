"""polyccm: a Kubernetes cloud-controller-manager core with pluggable cloud providers."""

from polyccm.cloud import (
    CloudProvider,
    InstanceMetadata,
    InstancesV2,
    LoadBalancer,
    LoadBalancerIngress,
    LoadBalancerStatus,
    NodeAddress,
    ProviderContext,
    Route,
    Routes,
)
from polyccm.errors import (
    CapabilityNotImplemented,
    CloudError,
    ConfigError,
    ImplementedElsewhere,
    InstanceNotFound,
    InvalidServiceSpec,
    RetryAfter,
    Throttled,
)
from polyccm.objects import Node, Service
from polyccm.rbac import PolicyRule

__all__ = [
    "CapabilityNotImplemented",
    "CloudError",
    "CloudProvider",
    "ConfigError",
    "ImplementedElsewhere",
    "InstanceMetadata",
    "InstanceNotFound",
    "InstancesV2",
    "InvalidServiceSpec",
    "LoadBalancer",
    "LoadBalancerIngress",
    "LoadBalancerStatus",
    "Node",
    "NodeAddress",
    "PolicyRule",
    "ProviderContext",
    "RetryAfter",
    "Route",
    "Routes",
    "Service",
    "Throttled",
]
