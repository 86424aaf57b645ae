"""Switching from upstream's DigitalOcean CCM to polyccm, and back (issue 25), from goldens.

Upstream's digitalocean-cloud-controller-manager v0.1.68 cannot be built by CI (the Go module
proxy refuses it), so what it did on the emulator is recorded in
``providers/digitalocean/tests/goldens/switch`` (``python -m
polyccm_digitalocean_emulator.switch --peer PATH`` records them again). Here:

1. upstream's recorded exchanges are sent to the emulator again (each must get the status it got
   then: the emulator serves upstream), the cloud state must be the recorded one, and upstream's
   recorded results are written to Kubernetes (Nodes initialised, Services' annotations,
   finalizers and status); upstream's own edits are replayed the same way on their own (each
   accepted, each step's cloud the recorded one);
2. ``polyccm plan`` (upstream's environment: DO_ACCESS_TOKEN, DO_OVERRIDE_URL, REGION) says
   "adopt" for every load balancer and nothing else;
3. polyccm (the real CLI, same environment) settles with no cloud write, no Service status or
   annotation changed, no Warning event;
4. step 4's edits, applied with polyccm running, give the cloud state upstream's same edits
   gave, field by field (ids and timestamps aside), IPs included;
5. the reverse switch: polyccm makes everything from scratch; the state equals what upstream
   found when recorded, and upstream's recorded exchanges on it are accepted. Upstream PUTs
   every load balancer it ensures, its own included (loadbalancers.go:227-229, 365), so its
   writes are asserted to change nothing but issue 29's differences.

Each of issue 29's differences (DigitalOcean load balancers with upstream's semantics) is a
test that it shows nowhere: plain once polyccm no longer has it (``GONE``), a strict xfail while
it does. The scenario runs once per module (``switch`` fixture);
the tests read its results.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from polyccm.kube.api import NODES, SERVICES, KubeApi
from polyccm_digitalocean_emulator import switch as scenario
from polyccm_digitalocean_emulator.plugin import CA_BUNDLE_VARIABLE
from polyccm_digitalocean_emulator.testing import DigitalOceanApi, control, running_emulator
from polyccm_testing.demo import running_polyccm
from polyccm_testing.devenv.cleanup import delete_all_nodes, delete_namespace
from polyccm_testing.emulation.testing import free_port
from polyccm_testing.kubeobjects import events_for
from polyccm_testing.opstools import plans_by_service, run_command
from polyccm_testing.peers.goldens import (
    Golden,
    Replayer,
    Step,
    comparable,
    load_steps,
    substitute,
)
from polyccm_testing.peers.recording import Exchange, Recorder

GOLDENS = Path(__file__).parents[1] / scenario.GOLDENS
#: Differences between two clouds that are not differences: what the cloud assigns, and when.
IDS_AND_TIMES = ("id", "created_at", "vpc_uuid", "project_id")
SETTLED = 4.0  # seconds without a write after which polyccm has settled
#: Warnings about the scenario's Services that no CCM makes: kube-apiserver's Cluster IP repair
#: (the session's control plane hands out again the IPs of namespaces deleted before).
NOT_A_CCM = frozenset({"ClusterIPNotAllocated"})


# -- the scenario, run once -----------------------------------------------------------------


@dataclass
class Run:
    """What happened, for the tests to assert on."""

    golden: Golden
    kube: KubeApi
    bindings: dict[str, str] = field(default_factory=dict)
    """Recorded -> this run's values (ids, UIDs, IPs) of steps 1-4."""
    names: dict[str, str] = field(default_factory=dict)
    """Load-balancer name -> its Service's name (this run's, both phases)."""
    ids: dict[str, str] = field(default_factory=dict)
    """Load-balancer id -> its Service's name (steps 1-4)."""
    replayed: dict[str, list[Exchange]] = field(default_factory=dict)
    replay_differences: dict[str, Any] = field(default_factory=dict)
    kube_before: dict[str, Any] = field(default_factory=dict)
    kube_after: dict[str, Any] = field(default_factory=dict)
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)
    settle_writes: list[str] = field(default_factory=list)
    warnings: list[tuple[str, ...]] = field(default_factory=list)
    edits: dict[str, dict[str, Any]] = field(default_factory=dict)
    reverse_differences: dict[str, Any] = field(default_factory=dict)
    reverse_lb_names: dict[str, str] = field(default_factory=dict)
    """Service -> its load balancer's name when the reverse switch was recorded."""
    upstream_reverse_changes: dict[str, Any] = field(default_factory=dict)
    replayed_edit_differences: dict[str, Any] = field(default_factory=dict)
    metrics: str = ""
    """What polyccm served at /metrics on upstream's METRICS_ADDR while it had taken over."""

    def dump(self, path: Path) -> None:
        """Everything but the golden and the client, for reading a failure."""
        value = {k: v for k, v in vars(self).items() if k not in ("golden", "kube")}
        path.write_text(json.dumps(value, indent=1, sort_keys=True, default=str))


