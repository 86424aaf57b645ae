"""The operator-tools contract: what ``polyccm plan``, ``orphans`` and ``check-service`` ask of a
provider. Every part is optional; a command whose part the provider lacks says so (exit 2).

* :class:`LoadBalancerPlanner` (``CloudProvider.load_balancer_planner()``): what
  ``ensure_load_balancer`` would do now, found with read-only cloud calls, by the same code
  that ensures (spec building, validation, naming, matching), never a second copy of it.
* :class:`ServiceChecker` (hook ``polyccm_build_service_checker``): a Service's problems,
  offline (no cloud, no cluster), worded as the service controller's Warning events.
* :class:`Orphans` (``CloudProvider.orphans()``): cloud resources carrying this cluster's marks
  that no Service or Node accounts for, and their deletion.

Nodes and routes need nothing new: the core plans them from ``InstancesV2`` and
``Routes.list_routes``. While the core plans (and while ``orphans`` lists), every cloud call
passes :func:`polyccm.cloudcalls.record` under a read-only guard: a call that
``CloudProvider.read_only_call`` does not take for a read raises
:class:`~polyccm.errors.WriteRefused` before it is sent.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from polyccm.errors import InvalidServiceSpec
from polyccm.objects import LOAD_BALANCER_FINALIZER, Node, Service, wants_load_balancer

# -- problems -----------------------------------------------------------------------------------

ERROR = "error"
"""``ensure_load_balancer`` would refuse the service (``InvalidServiceSpec``)."""
WARNING = "warning"
"""The provider would work around it (``LoadBalancerStatus.warnings``)."""

SYNC_FAILED_REASON = "SyncLoadBalancerFailed"
WARNING_REASON = "LoadBalancerWarning"


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem of a Service for this provider: an error (``ensure`` refuses the service)
    or a warning (``ensure`` works around it). ``message`` is the provider's text, exactly the
    ``InvalidServiceSpec`` message or the ``LoadBalancerStatus.warnings`` entry."""

    severity: str
    """:data:`ERROR` or :data:`WARNING`."""
    message: str

    @property
    def event_reason(self) -> str:
        """The reason of the Warning event the service controller records for it."""
        return SYNC_FAILED_REASON if self.severity == ERROR else WARNING_REASON

    @property
    def event_message(self) -> str:
        """The message of that Warning event, as the service controller words it."""
        if self.severity == ERROR:
            return f"Error syncing load balancer: {self.message}"
        return self.message

    @classmethod
    def error(cls, error: InvalidServiceSpec | str) -> Problem:
        return cls(ERROR, str(error))

    @classmethod
    def warnings(cls, messages: Sequence[str]) -> tuple[Problem, ...]:
        return tuple(cls(WARNING, message) for message in messages)


class ServiceChecker(ABC):
    """Offline validation of Services for ``polyccm check-service``, returned by the hook
    ``polyccm_build_service_checker``. Built from the cloud config alone: no cloud call, no
    cluster, no credentials."""

    @abstractmethod
    def check_service(self, service: Service) -> list[Problem]:
        """Every problem ``ensure_load_balancer`` would find in ``service`` before calling the
        cloud, by the same validation code and with the same messages: the error it would
        raise (validation stops at the first, as ensure does) and the warnings it would
        return. An empty list: nothing to say. ``service`` is a ``type: LoadBalancer``
        service as a user wrote it (no UID, node ports possibly unset: a missing nodePort is
        not a problem here, the API server allocates it)."""


# -- load-balancer plans -------------------------------------------------------------------------

CREATE = "create"
"""No load balancer of this service exists: ensure would make one."""
ADOPT = "adopt"
"""A load balancer with the name this provider gives the service exists (made by an upstream
CCM or by polyccm) and matches it: ensure would take it as it is, changing nothing."""
UPDATE = "update"
"""It exists and differs: ensure would change what ``LoadBalancerPlan.differences`` lists."""
DELETE = "delete"
"""The service no longer wants a load balancer (deleted, another type, a loadBalancerClass)
but holds the cleanup finalizer: the load balancer (if still there) goes, then the finalizer."""
FAIL = "fail"
"""Ensure would fail (an ``ERROR`` problem, or a cloud-side refusal such as a changed load
balancer type): nothing changes in the cloud; the Warning event says why, again and again."""
SKIP = "skip"
"""Another controller implements this service's load balancer (``ImplementedElsewhere``)."""

ACTIONS = (CREATE, ADOPT, UPDATE, DELETE, FAIL, SKIP)
UNCHANGED = frozenset({ADOPT, SKIP})
"""Actions that change nothing: ``polyccm plan`` exits 0 when every action is one of these."""

