"""High availability end to end: two real ``polyccm --provider aws`` processes campaign for one
Lease on the real kube-apiserver and share one AWS emulator (moto, real boto3).

Each process runs with its own ``AWS_SDK_UA_APP_ID``, which botocore writes into the User-Agent
of every request, so the emulator itself says who called the cloud: the standby made no call
until the leader was gone. Killing the leader part-way through creating 20 classic ELBs hands
the work to the standby within the lease duration, and it finishes every one with nothing
duplicated; deleting the services then leaves nothing behind. A SIGTERM gives the Lease up, so
the standby takes over long before the lease would have expired.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from polyccm.kube.api import LEASES, NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node, Service
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World, isolated_environment
from polyccm_testing.kubeobjects import lease_holder, make_node, make_service, wait_for

LEASE_NAME = "cloud-controller-manager"
JITTER = 2.2
"""A candidate waits up to retry_period * (1 + 1.2) between two looks at the Lease."""
SLACK = 1.0
"""Seconds allowed for the Lease requests themselves on a busy two-core machine."""
SERVICES_AT_ONCE = 20


@dataclass
class Candidate:
    """One polyccm process, named by the application id its cloud requests carry."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    identity: str = ""

    def logged(self, pattern: str) -> str | None:
        found = re.search(pattern, self.log.read_text(errors="replace"))
        return found.group(0) if found else None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@dataclass
