"""Switching Equinix Metal from upstream's CCM to polyccm and back (issue 25), from goldens.

Upstream (cloud-provider-equinix-metal 38d15e2) cannot be built from the Go module proxy, so its
side is what ``python -m polyccm_packet_emulator.switch --peer PATH`` recorded in
``providers/packet/tests/goldens/switch``: the exchanges it had with the Metal API at each step,
the cloud state and the Kubernetes results after. Here, against the real kube-apiserver and the
emulator:

1. upstream's exchanges are replayed (each must get the status it got) and give its cloud state;
2. upstream's Kubernetes results are applied, ``polyccm plan`` says "adopt" for each Service and
   nothing else, and ``polyccm --provider packet`` (the real CLI, upstream's ``cloud-sa.json``)
   settles without one write to Metal, without changing a Service's status or annotations and
   without a Warning event;
3. the edits upstream went through (a port added, an annotation changed, a node added and
   removed, a Service deleted) give polyccm the cloud state they gave upstream, field by field
   (ids and timestamps aside), with the same Elastic IPs;
4. the reverse switch: upstream started on what polyccm made changed nothing.

polyccm gets only what upstream has compiled in (the API's URL, ``METAL_API_URL``): the cluster
id both tag with is the kube-system UID, which each reads itself (issue 30).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from polyccm.kube.api import EVENTS, NAMESPACES, NODES, SERVICES, KubeApi
from polyccm_packet_emulator import switch
from polyccm_packet_emulator.testing import MetalApi, control, running_emulator
from polyccm_testing.demo import running_polyccm
from polyccm_testing.devenv.cleanup import delete_all_nodes, delete_namespace
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.kubeobjects import set_ready
from polyccm_testing.opstools import CommandResult, plans_by_service, run_command
from polyccm_testing.peers.goldens import Replayer, comparable, load_steps, substitute
from polyccm_testing.peers.recording import Exchange, Recorder

GOLDEN = load_steps(switch.GOLDENS)
FIRST = GOLDEN.step(switch.FIRST_STEP)
REVERSE = GOLDEN.step(switch.REVERSE_STEP)

pytestmark = pytest.mark.timeout(300)


def same_cloud(actual: Any, recorded: Any, bindings: Mapping[str, str]) -> bool:
    return bool(
        comparable(actual, switch.VOLATILE)
        == comparable(recorded, switch.VOLATILE, bindings=bindings)
    )


def recorded_ids(step_cloud: Mapping[str, Any]) -> dict[str, str]:
    return {str(d["hostname"]): str(d["id"]) for d in step_cloud["devices"]}


def replayer(env: Mapping[str, str], kube: KubeApi) -> Replayer:
    """A replayer of upstream's exchanges on the emulator ``env`` reaches, bound to this
    project and cluster."""
    uid = kube.get(NAMESPACES, "kube-system")["metadata"]["uid"]
    bindings = {
        str(FIRST.cloud["project"]): env["METAL_PROJECT_ID"],
        str(FIRST.kube["cluster_uid"]): uid,
    }
    return Replayer(
        switch.emulator_base(env), bindings=bindings, headers={"X-Auth-Token": env["METAL_API_KEY"]}
    )


def create_device(metal: MetalApi, machine: switch.Machine, cloud: Any, play: Replayer) -> None:
    """``machine``'s device, its id bound to the one upstream saw."""
    body = {
        "hostname": machine.name,
        "metro": machine.metro,
        "plan": machine.plan,
        "operating_system": "ubuntu_24_04",
        "tags": [],
    }
    made = metal.ok("POST", f"/projects/{metal.project_id}/devices", body)
    play.bindings[recorded_ids(cloud)[machine.name]] = str(made["id"])


def replay_cloud_side(step: str, metal: MetalApi, play: Replayer) -> None:
    """The part of a step the scenario (not the CCM) does in the cloud."""
    if step == switch.FIRST_STEP:
        for machine in switch.MACHINES:
            create_device(metal, machine, FIRST.cloud, play)
    elif step == "node-added":
        create_device(metal, switch.ADDED, GOLDEN.step(step).cloud, play)
    elif step == "node-removed":
        found = switch.device_id(metal, switch.REMOVED)
        metal.ok("DELETE", f"/devices/{found}")


