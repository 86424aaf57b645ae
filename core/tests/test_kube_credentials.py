"""Credentials that change while polyccm runs, and proxies, against the real API server: an exec
plugin's token refused with 401 is fetched again and the request goes through; a slow plugin
never holds up Lease renewals; a new client certificate from a plugin is what new connections
present; a rotated service-account token is picked up at once; HTTPS_PROXY and a kubeconfig's
proxy-url carry the requests (through a CONNECT proxy the test runs)."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm.kube.api import (
    LEASES,
    NAMESPACES,
    NO_RETRIES,
    ApiError,
    KubeApi,
    KubeconfigError,
    load_configuration,
)
from polyccm.kube.config import load_in_cluster
from polyccm.leaderelection import LeaderElector
from polyccm_testing.devenv import controlplane, pki

EXEC_API = "client.authentication.k8s.io/v1"


def kubeconfig(path: Path, server: str, ca: Path, user: dict[str, Any], **cluster: Any) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": server, "certificate-authority": str(ca), **cluster},
            }
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(document))
    return path


def plugin(folder: Path, answers: list[str]) -> dict[str, Any]:
    """An exec section running a script whose n-th run (counted in ``folder/runs``) executes
    ``answers[n]`` (the last one for the runs after), Python that prints an ExecCredential."""
    script = folder / "plugin.py"
    script.write_text(
        "import datetime, json, os, sys, time\n"
        f"folder = {str(folder)!r}\n"
        "runs = os.path.join(folder, 'runs')\n"
        "with open(runs, 'a') as f: f.write('run\\n')\n"
        "n = len(open(runs).read().splitlines()) - 1\n"
        "def answer(status):\n"
        f"    print(json.dumps({{'apiVersion': {EXEC_API!r}, 'kind': 'ExecCredential',"
        " 'status': status}))\n"
        "def rfc3339(seconds):\n"
        "    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)\n"
        "    return moment.strftime('%Y-%m-%dT%H:%M:%SZ')\n"
        f"answers = {answers!r}\n"
        "exec(answers[min(n, len(answers) - 1)])\n"
    )
    return {"apiVersion": EXEC_API, "command": sys.executable, "args": [str(script)]}


def runs(folder: Path) -> int:
    path = folder / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def who_am_i(api: KubeApi) -> str:
    review = api.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


# -- exec plugins -------------------------------------------------------------------------------


def test_an_exec_token_refused_with_401_is_fetched_again_and_the_request_goes_through(
    control_plane: Any, tmp_path: Path
) -> None:
    # client-go v0.35.4 plugin/pkg/client/auth/exec/exec.go:378-382: a 401 runs the plugin
    # again (maybeRefreshCreds, :418-431) unless it ran since; polyccm also sends the refused
    # request once more (authentication comes first, so the server did nothing with it).
    admin = control_plane.admin_token
    exec_section = plugin(
        tmp_path,
        ["answer({'token': 'revoked-token'})", f"answer({{'token': {admin!r}}})"],
    )
    config = kubeconfig(
        tmp_path / "kubeconfig",
        control_plane.api_url,
        control_plane.ca_cert,
        {"exec": exec_section},
    )
    api = KubeApi(load_configuration(str(config)), qps=0)
    try:
        assert api.list(NAMESPACES, limit=1)["kind"] == "NamespaceList"
        assert runs(tmp_path) == 2
        api.list(NAMESPACES, limit=1)
        assert runs(tmp_path) == 2, "a credential that works is kept"
    finally:
        api.close()


def test_a_plugin_that_fails_to_renew_is_logged_in_one_line_without_what_it_printed(
    control_plane: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # client-go v0.35.4 exec.go:548-575 says "exec: executable ... failed with exit code N"
    # (its stderr goes to the terminal); polyccm's log must not carry what the plugin printed.
    secret = "s3cr3t-printed-by-the-plugin"
    exec_section = plugin(
        tmp_path,
        [
            "answer({'token': 'revoked-token'})",
            f"sys.stderr.write('cannot log in with {secret}\\n'); sys.exit(3)",
        ],
    )
    config = kubeconfig(
        tmp_path / "kubeconfig",
        control_plane.api_url,
        control_plane.ca_cert,
        {"exec": exec_section},
    )
    api = KubeApi(load_configuration(str(config)), qps=0)
    try:
        with pytest.raises(ApiError) as refused:
            api.list(NAMESPACES, limit=1)
    finally:
        api.close()

    assert refused.value.status == 401
    assert runs(tmp_path) == 2
    warnings = [r.getMessage() for r in caplog.records if r.name == "polyccm.kube.credentials"]
    assert len(warnings) == 1, warnings
    assert "failed with exit code 3" in warnings[0] and "the current one is kept" in warnings[0]
    assert secret not in caplog.text and "\n" not in warnings[0]


def test_lease_renewals_go_on_while_an_exec_plugin_is_slow(
    control_plane: Any, kube_api: KubeApi, namespace: str, tmp_path: Path
) -> None:
    # client-go v0.35.4 exec.go:401-416 runs the plugin under the authenticator's mutex on the
    # request path, so every request waits for a slow plugin; polyccm fetches the next credential
    # in the background before the current one expires, and its Lease client (NO_RETRIES, as
    # app/manager.py builds it) never waits for one.
    admin = control_plane.admin_token
    release = tmp_path / "release"
    slow = (
        f"open(os.path.join(folder, 'started'), 'w').close()\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.05)\n"
        f"answer({{'token': {admin!r}}})"
    )
    exec_section = plugin(
        tmp_path, [f"answer({{'token': {admin!r}, 'expirationTimestamp': rfc3339(3)}})", slow]
    )
    config = kubeconfig(
        tmp_path / "kubeconfig",
        control_plane.api_url,
        control_plane.ca_cert,
        {"exec": exec_section},
    )
    configuration = load_configuration(str(config))
    lease_api = KubeApi(configuration, qps=0, retry=NO_RETRIES)
    stop = threading.Event()
    leading = threading.Event()

    def lead(lost: threading.Event) -> None:
        leading.set()
        lost.wait()

    elector = LeaderElector(
        lease_api,
        lock_name="slow-plugin",
        lock_namespace=namespace,
        identity="me",
        lease_duration=3.0,
        renew_deadline=2.0,
        retry_period=0.5,
        on_started_leading=lead,
        on_stopped_leading=lambda: None,
    )
    thread = threading.Thread(target=elector.run, args=(stop,), daemon=True)
    thread.start()

    def renewed() -> str:
        return str(kube_api.get(LEASES, "slow-plugin", namespace)["spec"]["renewTime"])

    try:
        wait_for(leading.is_set, 10, "the lease to be taken")
        wait_for((tmp_path / "started").exists, 10, "the plugin to run again")
        seen = [renewed()]
        for _ in range(3):
            wait_for(lambda: renewed() != seen[-1], 5, "a renewal while the plugin runs")
            seen.append(renewed())
        assert not release.exists() and elector.is_leader()
    finally:
        release.touch()
        stop.set()
        thread.join(15)
        lease_api.close()
    assert not thread.is_alive()
    assert runs(tmp_path) == 2


@pytest.fixture(scope="module")
def client_ca(tmp_path_factory: pytest.TempPathFactory) -> pki.Pki:
    return pki.generate(tmp_path_factory.mktemp("client-ca"))


@pytest.fixture(scope="module")
def x509_control_plane(
    tmp_path_factory: pytest.TempPathFactory, client_ca: pki.Pki
) -> Iterator[controlplane.ControlPlane]:
    """A control plane of its own whose API server authenticates client certificates signed by
    ``client_ca`` (the session's takes tokens only)."""
    plane = controlplane.start(
        tmp_path_factory.mktemp("x509-plane"),
        die_with_caller=True,
        apiserver_args=[f"--client-ca-file={client_ca.ca_cert}"],
    )
    try:
        yield plane
    finally:
        plane.stop()


def test_a_new_client_certificate_from_an_exec_plugin_is_what_new_connections_present(
    x509_control_plane: controlplane.ControlPlane, client_ca: pki.Pki, tmp_path: Path
) -> None:
    # client-go v0.35.4 exec.go:386-391 runs the plugin again once its credential expired, and
    # :527-533 closes every connection when the certificate changes, so new ones present it.
    answers = []
    for user in ("alice", "bob"):
        certificate, key = pki.client_certificate(client_ca, tmp_path / "pki", user=user)
        status = {
            "clientCertificateData": certificate.read_text(),
            "clientKeyData": key.read_text(),
            **({"expirationTimestamp": "2000-01-01T00:00:00Z"} if user == "alice" else {}),
        }
        answers.append(f"answer({status!r})")
    config = kubeconfig(
        tmp_path / "kubeconfig",
        x509_control_plane.api_url,
        x509_control_plane.ca_cert,
        {"exec": plugin(tmp_path, answers)},
    )
    configuration = load_configuration(str(config))
    assert runs(tmp_path) == 1
    api = KubeApi(configuration, qps=0)
    try:
        # alice's certificate has expired: bob's is fetched before the request and presented.
        assert who_am_i(api) == "bob"
        assert who_am_i(api) == "bob"
        assert runs(tmp_path) == 2
    finally:
        api.close()


# -- token files --------------------------------------------------------------------------------


def test_a_rotated_service_account_token_is_read_again_when_the_old_one_is_refused(
    control_plane: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # client-go v0.35.4 rest/config.go:543-575 reads the in-cluster token through
    # transport/token_source.go:69-81 (a file read again each minute), and :100-113 reads it
    # again at the next request once the server answered 401.
    host, port = control_plane.api_url.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    (tmp_path / "ca.crt").write_bytes(Path(control_plane.ca_cert).read_bytes())
    token = tmp_path / "token"
    token.write_text("expired-token")
    api = KubeApi(load_in_cluster(tmp_path), qps=0)
    try:
        token.write_text(control_plane.admin_token)  # the kubelet rotates the projected token

        assert api.list(NAMESPACES, limit=1)["kind"] == "NamespaceList"
    finally:
        api.close()


# -- proxies ------------------------------------------------------------------------------------


class ConnectProxy:
    """An HTTP CONNECT proxy on loopback that records the targets it tunnels to."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.targets: list[str] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.close()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
            if method != "CONNECT":
                client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            self.targets.append(target)
            host, port = target.rsplit(":", 1)
            with socket.create_connection((host, int(port))) as upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                peers = {client: upstream, upstream: client}
                while True:
                    ready, _, _ = select.select(list(peers), [], [], 30)
                    if not ready:
                        return
                    for side in ready:
                        data = side.recv(65536)
                        if not data:
                            return
                        peers[side].sendall(data)


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    running = ConnectProxy()
    yield running
    running.close()


@pytest.fixture
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_https_proxy_from_the_environment_carries_the_requests(
    control_plane: Any, proxy: ConnectProxy, monkeypatch: pytest.MonkeyPatch,
    no_proxy_settings: None,
) -> None:  # fmt: skip
    # client-go v0.35.4 transport/cache.go:129-135 uses http.ProxyFromEnvironment (which, unlike
    # the package, never proxies a loopback server: this test's server is one).
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    api = KubeApi(load_configuration(str(control_plane.kubeconfig)), qps=0)
    try:
        assert api.list(NAMESPACES, limit=1)["kind"] == "NamespaceList"
    finally:
        api.close()

    assert proxy.targets == [control_plane.api_url.removeprefix("https://")]


def test_no_proxy_keeps_the_requests_direct(
    control_plane: Any, proxy: ConnectProxy, monkeypatch: pytest.MonkeyPatch,
    no_proxy_settings: None,
) -> None:  # fmt: skip
    # Go's http.ProxyFromEnvironment, which client-go v0.35.4 transport/cache.go:129 uses,
    # leaves the hosts NO_PROXY names out.
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    api = KubeApi(load_configuration(str(control_plane.kubeconfig)), qps=0)
    try:
        api.list(NAMESPACES, limit=1)
    finally:
        api.close()

    assert proxy.targets == []


def test_a_kubeconfig_proxy_url_carries_the_requests_and_watches(
    control_plane: Any, proxy: ConnectProxy, tmp_path: Path, no_proxy_settings: None
) -> None:
    # client-go v0.35.4 tools/clientcmd/api/v1/types.go:80-89: proxy-url, for every request.
    config = kubeconfig(
        tmp_path / "kubeconfig",
        control_plane.api_url,
        control_plane.ca_cert,
        {"token": control_plane.admin_token},
        **{"proxy-url": proxy.url},
    )
    api = KubeApi(load_configuration(str(config)), qps=0)
    try:
        listed = api.list(NAMESPACES, limit=1)
        version = listed["metadata"]["resourceVersion"]
        events = api.watch(NAMESPACES, resource_version=version, timeout_seconds=1)
        assert all(event["type"] in ("ADDED", "MODIFIED", "BOOKMARK") for event in events)
    finally:
        api.close()

    assert proxy.targets and set(proxy.targets) == {control_plane.api_url.removeprefix("https://")}


def test_a_proxy_the_client_cannot_use_is_refused_at_start_in_one_line(
    control_plane: Any, monkeypatch: pytest.MonkeyPatch, no_proxy_settings: None
) -> None:
    # client-go v0.35.4 would dial a socks5 HTTPS_PROXY itself (transport/cache.go:129); the
    # package's urllib3 cannot without PySocks, and would fail at the first request instead.
    monkeypatch.setenv("HTTPS_PROXY", "socks5://user:password@127.0.0.1:1080")

    with pytest.raises(KubeconfigError) as refused:
        load_configuration(str(control_plane.kubeconfig))

    line = str(refused.value)
    assert "HTTPS_PROXY" in line and "SOCKS proxies need the PySocks package" in line, line
    assert "\n" not in line and "password" not in line, line


# -- the package, and what it costs --------------------------------------------------------------


def run_python(probe: str, **environment: str) -> Any:
    """What the Python ``probe`` prints as JSON, run in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, **environment},
    )
    return json.loads(done.stdout)


