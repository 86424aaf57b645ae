"""Recording the GCE switch goldens: upstream's binary on the emulator and a control plane of
its own, each step's exchanges (through a :class:`~polyccm_testing.peers.recording.Recorder`),
cloud state and Kubernetes results written as ``NN-<step>.json``.

Steps: ``create`` (upstream from an empty cloud: nodes, routes, every load balancer),
``restart`` (upstream started again on its own state: what it writes anyway), one step per
edit of :data:`~polyccm_gce_emulator.switch.EDITS` (upstream running, from the state the step
before left), then ``polyccm-made`` (polyccm's CLI from an empty cloud, same config) and
``reverse`` (upstream started on that state).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from polyccm.kube.api import SERVICES as SERVICE_OBJECTS
from polyccm.kube.api import ApiError, KubeApi
from polyccm_testing.devenv import controlplane
from polyccm_testing.peers.goldens import Peer, Step, save_step
from polyccm_testing.peers.recording import Exchange, Recorder

from polyccm_gce_emulator import switch
from polyccm_gce_emulator.testing import FAST, ComputeApi, emulator_thread

PEER = Peer(switch.GCE, switch.VERSION, switch.SOURCE)


def _exchanges(taken: list[Exchange]) -> tuple[Exchange, ...]:
    return tuple(
        Exchange(
            e.method, e.path, switch.canonical(e.request), e.status, switch.canonical(e.response)
        )
        for e in taken
    )


def _gone(api: KubeApi, name: str) -> bool:
    try:
        api.get(SERVICE_OBJECTS, name, switch.NAMESPACE)
    except ApiError as error:
        return error.not_found
    return False


def edit_done(edit: switch.Edit, api: KubeApi, compute: ComputeApi) -> Callable[[], bool]:
    """When the edit's result is in place (besides quiet): a deleted Service gone."""

    def done() -> bool:
        if edit.name == "service-deleted" and not _gone(api, edit.service):
            return False
        return switch.everything_served(api, compute)

    return done


def record(peer: Path, out: Path, keep: Path | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="polyccm-gce-switch-") as temporary:
        work = keep or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        plane = controlplane.start(work / "plane", die_with_caller=True)
        try:
            api = plane.kube_api(qps=0.0, user_agent="polyccm-switch-goldens")
            steps = _upstream_first(peer, work, api, plane.kubeconfig)
            switch.clear_kube(api)
            steps += _polyccm_first(peer, work, api, plane.kubeconfig)
        finally:
            plane.stop()
    for old in out.glob("[0-9][0-9]-*.json"):
        old.unlink()
    for index, step in enumerate(steps, start=1):
        path = save_step(out, index, step, PEER)
        print(f"{path}: {len(step.exchanges)} exchanges, {len(step.writes)} writes")
    return 0


def _upstream_first(peer: Path, work: Path, api: KubeApi, kubeconfig: Path) -> list[Step]:
    steps: list[Step] = []
    with emulator_thread(FAST) as emulator, Recorder(emulator.endpoint) as recorder:
        compute = emulator.api()
        static_ip = switch.setup_cloud(compute)
        switch.setup_kube(api, static_ip)
        config = switch.gce_conf(work, recorder.url, compute.project)
        env = switch.ccm_environment(emulator.endpoint, work)

        def served() -> bool:
            return switch.everything_served(api, compute)

        with switch.running(peer, config, kubeconfig, env, work / "upstream-create.log") as ccm:
            taken = switch.settle(recorder.take, served, ccm)
        steps.append(
            Step(
                "create",
                _exchanges(taken),
                switch.cloud_state(compute),
                switch.kube_results(api),
                "upstream from an empty cloud: nodes initialised, routes, every load balancer",
            )
        )
        with switch.running(peer, config, kubeconfig, env, work / "upstream-edits.log") as ccm:
            taken = switch.settle(recorder.take, served, ccm)
            steps.append(
                Step(
                    "restart",
                    _exchanges(taken),
                    switch.cloud_state(compute),
                    switch.kube_results(api),
                    "upstream started again on the state it made (what it writes anyway)",
                )
            )
            for edit in switch.EDITS:
                edit.apply(api, compute)
                taken = switch.settle(recorder.take, edit_done(edit, api, compute), ccm)
                steps.append(
                    Step(
                        edit.name,
                        _exchanges(taken),
                        switch.cloud_state(compute),
                        switch.kube_results(api),
                        f"upstream running: {edit.note}",
                    )
                )
    return steps


def _polyccm_first(peer: Path, work: Path, api: KubeApi, kubeconfig: Path) -> list[Step]:
    steps: list[Step] = []
    with emulator_thread(FAST) as emulator, Recorder(emulator.endpoint) as recorder:
        compute = emulator.api()
        static_ip = switch.setup_cloud(compute)
        switch.setup_kube(api, static_ip)
        config = switch.gce_conf(work, recorder.url, compute.project)
        env = switch.ccm_environment(emulator.endpoint, work)
        # polyccm serves only the Services it supports; the others wait for upstream.
        supported = [s.name for s in switch.SERVICES if not s.issue]

        def served_by_polyccm() -> bool:
            return switch.everything_served(api, compute, services=supported)

        with switch.running(None, config, kubeconfig, env, work / "polyccm-create.log") as ccm:
            taken = switch.settle(recorder.take, served_by_polyccm, ccm)
        steps.append(
            Step(
                "polyccm-made",
                _exchanges(taken),
                switch.cloud_state(compute),
                switch.kube_results(api),
                "polyccm (not upstream) from an empty cloud, same gce.conf and flags: the state "
                "upstream is started on in the next step",
            )
        )

        def served() -> bool:
            return switch.everything_served(api, compute)

        with switch.running(peer, config, kubeconfig, env, work / "upstream-reverse.log") as ccm:
            taken = switch.settle(recorder.take, served, ccm)
        steps.append(
            Step(
                "reverse",
                _exchanges(taken),
                switch.cloud_state(compute),
                switch.kube_results(api),
                "upstream started on the state polyccm made (the reverse switch)",
            )
        )
    return steps
