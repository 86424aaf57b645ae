"""Conformance under faults: :class:`FaultConformance`, what every provider must survive.

* **Crash cycles** (``test_fault_crash_cycles_leave_nothing_behind``): ``polyccm`` runs as a
  process against the emulator (each one's imports done while the one before runs:
  :mod:`polyccm_testing.warm_start`) and is SIGKILLed, again and again, at seeded random points
  (once its controllers run: after a random number, 1 to 5, of the cloud's write calls, or a
  random time up to 1.5 s after its first write) while Services are
  created, edited and deleted through the API. A last process then settles every Service and
  deletes them all. Afterwards the cloud holds nothing of the cluster (every kind the provider
  makes, counted through the cloud's own API), no Service ever had two load balancers (polled
  all along), and every finalizer is gone. :data:`CYCLES_VARIABLE` sets the number of cycles
  (default :data:`DEFAULT_CYCLES`), :data:`SEED_VARIABLE` the seed.
* **Failure at every step** (``test_fault_each_step_of_a_create|an_edit_...``): the writes of a
  clean create (and of an edit adding a port) are counted; then for each k, write k fails once
  in the cloud's own error form (the emulator's fault injection), and the next ensure must
  converge to what a clean one makes, and deletion from that half-made state must leave
  nothing.
* **Leader cut off** (``test_fault_a_leader_cut_off_...``): two processes under leader
  election, the leader's API server connection frozen by a loopback proxy
  (:class:`~polyccm_testing.tcpproxy.TcpProxy`): the standby must lead within the lease
  duration, and the cloud must see no call of the old leader after the new leader's first.
  The cloud tells the processes apart by their leader-election identity, which each names in
  the User-Agent of its cloud calls (:mod:`polyccm.useragent`); the adapter's
  :meth:`CallsByProcess.calls_by_process` reads it from the emulator's call log (the test
  skips, naming it, for an adapter without one). The processes run with the adapter's
  optional ``leader_environment`` too, which turns on the provider's own controllers that
  write to the cloud (DigitalOcean's firewall and tags), so that they are held to it as well.
  Upstream's CCM ends the process when leadership is lost (kubernetes/cloud-provider
  app/controllermanager.go:273-276 @4666611, ``OnStoppedLeading``); polyccm keeps it and
  fences its cloud calls instead (:mod:`polyccm.cloudcalls`): what both promise, and what
  the test checks, is the cloud's view.

The provider's test class gives the ``cloud`` fixture a :class:`FaultCloudUnderTest`: the
conformance adapter plus how to launch ``polyccm`` on the cloud, the cluster's resources, the
load balancers per Service, and the cloud's fault injection.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
from polyccm import useragent
from polyccm.cloud import LoadBalancer
from polyccm.kube.api import LEASES, SERVICES, ApiError, KubeApi
from polyccm.objects import Node, Service

from polyccm_testing.conformance.base import ConformanceBase, offered
from polyccm_testing.conformance.cloud_under_test import CloudUnderTest
from polyccm_testing.conformance.cluster import KitCluster
from polyccm_testing.conformance.faults_restart import ApiServerRestart
from polyccm_testing.conformance.faults_throttle import Throttling
from polyccm_testing.kubeobjects import lease_holder, make_node, make_service, wait_for
from polyccm_testing.tcpproxy import proxied_kubeconfig
from polyccm_testing.warm_start import WARM_IMPORTS

CYCLES_VARIABLE = "POLYCCM_SOAK_CYCLES"
"""Crash cycles per provider (``make test`` runs :data:`DEFAULT_CYCLES`; the soak runs more)."""
SEED_VARIABLE = "POLYCCM_FAULT_SEED"
DEFAULT_CYCLES = 25
DEFAULT_SEED = 32
SERVICE_NAMES = ("crash-a", "crash-b", "crash-c")
STARTED = b"started controllers"
"""What ``polyccm`` logs once its controllers run (polyccm.app.manager)."""
CAMPAIGNING = b"is campaigning for"
"""What ``polyccm`` logs when it starts to campaign for the Lease (polyccm.leaderelection)."""
START_TIMEOUT = 60.0
"""Seconds a crash cycle waits for :data:`STARTED` (a loaded machine is slow to get there)."""
FIRST_WRITE_TIMEOUT = 25.0
"""Seconds a crash cycle waits for the process's first write before killing it anyway (an
edit that changes nothing in the cloud makes none). Long, because a fresh GCE or Metal process
made its first cloud call 15 to 40 s after starting its controllers on the test machine."""
SETTLE_TIMEOUT = 120.0
"""Seconds the last process gets to serve every Service, and then to finalise them all."""
ATTEMPTS = 5
"""Tries of each follow-up call after an injected failure (0.5 s apart), as a controller
retries a failed sync."""
LEASE_NAME = "cloud-controller-manager"
FIRST_CALL_TIMEOUT = 60.0
"""Seconds the leader test waits for the new leader's first cloud call."""
LEASE = (4.0, 3.0, 0.5)
"""Lease duration, renew deadline and retry period of the leader test, in seconds."""


