"""The Equinix Metal switch scenario (issue 25): upstream's CCM first, then polyccm, on one
cluster and one Metal project; and :func:`main`, which records upstream's side as goldens.

Upstream is sigs.k8s.io/cloud-provider-equinix-metal at 38d15e2 (its last commit, after
v3.8.1). It never reads ``base-url`` (config.go parses it; nothing uses it) and always dials
``api.equinix.com``, so it runs with ``HTTPS_PROXY`` at a :class:`Recorder` that terminates TLS
for that name and forwards to the emulator. The Go module proxy refuses it (403), so CI cannot
build it: ``uv run python -m polyccm_packet_emulator.switch --peer PATH`` writes
``providers/packet/tests/goldens/switch/NN-<step>.json`` on a machine that has it.

Building the peer (Go 1.26, ~2 min idle, ~14 on two busy cores): the proxy refuses
``github.com/equinix/equinix-sdk-go@v0.61.0`` too, so ``git archive v0.61.0`` of its fetched
repository is zipped by ``golang.org/x/mod/zip.CreateFromDir`` into
``DIR/github.com/equinix/equinix-sdk-go/@v/v0.61.0.{zip,mod,info}`` plus ``list`` (its
``h1:`` hash equals upstream's go.sum: ``7pSLMfcrpH9G...``); then, in ``git archive 38d15e2``
of upstream, ``GOPROXY=file://DIR,https://proxy.golang.org,direct GOFLAGS=-mod=mod
CGO_ENABLED=0 go build -o ~/.cache/polyccm/bin/equinix-metal-cloud-controller-manager-38d15e2 .``

The Services table (:data:`TABLE`) covers every annotation and setting of upstream that
changes what lands in the cloud (file:line at 38d15e2, ``metal/loadbalancers.go``):

* the Elastic IP's place: ``metal.equinix.com/eip-metro`` (400, 454), else
  ``metal.equinix.com/eip-facility`` (401, 456), else the config's ``metro`` (458) or
  ``facility`` (460); a metro beside a facility wins (the ``switch`` order, 453-463);
* its tags: ``usage=cloud-provider-equinix-metal-auto``, ``service=<base64 sha256(ns/name)>``,
  ``cluster=<kube-system UID>`` (74-81, 111, 442-447, 619-629), ``details`` (442) and
  ``fail_on_approval_required`` (448);
* BGP: the project's config from ``localASN``/``bgpPass`` (bgp.go 60-71), one IPv4 session per
  node that a Service was ensured for (loadbalancers.go 512-529, bgp.go 75-94); the mode is
  ``kube-vip://``, whose implementor writes nothing (kubevip.go): the cloud state is the
  reservations, the BGP config and the sessions.

Not in the scenario: ``facility`` in the config (line 460; ``metro`` is set, as upstream's
README has it), ``bgpNodeSelector`` (filterNodes, 195 and 216: polyccm does not read it yet,
issue 30), the node label ``node.kubernetes.io/exclude-from-external-load-balancers`` (k8s.io/
cloud-provider's service controller drops those nodes before upstream sees them), ``eipTag``
and ``apiServerPort`` (the control-plane EIP, not a Service's). ``spec.loadBalancerIP`` naming
an untagged project address is left out too: upstream reserves nothing (line 422), then answers
a nil status (144-146), which the service controller refuses (k8s.io/cloud-provider v0.35.4
controllers/service/controller.go:421): upstream never serves such a Service.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyccm.kube.api import NAMESPACES, NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT
from polyccm_testing.demo import register_node, running_polyccm
from polyccm_testing.kubeobjects import set_ready
from polyccm_testing.peers.goldens import Peer, Step, save_step
from polyccm_testing.peers.recording import Exchange, Recorder

from polyccm_packet_emulator.plugin import API_URL_VARIABLE
from polyccm_packet_emulator.testing import MetalApi

PEER = Peer(
    name="cloud-provider-equinix-metal",
    version="38d15e2 (main after v3.8.1), equinix-sdk-go v0.61.0",
    source="github:kubernetes-sigs/cloud-provider-equinix-metal@38d15e2",
)
BINARY = "equinix-metal-cloud-controller-manager-38d15e2"
INTERCEPT = ("api.equinix.com",)
GOLDENS = Path(__file__).resolve().parents[3] / "tests" / "goldens" / "switch"
NAMESPACE = "metal-switch"
METRO = "da"
LOAD_BALANCER = "kube-vip://"
BGP_PASS = "SwitchBgpPass42"
EIP_METRO = "metal.equinix.com/eip-metro"
EIP_FACILITY = "metal.equinix.com/eip-facility"
#: Node annotations upstream writes (loadbalancers.go 335, 361-373).
NODE_ANNOTATION_PREFIX = "metal.equinix.com/"
#: Keys that differ between two runs of the same scenario and say nothing of it.
VOLATILE = ("id", "href", "created_at", "updated_at", "requested_at")
#: Upstream's controllers with the settings that keep a run short.
UPSTREAM_ARGS = (
    "--cloud-provider=equinixmetal",
    "--leader-elect=false",
    "--secure-port=0",
    "--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller",
    "--configure-cloud-routes=false",
    "--node-monitor-period=2s",
    "--v=2",
)


@dataclass(frozen=True)
class Machine:
    """A device of the scenario and the Node that registers for it."""

    name: str
    metro: str
    plan: str


#: Two metros (and facilities da11, sv15), two plans.
MACHINES = (
    Machine("metal-a", "da", "c3.small.x86"),
    Machine("metal-b", "da", "m3.small.x86"),
    Machine("metal-c", "sv", "c3.small.x86"),
)
ADDED = Machine("metal-d", "sv", "m3.small.x86")
REMOVED = "metal-b"


@dataclass(frozen=True)
class ScenarioService:
    name: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    why: str = ""


TABLE = (
    ScenarioService("plain", why="the config's metro (loadbalancers.go:458)"),
    ScenarioService("in-metro", {EIP_METRO: "sv"}, why="eip-metro (loadbalancers.go:400,454)"),
    ScenarioService(
        "in-facility", {EIP_FACILITY: "sv15"}, why="eip-facility (loadbalancers.go:401,456)"
    ),
    ScenarioService(
        "metro-and-facility",
        {EIP_METRO: "sv", EIP_FACILITY: "da11"},
        why="the metro wins (loadbalancers.go:454 before 456)",
    ),
)


def cloud_config(env: Mapping[str, str]) -> dict[str, Any]:
    """The upstream deployment's ``cloud-sa.json``: the Secret deploy/template/secret.yaml:7
    makes and deployment.yaml:69 passes as ``--cloud-config``."""
    return {"apiKey": env["METAL_API_KEY"], "projectID": env["METAL_PROJECT_ID"],
            "metro": METRO, "loadbalancer": LOAD_BALANCER, "bgpPass": BGP_PASS}  # fmt: skip


# -- setup, through the cloud's and the cluster's own APIs ---------------------------------------


def create_machine(kube: KubeApi, metal: MetalApi, machine: Machine) -> dict[str, Any]:
    """The device (``POST /projects/{id}/devices``) and its Node as a kubelet with
    ``--cloud-provider=external`` registers it (tainted, no providerID, Ready)."""
    body = {"hostname": machine.name, "metro": machine.metro, "plan": machine.plan,
            "operating_system": "ubuntu_24_04", "tags": []}  # fmt: skip
    device: dict[str, Any] = metal.ok("POST", f"/projects/{metal.project_id}/devices", body)
    register_node(kube, machine.name)
    set_ready(kube, machine.name, True)
    return device


def service_body(service: ScenarioService) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": service.name, "namespace": NAMESPACE,
                     "annotations": dict(service.annotations)},
        "spec": {"type": "LoadBalancer", "selector": {"app": service.name},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
    }  # fmt: skip


def set_up(kube: KubeApi, metal: MetalApi) -> None:
    """Every machine, the namespace and every Service of the table."""
    for machine in MACHINES:
        create_machine(kube, metal, machine)
    kube.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    for service in TABLE:
        kube.create(SERVICES, service_body(service), NAMESPACE)


def device_id(metal: MetalApi, hostname: str) -> str | None:
    listed = metal.ok("GET", f"/projects/{metal.project_id}/devices?per_page=500")["devices"]
    return next((str(d["id"]) for d in listed if d["hostname"] == hostname), None)


# -- what the cloud and the cluster hold -----------------------------------------------------------


def cloud_state(metal: MetalApi) -> dict[str, Any]:
    """The project's Elastic IPs (tags, place, assignments), BGP config and sessions, and
    devices, as its own API shows them. ``id``s are kept (for bindings); :data:`VOLATILE`
    names what a comparison drops."""
    project = metal.project_id
    devices = metal.ok("GET", f"/projects/{project}/devices?per_page=500")["devices"]
    names = {str(d["id"]): str(d["hostname"]) for d in devices}
    ips = metal.ok("GET", f"/projects/{project}/ips?types=public_ipv4")["ip_addresses"]
    elastic = [
        {"id": ip["id"], "address": ip["address"], "cidr": ip["cidr"], "type": ip["type"],
         "metro": (ip.get("metro") or {}).get("code"),
         "facility": (ip.get("facility") or {}).get("code"), "tags": sorted(ip["tags"]),
         "details": ip.get("details"), "customdata": ip.get("customdata"),
         "assignments": ip.get("assignments") or []}
        for ip in ips if not ip.get("management")
    ]  # fmt: skip
    config = metal.ok("GET", f"/projects/{project}/bgp-config")
    bgp = {key: config.get(key) for key in ("id", "asn", "md5", "deployment_type", "status")}
    sessions = []
    for device in devices:
        listed = metal.ok("GET", f"/devices/{device['id']}/bgp/sessions")["bgp_sessions"]
        sessions += [{"id": s["id"], "device": names[str(device["id"])],
                      "address_family": s["address_family"], "default_route": s["default_route"]}
                     for s in listed]  # fmt: skip
    return {
        "project": project,
        "devices": [
            {
                "id": d["id"],
                "hostname": d["hostname"],
                "metro": d["metro"]["code"],
                "facility": d["facility"]["code"],
            }
            for d in devices
        ],
        "elastic_ips": sorted(elastic, key=lambda ip: str(ip["address"])),
        "bgp_config": bgp if config else {},
        "bgp_sessions": sorted(sessions, key=lambda s: (s["device"], s["address_family"])),
    }


def kube_state(kube: KubeApi) -> dict[str, Any]:
    """What a CCM wrote in the cluster: each node's providerID, taints, labels of the cloud,
    addresses and ``metal.equinix.com/`` annotations; each Service's annotations, finalizers,
    ``spec.loadBalancerIP`` and load-balancer status; and the kube-system UID."""
    nodes = {}
    for node in kube.list(NODES)["items"]:
        meta = node["metadata"]
        nodes[meta["name"]] = {
            "providerID": node["spec"].get("providerID", ""),
            "taints": node["spec"].get("taints") or [],
            "labels": {k: v for k, v in (meta.get("labels") or {}).items()
                       if k.startswith(("topology.kubernetes.io/", "node.kubernetes.io/"))},
            "annotations": {k: v for k, v in (meta.get("annotations") or {}).items()
                            if k.startswith(NODE_ANNOTATION_PREFIX)},
            "addresses": node.get("status", {}).get("addresses") or [],
        }  # fmt: skip
    services = {}
    for service in kube.list(SERVICES, NAMESPACE)["items"]:
        meta = service["metadata"]
        services[meta["name"]] = {
            "annotations": meta.get("annotations") or {},
            "finalizers": meta.get("finalizers") or [],
            "loadBalancerIP": service["spec"].get("loadBalancerIP", ""),
            "ports": service["spec"]["ports"],
            "status": service.get("status", {}).get("loadBalancer", {}),
        }
    uid = kube.get(NAMESPACES, "kube-system")["metadata"]["uid"]
    return {"cluster_uid": uid, "nodes": nodes, "services": services}


def settled_kube(kube: KubeApi, nodes: Sequence[str], services: Sequence[str]) -> bool:
    """Every node in ``nodes`` initialised and peered, every Service in ``services`` served."""
    state = kube_state(kube)
    for name in nodes:
        node = state["nodes"].get(name)
        if node is None or not node["providerID"] or not node["annotations"]:
            return False
        if any(t["key"] == UNINITIALIZED_TAINT for t in node["taints"]):
            return False
    return all((state["services"].get(n) or {}).get("status", {}).get("ingress")
               for n in services)  # fmt: skip


# -- the edits of step 4 ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One edit: what is done, and when the CCM has done its part."""

    name: str
    apply: Callable[[KubeApi, MetalApi], None]
    nodes: tuple[str, ...]
    services: tuple[str, ...]
    gone: Callable[[KubeApi, MetalApi], bool] = lambda kube, metal: True


