"""Instance topology: the network nodes above an instance, for the node labels
``topology.k8s.aws/network-node-layer-1..N``, as upstream's instance topology manager reads them.

EC2's DescribeInstanceTopology answers for the instance types that have a topology (AWS lists
HPC, Trainium and P families). Instance types matching ``SupportedTopologyInstanceTypePattern``
(upstream's default: ``^(hpc|trn|p)[0-9]+[a-z]*(-[a-z0-9]+)?(\\.[0-9a-z]*)$``) must be answered:
an error there fails the node's metadata, so the node is initialised only once the topology
answers. Other types are asked too, and an error for them only costs the labels. What gives no
topology is remembered for a day and not asked again: a region without the API (or without the
permission), an instance type without topology, and an instance of a supported type that had
none (shutting down, say). Upstream asks one instance per call; here a batch of nodes costs one
call per 100 instances (the API's limit on ``InstanceIds``), pages followed.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from polyccm.errors import ConfigError

from polyccm_aws.api import AwsApi, error_code

log = logging.getLogger(__name__)

LAYER_LABEL_PREFIX = "topology.k8s.aws/network-node-layer-"
DEFAULT_PATTERN = r"^(hpc|trn|p)[0-9]+[a-z]*(-[a-z0-9]+)?(\.[0-9a-z]*)$"
"""Upstream's default ``SupportedTopologyInstanceTypePattern`` (topology.go:43)."""
UNSUPPORTED_TTL = 24 * 3600.0
"""How long a region, instance type or instance without topology is not asked again."""
IDS_PER_CALL = 100
"""The most instance ids DescribeInstanceTopology takes in one call."""
_REGION_WITHOUT_TOPOLOGY = ("UnsupportedOperation", "UnauthorizedOperation")


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """``SupportedTopologyInstanceTypePattern`` compiled (upstream's default when empty);
    :class:`ConfigError` for a pattern that does not compile (upstream panics)."""
    try:
        return re.compile(pattern or DEFAULT_PATTERN)
    except re.error as error:
        raise ConfigError(
            f"SupportedTopologyInstanceTypePattern {pattern!r} is not a regular expression: {error}"
        ) from None


class InstanceTopology:
    """Network-node layers of instances, asked in batches, with what has none remembered."""

    def __init__(
        self,
        api: AwsApi,
        *,
        region: str,
        pattern: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._region = region
        self._pattern = compile_pattern(pattern)
        self._clock = clock
        self._lock = threading.Lock()
        self._unsupported: dict[str, float] = {}
        """Region, instance type or instance id -> when it may be asked again."""

    def requires_answer(self, instance_type: str) -> bool:
        """Whether an instance of ``instance_type`` must have its topology (Go's MatchString
        finds the pattern anywhere, as :func:`re.search`)."""
        return bool(instance_type) and self._pattern.search(instance_type) is not None

    def layers(self, instances: Mapping[str, str]) -> dict[str, tuple[str, ...] | Exception]:
        """For each instance id -> instance type of ``instances``: its network nodes, layer 1
        first (empty when it has none or is not asked), or the error that leaves a supported
        type without its answer."""
        results: dict[str, tuple[str, ...] | Exception] = dict.fromkeys(instances, ())
        wanted = [i for i, kind in instances.items() if self._might_have_topology(i, kind)]
        for start in range(0, len(wanted), IDS_PER_CALL):
            chunk = wanted[start : start + IDS_PER_CALL]
            try:
                answered = self._describe(chunk)
            except Exception as error:  # noqa: BLE001 - sorted out per instance below
                code = error_code(error)
                if code in _REGION_WITHOUT_TOPOLOGY:
                    log.info("DescribeInstanceTopology is not available in %s (%s): nodes get "
                             "no network-node labels", self._region, code)  # fmt: skip
                    self._remember(self._region)
                    return results
                for instance_id in chunk:
                    if self.requires_answer(instances[instance_id]):
                        results[instance_id] = error
                    else:
                        log.warning("instance topology of %s: %s; no network-node labels",
                                    instance_id, error)  # fmt: skip
                continue
            for instance_id in chunk:
                nodes = answered.get(instance_id)
                if nodes is not None:
                    results[instance_id] = nodes
                elif self.requires_answer(instances[instance_id]):
                    # Perhaps shutting down: the type has topology, so only this instance is
                    # left alone.
                    log.warning("instance %s (%s) has no instance topology listed", instance_id,
                                instances[instance_id])  # fmt: skip
                    self._remember(instance_id)
                else:
                    self._remember(instances[instance_id])
        return results

    def _describe(self, instance_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        found: dict[str, tuple[str, ...]] = {}
        params: dict[str, object] = {"InstanceIds": list(instance_ids)}
        while True:
            answer = self._api.call("ec2", "describe_instance_topology", **params)
            for item in answer.get("Instances") or ():
                found[str(item["InstanceId"])] = tuple(
                    str(n) for n in item.get("NetworkNodes") or ()
                )
            token = answer.get("NextToken")
            if not token:
                return found
            params["NextToken"] = token

    def _might_have_topology(self, instance_id: str, instance_type: str) -> bool:
        if not instance_type:
            return False  # Fargate and other instance-less nodes
        now = self._clock()
        with self._lock:
            for key in (self._region, instance_id, instance_type):
                until = self._unsupported.get(key)
                if until is not None and until > now:
                    return False
        return True

    def _remember(self, key: str) -> None:
        with self._lock:
            self._unsupported[key] = self._clock() + UNSUPPORTED_TTL


def layer_labels(nodes: Sequence[str]) -> dict[str, str]:
    """``topology.k8s.aws/network-node-layer-N`` for each network node, layer 1 first."""
    return {f"{LAYER_LABEL_PREFIX}{index}": node for index, node in enumerate(nodes, 1)}
