"""The controllers of the cloud-controller-manager, and the kit a provider's own controllers use.

``cloud-node`` initialises nodes from the cloud, ``cloud-node-lifecycle`` removes nodes whose
instances are gone and taints shut-down ones, ``service`` manages load balancers, ``route``
manages pod-network routes; each is in its own module and they share the machinery in
:mod:`polyccm.controllers.base`.

A provider registers controllers of its own through the ``polyccm_register_controllers`` hook
(see core/CONTRACT.md). Everything such a controller needs is importable from here, the one
public place: the context of a term (API client, the term's node and service caches, the event
recorder), the work queue with per-item backoff, the worker loop and the periodic loop the
built-in controllers use, the read-only views of nodes and services, and the RBAC rule type.
"""

from polyccm.controllers.base import (
    CRASH_PAUSE,
    Controller,
    ControllerContext,
    guarded,
    process_one,
    run_periodically,
    run_workers,
)
from polyccm.controllers.registry import ControllerRegistry
from polyccm.errors import LeadershipLost, RetryAfter
from polyccm.events import EventRecorder
from polyccm.kube.api import (
    JSON_PATCH,
    MERGE_PATCH,
    NODES,
    SERVICES,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    JsonObject,
    KubeApi,
    Resource,
)
from polyccm.kube.informer import Informer, object_key
from polyccm.objects import Node, Service
from polyccm.rbac import PolicyRule
from polyccm.workqueue import RateLimitingQueue

__all__ = [
    "CRASH_PAUSE",
    "JSON_PATCH",
    "MERGE_PATCH",
    "NODES",
    "SERVICES",
    "STRATEGIC_MERGE_PATCH",
    "ApiError",
    "Controller",
    "ControllerContext",
    "ControllerRegistry",
    "EventRecorder",
    "Informer",
    "JsonObject",
    "KubeApi",
    "LeadershipLost",
    "Node",
    "PolicyRule",
    "RateLimitingQueue",
    "Resource",
    "RetryAfter",
    "Service",
    "guarded",
    "object_key",
    "process_one",
    "run_periodically",
    "run_workers",
]