def _add_port(kube: KubeApi, metal: MetalApi) -> None:
    ports = [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
             {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}]  # fmt: skip
    kube.patch(SERVICES, "plain", {"spec": {"ports": ports}}, NAMESPACE)


def _change_annotation(kube: KubeApi, metal: MetalApi) -> None:
    kube.patch(SERVICES, "in-metro", {"metadata": {"annotations": {EIP_METRO: "ny"}}}, NAMESPACE)


def _add_node(kube: KubeApi, metal: MetalApi) -> None:
    create_machine(kube, metal, ADDED)


def _remove_node(kube: KubeApi, metal: MetalApi) -> None:
    found = device_id(metal, REMOVED)
    assert found is not None, f"no device {REMOVED}"
    metal.ok("DELETE", f"/devices/{found}")
    # Its kubelet is gone with it: the node turns NotReady, which is when the cloud node
    # lifecycle controller asks whether the instance still exists.
    set_ready(kube, REMOVED, False)


def _node_gone(kube: KubeApi, metal: MetalApi) -> bool:
    return REMOVED not in {n["metadata"]["name"] for n in kube.list(NODES)["items"]}


def _delete_service(kube: KubeApi, metal: MetalApi) -> None:
    kube.delete(SERVICES, "in-facility", NAMESPACE)


