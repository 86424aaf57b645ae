"""The switch of issue 25 against upstream's own CCM: k8s.io/cloud-provider-aws v1.37.1 (built
by ``make test`` from the Go module proxy, :mod:`polyccm_testing.peers.builds`) runs first on
the AWS emulator and the real kube-apiserver, then polyccm's real command takes over with the
same cloud.conf, environment and flags.

The scenario (:mod:`polyccm_aws_emulator.switch`): ten Services, classic ELBs and NLBs, that
carry every annotation of upstream's table between them, and nodes in two zones.

1. upstream initialises the nodes and makes every load balancer;
2. it stops; ``polyccm plan`` says ``adopt`` for each Service and nothing else;
3. polyccm settles on that with zero cloud writes, no Service status or annotation changed and
   no Warning event;
4. the same edits (a port added, annotations changed, a node added and one removed, Services
   deleted), made once under upstream and once under polyccm from the same start, leave the
   same cloud, field by field (ids and times aside), and no load balancer's DNS name or
   address changes where upstream's does not;
5. the reverse switch, upstream taking over from polyccm, makes zero writes.

What still differs is a strict xfail of its own naming the issue that fixes it; where polyccm
differs on purpose (a warning upstream does not give) the test asserts the difference.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from polyccm.kube.api import EVENTS, NAMESPACES, NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_aws_emulator import switch
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.switch import NAMESPACE, SwitchCloud
from polyccm_aws_emulator.switch import SERVICES as TABLE
from polyccm_aws_emulator.testing import point_boto3_at
from polyccm_testing.devenv.cleanup import delete_all_nodes, delete_namespace
from polyccm_testing.kubeobjects import make_node
from polyccm_testing.peers.builds import aws_peer_or_reason
from polyccm_testing.peers.run import (
    RunningPeer,
    aws_environment,
    common_flags,
    loopback_environment,
    start_peer,
)

# The first test builds the upstream peer when `make test` (`make peers`) has not: about ten
# minutes on two cores, past the suite's per-test timeout.
pytestmark = pytest.mark.timeout(1200)

#: Actions that only read (the emulator counts every call by its action).
READS = ("Describe", "Get", "List")
#: How long without a cloud call counts as settled.
QUIET_SECONDS = 3.0


@pytest.fixture(scope="module")
def upstream_binary() -> Path:
    """aws-cloud-controller-manager v1.37.1 (``make test`` builds it before pytest; otherwise
    it is built here, once). Skipped only when Go is missing and none is cached."""
    found, reason = aws_peer_or_reason()
    if found is None:
        if shutil.which("go") is None:
            pytest.skip(reason)
        pytest.fail(reason)
    return found


def writes(aws: EmulatorControl) -> dict[str, int]:
    return {a: n for a, n in aws.calls().items() if not a.startswith(READS)}


def settled(aws: EmulatorControl, *, timeout: float = 60.0) -> Mapping[str, int]:
    """Wait until the cloud has had no call for :data:`QUIET_SECONDS`; the calls so far."""
    deadline = time.monotonic() + timeout
    last = dict(aws.calls())
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = dict(aws.calls())
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= QUIET_SECONDS:
            return now
    pytest.fail(f"the cloud calls did not settle in {timeout}s: {last}")


@dataclass
class Scenario:
    """One run of the scenario: the cloud, the cluster's Nodes and Services, and the CCMs."""

    kube: KubeApi
    aws: EmulatorControl
    emulator: Mapping[str, str]
    kubeconfig: Path
    directory: Path
    binary: Path
    cloud: SwitchCloud = field(init=False)
    config: Path = field(init=False)
    table: tuple[switch.SwitchService, ...] = TABLE
    logs: list[Path] = field(default_factory=list)
    uids: dict[str, str] = field(default_factory=dict)
    """Service UID -> name, once the load balancers are made."""

    def __post_init__(self) -> None:
        delete_namespace(self.kube, NAMESPACE)
        self.kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        self.cloud = SwitchCloud.create()
        self.config = self.directory / "cloud.conf"
        self.config.write_text(self.cloud.cloud_config())
        for label in list(self.cloud.instances):
            self.register(label)

    # -- the cluster ---------------------------------------------------------------------------

    def register(self, label: str) -> str:
        """The node of instance ``label`` as its kubelet registers it (tainted)."""
        name = str(self.cloud.instances[label]["PrivateDnsName"])
        make_node(self.kube, name, labels=self.cloud.node_labels(label))
        return name

    def services(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.kube.list(SERVICES, NAMESPACE)["items"]
        return items

    def kube_state(self) -> dict[str, Any]:
        """What users see of the Services: annotations, finalizers, status; by name."""
        return {
            s["metadata"]["name"]: {
                "annotations": s["metadata"].get("annotations", {}),
                "finalizers": s["metadata"].get("finalizers", []),
                "status": s.get("status", {}),
            }
            for s in self.services()
        }

    def nodes_state(self) -> dict[str, Any]:
        """Each node's providerID, labels, taints and addresses, by name."""
        return {
            n["metadata"]["name"]: {
                "providerID": n["spec"].get("providerID"),
                "labels": n["metadata"].get("labels", {}),
                "taints": n["spec"].get("taints", []),
                "addresses": n.get("status", {}).get("addresses", []),
            }
            for n in self.kube.list(NODES)["items"]
        }

    def warnings(self) -> set[tuple[str, str, str]]:
        """(object, reason, message) of the Warning events in the namespace."""
        events = self.kube.list(EVENTS, NAMESPACE)["items"]
        return {
            (e["involvedObject"]["name"], e.get("reason", ""), e.get("message", ""))
            for e in events
            if e.get("type") == "Warning"
        }

    def initialised(self) -> list[str]:
        """The nodes not initialised yet (still tainted, or no providerID)."""
        return [
            node.name
            for node in (Node(n) for n in self.kube.list(NODES)["items"])
            if node.has_taint(UNINITIALIZED_TAINT) or not node.provider_id
        ]

    def converged(self) -> None:
        """Every node initialised; then (the first time) the Services created, and each
        served; then no cloud call for a while.

        The Services come after the nodes' providerIDs: upstream's node sync skips a Service
        whose first sync is still running (cloud-provider v0.37.0 controllers/service
        controller.go ~715), so a node initialised meanwhile would join its load balancer only
        at the next periodic sync, 100 s later (~54): a race, not a difference."""
        _wait_empty(self.initialised, f"the nodes initialised; logs: {self.logs}")
        if not self.services():
            for service in self.table:
                manifest = switch.service_manifest(service, self.cloud)
                self.kube.create(SERVICES, manifest, NAMESPACE)

        def unserved() -> list[str]:
            return [
                s["metadata"]["name"]
                for s in self.services()
                if not (s.get("status", {}).get("loadBalancer") or {}).get("ingress")
            ]

        _wait_empty(unserved, f"every Service served; logs: {self.logs}")
        settled(self.aws)

    def cloud_state(self) -> dict[str, Any]:
        return switch.cloud_state(self.cloud, self.uids)

    def remember_uids(self) -> None:
        self.uids = switch.service_names(self.services())

    # -- the CCMs ------------------------------------------------------------------------------

    def flags(self) -> list[str]:
        """The deployment's flags, the same for both CCMs."""
        return [
            "--cloud-provider=aws",
            f"--cloud-config={self.config}",
            *common_flags(self.kubeconfig),
            "--node-monitor-period=1s",
        ]

    def env(self) -> dict[str, str]:
        return aws_environment(self.emulator, region=switch.REGION)

    @contextmanager
    def upstream(self) -> Iterator[RunningPeer]:
        with self._run(self.binary, "upstream") as peer:
            yield peer

    @contextmanager
    def polyccm(self) -> Iterator[RunningPeer]:
        with self._run(Path(sys.executable), "polyccm", "-m", "polyccm.cli") as peer:
            yield peer

    @contextmanager
    def _run(self, binary: Path, name: str, *prefix: str) -> Iterator[RunningPeer]:
        log = self.directory / f"{len(self.logs):02d}-{name}.log"
        self.logs.append(log)
        peer = start_peer(binary, [*prefix, *self.flags()], self.env(), log)
        try:
            yield peer
            peer.check_running()
        finally:
            peer.stop()

    def plan(self) -> dict[str, Any]:
        """``polyccm plan -o json`` with the deployment's flags and environment."""
        flags = [f for f in self.flags() if not f.startswith(("--leader-elect", "--secure-port"))]
        command = [sys.executable, "-m", "polyccm.cli", "plan", *flags, "-o", "json"]
        done = subprocess.run(
            command,
            env=loopback_environment(self.env()),
            capture_output=True,
            text=True,
            timeout=120,
        )
        (self.directory / "plan.json").write_text(done.stdout + done.stderr)
        assert done.stdout, done.stderr
        document: dict[str, Any] = json.loads(done.stdout)
        document["exitStatus"] = done.returncode
        return document

    # -- step 4 --------------------------------------------------------------------------------

    def edit(self) -> None:
        """The user's edits, each served and the cloud quiet before the next (so that two runs
        see them in the same order): a port added and annotations changed, Services deleted, a
        node added, one removed (its instance terminated, its Node deleted)."""
        switch.add_port(self.kube)
        switch.change_annotations(self.kube)
        settled(self.aws)
        switch.delete_services(self.kube)

        def left() -> list[str]:
            names = {s["metadata"]["name"] for s in self.services()}
            return sorted(names & set(switch.EDIT_DELETED))

        _wait_empty(left, f"the deleted Services finalised; logs: {self.logs}")
        settled(self.aws)
        self.cloud.add_instance(switch.ZONES[1])
        self.register(list(self.cloud.instances)[-1])
        _wait_empty(self.initialised, f"the new node initialised; logs: {self.logs}")
        settled(self.aws)
        gone = self.cloud.instances["a1"]
        self.cloud.world.ec2.terminate_instances(InstanceIds=[gone["InstanceId"]])
        self.kube.delete(NODES, str(gone["PrivateDnsName"]))
        settled(self.aws)


def _wait_empty(pending: Callable[[], list[str]], what: str, timeout: float = 60.0) -> None:
    """Wait until ``pending()`` is empty; fail naming what it still lists."""
    deadline = time.monotonic() + timeout
    left = pending()
    while left:
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}; still: {left}")
        time.sleep(0.2)
        left = pending()