# Usual aspects of a difference (a provider may use others).
LISTENERS = "listeners"
HEALTH_CHECK = "health-check"
SECURITY_GROUPS = "security-groups"
BACKENDS = "backends"
ATTRIBUTES = "attributes"
SUBNETS = "subnets"
TAGS = "tags"
TARGET_GROUPS = "target-groups"


@dataclass(frozen=True, slots=True)
class Difference:
    """One change ensure would make to an existing load balancer (or one part a new one would
    get, for :data:`CREATE`)."""

    aspect: str
    """What it is about: :data:`LISTENERS`, :data:`HEALTH_CHECK`, :data:`SECURITY_GROUPS`,
    :data:`BACKENDS`, :data:`ATTRIBUTES`, :data:`SUBNETS`, :data:`TAGS`,
    :data:`TARGET_GROUPS` or a provider's own word."""
    detail: str
    """One line a person reads: ``add TCP:443 -> TCP:30443``, ``register i-0abc``."""


@dataclass(frozen=True, slots=True)
class LoadBalancerPlan:
    """What the service controller would do to one service's load balancer now."""

    action: str
    """One of :data:`ACTIONS`."""
    name: str = ""
    """The load balancer's name (or id) in the cloud, as ``get_load_balancer_name`` gives it."""
    differences: tuple[Difference, ...] = ()
    problems: tuple[Problem, ...] = ()
    """The service's problems: those :class:`ServiceChecker` finds, plus what only the cloud
    can tell (a type that cannot change, a subnet that does not exist...)."""


class LoadBalancerPlanner(ABC):
    """Read-only planning for ``polyccm plan``; ``CloudProvider.load_balancer_planner()``.

    Usually the provider's ``LoadBalancer`` implements it too. The core calls it outside any
    leadership term, with leader election off, from one thread; every cloud call must pass
    :func:`polyccm.cloudcalls.record` and be a read."""

    @abstractmethod
    def plan_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerPlan:
        """What ``ensure_load_balancer(cluster_name, service, nodes)`` would do now, without
        doing it: :data:`CREATE`, :data:`ADOPT`, :data:`UPDATE` (with every difference:
        listeners, health check, security groups, backends...), :data:`FAIL` (with the
        problems) or :data:`SKIP`. Problems that ensure would return as warnings are listed
        whatever the action. ``nodes`` is the backend set, as for ensure. A ``CloudError``
        raised here is reported as :data:`FAIL` with its message."""


# -- orphans ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CloudResource:
    """A cloud resource that carries this cluster's marks but that no Service or Node of the
    cluster accounts for."""

    kind: str
    """The cloud's word for it: ``classic-elb``, ``nlb``, ``target-group``, ``security-group``,
    ``forwarding-rule``..."""
    id: str
    """What the cloud calls it (name, id or ARN); with ``kind``, unique."""
    mark: str
    """Why it belongs to this cluster: ``tag kubernetes.io/cluster/prod=owned``, ``name prefix
    a1b2...``."""
    reason: str
    """Why nothing accounts for it: ``service default/web (uid ...) no longer exists``."""
    delete_order: int = 0
    """Deletion goes by ascending order: what uses another resource comes first (AWS: load
    balancers 0, target groups 1, security groups 2)."""
    name: str = ""
    """A readable name when ``id`` is not one (an ARN's target-group name)."""
    details: Mapping[str, str] = field(default_factory=dict)
    """Whatever the provider needs to delete it again (a VPC, a region); shown in ``-o json``."""


def claims_load_balancer(service: Service) -> bool:
    """Whether ``service`` accounts for the load balancer named after it: it wants one (``type:
    LoadBalancer``, no ``loadBalancerClass``) or still holds the cleanup finalizer (the service
    controller deletes that load balancer itself)."""
    return wants_load_balancer(service) or LOAD_BALANCER_FINALIZER in service.finalizers


class Orphans(ABC):
    """Leaked-resource discovery for ``polyccm orphans``; ``CloudProvider.orphans()``."""

    @abstractmethod
    def find_orphans(
        self, cluster_name: str, services: Sequence[Service], nodes: Sequence[Node]
    ) -> list[CloudResource]:
        """Every resource with this cluster's marks (tags, name prefixes, descriptions) that
        none of ``services`` (every Service of the cluster, any type) or ``nodes`` accounts
        for (a Service accounts for its load balancer while :func:`claims_load_balancer`).
        Read-only. Never a resource without the cluster's marks."""

    @abstractmethod
    def delete_orphan(self, cluster_name: str, resource: CloudResource) -> None:
        """Delete ``resource``, as :meth:`find_orphans` returned it. Read it again first and
        raise a ``CloudError`` (it is then kept) when it no longer carries the cluster's marks;
        succeed when it is already gone. Called in ascending ``delete_order``."""
