"""A real local control plane: etcd and kube-apiserver (plus cloud emulators) as background
processes on loopback ports, recorded in a state directory.

This is the library behind ``polyccm-dev`` and the ``control_plane`` pytest fixture. The API
server runs with RBAC authorization, a static admin token (group ``system:masters``), a serving
certificate signed by a generated CA, and service-account keys, so clients behave as they would
against a real cluster: no TLS checks are skipped and unauthenticated requests are refused.

Processes are started in their own sessions and outlive the caller; :func:`stop` (or
``polyccm-dev down``) ends them from any process, using what ``state.json`` recorded.
:func:`apiserver_stopped` and :func:`restart_apiserver` take the API server down and bring it
back on the same etcd, port and certificates, as an upgrade or a crash of a real control plane
would, for tests of what clients do meanwhile.
"""

from __future__ import annotations

import fcntl
import secrets
import ssl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polyccm_testing.devenv import pki, processes
from polyccm_testing.devenv import state as state_files
from polyccm_testing.devenv.state import Component, DevState

if TYPE_CHECKING:
    import pluggy
    from polyccm.kube.api import KubeApi
    from polyccm.plugins import EmulatorLauncher

    from polyccm_testing.devenv.binaries import ControlPlaneBinaries

ETCD = "etcd"
KUBE_APISERVER = "kube-apiserver"
EMULATOR_PREFIX = "emulator/"

DEFAULT_TIMEOUT = 120.0
"""Seconds allowed for etcd and the API server to become ready."""
EMULATOR_TIMEOUT = 60.0
"""Seconds allowed for each cloud emulator to answer."""
PORT_ATTEMPTS = 3
"""Starts retried when a port picked as free was taken before the process bound it."""

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
ADMIN_USER = "admin"
ADMIN_GROUP = "system:masters"

Progress = Callable[[str], None]


class ControlPlaneError(RuntimeError):
    """The control plane or an emulator could not be started, or the state dir is unusable."""


class StateFileError(ControlPlaneError):
    """The state dir's ``state.json`` cannot be read or is not one: bad input, not a failure
    of what runs (``polyccm-dev`` exits 2)."""


class UnknownEmulatorError(ControlPlaneError):
    """``--cloud NAME`` names no installed emulator."""

    def __init__(self, name: str, installed: Sequence[str]) -> None:
        listing = ", ".join(installed) if installed else "none"
        super().__init__(f"unknown cloud {name!r}; installed emulators: {listing}")
        self.name = name
        self.installed = tuple(installed)


@dataclass(frozen=True)
class ComponentStatus:
    """Whether one recorded component still runs."""

    name: str
    pid: int
    url: str
    alive: bool
    log: str