@dataclass
class Run:
    """What the scenario observed, for the tests below to judge one step each."""

    plan: dict[str, Any] = field(default_factory=dict)
    plan_writes: dict[str, int] = field(default_factory=dict)
    takeover_writes: dict[str, int] = field(default_factory=dict)
    takeover_calls: dict[str, int] = field(default_factory=dict)
    kube: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    nodes: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    new_warnings: set[tuple[str, str, str]] = field(default_factory=set)
    made: dict[str, Any] = field(default_factory=dict)
    made_again: dict[str, Any] = field(default_factory=dict)
    polyccm_edited: dict[str, Any] = field(default_factory=dict)
    upstream_edited: dict[str, Any] = field(default_factory=dict)
    addresses: dict[str, tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)
    upstream_restart_writes: dict[str, int] = field(default_factory=dict)
    reverse_writes: dict[str, int] = field(default_factory=dict)
    reverse_fresh_writes: dict[str, int] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def _polyccm_half(scenario: Scenario, run: Run) -> None:
    """Steps 1-3, polyccm's edits of step 4, and the reverse switch after them (step 5)."""
    with scenario.upstream():
        scenario.converged()
    scenario.remember_uids()
    run.made = scenario.cloud_state()
    kube_before, nodes_before = scenario.kube_state(), scenario.nodes_state()
    warnings_before = scenario.warnings()
    addresses_before = switch.lb_addresses(switch.raw_cloud_state(scenario.cloud))

    scenario.aws.reset_calls()
    run.plan = scenario.plan()
    run.plan_writes = writes(scenario.aws)

    scenario.aws.reset_calls()
    with scenario.polyccm():
        # Its informers list, then every Service is synced once: a quiet cloud after that.
        time.sleep(QUIET_SECONDS)
        settled(scenario.aws)
        run.takeover_writes = writes(scenario.aws)
        run.takeover_calls = dict(scenario.aws.calls(by_service=True))
        run.kube = (kube_before, scenario.kube_state())
        run.nodes = (nodes_before, scenario.nodes_state())
        run.new_warnings = scenario.warnings() - warnings_before
        scenario.edit()
    run.polyccm_edited = scenario.cloud_state()
    run.addresses["polyccm"] = (
        addresses_before,
        switch.lb_addresses(switch.raw_cloud_state(scenario.cloud)),
    )

    scenario.aws.reset_calls()
    with scenario.upstream():
        time.sleep(QUIET_SECONDS)
        settled(scenario.aws)
        run.reverse_writes = writes(scenario.aws)