@dataclass(frozen=True)
class Launch:
    """How to run ``polyccm`` on the cloud: the command (the provider, its config and cluster
    name; the kit adds ``--kubeconfig``, the leader-election flags, ``--secure-port=0`` and
    ``--configure-cloud-routes=false``) and the whole environment of the process."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    warm_imports: tuple[str, ...] = ()
    """Modules the provider imports lazily (its cloud SDK), for a process started ahead to
    import before it runs (:mod:`polyccm_testing.warm_start`)."""


class FaultCloudUnderTest(CloudUnderTest, Protocol):
    """A :class:`CloudUnderTest` that also tells the fault tests how to run and break it."""

    def launch(self, workdir: Path) -> Launch:
        """The ``polyccm`` process on this cloud (``workdir`` holds its config files)."""
        ...

    def cluster_resources(self) -> frozenset[str]:
        """Every resource of the cluster the cloud holds, of every kind the provider makes
        (load balancers and all their parts, firewalls, tags, addresses, health checks,
        instance groups, Elastic IPs...), as ``kind:identifier`` read through the cloud's own
        API. Resources the test itself made (instances) may be listed: the kit compares with
        what was there before."""
        ...

    def load_balancers_per_service(self) -> Mapping[str, int]:
        """How many load balancers the cloud holds for each Service, keyed by anything that
        names the Service (its UID, or ``namespace/name``)."""
        ...

    def fail_write(self, after: int) -> None:
        """Let ``after`` write calls through, then fail the next one once, as the cloud fails
        a request (an error it does not ask to retry)."""
        ...

    def clear_faults(self) -> None:
        """Forget pending faults."""
        ...

    # Optional: ``poll_interval``, seconds between two looks for doubled load balancers
    # (0.2 without it; more for a cloud whose rate limit the looks would use up).


class HeldUntilDeleted(Protocol):
    held_until_deleted: frozenset[str]
    """Optional: kinds of resource an interrupted ensure may leave, by design (as upstream),
    until the Service is deleted; the converged state is compared without them (deletion
    must still remove them)."""


class CallsByProcess(Protocol):
    def calls_by_process(self) -> Sequence[tuple[float, str, str]]:
        """Every call of a ``polyccm`` process the cloud served, as ``(unix time, the
        caller's leader-election identity, operation)``: the cloud tells callers apart by
        what the requests carry (the User-Agent, :mod:`polyccm.useragent`)."""
        ...


class LeaderEnvironment(Protocol):
    leader_environment: Mapping[str, str]
    """Optional: more environment for the leader test's processes (the provider's own
    controllers that write to the cloud, turned on)."""


def _cycles() -> int:
    return int(os.environ.get(CYCLES_VARIABLE, DEFAULT_CYCLES))


# -- processes ------------------------------------------------------------------------------


@dataclass
class Processes:
    """``polyccm`` processes of one test, their logs, and their end."""

    cloud: FaultCloudUnderTest
    kubeconfig: str
    directory: Path
    running: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def start(
        self,
        name: str,
        *flags: str,
        kubeconfig: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``polyccm`` (``name`` names its log; ``env`` adds to the launch's)."""
        return self._spawn(name, flags, kubeconfig, warm=False, env=env)

    def prepare(self, name: str, *flags: str) -> subprocess.Popen[bytes]:
        """A ``polyccm`` process that has done its imports and waits for :meth:`go`
        (:mod:`polyccm_testing.warm_start`)."""
        return self._spawn(name, flags, None, warm=True)

    @staticmethod
    def go(process: subprocess.Popen[bytes]) -> None:
        """Let a prepared process run ``polyccm``."""
        assert process.stdin is not None
        process.stdin.write(b"go\n")
        process.stdin.flush()

    def _spawn(
        self,
        name: str,
        flags: Sequence[str],
        kubeconfig: str | None,
        *,
        warm: bool,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        launch = self.cloud.launch(self.directory)
        argv = list(launch.argv)
        if warm and argv[1:2] == ["-m"]:
            argv[1:2] = ["-m", "polyccm_testing.warm_start"]
        log = self.directory / f"{name}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [
                    *argv,
                    f"--kubeconfig={kubeconfig or self.kubeconfig}",
                    "--secure-port=0",
                    "--configure-cloud-routes=false",
                    *flags,
                ],
                env={**launch.env, **(env or {}), WARM_IMPORTS: ",".join(launch.warm_imports)},
                stdin=subprocess.PIPE if warm else subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        self.running.append(process)
        self.logs.append(log)
        return process

    def wait_started(
        self, process: subprocess.Popen[bytes], timeout: float, marker: bytes = STARTED
    ) -> bool:
        """Wait until ``process`` has logged ``marker`` (:data:`STARTED`: its controllers
        run); whether it did within ``timeout`` seconds."""
        log = self.logs[self.running.index(process)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None:
            if marker in log.read_bytes():
                return True
            time.sleep(0.05)
        return False

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def close(self) -> None:
        for process in self.running:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(timeout=30)
            if process.stdin is not None:
                process.stdin.close()

    def tail(self, lines: int = 30) -> str:
        if not self.logs:
            return ""
        text = self.logs[-1].read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


class DoubleWatch:
    """Polls the cloud's load balancers per Service on a thread; keeps every moment where a
    Service had more than one."""

    def __init__(self, cloud: FaultCloudUnderTest, interval: float = 0.2) -> None:
        self.cloud = cloud
        self.interval = interval
        self.doubles: list[dict[str, int]] = []
        self.polls = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="double-watch", daemon=True)

    def __enter__(self) -> DoubleWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                counts = self.cloud.load_balancers_per_service()
            except Exception as error:  # noqa: BLE001 - the emulator busy: poll again
                self.errors.append(str(error))
                continue
            self.polls += 1
            doubled = {key: n for key, n in counts.items() if n > 1}
            if doubled:
                self.doubles.append(doubled)