def _service_gone(kube: KubeApi, metal: MetalApi) -> bool:
    return "in-facility" not in {s["metadata"]["name"]
                                 for s in kube.list(SERVICES, NAMESPACE)["items"]}  # fmt: skip


ALL = tuple(m.name for m in MACHINES)
SERVED = tuple(s.name for s in TABLE)
LEFT = tuple(n for n in (*ALL, ADDED.name) if n != REMOVED)
EDITS = (
    Edit("port-added", _add_port, ALL, SERVED),
    Edit("annotation-changed", _change_annotation, ALL, SERVED),
    Edit("node-added", _add_node, (*ALL, ADDED.name), SERVED),
    Edit("node-removed", _remove_node, LEFT, SERVED, _node_gone),
    Edit(
        "service-deleted",
        _delete_service,
        LEFT,
        tuple(s for s in SERVED if s != "in-facility"),
        _service_gone,
    ),
)
FIRST_STEP = "upstream-creates"
REVERSE_STEP = "reverse-switch"


def settle(
    done: Callable[[], bool],
    writes: Callable[[], int],
    *,
    quiet: float = 4.0,
    timeout: float = 120.0,
) -> None:
    """Wait until ``done()`` and no new write for ``quiet`` seconds (``writes()`` counts them)."""
    deadline = time.monotonic() + timeout
    seen, since = writes(), time.monotonic()
    while True:
        now = time.monotonic()
        count = writes()
        if count != seen:
            seen, since = count, now
        elif now - since >= quiet and done():
            return
        if now > deadline:
            raise TimeoutError("the CCM did not settle")
        time.sleep(0.25)