def _upstream_half(scenario: Scenario, run: Run) -> None:
    """Step 1 again from a fresh cloud; upstream restarted on its own result (what it writes
    then is its baseline); then the same edits under upstream."""
    with scenario.upstream():
        scenario.converged()
    scenario.remember_uids()
    run.made_again = scenario.cloud_state()
    before = switch.lb_addresses(switch.raw_cloud_state(scenario.cloud))
    scenario.aws.reset_calls()
    with scenario.upstream():
        time.sleep(QUIET_SECONDS)
        settled(scenario.aws)
        run.upstream_restart_writes = writes(scenario.aws)
        scenario.edit()
    run.upstream_edited = scenario.cloud_state()
    run.addresses["upstream"] = (
        before,
        switch.lb_addresses(switch.raw_cloud_state(scenario.cloud)),
    )


def _polyccm_first(scenario: Scenario, run: Run) -> None:
    """Step 5 from the other side: polyccm makes everything, upstream takes over."""
    with scenario.polyccm():
        scenario.converged()
    scenario.aws.reset_calls()
    with scenario.upstream():
        time.sleep(QUIET_SECONDS)
        settled(scenario.aws)
        run.reverse_fresh_writes = writes(scenario.aws)


@pytest.fixture(scope="module")
def run(
    kube_api: KubeApi,
    emulator: Mapping[str, str],
    control_plane: Any,
    tmp_path_factory: pytest.TempPathFactory,
    upstream_binary: Path,
) -> Iterator[Run]:
    """The whole scenario, once for the module (three fresh clouds in turn)."""
    result = Run()
    with pytest.MonkeyPatch.context() as patch:
        for index, half in enumerate((_polyccm_half, _upstream_half, _polyccm_first)):
            aws = point_boto3_at(
                emulator, patch.setenv, lambda name: patch.delenv(name, raising=False)
            )
            delete_all_nodes(kube_api)
            scenario = Scenario(
                kube_api,
                aws,
                emulator,
                Path(control_plane.kubeconfig),
                tmp_path_factory.mktemp(f"switch-{index}"),
                upstream_binary,
            )
            started = time.monotonic()
            try:
                half(scenario, result)
            finally:
                result.logs += scenario.logs
                result.seconds[half.__name__] = time.monotonic() - started
                delete_namespace(kube_api, NAMESPACE)
                delete_all_nodes(kube_api)
    # Everything observed, for reading when a step fails.
    dump = tmp_path_factory.getbasetemp() / "switch-aws-run.json"
    dump.write_text(json.dumps(dataclasses.asdict(result), indent=1, sort_keys=True, default=str))
    yield result


