"""What the classic-ELB and NLB implementations share: the clients and helpers they are built
from, the "describe by name, or None" lookup whose not-found error both APIs spell alike, and
which backend instances a load balancer may hold."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from polyccm_aws.api import AwsApi, AwsApiError, error_code
from polyccm_aws.config import CloudConfig
from polyccm_aws.instance_store import Instance, state_of
from polyccm_aws.network import Network
from polyccm_aws.security_groups import SecurityGroups
from polyccm_aws.tagging import ClusterTagging


def wanted_backends(instances: Mapping[str, Instance], registered: Iterable[str]) -> set[str]:
    """The instance ids a load balancer should hold: every running instance, plus the ones
    already registered that are merely not running (stopped, pending...).

    AWS refuses to register an instance that is not running (ELBv2 answers InvalidTarget), so
    one stopped node must not fail the whole load balancer. An instance that stops while
    registered stays registered, as AWS keeps it (target state ``unused``): it takes traffic
    again once it runs, without waiting for a node event to register it anew.
    """
    kept = set(registered)
    return {
        instance_id
        for instance_id, instance in instances.items()
        if state_of(instance) == "running" or instance_id in kept
    }


class BalancerKind:
    """Base of :class:`~polyccm_aws.elb.ClassicElb` and :class:`~polyccm_aws.nlb.NetworkLb`."""

    def __init__(
        self,
        api: AwsApi,
        config: CloudConfig,
        tagging: ClusterTagging,
        groups: SecurityGroups,
        network: Network,
    ) -> None:
        self._api = api
        self._config = config
        self._tagging = tagging
        self._groups = groups
        self._network = network

    def _describe(self, service: str, **by_name: Any) -> dict[str, Any] | None:
        """The ``describe_load_balancers`` answer of ``service`` (elb or elbv2), or ``None``
        when no load balancer has that name."""
        try:
            answer: dict[str, Any] = self._api.call(service, "describe_load_balancers", **by_name)
        except AwsApiError as error:
            if error_code(error) == "LoadBalancerNotFound":
                return None
            raise
        return answer
