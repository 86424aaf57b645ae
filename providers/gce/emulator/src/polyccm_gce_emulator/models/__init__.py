"""The emulator's model layer: resources and their state, one :class:`ComputeProject` per
project, all of them in :class:`ComputeBackends`. Nothing here knows HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from polyccm_gce_emulator.models.base import ProjectBase, Resource
from polyccm_gce_emulator.models.common import Link, render
from polyccm_gce_emulator.models.geography import REGIONS, all_zones, region_of
from polyccm_gce_emulator.models.instances import InstancesMixin
from polyccm_gce_emulator.models.internal import InternalLoadBalancingMixin
from polyccm_gce_emulator.models.operations import Operation, OperationFault
from polyccm_gce_emulator.settings import EmulatorSettings


class ComputeProject(InstancesMixin, InternalLoadBalancingMixin, ProjectBase):
    """One project as GCE creates it: the fixed zones and regions, and the default network."""

    def __init__(
        self, project: str, settings: EmulatorSettings, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(project, settings, clock)
        self.seed_geography()
        self.seed_network()
        self.group_members = {}


class ComputeBackends:
    """Every project the emulator has been asked about, created on first use (any project id
    exists, as any account does in moto). ``lock`` guards all of them."""

    def __init__(self, settings: EmulatorSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.lock = threading.RLock()
        self._projects: dict[str, ComputeProject] = {}

    def project(self, name: str) -> ComputeProject:
        found = self._projects.get(name)
        if found is None:
            found = self._projects[name] = ComputeProject(name, self.settings, self.clock)
            # A Shared VPC's route in one project names an instance of another.
            found.peers = self._projects
        return found

    def projects(self) -> list[ComputeProject]:
        return list(self._projects.values())

    def reset(self, settings: EmulatorSettings) -> None:
        self.settings = settings
        self._projects.clear()

    def configure(self, settings: EmulatorSettings) -> None:
        """New settings for every project, existing ones included."""
        self.settings = settings
        for project in self._projects.values():
            project.settings = settings


__all__ = [
    "REGIONS",
    "ComputeBackends",
    "ComputeProject",
    "Link",
    "Operation",
    "OperationFault",
    "Resource",
    "all_zones",
    "region_of",
    "render",
]
