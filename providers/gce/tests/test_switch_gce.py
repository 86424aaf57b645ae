"""The switch from upstream's GCE CCM (cloud-provider-gcp v36.3.8) to polyccm, from goldens
(issue 25): upstream's binary cannot be built in CI, so what it did on the emulator is recorded
in ``goldens/switch/NN-<step>.json`` (``python -m polyccm_gce_emulator.switch --peer PATH``
regenerates them) and replayed here against a fresh emulator, every exchange accepted with the
status it got.

Then polyccm's real CLI takes over with the same gce.conf and flags: ``polyccm plan`` says adopt
for each Service and nothing else, polyccm settles with no cloud write, no Service status or
annotation changed and no Warning event; the same edits (a port added, source ranges changed, a
node added and removed, a Service deleted) leave the cloud as upstream's left it, field by field
(ids and timestamps aside), the port edit on the same IP; and upstream started on what
polyccm makes writes nothing it would not write on its own state: the firewall the
source-ranges annotation restricts and the Standard-tier rule included (issue 27). Two internal
Services (instance groups, a backend service, the healthChecks API) are adopted alike; only
upstream re-reserves and releases their ``<lb>`` address on every sync.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from google.oauth2.credentials import Credentials
from polyccm.kube.api import KubeApi
from polyccm_gce import provider as provider_module
from polyccm_gce_emulator import switch
from polyccm_gce_emulator.testing import FAST, TEST_TOKEN, emulator_thread
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.kubeobjects import events_for
from polyccm_testing.opstools import CommandResult, plans_by_service, run_command
from polyccm_testing.peers.goldens import Golden, Step, comparable, load_steps, substitute
from polyccm_testing.peers.recording import Exchange, Recorder

GOLDEN = Path(__file__).parent / "goldens" / "switch"
#: The Services polyccm serves exactly as upstream did: every one of the table.
SUPPORTED = [s.name for s in switch.SERVICES if not s.issue]

pytestmark = pytest.mark.timeout(300)


@dataclass
class Snapshot:
    """What a step left: polyccm's exchanges, the cloud and Kubernetes."""

    exchanges: list[Exchange]
    cloud: dict[str, Any]
    kube: dict[str, Any]


@dataclass
class Switch:
    """Upstream's recorded steps replayed, then polyccm on that state."""

    golden: Golden
    bindings: dict[str, str]
    plan: CommandResult
    plan_exchanges: list[Exchange]
    kube_before: dict[str, Any]
    replayed: dict[str, Any]
    adoption: Snapshot
    warnings: list[tuple[str, str, str]]
    edits: dict[str, Snapshot] = field(default_factory=dict)


def _lb(run: Switch, service: str) -> str:
    """The load-balancer name of ``service`` in the golden (upstream's UID)."""
    return switch.load_balancer_name(run.golden.step("create").kube["services"][service]["uid"])


def _expected(run: Switch, step: Step) -> Any:
    """Upstream's cloud after ``step`` with this run's names and addresses."""
    return comparable(switch.rebind(step.cloud, run.bindings), switch.VOLATILE)


def _actual(cloud: dict[str, Any]) -> Any:
    return comparable(cloud, switch.VOLATILE)


@pytest.fixture(scope="module")
def credentials() -> Iterator[None]:
    """``polyccm plan`` runs in this process: a fixed token (google-auth reads the metadata
    server's address once per process)."""
    token: Any = Credentials(token=TEST_TOKEN)  # type: ignore[no-untyped-call]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(provider_module, "application_default_credentials", lambda: (token, None))
        yield


def _settle(recorder: Recorder, api: KubeApi, compute: Any, ccm: switch.CcmProcess) -> list[Any]:
    return switch.settle(
        recorder.take,
        lambda: switch.everything_served(api, compute, services=SUPPORTED),
        ccm,
        quiet=3.0,
        timeout=180.0,
    )