@pytest.fixture(scope="module")
def metal_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, str]]:
    with running_emulator(tmp_path_factory.mktemp("metal-switch")) as env:
        yield env


def test_the_golden_names_upstream_and_its_steps() -> None:
    assert GOLDEN.peer == switch.PEER
    assert [s.name for s in GOLDEN.steps] == [
        switch.FIRST_STEP,
        *(e.name for e in switch.EDITS),
        switch.REVERSE_STEP,
    ]
    # Upstream served every Service of the table (each has its Elastic IP in its place).
    places = {ip["tags"][1]: (ip["metro"], ip["facility"]) for ip in FIRST.cloud["elastic_ips"]}
    assert sorted(places.values(), key=str) == sorted(
        [("da", None), ("sv", None), ("sv", "sv15"), ("sv", None)], key=str
    )


def test_upstream_exchanges_replay_on_the_emulator_with_its_cloud_state(
    metal_env: Mapping[str, str], kube_api: KubeApi
) -> None:
    control(metal_env).reset()
    metal = MetalApi(metal_env)
    play = replayer(metal_env, kube_api)
    for step in GOLDEN.steps[:-1]:
        replay_cloud_side(step.name, metal, play)
        play.replay(step.exchanges)
        assert same_cloud(switch.cloud_state(metal), step.cloud, play.bindings), step.name


# -- polyccm takes over what upstream made ---------------------------------------------------------


def warnings(kube: KubeApi) -> list[str]:
    found = []
    for namespace in (switch.NAMESPACE, "default"):
        for event in kube.list(EVENTS, namespace)["items"]:
            if event.get("type") == "Warning":
                found.append(f"{event['involvedObject']['name']}: {event.get('message')}")
    return sorted(found)


def apply_kube_results(kube: KubeApi, recorded: Mapping[str, Any], bindings: Any) -> None:
    """What upstream wrote in the cluster, written again (its ids bound to this run's)."""
    state = substitute(dict(recorded), bindings)
    for name, node in state["nodes"].items():
        kube.create(
            NODES,
            {
                "metadata": {
                    "name": name,
                    "labels": node["labels"],
                    "annotations": node["annotations"],
                },
                "spec": {"providerID": node["providerID"], "taints": node["taints"]},
            },
        )
        set_ready(
            kube, name, True, addresses=tuple((a["type"], a["address"]) for a in node["addresses"])
        )
    kube.create(NAMESPACES, {"metadata": {"name": switch.NAMESPACE}})
    for entry in switch.TABLE:
        service = state["services"][entry.name]
        body = switch.service_body(entry)
        body["metadata"].update(
            annotations=service["annotations"], finalizers=service["finalizers"]
        )
        body["spec"].update(ports=service["ports"], loadBalancerIP=service["loadBalancerIP"])
        kube.create(SERVICES, body, switch.NAMESPACE)
        kube.patch(
            SERVICES,
            entry.name,
            {"status": {"loadBalancer": service["status"]}},
            switch.NAMESPACE,
            subresource="status",
        )


def services_seen(kube: KubeApi) -> dict[str, Any]:
    return {
        name: (s["annotations"], s["status"], s["loadBalancerIP"])
        for name, s in switch.kube_state(kube)["services"].items()
    }


def nodes_seen(kube: KubeApi) -> dict[str, Any]:
    return {
        name: (n["providerID"], n["labels"], n["annotations"])
        for name, n in switch.kube_state(kube)["nodes"].items()
    }


@dataclass
class Switched:
    """The cluster and cloud upstream left, polyccm running on them through a recorder."""

    env: Mapping[str, str]
    metal: MetalApi
    kube: KubeApi
    bindings: dict[str, str]
    config: Path
    polyccm_env: dict[str, str]
    plan: CommandResult
    before: dict[str, Any]
    after: dict[str, Any]
    warnings_before: list[str]
    warnings_after: list[str]
    nodes_before: dict[str, Any]
    nodes_after: dict[str, Any]
    recorder: Recorder
    takeover: list[Exchange]
    log: Path
    stack: ExitStack = field(default_factory=ExitStack)

    def writes(self) -> int:
        return sum(1 for e in self.recorder.exchanges() if e.is_write)