# -- the Kubernetes side --------------------------------------------------------------------


def _service_exists(api: KubeApi, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = api.get(SERVICES, name, namespace)
    except ApiError as error:
        if error.not_found:
            return None
        raise
    return found


def _toggle_port(api: KubeApi, namespace: str, service: Mapping[str, Any]) -> None:
    """Edit a Service as a user does: add a second port, or take it away again."""
    ports = list(service["spec"]["ports"])
    if len(ports) > 1:
        ports = ports[:1]
    else:
        ports.append({"name": "alt", "port": 8080, "targetPort": 8080, "protocol": "TCP"})
    api.patch(
        SERVICES,
        service["metadata"]["name"],
        {"spec": {"ports": ports}},
        namespace,
        patch_type="application/merge-patch+json",
    )


def _act(rng: random.Random, api: KubeApi, namespace: str) -> str:
    """One user action, drawn by ``rng``: create, edit or delete a Service."""
    name = rng.choice(SERVICE_NAMES)
    found = _service_exists(api, namespace, name)
    if found is None:
        make_service(api, namespace, name)
        return f"create {name}"
    if found["metadata"].get("deletionTimestamp"):
        return f"wait {name}"
    if rng.random() < 0.6:
        _toggle_port(api, namespace, found)
        return f"edit {name}"
    api.delete(SERVICES, name, namespace)
    return f"delete {name}"


def _served(api: KubeApi, namespace: str) -> bool:
    services = api.list(SERVICES, namespace)["items"]
    return all((s.get("status") or {}).get("loadBalancer", {}).get("ingress") for s in services)


def _kinds(resources: frozenset[str]) -> Counter[str]:
    return Counter(r.split(":", 1)[0] for r in resources)


# -- the tests ------------------------------------------------------------------------------


class FaultConformance(ApiServerRestart, Throttling, ConformanceBase):
    """The fault promises (with those of :mod:`~polyccm_testing.conformance.faults_restart` and
    :mod:`~polyccm_testing.conformance.faults_throttle`). Subclass it and give a ``cloud``
    fixture returning a :class:`FaultCloudUnderTest`."""

    @pytest.fixture
    def kit_processes(
        self, cloud: FaultCloudUnderTest, control_plane: Any, tmp_path: Path
    ) -> Iterator[Processes]:
        processes = Processes(cloud, str(control_plane.kubeconfig), tmp_path)
        try:
            yield processes
        finally:
            processes.close()

    @pytest.fixture
    def kit_fault_load_balancer(self, cloud: FaultCloudUnderTest) -> LoadBalancer:
        return offered(
            cloud.provider.load_balancer(), cloud.provider, "LoadBalancer", "load_balancer()"
        )

    # -- crash cycles ---------------------------------------------------------------------

    @pytest.mark.timeout(2 * SETTLE_TIMEOUT + 40 * _cycles())
    def test_fault_crash_cycles_leave_nothing_behind(  # noqa: PLR0917
        self,
        cloud: FaultCloudUnderTest,
        kit_fault_load_balancer: LoadBalancer,
        kit_processes: Processes,
        kube_api: KubeApi,
        namespace: str,
        clean_nodes: None,
    ) -> None:
        cycles = _cycles()
        seed = int(os.environ.get(SEED_VARIABLE, DEFAULT_SEED))
        rng = random.Random(seed)
        for index in range(2):
            make_node(kube_api, cloud.create_instance(f"crash-{index}-{secrets.token_hex(2)}"))
        baseline = cloud.cluster_resources()  # the instances, where the adapter lists them
        history: list[str] = []
        mid_work = 0
        with DoubleWatch(cloud, getattr(cloud, "poll_interval", 0.2)) as watch:
            ready = kit_processes.prepare("cycle-0", "--leader-elect=false")
            for cycle in range(cycles):
                process, start = ready, cloud.write_calls()
                kit_processes.go(process)
                ready = kit_processes.prepare(f"cycle-{cycle + 1}", "--leader-elect=false")
                history.extend(_act(rng, kube_api, namespace) for _ in range(rng.randint(1, 2)))
                kit_processes.wait_started(process, START_TIMEOUT)
                _wait_for_writes(cloud, start, rng.randint(1, 5), rng.uniform(0.0, 1.5))
                kit_processes.kill(process)
                made = cloud.write_calls() - start
                mid_work += made > 0
                history.append(f"kill {cycle} after {made} writes")
            kit_processes.go(ready)  # the last start, which settles everything
            wait_for(
                lambda: _served(kube_api, namespace),
                SETTLE_TIMEOUT,
                f"every Service served after the last start; log:\n{kit_processes.tail()}",
            )
            for service in kube_api.list(SERVICES, namespace)["items"]:
                kube_api.delete(SERVICES, service["metadata"]["name"], namespace)
            wait_for(
                lambda: not kube_api.list(SERVICES, namespace)["items"],
                SETTLE_TIMEOUT,
                f"every Service finalised; log:\n{kit_processes.tail()}",
            )
            time.sleep(1.0)  # one more poll of the watch after the last delete
        kit_processes.close()
        left = cloud.cluster_resources() - baseline
        print(f"crash cycles {cycles} (seed {seed}): {mid_work} kills after a write")
        assert watch.polls > cycles, f"the cloud was polled {watch.polls} times only"
        # Kills before any write prove little: most must land while polyccm writes.
        assert mid_work * 3 >= cycles, (
            f"only {mid_work} of {cycles} kills came after a write: {history[-12:]}"
        )
        assert not left, f"left in the cloud after {cycles} crash cycles: {sorted(left)}"
        assert not watch.doubles, (
            f"a Service had two load balancers at once: {watch.doubles[:3]} "
            f"(seed {seed}; {history[-12:]})"
        )

    # -- failure at every step ------------------------------------------------------------

    def test_fault_each_step_of_a_create_failing_once_converges_and_deletes_clean(
        self,
        cloud: FaultCloudUnderTest,
        kit_cluster: KitCluster,
        kit_fault_load_balancer: LoadBalancer,
    ) -> None:
        nodes = [kit_cluster.add_node("step-a"), kit_cluster.add_node("step-b")]
        _each_step(cloud, kit_cluster, kit_fault_load_balancer, nodes, edit=False)

    def test_fault_each_step_of_an_edit_failing_once_converges_and_deletes_clean(
        self,
        cloud: FaultCloudUnderTest,
        kit_cluster: KitCluster,
        kit_fault_load_balancer: LoadBalancer,
    ) -> None:
        nodes = [kit_cluster.add_node("edit-a"), kit_cluster.add_node("edit-b")]
        _each_step(cloud, kit_cluster, kit_fault_load_balancer, nodes, edit=True)

    # -- leader cut off -------------------------------------------------------------------

    def test_fault_the_cloud_tells_which_process_called(
        self,
        cloud: FaultCloudUnderTest,
        kit_cluster: KitCluster,
        kit_fault_load_balancer: LoadBalancer,
    ) -> None:
        """What the leader test stands on: the cloud sees, in each request, the
        leader-election identity of the process that sent it (:mod:`polyccm.useragent`)."""
        calls_by_process = _calls_by_process(cloud)
        service = kit_cluster.add_service(f"who-{secrets.token_hex(2)}")
        before = len(calls_by_process())
        kit_fault_load_balancer.get_load_balancer(cloud.cluster_name, service)
        callers = _callers(list(calls_by_process())[before:])
        assert callers == [useragent.IDENTITY], (
            f"the cloud saw {callers} call, not this process ({useragent.IDENTITY})"
        )

    def test_fault_a_leader_cut_off_makes_no_call_after_the_new_leaders_first(  # noqa: PLR0917
        self,
        cloud: FaultCloudUnderTest,
        kit_fault_load_balancer: LoadBalancer,
        kit_processes: Processes,
        control_plane: Any,
        kube_api: KubeApi,
        namespace: str,
        clean_nodes: None,
        tmp_path: Path,
    ) -> None:
        calls_by_process = _calls_by_process(cloud)
        lease, renew, retry = LEASE
        flags = (
            "--leader-elect=true",
            f"--leader-elect-resource-namespace={namespace}",
            f"--leader-elect-lease-duration={lease:g}s",
            f"--leader-elect-renew-deadline={renew:g}s",
            f"--leader-elect-retry-period={retry * 1000:.0f}ms",
        )
        make_node(kube_api, cloud.create_instance(f"lead-{secrets.token_hex(2)}"))
        extra = getattr(cloud, "leader_environment", {})
        config, proxy = proxied_kubeconfig(control_plane.kubeconfig, tmp_path / "proxied.yaml")
        try:
            kit_processes.start("old-leader", *flags, kubeconfig=str(config), env=extra)
            wait_for(lambda: lease_holder(kube_api, namespace), 30, "the first leader")
            old = lease_holder(kube_api, namespace)
            make_service(kube_api, namespace, "lead")
            wait_for(lambda: _served(kube_api, namespace), 60, "the leader serving a Service")
            standby = kit_processes.start("new-leader", *flags, env=extra)
            # Cut the leader off only once the standby campaigns (a loaded machine takes
            # seconds to start it), else the hand-over would count its start-up too.
            assert kit_processes.wait_started(standby, START_TIMEOUT, CAMPAIGNING), (
                f"the standby never campaigned; log:\n{kit_processes.tail()}"
            )
            time.sleep(retry * 2)
            proxy.freeze()
            last_renewal = _last_renewal_until_taken(kube_api, namespace, old, lease + 20)
            taken = time.time()
            new = lease_holder(kube_api, namespace)
            kube_api.patch(SERVICES, "lead", {"metadata": {"labels": {"edited": "yes"}}}, namespace)
            # A new leader's first cloud call can come long after it took the Lease (its caches
            # sync, its SDK loads: up to 40 s for GCE or Metal on a loaded machine).
            wait_for(
                lambda: any(who == new for _, who, _ in calls_by_process()),
                FIRST_CALL_TIMEOUT,
                f"a cloud call naming the new leader {new} (each process names itself in "
                "its cloud requests: polyccm.useragent)",
            )
            time.sleep(lease)  # the old leader's chance to misbehave
            calls = list(calls_by_process())
        finally:
            proxy.cut()
        # The cloud must tell the old leader's calls apart, or "none after" proves nothing.
        assert any(who == old for _, who, _ in calls), (
            f"the cloud saw no call naming the old leader {old}: each process must name itself "
            f"in its cloud requests (polyccm.useragent); callers seen: {_callers(calls)}"
        )
        first_new = min((t for t, who, _ in calls if who == new), default=None)
        assert first_new is not None, f"the new leader {new} made no cloud call"
        late = [
            (round(t - first_new, 3), op) for t, who, op in calls if who == old and t > first_new
        ]
        assert not late, f"the old leader called the cloud after the new leader's first: {late[:5]}"
        # The standby takes the Lease once it has seen no renewal for the lease duration (it
        # looks every retry period). Measured on 2 shared, heavily loaded cores with a 4 s
        # lease: 6.5 s to 13.8 s, hence a loose bound (issue 32 asks for the lease duration).
        handover = taken - last_renewal
        old_calls = [t for t, who, _ in calls if who == old]
        print(
            f"leader cut off: hand-over {handover:.1f}s (lease {lease:g}s); the old leader's "
            f"{len(old_calls)} calls ended {first_new - max(old_calls):.1f}s before the new "
            f"leader's first; the new leader made {sum(who == new for _, who, _ in calls)}"
        )
        assert handover < 4 * lease, f"hand-over took {handover:.1f}s, lease {lease:g}s"


def _wait_for_writes(cloud: FaultCloudUnderTest, start: int, writes: int, after: float) -> None:
    """Return once the cloud counted ``writes`` writes since ``start``, or ``after`` seconds
    after the first of them (the kill then lands mid-work), or after
    :data:`FIRST_WRITE_TIMEOUT` without any write."""
    first = time.monotonic() + FIRST_WRITE_TIMEOUT
    deadline = first
    while time.monotonic() < deadline:
        made = cloud.write_calls() - start
        if made >= writes:
            return
        if made and deadline == first:
            deadline = time.monotonic() + after
        time.sleep(0.02)


def _calls_by_process(cloud: FaultCloudUnderTest) -> Callable[[], Sequence[tuple[float, str, str]]]:
    """The adapter's :meth:`CallsByProcess.calls_by_process`; the test skips without one."""
    found: Callable[[], Sequence[tuple[float, str, str]]] | None = getattr(
        cloud, "calls_by_process", None
    )
    if found is None:
        pytest.skip(
            f"{type(cloud).__name__} has no calls_by_process(): the cloud cannot say who "
            "called when"
        )
    return found


def _callers(calls: Sequence[tuple[float, str, str]]) -> list[str]:
    return sorted({who for _, who, _ in calls})


def _last_renewal_until_taken(api: KubeApi, namespace: str, holder: str, timeout: float) -> float:
    """Poll the Lease until someone else than ``holder`` holds it; the (local) time at which
    ``holder``'s last renewal was first seen."""
    seen, renewed = "", time.time()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spec = api.get(LEASES, LEASE_NAME, namespace).get("spec", {})
        if spec.get("holderIdentity") not in ("", None, holder):
            return renewed
        if spec.get("renewTime") != seen:
            seen, renewed = str(spec.get("renewTime")), time.time()
        time.sleep(0.1)
    pytest.fail(f"nobody took the Lease from {holder} in {timeout:.0f}s")


def _each_step(
    cloud: FaultCloudUnderTest,
    cluster: KitCluster,
    balancer: LoadBalancer,
    nodes: list[Node],
    *,
    edit: bool,
) -> None:
    """Count the writes of a clean create (or edit), then fail each in turn."""
    name = cloud.cluster_name
    baseline = cloud.cluster_resources()

    def made(label: str) -> tuple[Service, Service]:
        service = cluster.add_service(f"{label}-{secrets.token_hex(2)}")
        return service, _with_second_port(cluster, service) if edit else service

    probe, probe_target = made("probe")
    if edit:
        balancer.ensure_load_balancer(name, probe, nodes)
    writes = cloud.write_calls()
    balancer.ensure_load_balancer(name, probe_target, nodes)
    steps = cloud.write_calls() - writes
    clean = _kinds(cloud.cluster_resources() - baseline)
    balancer.ensure_load_balancer_deleted(name, probe_target)
    assert cloud.cluster_resources() == baseline, "a clean delete left resources behind"
    if edit and steps == 0:
        pytest.skip("adding a port to a Service changes nothing in this cloud: no write to fail")
    assert steps > 0, "a clean ensure made no write the adapter counts"

    problems: list[str] = []
    for step in range(steps):
        for then_delete in (False, True):
            service, target = made(f"s{step}")
            if edit:
                balancer.ensure_load_balancer(name, service, nodes)
            cloud.fail_write(step)
            # The injected failure, in whatever form the provider raises it.
            with contextlib.suppress(Exception):
                balancer.ensure_load_balancer(name, target, nodes)
            cloud.clear_faults()
            where = f"write {step + 1} of {steps} failed"
            if not then_delete:
                _as_a_controller(balancer.ensure_load_balancer, name, target, nodes)
                now = _kinds(cloud.cluster_resources() - baseline)
                for kind in getattr(cloud, "held_until_deleted", ()):
                    now[kind] = clean[kind]  # kept, by design, until the Service goes
                if now != clean:
                    problems.append(f"{where}: the next ensure made {dict(now)}, not {dict(clean)}")
                writes = cloud.write_calls()
                balancer.ensure_load_balancer(name, target, nodes)
                if cloud.write_calls() != writes:
                    problems.append(f"{where}: the ensure after the next one still wrote")
            _as_a_controller(balancer.ensure_load_balancer_deleted, name, target)
            left = cloud.cluster_resources() - baseline
            if left:
                how = "deleted at once" if then_delete else "converged, then deleted"
                problems.append(f"{where}, {how}: left {sorted(left)}")
                balancer.ensure_load_balancer_deleted(name, target)
    assert not problems, "\n".join(problems)


def _as_a_controller(call: Callable[..., object], *arguments: object) -> None:
    """Make ``call`` as the service controller does after a failed sync: again, after a
    pause, while the cloud still answers an error (GCE's ``resourceNotReady`` while an
    operation the failed ensure started still runs, say), at most :data:`ATTEMPTS` times."""
    for attempt in range(ATTEMPTS):
        try:
            call(*arguments)
        except Exception:
            if attempt == ATTEMPTS - 1:
                raise
            time.sleep(0.5)
        else:
            return


def _with_second_port(cluster: KitCluster, service: Service) -> Service:
    """``service`` edited through the API: a second port, as the cache then holds it."""
    ports = [*service.raw["spec"]["ports"], {"name": "alt", "port": 8080, "protocol": "TCP"}]
    patched = cluster.api.patch(
        SERVICES,
        service.name,
        {"spec": {"ports": ports}},
        service.namespace,
        patch_type="application/merge-patch+json",
    )
    return Service(cluster._cached_raw(cluster.services, service.key, patched))