def expected(step: Step, bindings: Mapping[str, str]) -> Any:
    """The recorded cloud state of ``step`` in this run's ids, without ids and times."""
    return comparable(step.cloud, IDS_AND_TIMES, bindings=bindings)


def actual(api: DigitalOceanApi) -> Any:
    return comparable(scenario.cloud_state(api), IDS_AND_TIMES)


def service_names(kube: KubeApi) -> dict[str, str]:
    """Each scenario Service's load-balancer name -> the Service's name."""
    return recorded_names(scenario.kube_state(kube))


def bind_setup(recorded: Mapping[str, Any], made: scenario.Setup, kube: KubeApi) -> dict[str, str]:
    """Recorded -> actual values the test knows: the certificate's id, droplet ids, and each
    Service's UID and the load-balancer name made of it."""
    setup = scenario.Setup.from_json(recorded["setup"])
    bindings = {setup.certificate_id: made.certificate_id}
    for name, droplet_id in setup.droplets.items():
        if droplet_id != made.droplets[name]:
            bindings[str(droplet_id)] = str(made.droplets[name])
    for name, service in recorded["services"].items():
        uid = kube.get(SERVICES, name, scenario.NAMESPACE)["metadata"]["uid"]
        bindings[service["uid"]] = uid
        bindings[scenario.load_balancer_name(service["uid"])] = scenario.load_balancer_name(uid)
    return bindings


def apply_kube_results(
    kube: KubeApi, recorded: Mapping[str, Any], bindings: Mapping[str, str]
) -> None:
    """Write upstream's recorded results as upstream wrote them: each Node's providerID,
    labels, taints and addresses; each Service's annotations, finalizers and status."""
    results = substitute(recorded, bindings)
    for name, node in results["nodes"].items():
        kube.patch(NODES, name, {"metadata": {"labels": node["labels"]},
                                 "spec": {"providerID": node["providerID"],
                                          "taints": node["taints"] or None}})  # fmt: skip
        kube.patch(NODES, name, {"status": {"addresses": node["addresses"]}}, subresource="status")
    for name, service in results["services"].items():
        kube.patch(SERVICES, name, {"metadata": {"annotations": service["annotations"],
                                                 "finalizers": service["finalizers"]}},
                   scenario.NAMESPACE)  # fmt: skip
        kube.patch(SERVICES, name, {"status": {"loadBalancer": service["loadBalancer"]}},
                   scenario.NAMESPACE, subresource="status")  # fmt: skip


def services_view(kube: KubeApi) -> dict[str, Any]:
    """Each scenario Service's annotations and load-balancer status."""
    state = scenario.kube_state(kube)["services"]
    return {name: {"annotations": s["annotations"], "loadBalancer": s["loadBalancer"]}
            for name, s in state.items()}  # fmt: skip


def replay_to(env: Mapping[str, str], bindings: dict[str, str]) -> Replayer:
    return Replayer(env["DO_OVERRIDE_URL"], Path(env[CA_BUNDLE_VARIABLE]), bindings,
                  {"Authorization": f"Bearer {env['DO_ACCESS_TOKEN']}"})  # fmt: skip


def bind_addresses(bindings: dict[str, str], recorded: Any, now: Any) -> None:
    """Bind each recorded load balancer's id and IPs to those of the one of the same name (only
    those: binding every differing value would hide the differences to be found)."""
    by_name = {lb["name"]: lb for lb in now["load_balancers"]}
    for balancer in recorded["load_balancers"]:
        current = by_name.get(substitute(balancer["name"], bindings))
        for key in ("id", "ip", "ipv6"):
            if current and balancer.get(key) and current.get(key):
                bindings.setdefault(str(balancer[key]), str(current[key]))


