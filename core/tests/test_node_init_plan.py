"""``polyccm plan`` and the cloud-node controller cannot disagree about a new node: for a table
of nodes and cloud answers, what ``plan -o json`` prints for each node is exactly what the
controller then writes to the real API server (one spec write, then the addresses), or the
Warning it records when the node stays tainted."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from polyccm.cloud import NodeAddress
from polyccm.controllers import nodeinfo
from polyccm.errors import RetryAfter
from polyccm.kube.api import NODES, KubeApi
from polyccm.objects import PROVIDED_NODE_IP_ANNOTATION, UNINITIALIZED_TAINT, Node
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.fake import FakeCloud
from polyccm_testing.fake_main import FakeCloudPlugin
from polyccm_testing.kubeobjects import events_for, make_node, reasons_for, wait_for
from polyccm_testing.opstools import run_command

ZONE_BETA = nodeinfo.LABEL_ZONE_BETA


@dataclass(frozen=True)
class Case:
    """A tainted node as a kubelet registers it, and the cloud's instance behind it."""

    name: str
    instance: dict[str, Any] | None = field(default_factory=dict)
    """``FakeCloud.add_instance`` keywords; ``None``: the cloud has no such instance."""
    node: dict[str, Any] = field(default_factory=dict)
    """``make_node`` keywords."""
    same_addresses: bool = False
    """The kubelet already reports the cloud's addresses."""
    keeps_provider_id: bool = False
    """The kubelet already set the providerID the cloud reports."""


CASES = (
    Case(
        "agree-new",
        {
            "instance_type": "m.large",
            "zone": "zone-b",
            "additional_labels": {"fake.example.com/rack": "r7", "kubernetes.io/no": "x"},
        },
        {"addresses": (("Hostname", "agree-new.local"),)},
    ),
    # The kubelet's providerID is kept, and the plan must not claim to set it (upstream sets it
    # only when empty: cloud-provider v0.35.4 controllers/node/node_controller.go:497-501).
    Case("agree-has-id", keeps_provider_id=True),
    # Unchanged addresses are not written (node_controller.go:397-399), so the plan must not
    # list them.
    Case("agree-same-addresses", same_addresses=True),
    # The cloud names no zone; the kubelet's beta zone label is the source of truth for the GA
    # one (node_controller.go:54-89, 308-356): the controller corrects it, so the plan says so.
    Case(
        "agree-stale-beta",
        {"zone": ""},
        {"labels": {ZONE_BETA: "zone-old", nodeinfo.LABEL_ZONE: "zone-older"}},
    ),
    Case(
        "agree-provided-ip",
        {
            "addresses": (
                NodeAddress("InternalIP", "10.3.0.5"),
                NodeAddress("InternalIP", "10.3.0.6"),
                NodeAddress("ExternalIP", "198.51.100.36"),
            )
        },
        {"annotations": {PROVIDED_NODE_IP_ANNOTATION: "10.3.0.6"}},
    ),
    # Each of these stays tainted, with the Warning the plan quotes.
    Case("agree-ghost", None),
    Case("agree-no-provider-id", {"reported_provider_id": ""}),
    Case("agree-foreign-ip", {}, {"annotations": {PROVIDED_NODE_IP_ANNOTATION: "10.9.9.9"}}),
)


def arrange(api: KubeApi, cloud: FakeCloud, case: Case) -> None:
    node = dict(case.node)
    if case.instance is not None:
        instance = cloud.add_instance(case.name, **case.instance)
        if case.same_addresses:
            node["addresses"] = tuple((a.type, a.address) for a in instance.addresses)
        if case.keeps_provider_id:
            node["provider_id"] = instance.provider_id
    make_node(api, case.name, **node)


def planned(cloud: FakeCloud, control_plane: ControlPlane) -> dict[str, dict[str, Any]]:
    """What ``polyccm plan -o json`` prints for each node, by node name."""
    result = run_command(
        "plan",
        "fake",
        control_plane.kubeconfig,
        "--controllers=cloud-node",
        "-o",
        "json",
        plugins=[FakeCloudPlugin(cloud)],
    )
    assert result.status in (0, 1), result
    return {change["node"]: change for change in json.loads(result.stdout)["nodes"]}


@dataclass
class Write:
    node: str
    body: dict[str, Any]
    subresource: str | None