@dataclass
class ControlPlane:
    """A running environment, as recorded in its state directory."""

    state_dir: Path
    api_url: str
    """``https://127.0.0.1:<port>``."""
    kubeconfig: Path
    """Admin kubeconfig (token auth, CA-verified TLS)."""
    ca_cert: Path
    """The CA the API server's certificate is signed by."""
    admin_token: str
    env: dict[str, str]
    """KUBECONFIG and the variables of every emulator (the contents of the ``env`` file)."""
    components: list[Component] = field(default_factory=list)
    reused: bool = False
    """True when it was already running before this call."""
    started_clouds: tuple[str, ...] = ()
    """Emulators this call started (a reused environment may gain some)."""

    @property
    def clouds(self) -> tuple[str, ...]:
        """Names of the emulators running in this environment."""
        return tuple(
            item.name.removeprefix(EMULATOR_PREFIX)
            for item in self.components
            if item.name.startswith(EMULATOR_PREFIX)
        )

    def stop(self) -> None:
        """Stop every process of the environment and remove its runtime files."""
        stop(self.state_dir)

    def status(self) -> list[ComponentStatus]:
        return status(self.state_dir) or []

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context that trusts the API server's CA."""
        return ssl.create_default_context(cafile=str(self.ca_cert))

    def restart_apiserver(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Stop kube-apiserver and start it again as it was (see :func:`restart_apiserver`)."""
        restart_apiserver(self.state_dir, timeout=timeout)

    def apiserver_stopped(self, timeout: float = DEFAULT_TIMEOUT) -> Any:
        """A context manager: kube-apiserver is down inside the block, back and ready after
        it (see :func:`apiserver_stopped`)."""
        return apiserver_stopped(self.state_dir, timeout=timeout)

    def kube_api(self, **kwargs: Any) -> KubeApi:
        """A :class:`polyccm.kube.api.KubeApi` with admin rights (keyword args go to it)."""
        from polyccm.kube.api import KubeApi

        return KubeApi.from_kubeconfig(str(self.kubeconfig), **kwargs)


# -- public entry points ----------------------------------------------------------------------


def start(
    state_dir: Path | str,
    clouds: Sequence[str] = (),
    manager: pluggy.PluginManager | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    binaries: ControlPlaneBinaries | None = None,
    progress: Progress | None = None,
    die_with_caller: bool = False,
    apiserver_args: Sequence[str] = (),
) -> ControlPlane:
    """Start etcd, kube-apiserver and the emulators named in ``clouds`` in ``state_dir``.

    ``apiserver_args`` are added to kube-apiserver's command line (an audit policy and log, for
    a benchmark that counts each client's requests); they are kept for its restarts.

    The processes outlive the caller unless ``die_with_caller`` is set: then the kernel kills
    them when the calling process dies, even by SIGKILL (test sessions use this; it needs
    util-linux's ``setpriv``).

    Idempotent: when ``state_dir`` already runs, it is returned (``reused=True``) after starting
    any requested emulator that is missing. A partly dead environment is stopped and started
    afresh. Cloud names are checked before anything starts (:class:`UnknownEmulatorError`). On any
    failure, everything this call started is stopped again and :class:`ControlPlaneError` says
    why, with the last lines of the failing component's log.
    """
    say = progress or (lambda _message: None)
    directory = Path(state_dir).resolve()
    wanted = list(dict.fromkeys(clouds))
    launchers = resolve_emulators(wanted, manager)
    directory.mkdir(parents=True, exist_ok=True)
    with _locked(directory):
        existing = _load(directory)
        if existing is not None:
            if all(_alive(item) for item in existing.components):
                return _extend(directory, existing, launchers, say, die_with_caller)
            say(f"{directory} was partly stopped; stopping the rest and starting afresh")
            _stop_components(existing.components)
        state_files.remove_runtime_files(directory)
        return _start_fresh(
            directory,
            launchers,
            timeout=timeout,
            binaries=binaries,
            say=say,
            die_with_caller=die_with_caller,
            apiserver_args=apiserver_args,
        )


def attach(state_dir: Path | str) -> ControlPlane | None:
    """The environment running in ``state_dir``, or ``None`` unless every part of it is alive."""
    directory = Path(state_dir).resolve()
    recorded = _load(directory)
    if recorded is None or not recorded.components:
        return None
    if not all(_alive(item) for item in recorded.components):
        return None
    return _plane(directory, recorded, reused=True)


def status(state_dir: Path | str) -> list[ComponentStatus] | None:
    """Each recorded component and whether it runs; ``None`` when nothing was started."""
    directory = Path(state_dir).resolve()
    recorded = _load(directory)
    if recorded is None:
        return None
    return [
        ComponentStatus(item.name, item.pid, item.url, _alive(item), item.log)
        for item in recorded.components
    ]


def stop(state_dir: Path | str) -> bool:
    """Stop everything recorded in ``state_dir`` and remove its runtime files (logs stay).

    Returns whether anything was recorded there.
    """
    directory = Path(state_dir).resolve()
    if not directory.is_dir():
        return False
    with _locked(directory):
        recorded = _load(directory)
        if recorded is not None:
            _stop_components(recorded.components)
            for file_name in recorded.emulator_files:
                (directory / file_name).unlink(missing_ok=True)
        state_files.remove_runtime_files(directory)
    return recorded is not None


@contextmanager
def apiserver_stopped(state_dir: Path | str, *, timeout: float = DEFAULT_TIMEOUT) -> Iterator[None]:
    """Stop the environment's kube-apiserver for the duration of the block (etcd and emulators
    keep running), then start it again with the same command line (same etcd, port,
    certificates and tokens) and return once it is ready.

    The API server is started again even when the block raises. One started for a test session
    (``die_with_caller``) is tied to the thread that calls this, as it was to the one that
    started the session: call it from the main thread. Raises :class:`ControlPlaneError` when
    nothing runs in ``state_dir`` or the API server does not come back within ``timeout``.
    """
    directory = Path(state_dir).resolve()
    with _locked(directory):
        recorded = _load(directory)
        component = recorded.component(KUBE_APISERVER) if recorded is not None else None
        if recorded is None or component is None or not component.argv:
            raise ControlPlaneError(f"no kube-apiserver recorded in {directory}")
        processes.stop_group(component.pid, component.start_time)
    try:
        yield
    finally:
        _start_apiserver_again(directory, timeout)


def restart_apiserver(state_dir: Path | str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Stop kube-apiserver and start it again at once (see :func:`apiserver_stopped`)."""
    with apiserver_stopped(state_dir, timeout=timeout):
        pass


def _start_apiserver_again(directory: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with _locked(directory):
        recorded = _load(directory)
        old = recorded.component(KUBE_APISERVER) if recorded is not None else None
        if recorded is None or old is None:
            raise ControlPlaneError(f"no kube-apiserver recorded in {directory}")
        keys = pki.Pki.in_directory(directory / state_files.PKI_DIR)
        log = Path(old.log)
        for attempt in range(PORT_ATTEMPTS):
            offset = _log_size(log)
            try:
                child = processes.spawn_detached(
                    old.argv, log_path=log, cwd=directory, die_with_parent=old.die_with_caller
                )
            except OSError as error:
                raise ControlPlaneError(f"cannot run {old.argv[0]}: {error}") from error
            component = Component(
                name=old.name,
                pid=child.pid,
                start_time=processes.start_time_of(child.pid),
                url=old.url,
                log=old.log,
                argv=list(old.argv),
                die_with_caller=old.die_with_caller,
            )
            # Same place in the list: components stop in the reverse of their start order.
            index = next(i for i, item in enumerate(recorded.components) if item.name == old.name)
            recorded.components[index] = component
            state_files.save(directory, recorded)
            try:
                _wait_for_apiserver(component, recorded.admin_token, keys.ca_cert, deadline)
                return
            except processes.NotReadyError as error:
                # The port is the one clients know: another process may hold it for a moment
                # (a socket of the old server lingering); try it again, never another port.
                if attempt + 1 < PORT_ATTEMPTS and _port_taken(log, offset):
                    processes.stop_group(component.pid, component.start_time)
                    time.sleep(0.5)
                    old = component
                    continue
                raise _failure(component, str(error)) from None


def _wait_for_apiserver(component: Component, token: str, ca_cert: Path, deadline: float) -> None:
    """Return once /readyz is ok and the ``default`` namespace can be read."""
    headers = {"Authorization": f"Bearer {token}"}
    context = ssl.create_default_context(cafile=str(ca_cert))
    for path in ("/readyz", "/api/v1/namespaces/default"):
        processes.wait_until_answers(
            component.url + path,
            accept=lambda status, _body: status == 200,
            timeout=max(1.0, deadline - time.monotonic()),
            alive=lambda: _alive(component),
            headers=headers,
            context=context,
        )


def resolve_emulators(
    clouds: Sequence[str], manager: pluggy.PluginManager | None = None
) -> dict[str, EmulatorLauncher]:
    """The launcher of each cloud in ``clouds``; :class:`UnknownEmulatorError` for a name that
    no installed plugin registers."""
    if not clouds:
        return {}
    from polyccm.plugins import installed_emulators, plugin_manager

    installed = installed_emulators(manager if manager is not None else plugin_manager())
    for name in clouds:
        if name not in installed:
            raise UnknownEmulatorError(name, sorted(installed))
    return {name: installed[name] for name in clouds}


# -- internals ----------------------------------------------------------------------------------


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Serialise ``start`` and ``stop`` on one state dir across processes."""
    with (directory / state_files.LOCK_FILE).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _load(directory: Path) -> DevState | None:
    try:
        return state_files.load(directory)
    except state_files.StateError as error:
        raise StateFileError(str(error)) from error


def _alive(component: Component) -> bool:
    return processes.is_alive(component.pid, component.start_time)


def _stop_components(components: Sequence[Component]) -> None:
    # Emulators first, then the API server, etcd last: the reverse of the start order.
    for item in reversed(components):
        processes.stop_group(item.pid, item.start_time)


def _plane(
    directory: Path, recorded: DevState, *, reused: bool, started: Sequence[str] = ()
) -> ControlPlane:
    return ControlPlane(
        state_dir=directory,
        api_url=recorded.api_url,
        kubeconfig=directory / state_files.KUBECONFIG_FILE,
        ca_cert=pki.Pki.in_directory(directory / state_files.PKI_DIR).ca_cert,
        admin_token=recorded.admin_token,
        env=state_files.environment(directory, recorded),
        components=list(recorded.components),
        reused=reused,
        started_clouds=tuple(started),
    )


def _extend(
    directory: Path,
    recorded: DevState,
    launchers: Mapping[str, EmulatorLauncher],
    say: Progress,
    die_with_caller: bool,
) -> ControlPlane:
    """Start the requested emulators that a running environment lacks."""
    missing = {
        name: launcher
        for name, launcher in launchers.items()
        if recorded.component(EMULATOR_PREFIX + name) is None
    }
    before = len(recorded.components)
    launch = _Launcher(directory, recorded, say, die_with_caller=die_with_caller)
    try:
        for name, launcher in missing.items():
            launch.emulator(name, launcher)
    except BaseException:
        _stop_components(recorded.components[before:])
        del recorded.components[before:]
        for name in missing:
            recorded.emulator_env.pop(name, None)
        state_files.save(directory, recorded)
        raise
    if missing:
        state_files.write_env(directory, state_files.environment(directory, recorded))
    return _plane(directory, recorded, reused=True, started=tuple(missing))


def _start_fresh(
    directory: Path,
    launchers: Mapping[str, EmulatorLauncher],
    *,
    timeout: float,
    binaries: ControlPlaneBinaries | None,
    say: Progress,
    die_with_caller: bool,
    apiserver_args: Sequence[str] = (),
) -> ControlPlane:
    if binaries is None:
        from polyccm_testing.devenv.binaries import BinaryError, ensure_binaries

        say("locating kube-apiserver and etcd (built from source on first use: minutes)")
        try:
            binaries = ensure_binaries()
        except BinaryError as error:
            raise ControlPlaneError(str(error)) from error
    began = time.monotonic()
    recorded = DevState(admin_token=secrets.token_urlsafe(32), started_at=time.time())
    launch = _Launcher(
        directory, recorded, say, deadline=began + timeout, die_with_caller=die_with_caller
    )
    try:
        keys = pki.generate(directory / state_files.PKI_DIR)
        token_file = directory / state_files.TOKEN_FILE
        token_file.write_text(f'{recorded.admin_token},{ADMIN_USER},{ADMIN_USER},"{ADMIN_GROUP}"\n')
        token_file.chmod(0o600)
        etcd_url = launch.etcd(binaries.etcd)
        launch.apiserver(
            binaries.kube_apiserver, etcd_url=etcd_url, keys=keys, extra_args=apiserver_args
        )
        state_files.write_kubeconfig(
            directory, server=recorded.api_url, ca_cert=keys.ca_cert, token=recorded.admin_token
        )
        say(f"control plane ready in {time.monotonic() - began:.1f} s at {recorded.api_url}")
        for name, launcher in launchers.items():
            launch.emulator(name, launcher)
        state_files.write_env(directory, state_files.environment(directory, recorded))
    except BaseException as error:
        _stop_components(recorded.components)
        state_files.remove_runtime_files(directory)
        if isinstance(error, pki.PkiError):
            raise ControlPlaneError(str(error)) from error
        raise
    return _plane(directory, recorded, reused=False, started=tuple(launchers))


def _failure(component: Component, reason: str) -> ControlPlaneError:
    log = Path(component.log)
    lines = processes.tail(log, 30)
    return ControlPlaneError(
        f"{component.name} did not start: {reason}\n--- last lines of {log}:\n{lines}"
    )


def _port_taken(log: Path, offset: int) -> bool:
    """Whether the process lost a race for its port (it logged so after ``offset``)."""
    try:
        with log.open("rb") as handle:
            handle.seek(offset)
            written = handle.read()
    except OSError:
        return False
    return b"address already in use" in written


def _log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except OSError:
        return 0


class _Launcher:
    """Starts components into one state dir, recording each in ``state.json`` as it spawns."""

    def __init__(
        self,
        directory: Path,
        recorded: DevState,
        say: Progress,
        *,
        deadline: float = 0.0,
        die_with_caller: bool = False,
    ) -> None:
        self.directory = directory
        self.recorded = recorded
        self.say = say
        self.deadline = deadline
        self.die_with_caller = die_with_caller

    def _log(self, name: str) -> Path:
        return self.directory / state_files.LOG_DIR / f"{name}.log"

    def _remaining(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    def spawn(self, name: str, argv: Sequence[str], *, url: str, log: Path) -> Component:
        try:
            child = processes.spawn_detached(
                argv, log_path=log, cwd=self.directory, die_with_parent=self.die_with_caller
            )
        except OSError as error:
            raise ControlPlaneError(f"{name}: cannot run {argv[0]}: {error}") from error
        component = Component(
            name=name,
            pid=child.pid,
            start_time=processes.start_time_of(child.pid),
            url=url,
            log=str(log),
            argv=list(argv),
            die_with_caller=self.die_with_caller,
        )
        self.recorded.components.append(component)
        state_files.save(self.directory, self.recorded)
        return component

    def discard(self, component: Component) -> None:
        processes.stop_group(component.pid, component.start_time)
        self.recorded.components.remove(component)
        state_files.save(self.directory, self.recorded)

    def _retrying(
        self,
        name: str,
        make_argv: Callable[[], tuple[list[str], str]],
        wait: Callable[[Component], None],
    ) -> Component:
        """Spawn ``name`` and ``wait`` for it; spawn again on fresh ports when it lost a port."""
        log = self._log(name)
        for attempt in range(PORT_ATTEMPTS):
            argv, url = make_argv()
            offset = _log_size(log)
            component = self.spawn(name, argv, url=url, log=log)
            try:
                wait(component)
            except processes.NotReadyError as error:
                if attempt + 1 < PORT_ATTEMPTS and _port_taken(log, offset):
                    self.say(f"{name} lost its port to another process; retrying")
                    self.discard(component)
                    continue
                raise _failure(component, str(error)) from None
            return component
        raise AssertionError("unreachable")

    def etcd(self, binary: Path) -> str:
        """Start etcd on two free ports; return its client URL once it reports healthy."""
        data = self.directory / state_files.ETCD_DIR

        def make_argv() -> tuple[list[str], str]:
            client_port, peer_port = processes.free_ports(2)
            client_url = f"http://127.0.0.1:{client_port}"
            peer_url = f"http://127.0.0.1:{peer_port}"
            argv = [
                str(binary),
                "--name=polyccm-dev",
                f"--data-dir={data}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=polyccm-dev={peer_url}",
                "--unsafe-no-fsync=true",
            ]
            return argv, client_url

        def wait(component: Component) -> None:
            processes.wait_until_answers(
                component.url + "/health",
                accept=lambda status, body: status == 200 and b'"health":"true"' in body,
                timeout=self._remaining(),
                alive=lambda: _alive(component),
            )

        self.say(f"starting etcd ({binary})")
        return self._retrying(ETCD, make_argv, wait).url

    def apiserver(
        self, binary: Path, *, etcd_url: str, keys: pki.Pki, extra_args: Sequence[str] = ()
    ) -> None:
        """Start kube-apiserver; return once /readyz is ok and the ``default`` namespace exists."""
        token_file = self.directory / state_files.TOKEN_FILE

        def make_argv() -> tuple[list[str], str]:
            (port,) = processes.free_ports(1)
            url = f"https://127.0.0.1:{port}"
            argv = [
                str(binary),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={keys.ca_cert.parent}",
                f"--tls-cert-file={keys.serving_cert}",
                f"--tls-private-key-file={keys.serving_key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                f"--token-auth-file={token_file}",
                f"--service-account-issuer={url}",
                f"--service-account-key-file={keys.service_account_public_key}",
                f"--service-account-signing-key-file={keys.service_account_key}",
                "--profiling=false",
                *extra_args,
            ]
            return argv, url

        def wait(component: Component) -> None:
            _wait_for_apiserver(
                component,
                self.recorded.admin_token,
                keys.ca_cert,
                time.monotonic() + self._remaining(),
            )

        self.say(f"starting kube-apiserver ({binary})")
        self.recorded.api_url = self._retrying(KUBE_APISERVER, make_argv, wait).url
        state_files.save(self.directory, self.recorded)

    def emulator(self, name: str, launcher: EmulatorLauncher) -> None:
        """Launch the emulator of cloud ``name`` on a free port; wait until it answers."""
        (port,) = processes.free_ports(1)
        try:
            launch = launcher(port, self.directory)
        except Exception as error:
            raise ControlPlaneError(f"the {name} emulator's launcher failed: {error}") from error
        url = f"http://127.0.0.1:{port}"
        self.say(f"starting the {name} emulator on {url}")
        component = self.spawn(
            EMULATOR_PREFIX + name, list(launch.argv), url=url, log=self._log(f"emulator-{name}")
        )
        health = launch.health_path
        if not health.startswith("/"):
            health = "/" + health
        try:
            processes.wait_until_answers(
                url + health,
                accept=lambda status, _body: status < 500,
                timeout=EMULATOR_TIMEOUT,
                alive=lambda: _alive(component),
            )
        except processes.NotReadyError as error:
            raise _failure(component, str(error)) from None
        for file_name, content in launch.files.items():
            target = self.directory / file_name
            if target.parent != self.directory:
                raise ControlPlaneError(
                    f"the {name} emulator asked for a file outside the state dir: {file_name!r}"
                )
            target.touch(mode=0o600)
            target.write_text(content)
            self.recorded.emulator_files.append(file_name)
        self.recorded.emulator_env[name] = dict(launch.env)
        state_files.save(self.directory, self.recorded)


__all__ = [
    "ComponentStatus",
    "ControlPlane",
    "ControlPlaneError",
    "UnknownEmulatorError",
    "apiserver_stopped",
    "attach",
    "resolve_emulators",
    "restart_apiserver",
    "start",
    "status",
    "stop",
]