# -- running the peer and recording it ------------------------------------------------------------


def emulator_base(env: Mapping[str, str]) -> str:
    """The emulator's root URL (upstream's paths carry ``/metal/v1`` themselves)."""
    return env[API_URL_VARIABLE].rstrip("/").removesuffix("/metal/v1")


@contextmanager
def running_upstream(
    peer: Path, state: Path, kubeconfig: Path, config: Path, recorder: Recorder
) -> Iterator[Path]:
    """Upstream's CCM with its deployment's config, dialling ``api.equinix.com`` through
    ``recorder`` (``HTTPS_PROXY``; its CA as ``SSL_CERT_FILE``); yields its log file."""
    assert recorder.client_ca_file is not None, "the recorder must intercept api.equinix.com"
    log = state / "upstream.log"
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("METAL_", "PACKET_")) and "PROXY" not in k.upper()}  # fmt: skip
    environ.update(HTTPS_PROXY=recorder.url, SSL_CERT_FILE=str(recorder.client_ca_file),
                   NO_PROXY="127.0.0.1,localhost")  # fmt: skip
    argv = [str(peer), f"--kubeconfig={kubeconfig}", f"--cloud-config={config}", *UPSTREAM_ARGS]
    with log.open("a") as output:
        process = subprocess.Popen(argv, env=environ, stdout=output, stderr=subprocess.STDOUT)
        try:
            yield log
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def recorded_step(
    name: str, exchanges: list[Exchange], kube: KubeApi, metal: MetalApi, note: str
) -> Step:
    return Step(name, tuple(exchanges), cloud_state(metal), kube_state(kube), note)


