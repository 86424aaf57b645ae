"""Direct lookups where moto's backends scan or repeat one: a volume by its id, the instances
leaving a classic ELB by a set, the EC2 backend of a target health read once. Each patch
answers what moto's code answers, only without the O(N) work per item that makes a
500-instance RunInstances or a 5,000-instance deregistration quadratic;
:func:`look_up_directly` installs them (idempotent)."""

from __future__ import annotations

import functools
from typing import Any

#: The marker each patched function carries, so a second install leaves it alone.
MARKER = "polyccm_direct_lookup"


def find_a_volume_by_its_id() -> None:
    """Answer ``describe_volumes`` of one volume id from moto's dict of volumes by that id.

    RunInstances asks it once for the root volume of each instance it launches, and moto
    answers by testing every volume of the region: 500 instances launched among 5,000 cost
    ~1.4 s of a 2 s call (profiled). moto keeps each volume under its own id, so the volume
    under that key is the only one whose id matches; the filters are then applied as moto
    applies them. An unknown id, several ids or none go to moto (and its error)."""
    from moto.ec2.models import elastic_block_store
    from moto.ec2.utils import generic_filter  # the one elastic_block_store uses

    backend = elastic_block_store.EBSBackend
    original = backend.describe_volumes
    if getattr(original, MARKER, False):
        return

    @functools.wraps(original)
    def describe_volumes(
        self: Any, volume_ids: list[str] | None = None, filters: Any = None
    ) -> list[Any]:
        if type(volume_ids) is list and len(volume_ids) == 1 and type(volume_ids[0]) is str:
            volume = self.volumes.get(volume_ids[0])
            if volume is not None and volume.id == volume_ids[0]:
                matches = [volume]
                if filters:
                    matches = generic_filter(filters, matches)
                return matches
        return original(self, volume_ids, filters)

    setattr(describe_volumes, MARKER, True)
    backend.describe_volumes = describe_volumes  # type: ignore[method-assign]


def deregister_from_a_classic_elb_by_set() -> None:
    """Drop the instances leaving a classic ELB by looking each registered id up in a set of
    those leaving, not in their list: deregistering 2,500 of 5,000 instances cost ~0.26 s of
    moto's time (profiled), now ~1 ms. The ids kept, and their order, are moto's (a string is
    in the set exactly when it is in the list); anything but a list of strings goes to moto."""
    from moto.elb.models import ELBBackend

    original = ELBBackend.deregister_instances
    if getattr(original, MARKER, False):
        return

    @functools.wraps(original)
    def deregister_instances(
        self: Any,
        load_balancer_name: str,
        instance_ids: Any,
        from_autoscaling: bool = False,
    ) -> Any:
        if type(instance_ids) is not list or any(type(i) is not str for i in instance_ids):
            return original(self, load_balancer_name, instance_ids, from_autoscaling)
        load_balancer = self.get_load_balancer(load_balancer_name)
        name = "instance_autoscaling_ids" if from_autoscaling else "instance_sparse_ids"
        leaving = set(instance_ids)
        kept = [
            i
            for i in getattr(load_balancer, name)
            if (i not in leaving if type(i) is str else i not in instance_ids)
        ]
        setattr(load_balancer, name, kept)
        return load_balancer

    setattr(deregister_instances, MARKER, True)
    ELBBackend.deregister_instances = deregister_instances  # type: ignore[method-assign]


def find_the_ec2_backend_once_per_health_read() -> None:
    """Find the region's EC2 backend once per DescribeTargetHealth, not once per target.

    moto's ``describe_target_health`` hands each target's health check the ELBv2 backend's
    ``ec2_backend``, a property that looks the backend up in moto's registry of accounts and
    regions each time: ~4 of ~23 ms for 5,000 targets. It is the same backend for every target
    of one read, so it is found once; the healths are then moto's, in moto's order. An unknown
    group goes to moto (and its error)."""
    from moto.elbv2.models import ELBv2Backend

    original = ELBv2Backend.describe_target_health
    if getattr(original, MARKER, False):
        return

    @functools.wraps(original)
    def describe_target_health(
        self: Any, target_group_arn: str, targets: list[dict[str, Any]]
    ) -> list[Any]:
        target_group = self.target_groups.get(target_group_arn)
        if target_group is None:
            return original(self, target_group_arn, targets)
        if not targets:
            targets = list(target_group.targets.values())
        ec2_backend = self.ec2_backend
        return [target_group.health_for(target, ec2_backend) for target in targets]

    setattr(describe_target_health, MARKER, True)
    ELBv2Backend.describe_target_health = describe_target_health  # type: ignore[method-assign]


#: Every patch here, as (owner's import path, attribute), for tests that put moto's code back.
PATCHED = (
    ("moto.ec2.models.elastic_block_store.EBSBackend", "describe_volumes"),
    ("moto.elb.models.ELBBackend", "deregister_instances"),
    ("moto.elbv2.models.ELBv2Backend", "describe_target_health"),
)


def look_up_directly() -> None:
    """Install every lookup of this module (idempotent)."""
    find_a_volume_by_its_id()
    deregister_from_a_classic_elb_by_set()
    find_the_ec2_backend_once_per_health_read()