@pytest.fixture(scope="module")
def run(
    control_plane: ControlPlane,
    kube_api: KubeApi,
    tmp_path_factory: pytest.TempPathFactory,
    credentials: None,
) -> Iterator[Switch]:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    golden = load_steps(GOLDEN)
    work = tmp_path_factory.mktemp("switch-gce")
    switch.clear_kube(kube_api)
    try:
        with emulator_thread(FAST) as emulator, Recorder(emulator.endpoint) as recorder:
            compute = emulator.api()
            static_ip = switch.setup_cloud(compute)
            create = golden.step("create")
            actual = switch.register_recorded(kube_api, create.kube, static_ip)
            replayer = switch.replayer(
                emulator.endpoint,
                {**switch.fixed_values(golden.steps), **switch.kube_bindings(create.kube, actual)},
            )
            # Step 1 as upstream did it, and its restart: every exchange accepted as recorded.
            replayer.replay(create.exchanges)
            replayer.replay(golden.step("restart").exchanges)
            switch.finish_recorded(kube_api, create.kube, replayer.bindings)
            kube_before = switch.kube_results(kube_api)
            replayed = switch.cloud_state(compute)

            config = switch.gce_conf(work, recorder.url, compute.project)
            recorder.take()
            plan = run_command(
                "plan",
                "gce",
                control_plane.kubeconfig,
                f"--cluster-name={switch.CLUSTER_NAME}",
                f"--cluster-cidr={switch.CLUSTER_CIDR}",
                "-o",
                "json",
                cloud_config=config,
            )
            plan_exchanges = recorder.take()

            env = switch.ccm_environment(emulator.endpoint, work)
            with switch.running(
                None, config, control_plane.kubeconfig, env, work / "polyccm.log"
            ) as ccm:
                taken = _settle(recorder, kube_api, compute, ccm)
                result = Switch(
                    golden,
                    replayer.bindings,
                    plan,
                    plan_exchanges,
                    kube_before,
                    replayed,
                    Snapshot(taken, switch.cloud_state(compute), switch.kube_results(kube_api)),
                    [
                        event
                        for name in kube_before["services"]
                        for event in events_for(kube_api, switch.NAMESPACE, name)
                        if event[0] == "Warning"
                    ],
                )
                for edit in switch.EDITS:
                    edit.apply(kube_api, compute)
                    taken = _settle(recorder, kube_api, compute, ccm)
                    snapshot = Snapshot(
                        taken, switch.cloud_state(compute), switch.kube_results(kube_api)
                    )
                    result.edits[edit.name] = snapshot
                    recorded = golden.step(edit.name)
                    result.bindings.update(switch.kube_bindings(recorded.kube, snapshot.kube))
            yield result
    finally:
        switch.clear_kube(kube_api)


# -- step 1: upstream's exchanges replay on the emulator --------------------------------------


def test_the_golden_names_upstreams_version_and_source() -> None:
    golden = load_steps(GOLDEN)
    assert golden.peer.name == "cloud-provider-gcp"
    assert golden.peer.version == "v36.3.8"
    assert "f67fc7e3" in golden.peer.source
    assert [step.name for step in golden.steps] == [
        "create",
        "restart",
        *(edit.name for edit in switch.EDITS),
        "polyccm-made",
        "reverse",
    ]


def test_upstream_made_every_load_balancer_and_route_of_the_table() -> None:
    create = load_steps(GOLDEN).step("create")
    services = create.kube["services"]
    assert sorted(services) == sorted(s.name for s in switch.SERVICES)
    for name, service in services.items():
        assert service["status"]["loadBalancer"]["ingress"][0]["ip"], name
        assert switch.load_balancer_name(service["uid"]) in create.cloud["forwardingRules"]
    assert len(create.cloud["routes"]) == len(switch.INSTANCES)
    nodes = create.kube["nodes"].values()
    zones = {node["labels"]["topology.kubernetes.io/zone"] for node in nodes}
    assert zones == {switch.ZONE_A, switch.ZONE_B}