def test_the_table_covers_every_annotation_of_upstreams_table() -> None:
    # k8s.io/cloud-provider-aws v1.37.1 pkg/providers/v1/aws.go:99-251: the ServiceAnnotation*
    # constants; each is carried by a Service of the scenario.
    assert switch.uncovered() == set()
    assert len(switch.ANNOTATIONS) == 30


def test_upstream_makes_every_load_balancer(run: Run) -> None:
    assert sorted(run.made["elb"]) == sorted(f"lb:{s.name}" for s in TABLE if not s.nlb)
    assert sorted(run.made["nlb"]) == sorted(f"lb:{s.name}" for s in TABLE if s.nlb)
    # Two fresh clouds, the same Services: upstream made the same thing twice (the comparison
    # of step 4 rests on it).
    assert switch.differences(run.made, run.made_again) == []


def test_plan_says_adopt_for_each_service_and_nothing_else(run: Run) -> None:
    actions = {p["service"]: p["action"] for p in run.plan["loadBalancers"]}
    assert actions == {f"{NAMESPACE}/{s.name}": "adopt" for s in TABLE}, run.plan
    assert [p for p in run.plan["loadBalancers"] if p["differences"] or p["problems"]] == []
    assert run.plan["nodes"] == [] and run.plan["routes"] == []
    assert run.plan["exitStatus"] == 0
    assert run.plan_writes == {}


def test_polyccm_takes_over_with_zero_cloud_writes(run: Run) -> None:
    assert run.takeover_writes == {}, run.logs
    # ...having read every load balancer in that time (one attribute read per classic ELB,
    # one listener listing per NLB): every Service was synced.
    calls = run.takeover_calls
    assert calls.get("elb:DescribeLoadBalancerAttributes", 0) >= sum(1 for s in TABLE if not s.nlb)
    assert calls.get("elbv2:DescribeListeners", 0) >= sum(1 for s in TABLE if s.nlb)


def test_polyccm_takes_over_without_changing_what_users_see(run: Run) -> None:
    assert run.kube[1] == run.kube[0]
    assert run.nodes[1] == run.nodes[0]
    assert run.new_warnings == set()


def test_the_same_edits_leave_the_same_cloud(run: Run) -> None:
    assert switch.differences(run.upstream_edited, run.polyccm_edited) == []


