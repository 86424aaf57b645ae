"""Fault conformance: the cloud throttles every call for a stretch (:class:`Throttling`, mixed
into :class:`~polyccm_testing.conformance.FaultConformance`).

``test_fault_a_throttled_stretch_backs_off_warns_and_loses_nothing``: with ``polyccm`` running
and its nodes initialised, the cloud answers every call in its own throttling form for
:data:`THROTTLE_SECONDS` (AWS ``Throttling``/``RequestLimitExceeded``, GCE 403
``rateLimitExceeded``, DigitalOcean 429 with ``ratelimit-reset``, Metal 429 with
``Retry-After``: the adapter's :meth:`Throttleable.throttle`) while :data:`SERVICE_COUNT`
Services are created (longer, up to :data:`MAX_THROTTLE_SECONDS`, until ``polyccm`` says
why). ``polyccm`` must

* back off: the calls the cloud received during the stretch (throttled ones included) stay
  within :func:`call_bound`;
* say so: a Warning event on the Services it tried names the throttling
  (:data:`THROTTLE_WORDS`; with one worker and an SDK that retries with backoff, the others
  may not have been tried before the stretch ends);
* lose nothing: once the stretch ends every Service is served, by exactly one load balancer,
  and once they are deleted nothing of the cluster is left in the cloud.

The test skips, naming it, for an adapter without :meth:`Throttleable.throttle`.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import TYPE_CHECKING, Protocol

import pytest
from polyccm.cloud import LoadBalancer
from polyccm.kube.api import EVENTS, NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node

from polyccm_testing.conformance.faults_restart import one_each
from polyccm_testing.kubeobjects import make_node, make_service, wait_for

if TYPE_CHECKING:
    from polyccm_testing.conformance.faults import FaultCloudUnderTest, Processes

THROTTLE_SECONDS = 10.0
MAX_THROTTLE_SECONDS = 25.0
"""The stretch goes on past :data:`THROTTLE_SECONDS` until polyccm warns, for at most this."""
SERVICE_COUNT = 3
NODE_COUNT = 2
SETTLE_TIMEOUT = 120.0
THROTTLE_WORDS = re.compile(
    r"throttl|rate.?limit|too.?many.?requests|RequestLimitExceeded", re.IGNORECASE
)
"""What a Warning must say for a user to see that the cloud throttled polyccm."""

TRIES_PER_SYNC = 5
"""The most times one throttled call is sent within one sync: botocore's ``standard`` retry
mode as the AWS provider configures it (``total_max_attempts`` 5, polyccm_aws/api.py), GCE's
``invoke`` (``max_attempts`` 4, polyccm_gce/api.py); DigitalOcean and Metal send a 429'd call
once and hand the item back (``RetryAfter``)."""
SYNCS_PER_SECOND = 1.0
"""The most syncs of one object per throttled second. Upstream's service controller retries a
failed Service after 5 s, doubling to 300 s (k8s.io/cloud-provider
controllers/service/controller.go:59-60 and 121-125@v0.36.2: minRetryDelay, maxRetryDelay,
``NewTypedItemExponentialFailureRateLimiter``), so 1 + log2(1 + T/5) syncs in T seconds; a cloud
that names its wait (``Retry-After: 1`` of Metal, the fake's 1 s) is asked again after it, at
most once a second."""


def call_bound(objects: int, seconds: float) -> int:
    """The most calls ``objects`` (Services and Nodes) may cost in a throttled stretch of
    ``seconds``: each one's first sync (:data:`TRIES_PER_SYNC` tries), then at most
    :data:`SYNCS_PER_SECOND` syncs a second (one try each, as the cloud asks: its retry
    budget spent, or a named wait). A client retrying in a tight loop costs hundreds a second."""
    return int(objects * (TRIES_PER_SYNC + SYNCS_PER_SECOND * seconds))


class Throttleable(Protocol):
    def throttle(self, seconds: float) -> None:
        """For ``seconds`` from now, answer every API call in the cloud's own throttling form
        (``clear_faults`` ends it early)."""
        ...

    def all_calls(self) -> int:
        """API calls the cloud received so far, throttled ones included (the kit compares two
        readings; it makes no call itself meanwhile)."""
        ...


def _initialised(api: KubeApi, names: set[str]) -> bool:
    nodes = {item["metadata"]["name"]: Node(item) for item in api.list(NODES)["items"]}
    return names <= set(nodes) and all(
        nodes[n].provider_id and not nodes[n].has_taint(UNINITIALIZED_TAINT) for n in names
    )


def _throttle_warnings(api: KubeApi, namespace: str) -> dict[str, str]:
    """Per Service name, one Warning event naming the throttling."""
    found: dict[str, str] = {}
    for event in api.list(EVENTS, namespace)["items"]:
        involved = event.get("involvedObject") or {}
        message = str(event.get("message", ""))
        if (
            involved.get("kind") == "Service"
            and event.get("type") == "Warning"
            and THROTTLE_WORDS.search(message)
        ):
            found.setdefault(str(involved.get("name")), message)
    return found


def _served(api: KubeApi, namespace: str) -> list[str]:
    return [
        s["metadata"]["name"]
        for s in api.list(SERVICES, namespace)["items"]
        if (s.get("status") or {}).get("loadBalancer", {}).get("ingress")
    ]


class Throttling:
    """The throttling promise (uses :class:`FaultConformance`'s fixtures)."""

    @pytest.mark.timeout(3 * SETTLE_TIMEOUT + 60)
    def test_fault_a_throttled_stretch_backs_off_warns_and_loses_nothing(  # noqa: PLR0917
        self,
        cloud: FaultCloudUnderTest,
        kit_fault_load_balancer: LoadBalancer,
        kit_processes: Processes,
        kube_api: KubeApi,
        namespace: str,
        clean_nodes: None,
    ) -> None:
        from polyccm_testing.conformance.faults import START_TIMEOUT

        throttle = getattr(cloud, "throttle", None)
        all_calls = getattr(cloud, "all_calls", None)
        if throttle is None or all_calls is None:
            pytest.skip(f"{type(cloud).__name__} has no throttle() and all_calls()")
        # Its imports done while the cloud is arranged (polyccm_testing.warm_start).
        process = kit_processes.prepare("throttle", "--leader-elect=false")
        tag = secrets.token_hex(2)
        names = [cloud.create_instance(f"throttle-{i}-{tag}") for i in range(NODE_COUNT)]
        for name in names:
            make_node(kube_api, name)
        baseline = cloud.cluster_resources()
        kit_processes.go(process)
        started_in_time = kit_processes.wait_started(process, 2 * START_TIMEOUT)
        assert started_in_time, f"polyccm did not start; log:\n{kit_processes.tail()}"
        wait_for(
            lambda: _initialised(kube_api, set(names)),
            SETTLE_TIMEOUT,
            f"the nodes initialised before the stretch; log:\n{kit_processes.tail()}",
        )
        services = [f"throttle-{index}" for index in range(SERVICE_COUNT)]
        before = all_calls()
        throttle(THROTTLE_SECONDS)
        started = time.monotonic()
        for name in services:
            make_service(kube_api, namespace, name)
        # The stretch lasts THROTTLE_SECONDS, longer if polyccm has not said why yet (an SDK
        # retrying with backoff may outlast it: botocore's 5 tries, up to 1 + 2 + 4 + 8 s).
        time.sleep(max(0.0, started + THROTTLE_SECONDS - time.monotonic()))
        if not _throttle_warnings(kube_api, namespace):
            throttle(MAX_THROTTLE_SECONDS - THROTTLE_SECONDS)
            wait_for(
                lambda: (
                    _throttle_warnings(kube_api, namespace)
                    or time.monotonic() > started + MAX_THROTTLE_SECONDS
                ),
                MAX_THROTTLE_SECONDS,
            )
        during = all_calls() - before
        stretch = time.monotonic() - started
        cloud.clear_faults()
        bound = call_bound(SERVICE_COUNT + NODE_COUNT, stretch)
        served_during = _served(kube_api, namespace)
        wait_for(
            lambda: len(_served(kube_api, namespace)) == SERVICE_COUNT,
            SETTLE_TIMEOUT,
            f"every Service served after the stretch; log:\n{kit_processes.tail()}",
        )
        served = time.monotonic() - started
        warnings = _throttle_warnings(kube_api, namespace)
        wrong = one_each(cloud.load_balancers_per_service(), SERVICE_COUNT)
        for name in services:
            kube_api.delete(SERVICES, name, namespace)
        wait_for(
            lambda: not kube_api.list(SERVICES, namespace)["items"],
            SETTLE_TIMEOUT,
            f"every Service finalised; log:\n{kit_processes.tail()}",
        )
        kit_processes.close()
        left = cloud.cluster_resources() - baseline
        print(
            f"throttled {stretch:.1f}s: {during} calls (bound {bound}); every Service served "
            f"{served:.1f}s after the stretch began; warnings: {sorted(warnings.values())[:1]}"
        )
        assert during <= bound, (
            f"{during} calls in a {stretch:.1f}s throttled stretch, more than {bound} "
            f"({SERVICE_COUNT} Services, {NODE_COUNT} nodes): polyccm does not back off"
        )
        assert not served_during, f"served while every call was throttled: {served_during}"
        # One worker may spend the whole stretch on one Service (an SDK retrying with
        # backoff), so the others may not have been tried yet: at least one must say why.
        assert warnings, f"no Warning event on {services} names the throttling"
        assert not wrong, wrong
        assert not left, f"left in the cloud after the Services were deleted: {sorted(left)}"