def test_upstream_made_the_internal_load_balancers_of_the_table() -> None:
    # cloud-provider-gcp v36.3.8 gce_loadbalancer_internal.go: one instance group per zone
    # named k8s-ig--<cluster-id> holding that zone's nodes (:121, :661-788); the shared health
    # check k8s-<cluster-id>-node on :10256/healthz for Cluster traffic, one named <lb> on
    # healthCheckNodePort for Local (:141-151, :899-917; gce_loadbalancer_naming.go:68-74); a
    # backend service <lb> on the groups (:819-861, :890); an INTERNAL rule (:1126); the <lb>
    # address released once the rule holds the IP (:176-183).
    create = load_steps(GOLDEN).step("create")
    cloud, services = create.cloud, create.kube["services"]
    group = f"k8s-ig--{switch.CLUSTER_ID}"
    for zone in (switch.ZONE_A, switch.ZONE_B):
        members = cloud["instanceGroups"][f"{zone}/{group}"]["members"]
        expected = [name for name, where, _cidr in switch.INSTANCES if where == zone]
        assert [link.rsplit("/", 1)[-1] for link in members] == expected
    for name, check, port in (
        ("internal", f"k8s-{switch.CLUSTER_ID}-node", 10256),
        ("internal-local", None, 32091),
    ):
        lb = switch.load_balancer_name(services[name]["uid"])
        check = check or lb
        assert cloud["healthChecks"][check]["httpHealthCheck"]["port"] == port
        backend = cloud["backendServices"][lb]
        assert backend["loadBalancingScheme"] == "INTERNAL"
        assert backend["healthChecks"][0].endswith(f"/healthChecks/{check}")
        assert sorted(b["group"].rsplit("/", 3)[-3] for b in backend["backends"]) == [
            switch.ZONE_A,
            switch.ZONE_B,
        ]
        rule = cloud["forwardingRules"][lb]
        assert rule["loadBalancingScheme"] == "INTERNAL"
        assert rule["IPAddress"] == services[name]["status"]["loadBalancer"]["ingress"][0]["ip"]
        assert lb not in cloud["addresses"]


def test_the_replayed_cloud_is_the_one_upstream_left(run: Switch) -> None:
    # The fixture replayed every exchange with its recorded status (ReplayRefused otherwise):
    # the cloud polyccm is started on is upstream's after its restart, field by field.
    assert _actual(run.replayed) == _expected(run, run.golden.step("restart"))


# -- steps 2 and 3: polyccm takes over --------------------------------------------------------


def test_plan_says_adopt_for_each_service_and_nothing_else(run: Switch) -> None:
    document = json.loads(run.plan.stdout)
    assert (document["nodes"], document["routes"]) == ([], []), run.plan.stdout
    plans = plans_by_service(run.plan, switch.NAMESPACE)
    for name in SUPPORTED:
        assert plans[name]["action"] == "adopt", plans[name]
        assert plans[name]["differences"] == [] and plans[name]["problems"] == []
    assert not switch.cloud_writes(run.plan_exchanges)


def test_plan_adopts_a_firewall_restricted_by_the_source_ranges_annotation(run: Switch) -> None:
    # service/helpers/helper.go:61-85@k8s.io/cloud-provider v0.35.4 GetLoadBalancerSourceRanges
    # reads the annotation when the spec has no ranges; upstream's firewall holds 192.0.2.0/24
    # (gce_loadbalancer_external.go:1191@v36.3.8). Before issue 27: a plan to widen it.
    plan = plans_by_service(run.plan, switch.NAMESPACE)["ranges-annotation"]
    assert (plan["action"], plan["differences"]) == ("adopt", [])
    assert run.plan.status == 0


def _writes_about(run: Switch, exchanges: list[Exchange], names: list[str]) -> list[str]:
    lbs = [run.bindings[_lb(run, name)] for name in names]
    return [
        str(e)
        for e in switch.cloud_writes(exchanges)
        if any(lb in e.path or lb in json.dumps(e.request) for lb in lbs)
    ]


def test_polyccm_settles_with_zero_cloud_writes(run: Switch) -> None:
    assert [str(e) for e in switch.cloud_writes(run.adoption.exchanges)] == []


def test_polyccm_keeps_the_firewall_the_source_ranges_annotation_restricts(run: Switch) -> None:
    # gce_loadbalancer_external.go:1191@v36.3.8 via GetLoadBalancerSourceRanges; before
    # issue 27 polyccm patched it to 0.0.0.0/0 on its first sync.
    assert _writes_about(run, run.adoption.exchanges, ["ranges-annotation"]) == []


def test_upstream_reserves_each_internal_address_on_a_restart_and_polyccm_does_not(
    run: Switch,
) -> None:
    # A deliberate difference: upstream reserves <lb> with the rule's IP and releases it on
    # every sync of an internal load balancer (gce_loadbalancer_internal.go:167-183@v36.3.8,
    # gce_address_manager.go HoldAddress/ReleaseAddress), two writes per Service per sync;
    # polyccm keeps the rule's IP without them, so its adoption writes nothing.
    names = ["internal", "internal-local"]
    lbs = [_lb(run, name) for name in names]
    upstream = [
        (e.method, e.path.split("?")[0].rsplit("/", 1)[-1])
        for e in switch.cloud_writes(list(run.golden.step("restart").exchanges))
        if any(lb in e.path or lb in json.dumps(e.request) for lb in lbs)
    ]
    assert sorted(upstream) == sorted(
        [("POST", "addresses") for _ in lbs] + [("DELETE", lb) for lb in lbs]
    )
    assert _writes_about(run, run.adoption.exchanges, names) == []