def recorded_names(kube: Mapping[str, Any]) -> dict[str, str]:
    """Load-balancer name -> Service name, as recorded."""
    names = {}
    for name, service in kube["services"].items():
        names[scenario.load_balancer_name(service["uid"])] = name
        custom = service["annotations"].get("service.beta.kubernetes.io/do-loadbalancer-name")
        if custom:
            names[custom] = name
    return names


def upstreams_environment(env: Mapping[str, str], endpoint: str) -> dict[str, str]:
    """What upstream's deployment sets (cloud.go:89-165@v0.1.68), pointed at ``endpoint``: the
    very environment the goldens were recorded with, METRICS_ADDR included (upstream's README
    "Expose Prometheus Metrics"), which polyccm serves its /metrics on."""
    return scenario.upstream_env(endpoint, env["DO_ACCESS_TOKEN"], free_port())


def differences(expected: Any, actual: Any, names: Mapping[str, str]) -> dict[str, Any]:
    """Field by field, what differs between two comparable cloud states: ``{"<service>.<field>":
    [expected, actual]}`` for load balancers (by their Service's name), ``{"droplets": ...}``."""
    found: dict[str, Any] = {}
    if expected["droplets"] != actual["droplets"]:
        found["droplets"] = [expected["droplets"], actual["droplets"]]
    want = {names.get(lb["name"], lb["name"]): lb for lb in expected["load_balancers"]}
    have = {names.get(lb["name"], lb["name"]): lb for lb in actual["load_balancers"]}
    for service in sorted(want.keys() | have.keys()):
        if service not in have or service not in want:
            found[service] = [service in want, service in have]
            continue
        for key in sorted(want[service].keys() | have[service].keys()):
            if want[service].get(key) != have[service].get(key):
                found[f"{service}.{key}"] = [want[service].get(key), have[service].get(key)]
    return found


def ensured_all(kube: KubeApi) -> bool:
    """Whether polyccm has ensured every Service it serves (upstream's events are not replayed:
    an EnsuredLoadBalancer here is polyccm's)."""
    serves = {c.name for c in scenario.CASES} - {"disowned"} - scenario.POLYCCM_UNSERVED
    ensured = {
        name
        for name in serves
        for _type, reason, _message in events_for(kube, scenario.NAMESPACE, name)
        if reason == "EnsuredLoadBalancer"
    }
    return ensured == serves


@contextmanager
def polyccm(
    tmp: Path, endpoint: str, env: Mapping[str, str], kubeconfig: Path
) -> Iterator[dict[str, str]]:
    """polyccm's real CLI with upstream's environment (no cloud config: upstream has none);
    yields that environment."""
    ours = upstreams_environment(env, endpoint)
    with running_polyccm("digitalocean", state=tmp, env=ours, kubeconfig=kubeconfig,
                         args=["--configure-cloud-routes=false"]):  # fmt: skip
        yield ours


@contextmanager
def environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def fresh(kube: KubeApi, env: Mapping[str, str]) -> tuple[DigitalOceanApi, scenario.Setup]:
    delete_namespace(kube, scenario.NAMESPACE)
    delete_all_nodes(kube)
    control(env).reset()
    # The replay sends in seconds what upstream sent in minutes: DigitalOcean's 250 a minute
    # would refuse it, and a 429 is not what upstream got.
    control(env).configure(rate_limit_per_minute=100_000, rate_limit_per_hour=1_000_000)
    api = DigitalOceanApi(env)
    return api, scenario.setup_cloud(api)