def test_no_address_changes_where_upstreams_does_not(run: Run) -> None:
    upstream_before, upstream_after = run.addresses["upstream"]
    changed_by_upstream = {
        switch_name
        for switch_name in upstream_before
        if switch_name in upstream_after
        and upstream_after[switch_name] != upstream_before[switch_name]
    }
    assert changed_by_upstream == set()  # upstream keeps every address through the edits
    polyccm_before, polyccm_after = run.addresses["polyccm"]
    assert {
        name: (polyccm_before[name], polyccm_after[name])
        for name in polyccm_before
        if name in polyccm_after and polyccm_after[name] != polyccm_before[name]
    } == {}


def test_upstream_restarted_on_its_own_result_writes_only_what_it_writes_on_every_sync(
    run: Run,
) -> None:
    """The baseline of step 5: what upstream writes on every sync, whoever made the load
    balancer (k8s.io/cloud-provider-aws v1.37.1 pkg/providers/v1/)."""
    classic = [s for s in TABLE if not s.nlb]
    assert run.upstream_restart_writes == {
        # aws_loadbalancer.go:1389-1397: additional-resource-tags added unconditionally.
        "AddTags": sum(1 for s in classic if "additional-resource-tags" in s.annotations),
        # aws_loadbalancer.go:1402-1425: the attributes it builds never DeepEqual what AWS
        # answers, which includes AdditionalAttributes (elb.http.desyncmitigationmode).
        "ModifyLoadBalancerAttributes": len(classic),
        # aws_loadbalancer.go:1326-1333: the proxy-protocol policy, created "every time".
        "CreateLoadBalancerPolicy": sum(1 for s in classic if "proxy-protocol" in s.annotations),
        # aws.go:2733-2744: the ssl-negotiation-policy set on each TLS port on every sync.
        "SetLoadBalancerPoliciesOfListener": sum(
            1 for s in classic if "ssl-negotiation-policy" in s.annotations
        ),
        # aws_loadbalancer.go:846-850: an HTTP health check's path is compared with the
        # request being built, not the target group, so it is always modified.
        "ModifyTargetGroup": sum(
            len(s.ports)
            for s in TABLE
            if s.nlb and s.annotations.get("healthcheck-protocol", "").lower() == "http"
        ),
    }


def test_upstream_takes_over_what_polyccm_made_with_zero_writes_of_its_own(run: Run) -> None:
    """Polyccm first, then upstream: upstream writes no more than on its own result."""
    assert run.reverse_fresh_writes == run.upstream_restart_writes, run.logs


def test_upstream_takes_over_polyccms_edits_with_zero_writes_of_its_own(run: Run) -> None:
    """After polyccm's edits, upstream writes no more than its every-sync writes (fewer: two
    Services are gone)."""
    extra = {
        action: count
        for action, count in run.reverse_writes.items()
        if count > run.upstream_restart_writes.get(action, 0)
    }
    assert extra == {}, run.logs


# -- what still differs ---------------------------------------------------------------------------


@pytest.fixture
def zone_over_region(
    kube_api: KubeApi,
    aws: EmulatorControl,
    emulator: Mapping[str, str],
    control_plane: Any,
    clean_nodes: None,
    tmp_path: Path,
    upstream_binary: Path,
) -> Iterator[Scenario]:
    """A cloud.conf whose ``Zone`` (us-east-1a) and ``Region`` (us-west-2) disagree, and proof
    that upstream takes the region from the zone: it initialises the nodes of us-east-1. Then
    the same nodes registered afresh (tainted) for polyccm."""
    scenario = Scenario(
        kube_api, aws, emulator, Path(control_plane.kubeconfig), tmp_path, upstream_binary
    )
    scenario.config.write_text(
        scenario.cloud.cloud_config().replace(f"Region = {switch.REGION}", "Region = us-west-2")
    )
    try:
        with scenario.upstream():
            _wait_empty(scenario.initialised, f"upstream initialising the nodes; {scenario.logs}")
        delete_all_nodes(kube_api)
        for label in list(scenario.cloud.instances):
            scenario.register(label)
        yield scenario
    finally:
        delete_namespace(kube_api, NAMESPACE)


def test_polyccm_takes_the_region_from_zone_as_upstream_does(zone_over_region: Scenario) -> None:
    # k8s.io/cloud-provider-aws v1.37.1 pkg/providers/v1/aws.go:3745-3757
    # (getRegionFromMetadata): a configured Zone decides the region, "for backwards
    # compatibility", before Region is read; the fixture saw upstream do it.
    with zone_over_region.polyccm():
        _wait_empty(
            zone_over_region.initialised,
            f"polyccm initialising the nodes; {zone_over_region.logs}",
            timeout=20,
        )