def test_no_service_status_or_annotation_changed_and_no_warning(run: Switch) -> None:
    before, after = run.kube_before["services"], run.adoption.kube["services"]
    for name in before:
        assert after[name]["status"] == before[name]["status"], name
        assert after[name]["annotations"] == before[name]["annotations"], name
        assert after[name]["finalizers"] == before[name]["finalizers"], name
    assert run.warnings == []
    assert run.adoption.kube["nodes"] == run.kube_before["nodes"]


# -- step 4: the same edits as upstream's, from the same start --------------------------------


@pytest.mark.parametrize("edit", [e.name for e in switch.EDITS])
def test_polyccms_edit_leaves_the_cloud_as_upstreams_did(run: Switch, edit: str) -> None:
    assert _actual(run.edits[edit].cloud) == _expected(run, run.golden.step(edit))


@pytest.mark.parametrize("edit", [e.name for e in switch.EDITS])
def test_polyccms_edit_leaves_the_services_as_upstreams_did(run: Switch, edit: str) -> None:
    # Status (the ingress IP), annotations and finalizers of every Service after the edit.
    recorded = run.golden.step(edit).kube["services"]
    actual = run.edits[edit].kube["services"]
    assert sorted(actual) == sorted(recorded)
    for name, service in recorded.items():
        want = substitute(
            {key: service[key] for key in ("status", "annotations", "finalizers")},
            run.bindings,
        )
        assert {key: actual[name][key] for key in want} == want, name


def test_a_port_edit_keeps_the_ip(run: Switch) -> None:
    # Upstream reserves the rule's IP before re-creating the rule on it
    # (gce_loadbalancer_external.go:201@v36.3.8 ensureStaticIP, :291 createForwardingRule);
    # before issue 27 polyccm's new rule got a new ephemeral IP.
    name = run.bindings[_lb(run, "plain")]
    before = run.adoption.cloud["forwardingRules"][name]["IPAddress"]
    assert run.edits["port-added"].cloud["forwardingRules"][name]["IPAddress"] == before


def test_an_annotation_edit_leaves_the_cloud_as_upstreams_did(run: Switch) -> None:
    # The firewall takes the edited annotation's ranges (GetLoadBalancerSourceRanges, as
    # above; gce_loadbalancer_external.go:1205-1215@v36.3.8 the update).
    name = run.bindings[_lb(run, "ranges-annotation")]
    expected = _expected(run, run.golden.step("annotation-changed"))
    actual = _actual(run.edits["annotation-changed"].cloud)
    assert switch.only(actual, name) == switch.only(expected, name)


def test_a_deleted_service_leaves_nothing_behind(run: Switch) -> None:
    gone = run.bindings[_lb(run, "udp")]
    cloud = run.edits["service-deleted"].cloud
    assert switch.only(cloud, gone) == {kind: {} for kind in cloud}


# -- step 5: the reverse switch ---------------------------------------------------------------


@dataclass
class Reverse:
    golden: Golden
    made: Snapshot
    bindings: dict[str, str]
    replayed: list[Exchange]
    after: dict[str, Any]


@pytest.fixture(scope="module")
def reverse(
    run: Switch,
    control_plane: ControlPlane,
    kube_api: KubeApi,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Reverse]:
    """polyccm first on an empty cloud, then upstream's recorded exchanges on what it made."""
    golden = run.golden
    work = tmp_path_factory.mktemp("switch-gce-reverse")
    switch.clear_kube(kube_api)
    try:
        with emulator_thread(FAST) as emulator, Recorder(emulator.endpoint) as recorder:
            compute = emulator.api()
            static_ip = switch.setup_cloud(compute)
            switch.setup_kube(kube_api, static_ip)
            config = switch.gce_conf(work, recorder.url, compute.project)
            env = switch.ccm_environment(emulator.endpoint, work)
            with switch.running(
                None, config, control_plane.kubeconfig, env, work / "polyccm.log"
            ) as ccm:
                taken = _settle(recorder, kube_api, compute, ccm)
            made = Snapshot(taken, switch.cloud_state(compute), switch.kube_results(kube_api))
            recorded = golden.step("polyccm-made")
            bindings = {
                **switch.fixed_values(golden.steps),
                **switch.kube_bindings(recorded.kube, made.kube),
            }
            # The addresses polyccm was given then and now, by load balancer.
            for name, rule in recorded.cloud["forwardingRules"].items():
                now = made.cloud["forwardingRules"].get(bindings.get(name, name))
                if now and now["IPAddress"] != rule["IPAddress"]:
                    bindings[rule["IPAddress"]] = now["IPAddress"]
            replayer = switch.replayer(emulator.endpoint, bindings)
            replayed = replayer.replay(golden.step("reverse").exchanges)
            yield Reverse(golden, made, replayer.bindings, replayed, switch.cloud_state(compute))
    finally:
        switch.clear_kube(kube_api)