def _take_over(run: Run, env: Mapping[str, str], kubeconfig: Path, tmp: Path) -> None:
    """Steps 1 to 4 on a reset emulator."""
    kube, golden = run.kube, run.golden
    api, made = fresh(kube, env)
    create = golden.step("create")
    scenario.register_nodes(kube, made)
    scenario.create_services(kube, made)
    run.bindings = bind_setup(create.kube, made, kube)
    run.names.update(service_names(kube))
    replayer = replay_to(env, run.bindings)
    # 1. upstream's exchanges again, and its Kubernetes results.
    run.replayed["create"] = replayer.replay(create.exchanges)
    time.sleep(0.5)  # the last load balancers turn active
    run.replay_differences = differences(expected(create, run.bindings), actual(api), run.names)
    run.ids = {
        lb["id"]: run.names[lb["name"]] for lb in scenario.cloud_state(api)["load_balancers"]
    }
    apply_kube_results(kube, create.kube, run.bindings)
    run.kube_before = services_view(kube)
    with Recorder(env["DO_OVERRIDE_URL"], ca_file=Path(env[CA_BUNDLE_VARIABLE])) as rec:
        # 2. the plan, with upstream's environment.
        with environment(**upstreams_environment(env, rec.url)):
            result = run_command("plan", "digitalocean", kubeconfig, "-o", "json")
        run.plans = plans_by_service(result, scenario.NAMESPACE)
        rec.take()
        # 3. polyccm takes over.
        settler = scenario.Settler(rec, SETTLED)
        with polyccm(tmp, rec.url, env, kubeconfig) as ours:
            # Settled: every Service polyccm serves ensured once, and no write for a while.
            settler.wait(lambda: ensured_all(kube), timeout=60)
            with urllib.request.urlopen(f"http://{ours['METRICS_ADDR']}/metrics", timeout=10) as m:
                run.metrics = m.read().decode()
            run.settle_writes = [str(e) for e in settler.take() if e.is_write]
            run.kube_after = services_view(kube)
            run.warnings = [(name, *event) for name in run.kube_before
                            for event in events_for(kube, scenario.NAMESPACE, name)
                            if event[0] == "Warning" and event[1] not in NOT_A_CCM]  # fmt: skip
            # 4. the edits, from the same starting state as upstream's.
            for edit in scenario.EDITS:
                edit.apply(kube, api)
                settler.wait(lambda e=edit: e.done(kube), need_write=True, timeout=60)  # type: ignore[misc]
                found = differences(expected(golden.step(edit.name), run.bindings), actual(api),
                                    run.names)  # fmt: skip
                writes = [str(e) for e in settler.take() if e.is_write]
                run.edits[edit.name] = {"differences": found, "writes": writes}


def _reverse(run: Run, env: Mapping[str, str], kubeconfig: Path, tmp: Path) -> None:
    """Step 5 on a reset emulator: polyccm first, then upstream's recorded exchanges."""
    kube, golden = run.kube, run.golden
    api, made = fresh(kube, env)
    before, after = golden.step("reverse-polyccm"), golden.step("reverse")
    scenario.register_nodes(kube, made)
    scenario.create_services(kube, made)
    bindings = bind_setup(before.kube, made, kube)
    run.names.update(service_names(kube))
    with Recorder(env["DO_OVERRIDE_URL"], ca_file=Path(env[CA_BUNDLE_VARIABLE])) as rec:
        settler = scenario.Settler(rec, SETTLED)
        with polyccm(tmp, rec.url, env, kubeconfig):
            settler.wait(lambda: scenario.served(kube, scenario.POLYCCM_UNSERVED),
                         need_write=True, timeout=60)  # fmt: skip
    now = scenario.cloud_state(api)
    bind_addresses(bindings, before.cloud, now)
    run.reverse_differences = differences(expected(before, bindings), actual(api), run.names)
    run.replayed["reverse"] = replay_to(env, bindings).replay(after.exchanges)
    recorded = recorded_names(before.kube)
    run.reverse_lb_names = {service: name for name, service in recorded.items()}
    run.upstream_reverse_changes = differences(
        comparable(before.cloud, IDS_AND_TIMES), comparable(after.cloud, IDS_AND_TIMES), recorded
    )


def _replay_edits(run: Run, env: Mapping[str, str]) -> None:
    """Upstream's own edits replayed after its create, on a reset emulator: each exchange
    accepted with its recorded status, each step's cloud the recorded one."""
    kube, golden = run.kube, run.golden
    api, made = fresh(kube, env)
    create = golden.step("create")
    scenario.register_nodes(kube, made)
    scenario.create_services(kube, made)
    bindings = bind_setup(create.kube, made, kube)
    names = service_names(kube)
    replayer = replay_to(env, bindings)
    replayer.replay(create.exchanges)
    for edit in scenario.EDITS:
        if edit.name == "node-added":  # the droplet comes first, made through the API
            scenario.make_droplet(api, scenario.ADDED_DROPLET, False)
        step = golden.step(edit.name)
        run.replayed[edit.name] = replayer.replay(step.exchanges)
        time.sleep(0.5)  # a replayed create turns active
        run.replayed_edit_differences[edit.name] = differences(
            expected(step, bindings), actual(api), names
        )