@dataclass
class Differing:
    """Upstream's result on :data:`switch.DIFFERING` and a topology-described node, and what
    polyccm makes of it."""

    plan: dict[str, dict[str, Any]] = field(default_factory=dict)
    upstream_labels: dict[str, str] = field(default_factory=dict)
    polyccm_labels: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="module")
def differing(
    kube_api: KubeApi,
    emulator: Mapping[str, str],
    control_plane: Any,
    tmp_path_factory: pytest.TempPathFactory,
    upstream_binary: Path,
) -> Iterator[Differing]:
    """Upstream makes the load balancers of :data:`switch.DIFFERING` and initialises a node of
    :data:`switch.TOPOLOGY_TYPE`; ``polyccm plan`` reads them; polyccm initialises the same
    node registered afresh."""
    result = Differing()
    with pytest.MonkeyPatch.context() as patch:
        aws = point_boto3_at(emulator, patch.setenv, lambda name: patch.delenv(name, raising=False))
        delete_all_nodes(kube_api)
        scenario = Scenario(
            kube_api,
            aws,
            emulator,
            Path(control_plane.kubeconfig),
            tmp_path_factory.mktemp("switch-differing"),
            upstream_binary,
            table=switch.DIFFERING,
        )
        try:
            instance = scenario.cloud.add_instance(switch.ZONES[0], switch.TOPOLOGY_TYPE)
            node = str(instance["PrivateDnsName"])
            scenario.register(list(scenario.cloud.instances)[-1])
            with scenario.upstream():
                scenario.converged()
            result.upstream_labels = scenario.nodes_state()[node]["labels"]
            # The emulator answered upstream's DescribeInstanceTopology for this node.
            assert any("network-node-layer" in k for k in result.upstream_labels), (
                result.upstream_labels
            )
            result.plan = {p["service"].split("/")[1]: p for p in scenario.plan()["loadBalancers"]}
            kube_api.delete(NODES, node)
            scenario.register(list(scenario.cloud.instances)[-1])
            with scenario.polyccm():
                _wait_empty(scenario.initialised, f"polyccm initialising; {scenario.logs}")
            result.polyccm_labels = scenario.nodes_state()[node]["labels"]
        finally:
            delete_namespace(kube_api, NAMESPACE)
            delete_all_nodes(kube_api)
    yield result


def _adopted_with_a_warning(differing: Differing, name: str) -> str:
    """The plan adopts ``name`` as upstream left it, with no difference, and warns once: a
    deliberate improvement (upstream ignores the annotation without a word). The warning."""
    planned = differing.plan[name]
    assert (planned["action"], planned["differences"]) == ("adopt", [])
    assert [problem["severity"] for problem in planned["problems"]] == ["warning"]
    assert planned["problems"][0]["eventReason"] == "LoadBalancerWarning"
    return str(planned["problems"][0]["message"])


def test_ssl_ports_are_read_as_upstream_reads_them(differing: Differing) -> None:
    # k8s.io/cloud-provider-aws v1.37.1 pkg/providers/v1/aws.go:1932-1951: ssl-ports entries
    # are matched as written, so " 8443" names no port and upstream's listener stays plain TCP.
    # polyccm keeps that listener too, and says (README, AWS differences) that the entry names
    # no port of the Service, where upstream says nothing.
    warning = _adopted_with_a_warning(differing, "elb-ssl-spaced")
    assert "ssl-ports names ports the service does not have: ' 8443'" in warning


def test_an_nlb_healthcheck_timeout_is_left_as_upstream_leaves_it(differing: Differing) -> None:
    # aws.go:2244 parses the NLB's healthcheck-timeout; aws_loadbalancer.go:789 never sends it:
    # the target groups keep AWS's timeout. polyccm leaves it too and warns that it is unused.
    warning = _adopted_with_a_warning(differing, "nlb-hc-timeout")
    assert "healthcheck-timeout='6'" in warning and "upstream never sends it" in warning


def test_a_topology_described_node_gets_upstreams_labels(differing: Differing) -> None:
    # k8s.io/cloud-provider-aws v1.37.1 pkg/providers/v1/instances_v2.go (InstanceMetadata with
    # the topology of topology.go): the layers upstream gave this node.
    assert differing.polyccm_labels == differing.upstream_labels