class _Writes:
    """Counts the recorder's writes without taking its exchanges."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def __call__(self) -> int:
        return sum(1 for e in self.recorder.exchanges() if e.is_write)


def record_upstream(peer: Path, state: Path, plane: Any) -> list[Step]:
    """Steps 1 and 4 with upstream: it creates everything, then each edit."""
    kube, env = plane.kube_api(qps=0), plane.env
    metal = MetalApi(env)
    config = state / "cloud-sa.json"
    config.write_text(json.dumps(cloud_config(env), indent=2) + "\n")
    steps: list[Step] = []

    def close_step(name: str, note: str) -> None:
        steps.append(recorded_step(name, recorder.take(), kube, metal, note))

    def before_edit() -> None:
        # Reads between a step's end and the next edit belong to the step before (replayed
        # before the edit, they get the answers they got).
        last = steps[-1]
        steps[-1] = Step(last.name, (*last.exchanges, *recorder.take()), last.cloud, last.kube,
                         last.note)  # fmt: skip

    with Recorder(emulator_base(env), intercept=INTERCEPT) as recorder:
        writes = _Writes(recorder)
        set_up(kube, metal)
        with running_upstream(peer, state, plane.kubeconfig, config, recorder) as log:
            try:
                settle(lambda: settled_kube(kube, ALL, SERVED), writes)
                close_step(FIRST_STEP, "upstream initialises the nodes and serves every Service")
                for edit in EDITS:
                    before_edit()
                    edit.apply(kube, metal)
                    settle(lambda e=edit: e.gone(kube, metal)  # type: ignore[misc]
                           and settled_kube(kube, e.nodes, e.services), writes)  # fmt: skip
                    close_step(edit.name, f"upstream after the edit {edit.name}")
            except BaseException:
                print(log.read_text()[-6000:], file=sys.stderr)
                print(f"after steps {[s.name for s in steps]}", file=sys.stderr)
                raise
    return steps


def polyccm_env(env: Mapping[str, str]) -> dict[str, str]:
    """What polyccm needs beside upstream's config file: the API's URL (upstream has it
    compiled in). The cluster id is upstream's, the ``kube-system`` UID, by default."""
    return {API_URL_VARIABLE: env[API_URL_VARIABLE]}


def record_reverse(peer: Path, state: Path, plane: Any) -> Step:
    """Step 5: polyccm makes everything, then upstream takes over."""
    kube, env = plane.kube_api(qps=0), plane.env
    metal = MetalApi(env)
    config = state / "cloud-sa.json"
    config.write_text(json.dumps(cloud_config(env), indent=2) + "\n")
    set_up(kube, metal)
    with running_polyccm(
        "packet",
        state=state,
        env=polyccm_env(env),
        kubeconfig=plane.kubeconfig,
        args=["--configure-cloud-routes=false", f"--cloud-config={config}"],
    ):
        deadline = time.monotonic() + 120
        while not settled_kube(kube, ALL, SERVED):
            assert time.monotonic() < deadline, "polyccm did not serve the scenario"
            time.sleep(0.5)
        time.sleep(3)
    before = cloud_state(metal)
    with (
        Recorder(emulator_base(env), intercept=INTERCEPT) as recorder,
        running_upstream(peer, state, plane.kubeconfig, config, recorder),
    ):
        settle(lambda: settled_kube(kube, ALL, SERVED), _Writes(recorder), quiet=8.0)
        step = recorded_step(
            REVERSE_STEP, recorder.take(), kube, metal, "upstream started on the state polyccm made"
        )
    return Step(step.name, step.exchanges, {"before": before, "after": step.cloud}, step.kube,
                step.note)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    from polyccm_testing.devenv import controlplane

    parser = argparse.ArgumentParser(prog="python -m polyccm_packet_emulator.switch",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--peer", type=Path, required=True,
                        help=f"upstream's binary ({BINARY})")  # fmt: skip
    parser.add_argument("--out", type=Path, default=GOLDENS, help="the golden directory")
    args = parser.parse_args(argv)
    if not os.access(args.peer, os.X_OK):
        parser.error(f"--peer {args.peer}: not an executable file")
    steps: list[Step] = []
    for phase in (record_upstream, record_reverse):
        with tempfile.TemporaryDirectory(prefix="polyccm-switch-") as directory:
            state = Path(directory)
            plane = controlplane.start(state / "dev", clouds=("packet",), die_with_caller=True)
            try:
                if phase is record_upstream:
                    steps += record_upstream(args.peer, state, plane)
                else:
                    steps.append(record_reverse(args.peer, state, plane))
            finally:
                plane.stop()
    for old in args.out.glob("[0-9][0-9]-*.json"):
        old.unlink()
    for index, step in enumerate(steps, start=1):
        path = save_step(args.out, index, step, PEER)
        writes = [str(e) for e in step.writes]
        print(f"{path}: {len(step.exchanges)} exchanges, writes {writes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