class Cluster:
    """What the tests share: the API, the emulator, and a way to start candidates."""

    api: KubeApi
    namespace: str
    aws: EmulatorControl
    kubeconfig: str
    environment: dict[str, str]
    directory: Path
    candidates: list[Candidate] = field(default_factory=list)

    def start(self, name: str, lease: float, renew: float, retry: float) -> Candidate:
        """Start ``polyccm --provider aws`` under leader election, its cloud requests marked
        ``name``; the cluster id comes from cloud.conf, so it makes no cloud call before it
        leads."""
        config = self.directory / "cloud.conf"
        config.write_text(f"[Global]\nRegion = us-east-1\nKubernetesClusterID = {CLUSTER}\n")
        log = self.directory / f"{name}.log"
        command = [
            sys.executable,
            "-m",
            "polyccm.cli",
            "--provider=aws",
            f"--kubeconfig={self.kubeconfig}",
            f"--cloud-config={config}",
            "--configure-cloud-routes=false",
            "--secure-port=0",
            "--concurrent-service-syncs=3",
            "--leader-elect=true",
            f"--leader-elect-resource-namespace={self.namespace}",
            f"--leader-elect-lease-duration={lease:g}s",
            f"--leader-elect-renew-deadline={renew:g}s",
            f"--leader-elect-retry-period={retry * 1000:.0f}ms",
        ]
        with log.open("wb") as output:
            process = subprocess.Popen(
                command,
                env={**self.environment, "AWS_SDK_UA_APP_ID": name},
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        candidate = Candidate(name, process, log)
        self.candidates.append(candidate)
        return candidate

    def lease(self) -> dict[str, Any]:
        lease: dict[str, Any] = self.api.get(LEASES, LEASE_NAME, self.namespace)
        return lease

    def records_until_taken_from(
        self, leader: Candidate, resource_version: str, timeout: float
    ) -> list[dict[str, Any]]:
        """Every Lease record written after ``resource_version``, as a watch delivers them (none
        missed), up to the first one held by someone other than ``leader``."""
        records = []
        events = self.api.watch(
            LEASES,
            self.namespace,
            resource_version=resource_version,
            timeout_seconds=round(timeout),
            fieldSelector=f"metadata.name={LEASE_NAME}",
        )
        for event in events:
            if event["type"] != "MODIFIED":
                continue
            spec: dict[str, Any] = event["object"]["spec"]
            records.append(spec)
            if spec.get("holderIdentity") not in (None, "", leader.identity):
                return records
        pytest.fail(f"nobody took the Lease from {leader.name} in {timeout}s: {records}")

    def leads(self, candidate: Candidate) -> str:
        """Wait until ``candidate`` holds the Lease (the only candidate running); its identity."""
        candidate.identity = wait_for(
            lambda: lease_holder(self.api, self.namespace, LEASE_NAME),
            timeout=30,
            what=f"{candidate.name} to lead",
        )
        return candidate.identity

    def stands_by(self, candidate: Candidate) -> None:
        wait_for(
            lambda: candidate.logged(r"is campaigning for lease"),
            timeout=30,
            what=f"{candidate.name} to campaign",
        )

    def calls(self, candidate: Candidate) -> int:
        """Requests the emulator received carrying ``candidate``'s application id."""
        return sum(self.aws.calls_by_agent().get(candidate.name, {}).values())


@pytest.fixture
def cluster(
    kube_api: KubeApi,
    namespace: str,
    aws: EmulatorControl,
    control_plane: Any,
    emulator: Mapping[str, str],
    clean_nodes: None,
    tmp_path: Path,
) -> Iterator[Cluster]:
    environment = {**os.environ, **isolated_environment(emulator)}
    environment.pop("AWS_SDK_UA_APP_ID", None)
    running = Cluster(
        kube_api, namespace, aws, str(control_plane.kubeconfig), environment, tmp_path
    )
    yield running
    for candidate in running.candidates:
        if candidate.process.poll() is None:
            candidate.process.send_signal(signal.SIGKILL)
        candidate.process.wait(timeout=30)
        print(f"--- {candidate.name} (pid {candidate.process.pid}) ---\n{candidate.tail()}")


def moment(stamp: str) -> float:
    """A Lease MicroTime as seconds since the epoch."""
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def elb_name(service: Mapping[str, Any]) -> str:
    return ("a" + str(service["metadata"]["uid"]).replace("-", ""))[:32]


def hostnames(api: KubeApi, namespace: str) -> dict[str, str]:
    """Service name -> the hostname in its load-balancer status ('' without one)."""
    found = {}
    for item in api.list(SERVICES, namespace)["items"]:
        ingress = Service(item).load_balancer_status.get("ingress") or [{}]
        found[item["metadata"]["name"]] = str(ingress[0].get("hostname") or "")
    return found


def elbs(world: World) -> dict[str, dict[str, Any]]:
    pages = world.elb.get_paginator("describe_load_balancers").paginate()
    return {d["LoadBalancerName"]: d for page in pages for d in page["LoadBalancerDescriptions"]}


def elb_groups(world: World) -> list[dict[str, Any]]:
    """The VPC's ``k8s-elb-*`` security groups, tagged or not."""
    groups: list[dict[str, Any]] = world.ec2.describe_security_groups(
        Filters=[
            {"Name": "vpc-id", "Values": [world.vpc_id]},
            {"Name": "group-name", "Values": ["k8s-elb-*"]},
        ]
    )["SecurityGroups"]
    return groups


def node_group_sources(world: World) -> set[str]:
    """The groups the node security group admits traffic from."""
    (group,) = world.ec2.describe_security_groups(GroupIds=[world.node_group])["SecurityGroups"]
    return {
        pair["GroupId"]
        for permission in group.get("IpPermissions") or ()
        for pair in permission.get("UserIdGroupPairs") or ()
    }


def nodes_of(api: KubeApi, world: World) -> list[str]:
    """Two instances in two zones, registered as their kubelets would (tainted, Ready)."""
    names = []
    for zone in ("us-east-1a", "us-east-1b"):
        (instance,) = world.instances(1, zone)
        names.append(str(instance["PrivateDnsName"]))
        make_node(api, names[-1])
    return names


def initialised(api: KubeApi, names: list[str]) -> bool:
    return all(not Node(api.get(NODES, name)).has_taint(UNINITIALIZED_TAINT) for name in names)


def test_killing_the_leader_mid_creation_hands_every_load_balancer_to_the_standby(
    cluster: Cluster,
) -> None:
    """Lease 5 s, renew deadline 3 s, retry 0.5 s; three services synced at once, so several
    creates are cut short by the SIGKILL (the kill waits for a security group without its ELB).
    The standby takes the Lease between 5 s and 5 + 2 * 2.2 * 0.5 + 1 = 8.2 s after the
    leader's last renewal, finishes all 20 with one ELB and one group each, then deletes them
    all."""
    lease, renew, retry = 5.0, 3.0, 0.5
    api, namespace = cluster.api, cluster.namespace
    world = World()
    names = nodes_of(api, world)
    instance_ids = {
        i["InstanceId"]
        for reservation in world.ec2.describe_instances()["Reservations"]
        for i in reservation["Instances"]
    }

    leader = cluster.start("leader", lease, renew, retry)
    cluster.leads(leader)
    wait_for(lambda: initialised(api, names), timeout=30, what="the leader to initialise nodes")
    standby = cluster.start("standby", lease, renew, retry)
    cluster.stands_by(standby)
    assert cluster.calls(leader) > 0

    services = [make_service(api, namespace, f"web-{i:02}") for i in range(SERVICES_AT_ONCE)]
    wanted = {elb_name(s): s["metadata"]["name"] for s in services}

    def part_way() -> tuple[int, int] | None:
        """Kill once some ELBs exist, preferably while a security group waits for its ELB."""
        made, groups = len(elbs(world)), len(elb_groups(world))
        if made >= 8 or (made >= 2 and groups > made):
            return made, groups
        return None

    made, groups = wait_for(part_way, timeout=60, what="the leader part-way through")
    standby_calls_while_standing_by = cluster.calls(standby)
    finished = sum(1 for h in hostnames(api, namespace).values() if h)
    before = cluster.lease()
    leader.process.send_signal(signal.SIGKILL)
    killed_at = time.time()
    leader.process.wait(timeout=30)
    assert standby_calls_while_standing_by == 0, "a standby makes no cloud call"
    assert made < SERVICES_AT_ONCE and finished < SERVICES_AT_ONCE, (
        f"killed part-way: {made} ELBs, {groups} security groups, {finished} services done"
    )

    records = cluster.records_until_taken_from(
        leader, before["metadata"]["resourceVersion"], timeout=lease + 15
    )
    *renewals, taken = [before["spec"], *records]
    assert {r["holderIdentity"] for r in renewals} == {leader.identity}, "no release on SIGKILL"
    # The leader's last renewal is the last record it wrote. The standby saw that record at its
    # next look, at most JITTER * retry later, and takes the Lease at its first look once
    # lease_duration has passed since then: at most lease + 2 * JITTER * retry after that
    # renewal (and so after the kill), with SLACK for the Lease requests themselves.
    last_renewal = moment(renewals[-1]["renewTime"])
    acquired = moment(taken["acquireTime"])
    bound = lease + 2 * JITTER * retry + SLACK
    assert last_renewal <= killed_at
    assert acquired - last_renewal >= lease, "never before the lease expired"
    assert acquired - killed_at <= acquired - last_renewal <= bound, (
        f"took over {acquired - last_renewal:.2f}s after the last renewal, bound {bound:.1f}s"
    )

    done = wait_for(
        lambda: all((h := hostnames(api, namespace)).values()) and h,
        timeout=90,
        what="every service's ELB",
    )
    assert cluster.calls(standby) > 0
    by_name = elbs(world)
    assert set(by_name) == set(wanted), "exactly one ELB per service, none extra"
    groups_now = elb_groups(world)
    group_of = {g["GroupName"]: g["GroupId"] for g in groups_now}
    assert sorted(g["GroupName"] for g in groups_now) == sorted(
        f"k8s-elb-{name}" for name in wanted
    ), "exactly one security group per ELB"
    for group in groups_now:
        assert {"Key": world.cluster_tag, "Value": "owned"} in group["Tags"], group
    for name, service in wanted.items():
        elb = by_name[name]
        assert done[service] == elb["DNSName"]
        assert {i["InstanceId"] for i in elb["Instances"]} == instance_ids
        assert elb["SecurityGroups"] == [group_of[f"k8s-elb-{name}"]]
    assert node_group_sources(world) == set(group_of.values())

    for service in wanted.values():
        api.delete(SERVICES, service, namespace)
    wait_for(
        lambda: not api.list(SERVICES, namespace)["items"],
        timeout=90,
        what="every service finalised by the new leader",
    )
    assert elbs(world) == {}
    assert elb_groups(world) == []
    assert node_group_sources(world) == set()

    standby.process.send_signal(signal.SIGTERM)
    assert standby.process.wait(timeout=30) == 0


def test_a_leader_stopped_with_sigterm_gives_the_lease_up_to_the_standby_at_once(
    cluster: Cluster,
) -> None:
    """Lease 15 s: the standby takes over within one jittered retry period of the release,
    under 5 s after the SIGTERM, which nothing but the release explains."""
    lease, renew, retry = 15.0, 10.0, 0.5
    api, namespace = cluster.api, cluster.namespace
    world = World()
    names = nodes_of(api, world)
    leader = cluster.start("leader", lease, renew, retry)
    cluster.leads(leader)
    wait_for(lambda: initialised(api, names), timeout=30, what="the leader to initialise nodes")
    standby = cluster.start("standby", lease, renew, retry)
    cluster.stands_by(standby)
    assert cluster.calls(standby) == 0, "a standby makes no cloud call"

    before = cluster.lease()
    leader.process.send_signal(signal.SIGTERM)
    stopped_at = time.time()
    records = cluster.records_until_taken_from(
        leader, before["metadata"]["resourceVersion"], timeout=lease + 15
    )
    assert leader.process.wait(timeout=30) == 0
    *earlier, released, taken = [before["spec"], *records]
    assert not released.get("holderIdentity"), f"the leader's last record releases it: {records}"
    assert released["leaseDurationSeconds"] == 1, "as client-go's ReleaseOnCancel"
    assert earlier and {r["holderIdentity"] for r in earlier} == {leader.identity}
    last_renewal = moment(earlier[-1]["renewTime"])
    acquired = moment(taken["acquireTime"])
    # Without the release the standby could not take the Lease before lease_duration after
    # the last renewal it saw; released, it takes it at its next look.
    assert acquired - moment(released["renewTime"]) <= JITTER * retry + SLACK
    assert acquired - last_renewal < lease / 3, f"{acquired - last_renewal:.1f}s after renewal"
    assert acquired - stopped_at < lease / 3, f"hand-over took {acquired - stopped_at:.1f}s"

    service = make_service(api, namespace, "after")
    wait_for(
        lambda: hostnames(api, namespace).get("after"),
        timeout=30,
        what="the new leader's ELB",
    )
    assert cluster.calls(standby) > 0
    assert set(elbs(world)) == {elb_name(service)}
    api.delete(SERVICES, "after", namespace)
    wait_for(lambda: not api.list(SERVICES, namespace)["items"], what="the service finalised")
    standby.process.send_signal(signal.SIGTERM)
    assert standby.process.wait(timeout=30) == 0
