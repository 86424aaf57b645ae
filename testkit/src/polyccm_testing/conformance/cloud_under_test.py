"""What a provider's test adapter tells the conformance kit: :class:`CloudUnderTest`.

The kit proves the provider contract's promises, but it cannot know how a cloud makes an
instance, what a load balancer consists of there, or how to count the cloud's writes. A
provider's test module answers those questions with a small adapter over its emulator and
returns it from the ``cloud`` fixture; the kit does everything else.
"""

from __future__ import annotations

from typing import Protocol

from polyccm.cloud import CloudProvider
from polyccm.objects import Service


class CloudUnderTest(Protocol):
    """A provider wired to its emulator, plus the few cloud-side actions the kit needs.

    Everything here acts on the cloud directly, through the cloud's own API as a user or an
    operator would, never through the provider: the kit compares what the provider says and
    does with what the cloud reports.
    """

    @property
    def provider(self) -> CloudProvider:
        """The built provider, pointed at the emulator. The kit calls its ``initialize`` once
        per test with a real :class:`~polyccm.cloud.ProviderContext`."""
        ...

    @property
    def cluster_name(self) -> str:
        """The cluster name the kit passes to load-balancer and route calls."""
        ...

    def create_instance(self, name: str) -> str:
        """Create a running instance (``name`` is a hint, unique within a test) through the
        cloud's API and return the node name its kubelet would register. The kit then
        registers that Node and initialises it as the cloud-node controller would."""
        ...

    def delete_instance(self, name: str) -> None:
        """Terminate the instance of node ``name`` (the name :meth:`create_instance`
        returned), so that the cloud reports it gone."""
        ...

    def stop_instance(self, name: str) -> None:
        """Stop (power off) the instance of node ``name``; it still exists."""
        ...

    def load_balancer_resources(self) -> frozenset[str]:
        """Every cloud resource a load balancer of this provider may consist of (load
        balancers, listeners, target groups, security groups and their rules, forwarding
        rules...), one identifier each, of the adapter's choice. The kit compares snapshots:
        a second ensure must not change it, delete must bring it back to what it was."""
        ...

    def write_calls(self) -> int:
        """Mutating cloud calls made so far by anyone (the emulator's counter, say). The kit
        only compares two readings around a provider call."""
        ...

    def delete_load_balancer_out_of_band(self, service: Service) -> None:
        """Delete the service's load balancer itself behind the controller's back, as an
        operator would in the cloud console (what else it used may stay)."""
        ...

    def backends(self, service: Service) -> frozenset[str]:
        """What the service's load balancer sends traffic to, as the cloud reports it: node
        names, providerIDs, or instance ids (the last segment of the providerID)."""
        ...
