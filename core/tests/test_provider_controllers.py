"""A provider's own controllers, as a provider author and an operator meet them.

The provider here, ``labelcloud``, registers two controllers through
``polyccm_register_controllers``, written only with what ``polyccm.controllers`` exports:
``node-labeller`` (on by default) labels every node through a work queue and says so in an
event; ``node-auditor`` (off by default) annotates them the same way. ``--controllers`` selects
them like the built-in ones, they run in the leader's term beside the built-in ones against the
real API server, stop with the term, count in /healthz and the workqueue metrics, and their RBAC
rules reach the ClusterRole ``polyccm rbac`` prints.

Run as a script, this module is the ``polyccm`` command with ``labelcloud`` installed.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from polyccm import cli, cloudcalls, metrics
from polyccm.app import commandline
from polyccm.app.manager import ControllerManager
from polyccm.cloud import CloudProvider
from polyccm.controllers import (
    MERGE_PATCH,
    NODES,
    Controller,
    ControllerContext,
    ControllerRegistry,
    JsonObject,
    Node,
    PolicyRule,
    RateLimitingQueue,
    process_one,
    run_workers,
)
from polyccm.hookspecs import hookimpl
from polyccm.kube.api import LEASES, KubeApi, load_configuration
from polyccm.leaderelection import micro_time
from polyccm.plugins import ProviderRegistry, ProviderSettings, plugin_manager
from polyccm_testing.fake import FakeCloud
from polyccm_testing.kubeobjects import (
    make_node,
    reasons_for,
    stays,
    user_with_cluster_role,
    wait_for,
)

PROVIDER = "labelcloud"
LABEL = "labelcloud.example.com/seen"
ANNOTATION = "labelcloud.example.com/audited"
LABELLER_RULE = PolicyRule(("",), ("configmaps",), ("get",), resource_names=("labelcloud",))
AUDITOR_RULE = PolicyRule(("coordination.k8s.io",), ("leases",), ("get", "update"))


class Marker(Controller):
    """Marks every node it sees with a label or an annotation, one key at a time through its
    work queue, and records an event on the node."""

    def __init__(self, context: ControllerContext, *, field: str, key: str, reason: str) -> None:
        self.context = context
        self.field = field
        self.key = key
        self.reason = reason
        self.queue = RateLimitingQueue(self.name)
        self.ended = threading.Event()

    def run(self, stop: threading.Event) -> None:
        self.context.nodes.add_handler(
            on_add=self._enqueue, on_update=lambda _old, new: self._enqueue(new)
        )
        run_workers(
            name=self.name,
            queue=self.queue,
            workers=2,
            process=lambda queue: process_one(queue, self.sync, name=self.name),
            stop=stop,
        )
        self.ended.set()

    def _enqueue(self, obj: JsonObject) -> None:
        self.queue.add(obj["metadata"]["name"])

    def sync(self, key: str) -> None:
        raw = self.context.nodes.get(key)
        if raw is None:
            return
        node = Node(raw)
        marks = node.labels if self.field == "labels" else node.annotations
        if self.key in marks:
            return
        body = {"metadata": {self.field: {self.key: "yes"}}}
        self.context.api.patch(NODES, node.name, body, patch_type=MERGE_PATCH)
        self.context.recorder.event(raw, "Normal", self.reason, f"{self.name} marked the node")


class NodeLabeller(Marker):
    name = "node-labeller"

    def __init__(self, context: ControllerContext) -> None:
        super().__init__(context, field="labels", key=LABEL, reason="Labelled")


class NodeAuditor(Marker):
    name = "node-auditor"

    def __init__(self, context: ControllerContext) -> None:
        super().__init__(context, field="annotations", key=ANNOTATION, reason="Audited")


class Crasher(Controller):
    """A controller whose thread dies: a bug outside every per-item guard."""

    name = "crasher"

    def run(self, stop: threading.Event) -> None:
        raise RuntimeError("a bug outside every guard")


def _cannot_make(_context: ControllerContext) -> Controller:
    raise RuntimeError("the constructor has a bug")


class LabelCloudPlugin:
    """The ``labelcloud`` provider: the fake cloud plus controllers of its own."""

    def __init__(self, *, crasher: bool = False, unmade: bool = False, claim: str = "") -> None:
        self.crasher = crasher
        self.unmade = unmade
        self.claim = claim
        self.made: list[Marker] = []

    @hookimpl
    def polyccm_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register(PROVIDER, "a fake cloud with controllers of its own")

    @hookimpl
    def polyccm_build_provider(self, settings: ProviderSettings) -> CloudProvider | None:
        return FakeCloud() if settings.provider == PROVIDER else None

    @hookimpl
    def polyccm_register_controllers(self, provider: str, registry: ControllerRegistry) -> None:
        registry.register(
            "node-labeller",
            lambda context: self._made(NodeLabeller(context)),
            enabled_by_default=True,
            rbac_rules=[LABELLER_RULE],
        )
        registry.register(
            "node-auditor",
            lambda context: self._made(NodeAuditor(context)),
            enabled_by_default=False,
            rbac_rules=[AUDITOR_RULE],
        )
        if self.crasher:
            registry.register("crasher", lambda _context: Crasher(), enabled_by_default=True)
        if self.unmade:
            registry.register("unmade", _cannot_make, enabled_by_default=True)
        if self.claim:
            registry.register(self.claim, NodeLabeller, enabled_by_default=False)

    def _made(self, controller: Marker) -> Marker:
        self.made.append(controller)
        return controller


class _AnotherProvider:
    """An installed plugin of another provider: its controllers never join labelcloud's."""

    @hookimpl
    def polyccm_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register("othercloud", "another provider")

    @hookimpl
    def polyccm_register_controllers(self, provider: str, registry: ControllerRegistry) -> None:
        registry.register("other-thing", NodeLabeller, enabled_by_default=True)