def test_polyccm_makes_the_state_upstream_was_recorded_on(reverse: Reverse) -> None:
    # The golden's reverse step holds only if polyccm still makes what it made then.
    recorded = reverse.golden.step("polyccm-made").cloud
    expected = comparable(switch.rebind(recorded, reverse.bindings), switch.VOLATILE)
    assert _actual(reverse.made.cloud) == expected


def _reverse_writes(reverse: Reverse, names: list[str], *, about: bool) -> list[str]:
    """Upstream's recorded writes on polyccm's state, beyond the address it re-reserves and
    releases for every rule on any start (its restart on its own state makes those too,
    gce_loadbalancer_external.go:201 ensureStaticIP, :176 the release): those about the
    load balancers of ``names`` (``about``) or about the others."""
    made = reverse.golden.step("polyccm-made").kube["services"]
    lbs = [switch.load_balancer_name(made[name]["uid"]) for name in names]
    found = []
    for exchange in switch.cloud_writes(list(reverse.golden.step("reverse").exchanges)):
        if "/addresses" in exchange.path:
            continue
        mentions = any(lb in exchange.path or lb in json.dumps(exchange.request) for lb in lbs)
        if mentions == about:
            found.append(str(exchange))
    return found


def test_upstreams_restart_writes_only_address_reservations() -> None:
    restart = load_steps(GOLDEN).step("restart")
    writes = switch.cloud_writes(list(restart.exchanges))
    assert writes and all("/addresses" in e.path for e in writes)


def test_upstream_on_polyccms_state_writes_nothing_more_than_on_its_own(
    reverse: Reverse,
) -> None:
    assert _reverse_writes(reverse, [], about=False) == []


@pytest.mark.parametrize("name", ["ranges-annotation", "standard-tier"])
def test_upstream_rewrites_nothing_of_what_polyccm_once_made_differently(
    reverse: Reverse, name: str
) -> None:
    # Before issue 27: upstream narrowed polyccm's 0.0.0.0/0 firewall to the annotation's
    # ranges (gce_loadbalancer_external.go:1191@v36.3.8), and deleted polyccm's PREMIUM rule to
    # make a STANDARD one on a new address (:133 deleteWrongNetworkTieredResources).
    assert _reverse_writes(reverse, [name], about=True) == []


def test_polyccm_makes_a_standard_tier_rule_for_the_annotation(reverse: Reverse) -> None:
    # gce_annotations.go:160@v36.3.8 GetServiceNetworkTier, the rule's tier at
    # gce_loadbalancer_external.go:1096@v36.3.8.
    made = reverse.made.kube["services"]["standard-tier"]
    rule = reverse.made.cloud["forwardingRules"][switch.load_balancer_name(made["uid"])]
    assert rule["networkTier"] == "STANDARD"


def test_the_reverse_exchanges_replay_and_upstream_leaves_the_rest_as_polyccm_made_it(
    reverse: Reverse,
) -> None:
    assert len(reverse.replayed) == len(reverse.golden.step("reverse").exchanges)
    assert _actual(reverse.after) == _actual(reverse.made.cloud)


def test_upstream_deleted_a_service_without_leftovers() -> None:
    golden = load_steps(GOLDEN)
    lb = switch.load_balancer_name(golden.step("create").kube["services"]["udp"]["uid"])
    cloud = golden.step("service-deleted").cloud
    assert switch.only(cloud, lb) == {kind: {} for kind in cloud}


def test_regenerating_the_goldens_refuses_a_peer_that_is_not_a_program(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "gce-cloud-controller-manager"
    assert switch.main(["--peer", str(missing), "--out", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"--peer {missing}: not an executable file"]
    assert list(tmp_path.iterdir()) == []