LOADED = (
    "print(json.dumps({\n"
    "    'models': [m for m in sys.modules if m.startswith('kubernetes.client.models.')],\n"
    "    'kubeconfig loader': 'kubernetes.config.kube_config' in sys.modules,\n"
    "    'dynamic client': 'kubernetes.dynamic' in sys.modules,\n"
    "}))\n"
)


def test_the_package_loads_when_polyccm_connects_and_never_its_generated_models(
    control_plane: Any,
) -> None:
    # The JSON client never builds models (ApiClient would deserialise into them), and the
    # commands that never connect (--help, rbac) import no part of the package.
    probe = (
        "import json, sys\n"
        "import polyccm.cli, polyccm.app.manager\n"
        "assert 'kubernetes' not in sys.modules\n"
        "from polyccm.kube.api import NAMESPACES, KubeApi, load_configuration\n"
        f"api = KubeApi(load_configuration({str(control_plane.kubeconfig)!r}), qps=0)\n"
        "api.list(NAMESPACES, limit=1)\n"
    ) + LOADED

    assert run_python(probe) == {
        "models": [],
        "kubeconfig loader": True,
        "dynamic client": False,
    }


def test_in_cluster_only_the_parts_of_the_package_it_needs_load_and_the_rest_still_works(
    control_plane: Any, tmp_path: Path
) -> None:
    (tmp_path / "ca.crt").write_bytes(Path(control_plane.ca_cert).read_bytes())
    (tmp_path / "token").write_text(control_plane.admin_token)
    host, port = control_plane.api_url.removeprefix("https://").rsplit(":", 1)
    probe = (
        "import json, sys\n"
        "from polyccm.kube.api import NAMESPACES, KubeApi\n"
        "from polyccm.kube.config import load_in_cluster\n"
        f"api = KubeApi(load_in_cluster(__import__('pathlib').Path({str(tmp_path)!r})), qps=0)\n"
        "api.list(NAMESPACES, limit=1)\n"
    ) + LOADED
    loaded = run_python(probe, KUBERNETES_SERVICE_HOST=host, KUBERNETES_SERVICE_PORT=port)
    assert loaded == {"models": [], "kubeconfig loader": False, "dynamic client": False}

    # Any other code in the process still finds the whole package.
    probe += (
        "import kubernetes, kubernetes.config\n"
        "from kubernetes import watch\n"
        "print(json.dumps([kubernetes.__version__, callable(kubernetes.config.load_kube_config),\n"
        "    callable(watch.Watch), callable(kubernetes.client.CoreV1Api)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
    )
    version, *usable = json.loads(done.stdout.splitlines()[-1])
    assert version.split(".")[0].isdigit() and usable == [True, True, True]