# -- selection ------------------------------------------------------------------------------


def _selected(*args: str) -> frozenset[str]:
    manager = plugin_manager([LabelCloudPlugin(), _AnotherProvider()])
    return commandline.parse_command_line(
        [f"--provider={PROVIDER}", *args], manager
    ).options.controllers


BUILT_IN = {"cloud-node", "cloud-node-lifecycle", "service", "route"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, {*BUILT_IN, "node-labeller"}),
        ("*", {*BUILT_IN, "node-labeller"}),
        ("*,node-auditor", {*BUILT_IN, "node-labeller", "node-auditor"}),
        ("*,-node-labeller", BUILT_IN),
        ("node-auditor", {"node-auditor"}),
        ("service,node-labeller", {"service", "node-labeller"}),
        ("*,-route,-node-labeller,node-auditor", {*BUILT_IN - {"route"}, "node-auditor"}),
    ],
)
def test_controllers_flag_selects_provider_controllers_like_built_in_ones(
    spec: str | None, expected: set[str]
) -> None:
    assert _selected(*([f"--controllers={spec}"] if spec is not None else [])) == expected


def test_another_providers_controllers_are_never_registered() -> None:
    manager = plugin_manager([LabelCloudPlugin(), _AnotherProvider()])
    parsed = commandline.parse_command_line([f"--provider={PROVIDER}"], manager)
    assert set(parsed.controllers) == {"node-labeller", "node-auditor"}
    assert "other-thing" not in parsed.options.controllers


def _main(
    capsys: pytest.CaptureFixture[str], plugin: LabelCloudPlugin, *args: str
) -> tuple[int, str, str]:
    status = cli.main([f"--provider={PROVIDER}", *args], plugin_manager([plugin]))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_unknown_controller_exits_2_with_one_line_naming_the_valid_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, _, err = _main(capsys, LabelCloudPlugin(), "--controllers=*,node-labeler")
    assert status == 2
    assert err.count("\n") == 1, err
    assert "unknown controller 'node-labeler'" in err
    for name in ("cloud-node", "service", "route", "node-labeller", "node-auditor"):
        assert name in err


