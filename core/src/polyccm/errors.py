"""Errors that carry meaning between providers and controllers.

The error type decides what a controller does: :class:`RetryAfter` re-queues the item after its
fixed delay (:class:`Throttled`, the cloud's own throttle, is also reported as a Warning
event), :class:`ImplementedElsewhere` hands the service to another controller (the core still
manages its finalizer), :class:`InstanceNotFound` means the instance is gone, and every other error
re-queues with exponential backoff. Messages of :class:`InvalidServiceSpec` reach users as Warning
events, so they name the annotation or field at fault and never contain secrets.
"""

from __future__ import annotations


class CloudError(Exception):
    """Base class of the errors providers raise on purpose."""


class InstanceNotFound(CloudError):
    """The cloud has no instance for the node (terminated, deleted, or never existed)."""


class CapabilityNotImplemented(CloudError):
    """The provider does not implement this operation (``cloudprovider.NotImplemented``)."""


class ImplementedElsewhere(CloudError):
    """Another controller owns this object (for example an AWS load-balancer controller)."""


class RetryAfter(CloudError):
    """Ask again after ``delay`` seconds instead of backing off exponentially."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


class Throttled(RetryAfter):
    """The cloud throttled the call (its rate limit, answered 429 or its own form) and said
    when to come back: the item is re-queued after ``delay``, as any :class:`RetryAfter`, and
    the service controller also reports it as a Warning event, as upstream's does for the
    throttle error its providers return (a user then sees why the load balancer is late)."""


class InvalidServiceSpec(CloudError):
    """The service asks for something the provider cannot do (a bad annotation value, a
    forbidden combination). Nothing has been created in the cloud for it."""


class ConfigError(Exception):
    """User input (a flag, the cloud config) is malformed. The CLI prints it and exits 2."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line


class LeadershipLost(Exception):
    """This process may no longer act: its leadership term ended (or never began).

    Raised by :func:`polyccm.cloudcalls.record` before a cloud call is sent, so a worker of a
    term that has ended stops its cloud work at the next call instead of finishing it. Not a
    :class:`CloudError`: nothing failed in the cloud, and the item is left to the next leader.
    """


class WriteRefused(Exception):
    """A cloud call that is not a read, made while polyccm only reads (``polyccm plan``, and
    ``polyccm orphans`` before ``--delete``): refused by :func:`polyccm.cloudcalls.record`
    before it is sent. Not a :class:`CloudError`: it is a bug of the provider's planning code,
    never to be caught."""