@pytest.fixture(scope="module")
def switch(
    control_plane: Any, kube_api: KubeApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Run]:
    run = Run(load_steps(GOLDENS), kube_api)
    tmp = tmp_path_factory.mktemp("switch-do")
    with running_emulator(tmp, lb_active_delay=0.3) as env:
        try:
            _take_over(run, env, control_plane.kubeconfig, tmp)
            _reverse(run, env, control_plane.kubeconfig, tmp)
            _replay_edits(run, env)
        finally:
            delete_namespace(kube_api, scenario.NAMESPACE)
            delete_all_nodes(kube_api)
            if os.environ.get("POLYCCM_SWITCH_DUMP"):
                run.dump(Path(os.environ["POLYCCM_SWITCH_DUMP"]))
    yield run


# -- the differences issue 29 removes ----------------------------------------------------------


def _regional_default_stack() -> frozenset[str]:
    """Services whose load balancer upstream makes REGIONAL with the default network stack."""
    return frozenset(
        c.name
        for c in scenario.CASES
        if c.annotations.get("type") == "REGIONAL" and "network-stack" not in c.annotations
    ) - {"http3"}


@dataclass(frozen=True)
class Known:
    """A difference issue 29 removes, and where it shows: on ``services``, in cloud states'
    ``fields`` (None: any field), in plans whose differences or problems say ``plan_text``
    (None: any plan other than adopt), in Warning events saying ``warning_text`` (None: any),
    and in the writes polyccm makes when it takes over (``settle``)."""

    name: str
    reason: str
    services: frozenset[str]
    fields: frozenset[str] | None = None
    plan_text: str | None = None
    warning_text: str | None = None
    settle: bool = False

    def covers(self, key: str) -> bool:
        service, _, name = key.partition(".")
        return service in self.services and (self.fields is None or name in self.fields)

    def in_plan(self, plan: Mapping[str, Any]) -> bool:
        if self.plan_text is None:
            return plan["action"] != "adopt"
        said = [d["aspect"] + " " + d["detail"] for d in plan["differences"]]
        said += [p["message"] for p in plan.get("problems", [])]
        return any(self.plan_text in line for line in said)

    def in_warning(self, message: str) -> bool:
        return self.warning_text is None or self.warning_text in message


_WITH_LB = frozenset(c.name for c in scenario.CASES) - {"disowned"}
KNOWN = (
    Known("network-stack", "issue 29: a REGIONAL load balancer is DUALSTACK by default as "
          "upstream's (getNetworkStack, v0.1.68 loadbalancers.go:1756-); polyccm plans an update "
          "and PUTs IPV4 over upstream's DUALSTACK", _regional_default_stack(),
          frozenset({"network_stack"}), plan_text="network_stack", warning_text="network",
          settle=True),
    Known("health-check-figures", "issue 29: upstream always sends its health-check figures "
          "3/5/3/5 and proxy_protocol false (buildHealthCheck, loadbalancers.go:997-1049); "
          "polyccm sends none, so each of its PUTs brings DigitalOcean's 10/5/5/3",
          _WITH_LB - {"healthcheck", "http3"}, frozenset({"health_check"}),
          plan_text="health-check", warning_text="health"),
    Known("override-health-check-empty", "issue 29: override-health-check counts when present, "
          "even empty (loadbalancers.go:1006); polyccm wants 'true', warns that each healthcheck-* "
          "annotation is ignored and puts kube-proxy's check back", frozenset({"healthcheck"}),
          frozenset({"health_check"}), plan_text="health-check",
          warning_text="override-health-check"),
    Known("http3-shares-tls-port", "issue 29: http3-port shares its port with the TLS port as "
          "upstream requires (loadbalancers.go:1111); polyccm refuses the Service (a Warning), "
          "so its load balancer is never updated", frozenset({"http3"})),
    Known("disown-without-load-balancer", "issue 29: disown skips all work before any call "
          "(EnsureLoadBalancer, loadbalancers.go:206-213); polyccm fails the sync with a Warning "
          "when there is no load balancer", frozenset({"disowned"})),
    Known("algorithm-deprecated", "issue 29: the algorithm annotation is accepted silently as "
          "deprecated (lb_annotations.go:116-121); polyccm warns 'misspelled?'",
          frozenset({"slug"}), frozenset({"algorithm"}), plan_text="algorithm",
          warning_text="algorithm"),
)  # fmt: skip
#: Issue 29's differences polyccm no longer has: each a plain test that it shows nowhere.
GONE = frozenset({"network-stack", "health-check-figures", "override-health-check-empty",
                  "http3-shares-tls-port", "disown-without-load-balancer",
                  "algorithm-deprecated"})  # fmt: skip