def test_provider_controller_named_like_a_built_in_one_stops_polyccm(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, _, err = _main(capsys, LabelCloudPlugin(claim="service-lb-controller"))
    assert status == 2
    assert err.count("\n") == 1, err
    assert "'service-lb-controller', the name of a built-in controller" in err


def test_help_lists_the_provider_controllers(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _main(capsys, LabelCloudPlugin(), "--help")
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "node-labeller, node-auditor (off by default)" in out


# -- running in the term --------------------------------------------------------------------


class Running:
    """A manager with labelcloud's controllers, run on a thread until :meth:`stop`."""

    def __init__(self, manager: ControllerManager, plugin: LabelCloudPlugin) -> None:
        self.manager = manager
        self.plugin = plugin
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.status: int | None = None

    def _run(self) -> None:
        self.status = self.manager.run(self.stop_event)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=90)
        assert not self.thread.is_alive(), "the manager did not stop"
        # The fence is this test process's: a real polyccm exits with its last term, this
        # manager leaves the fence closed for the tests that run after it.
        cloudcalls.FENCE.open_always()

    def controller(self, name: str) -> Marker:
        return next(c for c in self.plugin.made if c.name == name)


@pytest.fixture
def start(control_plane: Any, clean_nodes: None) -> Iterator[Callable[..., Running]]:
    """Start labelcloud as ``polyccm`` would, from a command line, in this process."""
    started: list[Running] = []

    def run(*args: str, plugin: LabelCloudPlugin | None = None, ready: bool = True) -> Running:
        plugin = plugin or LabelCloudPlugin()
        argv = [
            f"--provider={PROVIDER}",
            f"--kubeconfig={control_plane.kubeconfig}",
            "--cluster-cidr=10.244.0.0/16",
            "--secure-port=0",
            "--kube-api-qps=0",
            "--leader-elect=false",
            *args,
        ]
        parsed = commandline.parse_command_line(argv, plugin_manager([plugin]))
        api = KubeApi(load_configuration(parsed.options.kubeconfig), qps=0)
        manager = ControllerManager(
            parsed.options,
            FakeCloud(),
            api,
            provider_controllers={n: info.constructor for n, info in parsed.controllers.items()},
        )
        running = Running(manager, plugin)
        running.thread.start()
        started.append(running)
        if ready:
            wait_for(manager.ready, 30, "the manager's caches to sync")
        return running

    yield run
    for running in started:
        running.stop()


def _node(api: KubeApi, name: str) -> Node:
    return Node(api.get(NODES, name))


def _queue_adds(name: str) -> float:
    value = metrics.REGISTRY.get_sample_value("workqueue_adds_total", {"name": name})
    return value or 0.0


def test_default_on_provider_controller_runs_beside_the_built_in_ones(
    start: Callable[..., Running], kube_api: KubeApi
) -> None:
    adds_before = _queue_adds("node-labeller")
    running = start()
    name = f"labelled-{secrets.token_hex(3)}"
    make_node(kube_api, name, tainted=False, provider_id=f"fake:///{name}")
    wait_for(lambda: LABEL in _node(kube_api, name).labels, 20, "the node-labeller's label")
    # The same event recorder, work-queue metrics and health as the built-in controllers.
    wait_for(lambda: "Labelled" in reasons_for(kube_api, "default", name), 20, "its event")
    assert _queue_adds("node-labeller") > adds_before
    assert running.manager.healthy()
    # node-auditor is off by default: it was never even made.
    assert stays(lambda: ANNOTATION not in _node(kube_api, name).annotations, 1.0)
    assert [c.name for c in running.plugin.made] == ["node-labeller"]


def test_minus_name_disables_and_a_default_off_controller_runs_when_named(
    start: Callable[..., Running], kube_api: KubeApi
) -> None:
    running = start("--controllers=*,-node-labeller,node-auditor")
    name = f"audited-{secrets.token_hex(3)}"
    make_node(kube_api, name, tainted=False, provider_id=f"fake:///{name}")
    wait_for(lambda: ANNOTATION in _node(kube_api, name).annotations, 20, "the audit annotation")
    assert stays(lambda: LABEL not in _node(kube_api, name).labels, 1.0)
    assert [c.name for c in running.plugin.made] == ["node-auditor"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_provider_controller_thread_fails_healthz(
    start: Callable[..., Running],
) -> None:
    running = start(plugin=LabelCloudPlugin(crasher=True))
    wait_for(lambda: not running.manager.healthy(), 10, "/healthz to report the dead controller")
    assert not running.manager.controllers_healthy()


def test_a_provider_controller_whose_constructor_raises_fails_healthz_and_the_rest_run(
    start: Callable[..., Running], kube_api: KubeApi
) -> None:
    running = start(plugin=LabelCloudPlugin(unmade=True))
    wait_for(lambda: not running.manager.healthy(), 10, "/healthz to report the unmade controller")
    name = f"unmade-{secrets.token_hex(3)}"
    make_node(kube_api, name, tainted=False, provider_id=f"fake:///{name}")
    wait_for(lambda: LABEL in _node(kube_api, name).labels, 20, "the other controller's label")


def test_provider_controllers_stop_with_the_leadership_term(
    start: Callable[..., Running], kube_api: KubeApi, namespace: str
) -> None:
    lease_name = "cloud-controller-manager"
    running = start(
        "--leader-elect=true",
        f"--leader-elect-resource-namespace={namespace}",
        "--leader-elect-lease-duration=3s",
        "--leader-elect-renew-deadline=2s",
        "--leader-elect-retry-period=0.5s",
        ready=False,
    )
    first = f"before-{secrets.token_hex(3)}"
    make_node(kube_api, first, tainted=False, provider_id=f"fake:///{first}")
    wait_for(lambda: LABEL in _node(kube_api, first).labels, 30, "the leader's label")
    labeller = running.controller("node-labeller")

    # Another candidate takes the Lease for an hour: this process's term ends.
    lease = kube_api.get(LEASES, lease_name, namespace)
    lease["spec"].update(
        holderIdentity="another-replica", leaseDurationSeconds=3600, renewTime=micro_time()
    )
    kube_api.replace(LEASES, lease_name, lease, namespace)
    wait_for(labeller.ended.is_set, 20, "the provider controller to stop with the term")
    assert running.thread.is_alive(), "the manager campaigns again; it does not exit"

    later = f"after-{secrets.token_hex(3)}"
    make_node(kube_api, later, tainted=False, provider_id=f"fake:///{later}")
    assert stays(lambda: LABEL not in _node(kube_api, later).labels, 1.5)


# -- the process ----------------------------------------------------------------------------


def test_polyccm_process_runs_the_provider_controller_and_stops_on_sigterm(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None
) -> None:
    name = f"process-{secrets.token_hex(3)}"
    make_node(kube_api, name, tainted=False, provider_id=f"fake:///{name}")
    process = subprocess.Popen(
        [
            sys.executable,
            __file__,
            f"--provider={PROVIDER}",
            f"--kubeconfig={control_plane.kubeconfig}",
            "--cluster-cidr=10.244.0.0/16",
            "--secure-port=0",
            "--leader-elect=false",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: LABEL in _node(kube_api, name).labels, 30, "the process's label")
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "node-labeller" in err  # "started controllers: ..., node-labeller"


# -- RBAC -----------------------------------------------------------------------------------


def _rbac(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    status, out, err = _main(capsys, LabelCloudPlugin(), "rbac", *args)
    assert status == 0, err
    role = yaml.safe_load(out)
    assert isinstance(role, dict)
    return role


def test_rbac_adds_the_rules_of_the_selected_provider_controllers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rules = _rbac(capsys)["rules"]
    assert LABELLER_RULE.to_api() in rules
    assert AUDITOR_RULE.to_api() not in rules  # off by default: not granted unless selected
    rules = _rbac(capsys, "--controllers=*,node-auditor,-node-labeller")["rules"]
    assert AUDITOR_RULE.to_api() in rules
    assert LABELLER_RULE.to_api() not in rules


def _allowed(api: KubeApi, user: str, attributes: dict[str, str]) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": attributes},
    }
    answer = api.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
    return bool(answer["status"].get("allowed"))


def test_the_generated_cluster_role_grants_what_the_provider_controller_declared(
    capsys: pytest.CaptureFixture[str], kube_api: KubeApi
) -> None:
    user = f"labelcloud-{secrets.token_hex(3)}"  # beside the real role, which other tests apply
    with user_with_cluster_role(kube_api, user, _rbac(capsys)["rules"]):
        config = {"namespace": "kube-system", "resource": "configmaps", "verb": "get"}

        def may_read_config() -> bool:
            return _allowed(kube_api, user, {**config, "name": "labelcloud"})

        wait_for(may_read_config, 10, "the authorizer to see the new ClusterRole")
        assert not _allowed(kube_api, user, {**config, "name": "someone-elses"})
        assert _allowed(kube_api, user, {"resource": "nodes", "verb": "patch"})
        assert not _allowed(
            kube_api,
            user,
            {"group": "coordination.k8s.io", "resource": "leases", "verb": "update"},
        )


if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:], plugin_manager([LabelCloudPlugin()])))