def record_node_writes(monkeypatch: pytest.MonkeyPatch) -> list[Write]:
    """Every patch of a node from now on, as sent."""
    writes: list[Write] = []
    patch = KubeApi.patch

    def recording(self: KubeApi, resource: Any, name: str, body: Any, *args: Any, **kw: Any) -> Any:
        if resource == NODES:
            writes.append(Write(name, json.loads(json.dumps(body)), kw.get("subresource")))
        return patch(self, resource, name, body, *args, **kw)

    monkeypatch.setattr(KubeApi, "patch", recording)
    return writes


def settled(api: KubeApi, plan: dict[str, dict[str, Any]]) -> bool:
    """Whether the controller has done all it will do with the case nodes: each has its
    Synced or FailedToInitialize event, and every initialised node's GA labels agree with its
    beta ones (the state the controller keeps them in)."""
    for name, change in plan.items():
        wanted = "Synced" if change["action"] == "initialise" else "FailedToInitialize"
        if wanted not in reasons_for(api, "default", name):
            return False
        node = Node(api.get(NODES, name))
        if not node.has_taint(UNINITIALIZED_TAINT) and nodeinfo.ga_label_fixes(node.labels):
            return False
    return True


def test_the_plan_is_what_the_controller_writes(
    kube_api: KubeApi,
    control_plane: ControlPlane,
    start_manager: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cloud = FakeCloud()
    for case in CASES:
        arrange(kube_api, cloud, case)
    before = {case.name: Node(kube_api.get(NODES, case.name)) for case in CASES}

    plan = planned(cloud, control_plane)
    assert set(plan) == {case.name for case in CASES}
    writes = record_node_writes(monkeypatch)
    running = start_manager(
        cloud, controllers=frozenset({"cloud-node"}), node_status_update_frequency=3600.0
    )
    wait_for(lambda: settled(kube_api, plan), what="every case node initialised or warned about")
    running.stop()  # writes the events still queued

    for name, change in plan.items():
        spec = [w.body for w in writes if w.node == name and w.subresource is None]
        status = [w.body for w in writes if w.node == name and w.subresource == "status"]
        if change["action"] == "initialise-fails":
            assert not spec and not status, name
            warnings = [m for t, r, m in events_for(kube_api, "default", name) if t == "Warning"]
            assert set(warnings) == {change["message"]}, name
            continue
        assert change["action"] == "initialise", change
        assert len(spec) == 1, f"{name}: one write sets providerID and labels and the taint"
        (body,) = spec
        assert body["spec"].get("providerID", "") == change["providerID"], name
        assert body["metadata"].get("labels", {}) == change["labels"], name
        kept = [t for t in before[name].taints if t["key"] != UNINITIALIZED_TAINT]
        assert (body["spec"]["taints"] or []) == kept, name
        written = [a for body in status for a in body["status"]["addresses"]]
        assert written == change["addresses"], name
    assert plan["agree-has-id"]["providerID"] == ""
    assert plan["agree-same-addresses"]["addresses"] == []
    assert plan["agree-stale-beta"]["labels"][nodeinfo.LABEL_ZONE] == "zone-old"
    assert plan["agree-provided-ip"]["addresses"][0] == {
        "type": "InternalIP",
        "address": "10.3.0.6",
    }


def test_a_cloud_that_asks_to_wait_is_planned_as_a_wait_without_a_warning(
    kube_api: KubeApi, control_plane: ControlPlane, start_manager: Any
) -> None:
    # A RetryAfter from instances_metadata brings the node back after the delay "with no
    # Warning event" (core/CONTRACT.md, the errors table), so the plan must not predict one.
    cloud = FakeCloud()
    cloud.add_instance("agree-throttled")
    make_node(kube_api, "agree-throttled")
    cloud.fail("instances_metadata", RetryAfter("rate limited", 0.5), times=2)

    change = planned(cloud, control_plane)["agree-throttled"]

    assert change["action"] == "initialise-waits", change
    assert change["message"] == "the cloud asks to be asked again in 0.5s: rate limited"
    running = start_manager(
        cloud, controllers=frozenset({"cloud-node"}), node_status_update_frequency=3600.0
    )
    wait_for(lambda: "Synced" in reasons_for(kube_api, "default", "agree-throttled"))
    running.stop()  # writes the events still queued
    assert cloud.count("instances_metadata") == 3  # the plan's, the refused one, the retry
    assert "FailedToInitialize" not in reasons_for(kube_api, "default", "agree-throttled")