#: Those still to remove: each excused where it shows, and a strict xfail of its own.
PENDING = tuple(k for k in KNOWN if k.name not in GONE)
#: A deliberate difference (the provider's README, annotations table): polyccm says that
#: allow-rules are ignored when spec.loadBalancerSourceRanges is set; upstream ignores them
#: silently (buildFirewall, loadbalancers.go:1226-1231).
DELIBERATE_WARNING = ("ranges", "allow-rules is ignored: spec.loadBalancerSourceRanges")


def unexplained(found: Mapping[str, Any], known: tuple[Known, ...] = PENDING) -> dict[str, Any]:
    return {key: value for key, value in found.items() if not any(k.covers(key) for k in known)}


def explained_by(category: Known, found: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in found.items() if category.covers(key)}


def plan_unexplained(name: str, plan: Mapping[str, Any]) -> list[str]:
    """What a plan says beyond "adopt" that no known difference explains."""
    if plan["action"] == "adopt":
        return []
    known = [k for k in PENDING if name in k.services]
    if any(k.plan_text is None for k in known):
        return []
    said = [d["aspect"] + " " + d["detail"] for d in plan["differences"]]
    said += [p["message"] for p in plan.get("problems", [])]
    left = [line for line in said if not any(k.plan_text and k.plan_text in line for k in known)]
    return left if plan["action"] == "update" else [plan["action"], *left]


def warning_explained(warning: tuple[str, ...]) -> bool:
    service, message = warning[0], warning[3]
    if service == DELIBERATE_WARNING[0] and DELIBERATE_WARNING[1] in message:
        return True
    return any(service in k.services and k.in_warning(message) for k in PENDING)


def written_services(run: Run, writes: list[str]) -> list[str]:
    """The Service each write was about (by the load-balancer id in its path)."""
    services = []
    for write in writes:
        path = write.split()[1]
        parts = path.split("?")[0].split("/")
        lb_id = parts[3] if len(parts) > 3 else ""
        services.append(run.ids.get(lb_id, path))
    return services


# -- 1. upstream's recording, replayed ------------------------------------------------------


def test_the_golden_names_upstreams_release(switch: Run) -> None:
    assert switch.golden.peer.name == scenario.PEER_NAME
    assert switch.golden.peer.version == "v0.1.68"


def test_upstream_was_refused_nothing_when_recorded(switch: Run) -> None:
    # The emulator serves upstream: every Service served, no request refused (before the
    # overlay, every create was a 422 on health_check.proxy_protocol).
    refused = [
        f"{s.name}: {e}" for s in switch.golden.steps for e in s.exchanges if e.status >= 400
    ]
    assert refused == []


def test_the_emulator_accepts_every_exchange_upstream_made(switch: Run) -> None:
    # Replayer raises ReplayRefused on any other status than the recorded one.
    create = switch.golden.step("create")
    assert len(switch.replayed["create"]) == len(create.exchanges)
    assert sum(e.method == "POST" and e.path == "/v2/load_balancers" for e in create.writes) == 17


def test_the_replayed_cloud_is_the_recorded_one(switch: Run) -> None:
    assert switch.replay_differences == {}


@pytest.mark.parametrize("edit", [edit.name for edit in scenario.EDITS])
def test_the_emulator_accepts_upstreams_edits_and_ends_where_upstream_did(
    switch: Run, edit: str
) -> None:
    recorded = switch.golden.step(edit)
    assert len(switch.replayed[edit]) == len(recorded.exchanges)
    assert switch.replayed_edit_differences[edit] == {}


# -- 2. the plan ----------------------------------------------------------------------------


def test_plan_says_adopt_for_every_load_balancer_upstream_made(switch: Run) -> None:
    assert set(switch.plans) == {c.name for c in scenario.CASES}
    left = {name: plan_unexplained(name, plan) for name, plan in switch.plans.items()}
    assert {name: said for name, said in left.items() if said} == {}
    # The health-check figures are not a plan's business (polyccm sends none to compare).
    touched = {s for k in PENDING if k.name != "health-check-figures" for s in k.services}
    adopted = {name for name, plan in switch.plans.items() if plan["action"] == "adopt"}
    assert adopted == {c.name for c in scenario.CASES} - touched


# -- 3. polyccm takes over ------------------------------------------------------------------