def polyccm_settled(recorder: Recorder, project: str) -> bool:
    paths = [e.path for e in recorder.exchanges()]
    return any(f"/projects/{project}/ips" in p for p in paths) and any(
        "bgp-config" in p for p in paths
    )


@pytest.fixture(scope="module")
def switched(
    metal_env: Mapping[str, str],
    kube_api: KubeApi,
    control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Switched]:
    state = tmp_path_factory.mktemp("switched")
    delete_all_nodes(kube_api)
    delete_namespace(kube_api, switch.NAMESPACE)
    control(metal_env).reset()
    metal = MetalApi(metal_env)
    play = replayer(metal_env, kube_api)
    replay_cloud_side(switch.FIRST_STEP, metal, play)
    play.replay(FIRST.exchanges)
    apply_kube_results(kube_api, FIRST.kube, play.bindings)
    config = state / "cloud-sa.json"
    config.write_text(json.dumps(switch.cloud_config(metal_env)) + "\n")
    stack = ExitStack()
    recorder = stack.enter_context(
        Recorder(switch.emulator_base(metal_env), intercept=switch.INTERCEPT)
    )
    env = {**switch.polyccm_env(metal_env), "METAL_API_URL": recorder.url + "/metal/v1"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        plan = run_command(
            "plan", "packet", control_plane.kubeconfig, "-o", "json", cloud_config=config
        )
    recorder.take()
    before, warned, nodes = services_seen(kube_api), warnings(kube_api), nodes_seen(kube_api)
    log = stack.enter_context(
        running_polyccm(
            "packet",
            state=state,
            env=env,
            kubeconfig=control_plane.kubeconfig,
            args=["--configure-cloud-routes=false", f"--cloud-config={config}", "--v=2"],
        )
    )
    try:
        switch.settle(
            lambda: polyccm_settled(recorder, metal.project_id),
            lambda: sum(1 for e in recorder.exchanges() if e.is_write),
            quiet=5.0,
        )
        found = Switched(
            metal_env,
            metal,
            kube_api,
            play.bindings,
            config,
            env,
            plan,
            before,
            services_seen(kube_api),
            warned,
            warnings(kube_api),
            nodes,
            nodes_seen(kube_api),
            recorder,
            recorder.take(),
            log,
            stack,
        )
        yield found
    finally:
        stack.close()
        delete_namespace(kube_api, switch.NAMESPACE)
        delete_all_nodes(kube_api)


def test_plan_says_adopt_for_each_service(switched: Switched) -> None:
    found = plans_by_service(switched.plan, switch.NAMESPACE)
    assert {n: (p["action"], p["differences"]) for n, p in found.items()} == {
        entry.name: ("adopt", []) for entry in switch.TABLE
    }


def test_plan_says_nothing_else(switched: Switched) -> None:
    # Node addresses in upstream's order, the hostname first (metal/devices.go:99-135@38d15e2)
    document = json.loads(switched.plan.stdout)
    assert (switched.plan.status, document["changes"], document["nodes"]) == (0, False, [])


def test_plan_warns_of_nothing(switched: Switched) -> None:
    # Upstream writes spec.loadBalancerIP back (metal/loadbalancers.go:485-500@38d15e2), so
    # each of its annotated Services has both, which is no mistake of the user's
    found = plans_by_service(switched.plan, switch.NAMESPACE)
    assert {n: p["problems"] for n, p in found.items()} == {e.name: [] for e in switch.TABLE}


def test_plan_adopts_with_upstreams_config_alone(
    switched: Switched, control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cluster= tag is the kube-system namespace's UID, read by polyccm as by upstream
    # (metal/loadbalancers.go:74-81,111,627@38d15e2): no METAL_CLUSTER_ID is needed.
    monkeypatch.setenv("METAL_API_URL", switched.polyccm_env["METAL_API_URL"])
    monkeypatch.delenv("METAL_CLUSTER_ID", raising=False)
    plan = run_command(
        "plan", "packet", control_plane.kubeconfig, "-o", "json", cloud_config=switched.config
    )
    found = plans_by_service(plan, switch.NAMESPACE)
    # Adopted as the Elastic IP its Service names (kept when the Service goes), not as the
    # reservation upstream made for it: the load balancer is upstream's only with its tags.
    uid = str(switched.bindings[str(FIRST.kube["cluster_uid"])])
    assert {n: p["loadBalancer"].endswith(f":cluster={uid}") for n, p in found.items()} == {
        e.name: True for e in switch.TABLE
    }


def test_polyccm_takes_over_without_a_cloud_write(switched: Switched) -> None:
    assert [str(e) for e in switched.takeover if e.is_write] == []


def test_polyccm_takes_over_without_changing_a_service(switched: Switched) -> None:
    # no annotation of polyccm's own (upstream writes none: metal/loadbalancers.go@38d15e2)
    assert switched.after == switched.before


def test_polyccm_takes_over_with_the_same_service_status(switched: Switched) -> None:
    assert {n: s[1:] for n, s in switched.after.items()} == {
        n: s[1:] for n, s in switched.before.items()
    }


def test_polyccm_keeps_the_nodes_cloud_fields(switched: Switched) -> None:
    assert {n: v[:2] for n, v in switched.nodes_after.items()} == {
        n: v[:2] for n, v in switched.nodes_before.items()
    }


def test_polyccm_keeps_upstreams_node_annotations(switched: Switched) -> None:
    # bgp-peers-{n}-bgp-pass base64 as upstream writes it (metal/loadbalancers.go:348@38d15e2)
    assert {n: v[2] for n, v in switched.nodes_after.items()} == {
        n: v[2] for n, v in switched.nodes_before.items()
    }


def test_polyccm_takes_over_without_a_warning_event(switched: Switched) -> None:
    assert switched.warnings_after == switched.warnings_before


@pytest.mark.parametrize("edit", switch.EDITS, ids=[e.name for e in switch.EDITS])
def test_an_edit_gives_the_cloud_state_it_gave_upstream(
    switched: Switched, edit: switch.Edit
) -> None:
    metal, kube = switched.metal, switched.kube
    recorded = GOLDEN.step(edit.name)
    edit.apply(kube, metal)
    if edit.name == "node-added":
        added = switch.device_id(metal, switch.ADDED.name)
        assert added is not None
        switched.bindings[recorded_ids(recorded.cloud)[switch.ADDED.name]] = added
    switch.settle(
        lambda: edit.gone(kube, metal) and switch.settled_kube(kube, edit.nodes, edit.services),
        switched.writes,
    )

    actual = switch.cloud_state(metal)
    assert comparable(actual, switch.VOLATILE) == comparable(
        recorded.cloud, switch.VOLATILE, bindings=switched.bindings
    )


def test_upstream_started_on_what_polyccm_made_writes_nothing() -> None:
    # Recorded: polyccm made every Elastic IP, the BGP config and the sessions, then upstream
    # ran. Its only writes are the session creates the API refuses (422 "already has
    # session"), which upstream takes as success (metal/bgp.go:91).
    changed = [str(e) for e in REVERSE.exchanges if e.is_write and e.status < 400]
    refused = {(e.method, e.status) for e in REVERSE.exchanges if e.is_write and e.status >= 400}
    assert changed == []
    assert refused <= {("POST", 422)}
    assert same_cloud(REVERSE.cloud["after"], REVERSE.cloud["before"], {})


@dataclass(frozen=True)
class PolyccmMade:
    """The scenario made by polyccm from an empty cluster and project (what it sent, and the
    cloud state after)."""

    writes: list[Exchange]
    cloud: dict[str, Any]
    bindings: dict[str, str]


@pytest.fixture(scope="module")
def polyccm_made(
    switched: Switched, control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> PolyccmMade:
    """Requested last: it ends the takeover above and starts from an empty cluster and project."""
    switched.stack.close()
    kube, metal = switched.kube, switched.metal
    delete_namespace(kube, switch.NAMESPACE)
    delete_all_nodes(kube)
    control(switched.env).reset()
    switch.set_up(kube, metal)
    args = ["--configure-cloud-routes=false", f"--cloud-config={switched.config}"]
    with (
        Recorder(switch.emulator_base(switched.env)) as recorder,
        running_polyccm(
            "packet",
            state=tmp_path_factory.mktemp("polyccm-made"),
            env={**switched.polyccm_env, "METAL_API_URL": recorder.url + "/metal/v1"},
            kubeconfig=control_plane.kubeconfig,
            args=args,
        ),
    ):
        switch.settle(lambda: switch.settled_kube(kube, switch.ALL, switch.SERVED), lambda: 0)
        writes = [e for e in recorder.take() if e.is_write]
    cloud = switch.cloud_state(metal)
    # Bound as upstream's reverse run saw them: the project, the cluster and each device.
    bindings = {
        str(REVERSE.cloud["before"]["project"]): switched.env["METAL_PROJECT_ID"],
        str(REVERSE.kube["cluster_uid"]): switched.bindings[str(FIRST.kube["cluster_uid"])],
    }
    made = recorded_ids(cloud)
    for name, recorded in recorded_ids(REVERSE.cloud["before"]).items():
        bindings[recorded] = made[name]
    return PolyccmMade(writes, cloud, bindings)


def elastic_ips_aside(cloud: Mapping[str, Any], *keys: str) -> Any:
    """``cloud`` with ``keys`` of each Elastic IP (and its address) left out."""
    ips = [
        {k: v for k, v in ip.items() if k not in (*keys, "address")} for ip in cloud["elastic_ips"]
    ]
    return {**cloud, "elastic_ips": ips, "project": ""}


def test_polyccm_makes_the_cloud_state_upstream_made(polyccm_made: PolyccmMade) -> None:
    # The same places, tags, BGP config and sessions (ids, addresses and details aside).
    live = polyccm_made.bindings[str(REVERSE.kube["cluster_uid"])]
    bindings = {str(FIRST.kube["cluster_uid"]): live}
    assert comparable(elastic_ips_aside(polyccm_made.cloud, "details"), switch.VOLATILE) == (
        comparable(elastic_ips_aside(FIRST.cloud, "details"), switch.VOLATILE, bindings=bindings)
    )


def test_polyccm_describes_its_elastic_ips_as_upstream(polyccm_made: PolyccmMade) -> None:
    # upstream's details (metal/constants.go:6, loadbalancers.go:442@38d15e2)
    assert sorted(ip["details"] for ip in polyccm_made.cloud["elastic_ips"]) == sorted(
        ip["details"] for ip in FIRST.cloud["elastic_ips"]
    )


def request_shapes(writes: list[Exchange]) -> list[tuple[str, str, list[str]]]:
    """Each successful write as method, path without ids, and the request's keys."""
    shapes = []
    for exchange in writes:
        if exchange.status >= 400:
            continue
        path = "/".join(
            "{id}" if len(part) == 36 else part for part in exchange.path.split("?")[0].split("/")
        )
        keys = sorted(exchange.request) if isinstance(exchange.request, dict) else []
        shapes.append((exchange.method, path, keys))
    return sorted(shapes)


def test_polyccm_sends_the_requests_upstream_sent(polyccm_made: PolyccmMade) -> None:
    # fail_on_approval_required on each reservation (metal/loadbalancers.go:448@38d15e2),
    # use_case on the BGP config (bgp.go:64), sessions with address_family alone (bgp.go:81-83)
    assert request_shapes(polyccm_made.writes) == request_shapes(FIRST.writes)


def test_upstream_replayed_on_what_polyccm_made_changes_nothing(
    polyccm_made: PolyccmMade, switched: Switched
) -> None:
    play = replayer(switched.env, switched.kube)
    play.bindings.update(polyccm_made.bindings)

    play.replay(REVERSE.exchanges)

    assert switch.cloud_state(switched.metal) == polyccm_made.cloud