def test_polyccm_settles_on_upstreams_cloud_with_no_write(switch: Run) -> None:
    settling = {s for k in PENDING if k.settle for s in k.services}
    services = written_services(switch, switch.settle_writes)
    assert [s for s in services if s not in settling] == []


def test_polyccm_serves_its_metrics_on_upstreams_metrics_addr(switch: Run) -> None:
    # Upstream's deployment sets METRICS_ADDR, served over plain HTTP at /metrics
    # (cloud.go:153-160,235-248@v0.1.68): polyccm takes the same environment and serves its
    # own counters there (before: the variable was dropped from the switch's environment, and
    # polyccm refused it with exit 2).
    served = 'polyccm_cloud_api_calls_total{operation="regions.list",provider="digitalocean"}'
    assert served in switch.metrics


def test_polyccm_changes_no_service_status_or_annotation(switch: Run) -> None:
    assert switch.kube_after == switch.kube_before


def test_polyccm_raises_no_warning_event(switch: Run) -> None:
    assert [w for w in switch.warnings if not warning_explained(w)] == []


def test_polyccm_says_allow_rules_are_ignored_beside_source_ranges_as_its_readme_says(
    switch: Run,
) -> None:
    # Deliberate: upstream drops allow-rules silently when source ranges are set
    # (loadbalancers.go:1226-1231); polyccm builds the same firewall and says so once.
    ranges = [w for w in switch.warnings if w[0] == DELIBERATE_WARNING[0]]
    assert [(w[1], w[2]) for w in ranges] == [("Warning", "LoadBalancerWarning")]
    assert DELIBERATE_WARNING[1] in ranges[0][3]


# -- 4. the same edits ----------------------------------------------------------------------


@pytest.mark.parametrize("edit", [edit.name for edit in scenario.EDITS])
def test_an_edit_gives_the_cloud_upstreams_edit_gave(switch: Run, edit: str) -> None:
    # Field by field, ids and times aside; IPs included (the recorded IPs bound to this run's).
    assert unexplained(switch.edits[edit]["differences"]) == {}
    assert switch.edits[edit]["writes"], "polyccm wrote nothing for the edit"


# -- 5. the reverse switch ------------------------------------------------------------------


def test_polyccm_makes_the_cloud_upstream_found_when_recorded(switch: Run) -> None:
    assert switch.reverse_differences == {}


def test_upstreams_writes_on_polyccms_cloud_change_nothing_issue_29_does_not_name(
    switch: Run,
) -> None:
    # Upstream writes on every ensure of a load balancer that exists (a PUT of its whole request:
    # EnsureLoadBalancer -> updateLoadBalancer, loadbalancers.go:227-229, 365), so a restart of
    # upstream on any cloud, its own included, is one PUT per Service: "zero writes" cannot
    # hold for upstream v0.1.68. What must hold: those PUTs change nothing but the issue 29
    # differences still pending, and upstream creates nothing (polyccm made every load
    # balancer, the http3 one included).
    reverse = switch.golden.step("reverse")
    assert {e.method for e in reverse.writes} == {"PUT"}
    assert unexplained(switch.upstream_reverse_changes) == {}


# -- issue 29's differences: those gone, each a plain test; those left, each a strict xfail ------


def _difference_shows(run: Run, known: Known) -> list[str]:
    """Everywhere ``known`` shows in this run: plans, writes, warnings, states."""
    shown = []
    for name, plan in run.plans.items():
        if name in known.services and known.in_plan(plan):
            shown.append(f"plan {name}: {plan['action']} {plan['differences']}")
    if known.settle:
        written = written_services(run, run.settle_writes)
        shown += [f"settle: a write for {s}" for s in written if s in known.services]
    for warning in run.warnings:
        if warning[0] in known.services and known.in_warning(warning[3]):
            shown.append(f"warning: {warning}")
    for edit, result in run.edits.items():
        shown += [f"{edit}: {key}" for key in explained_by(known, result["differences"])]
    shown += [f"reverse: {key}" for key in explained_by(known, run.upstream_reverse_changes)]
    return shown


@pytest.mark.parametrize(
    "known",
    [pytest.param(k, id=k.name, marks=[pytest.mark.xfail(strict=True, reason=k.reason)]
                  if k in PENDING else [])
     for k in KNOWN],
)  # fmt: skip
def test_issue_29_difference_is_gone(switch: Run, known: Known) -> None:
    # Each Known's reason cites the upstream v0.1.68 lines it pins.
    assert _difference_shows(switch, known) == []
