"""The whole polyccm process's secure port against the real API server: HTTPS always, bearer
tokens reviewed with TokenReview and paths with SubjectAccessReview (upstream's delegated
authentication and authorization), answers cached, failures closed, tokens never logged."""

from __future__ import annotations

import json
import secrets
import signal
import ssl
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from polyccm.kube.api import NAMESPACES, ApiError, KubeApi
from polyccm_testing.devenv.controlplane import ControlPlane
from polyccm_testing.devenv.pki import Pki, client_certificate, generate
from polyccm_testing.devenv.processes import free_ports
from polyccm_testing.fake_main import COMMAND as FAKE_MAIN
from polyccm_testing.kubeobjects import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    bind_cluster_role,
    make_cluster_role,
    make_service_account,
    service_account_kubeconfig,
    service_account_token,
    wait_for,
)
from polyccm_testing.secureport import Reply, client_context, secure_get

AUTH_DELEGATOR = "system:auth-delegator"


@dataclass
class Polyccm:
    """A running polyccm process and its secure port."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def get(self, path: str, token: str | None = None, cafile: Path | None = None) -> Reply:
        return secure_get(self.port, path, token=token, cafile=cafile)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_polyccm(control_plane: ControlPlane, directory: Path, *args: str) -> Polyccm:
    """Start polyccm (no leader election, no cloud routes) and wait until /healthz answers."""
    (port,) = free_ports(1)
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / f"polyccm-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                *FAKE_MAIN,
                f"--kubeconfig={control_plane.kubeconfig}",
                "--leader-elect=false",
                "--configure-cloud-routes=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                *args,
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    running = Polyccm(process, port, log)
    try:
        wait_for(
            lambda: running.get("/healthz").status == 200 or process.poll() is not None,
            60,
            "/healthz over HTTPS",
        )
        assert process.poll() is None, running.output()
    except BaseException:
        running.stop()
        raise
    return running


@dataclass(frozen=True)
class Accounts:
    """ServiceAccounts in ``namespace``: ``reviewer`` may make reviews (system:auth-delegator),
    ``reader`` may get /metrics, ``stranger`` may do nothing."""

    namespace: str

    @property
    def reader_role(self) -> str:
        """The ClusterRole that grants get on /metrics."""
        return f"{self.namespace}-metrics-reader"

    def token(self, kube_api: KubeApi, name: str) -> str:
        return service_account_token(kube_api, self.namespace, name)


@pytest.fixture(scope="module")
def accounts(kube_api: KubeApi) -> Iterator[Accounts]:
    namespace = f"secure-port-{secrets.token_hex(3)}"
    kube_api.create(NAMESPACES, {"metadata": {"name": namespace}})
    accounts = Accounts(namespace)
    reader_role = accounts.reader_role
    make_cluster_role(kube_api, reader_role, [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    bindings = [
        make_service_account(kube_api, namespace, "reviewer", cluster_role=AUTH_DELEGATOR),
        make_service_account(kube_api, namespace, "reader", cluster_role=reader_role),
        make_service_account(kube_api, namespace, "stranger"),
    ]
    wait_for(
        lambda: _may_get_metrics(kube_api, f"system:serviceaccount:{namespace}:reader"),
        10,
        "the authorizer to see the reader's ClusterRole",
    )
    yield accounts
    for resource, name in [
        *((CLUSTER_ROLE_BINDINGS, binding) for binding in bindings if binding),
        (CLUSTER_ROLES, reader_role),
        (NAMESPACES, namespace),
    ]:
        try:
            kube_api.delete(resource, name)
        except ApiError as error:
            if not error.not_found:
                raise


def _may_get_metrics(kube_api: KubeApi, user: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "nonResourceAttributes": {"path": "/metrics", "verb": "get"}},
    }
    answer = kube_api.request(
        "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review
    )
    return bool(answer["status"].get("allowed"))


@pytest.fixture(scope="module")
def polyccm(
    control_plane: ControlPlane,
    kube_api: KubeApi,
    accounts: Accounts,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Polyccm]:
    """polyccm at --v=10 whose reviews go through the ``reviewer`` account (the flags
    --authentication-kubeconfig and --authorization-kubeconfig), caching for five minutes."""
    directory = tmp_path_factory.mktemp("secure-port")
    reviewer = service_account_kubeconfig(
        kube_api, control_plane, directory, namespace=accounts.namespace, name="reviewer"
    )
    running = start_polyccm(
        control_plane,
        directory,
        f"--authentication-kubeconfig={reviewer}",
        f"--authorization-kubeconfig={reviewer}",
        "--authentication-token-webhook-cache-ttl=5m",
        "--authorization-webhook-cache-authorized-ttl=5m",
        "--authorization-webhook-cache-unauthorized-ttl=5m",
        "--v=10",
    )
    yield running
    running.stop()


def _status(reply: Reply) -> dict[str, Any]:
    assert reply.content_type == "application/json", reply
    body = json.loads(reply.body)
    assert isinstance(body, dict) and body["kind"] == "Status"
    return body


def test_probes_need_no_token(polyccm: Polyccm) -> None:
    reply = polyccm.get("/healthz")
    assert (reply.status, reply.body) == (200, "ok")
    assert polyccm.get("/livez").status == 200
    wait_for(lambda: polyccm.get("/readyz").status == 200, 30, "/readyz")
    # Only the listed paths are open: a single check's path is reviewed like any other.
    assert polyccm.get("/healthz/ping").status == 403


def test_an_anonymous_scrape_is_forbidden(polyccm: Polyccm) -> None:
    reply = polyccm.get("/metrics")
    assert reply.status == 403
    status = _status(reply)
    assert status["message"] == 'forbidden: User "system:anonymous" cannot get path "/metrics"'
    assert status["reason"] == "Forbidden" and status["code"] == 403


def test_a_token_the_api_server_rejects_is_401_even_on_an_open_path(polyccm: Polyccm) -> None:
    for path in ("/metrics", "/healthz"):  # authentication comes first, as upstream
        reply = polyccm.get(path, token="not-a-token-of-this-cluster")
        assert reply.status == 401, path
        assert _status(reply)["reason"] == "Unauthorized"


def test_an_account_granted_get_on_metrics_scrapes_them(
    polyccm: Polyccm, kube_api: KubeApi, accounts: Accounts
) -> None:
    reply = polyccm.get("/metrics", token=accounts.token(kube_api, "reader"))
    assert reply.status == 200
    assert reply.content_type.startswith("text/plain")
    assert "\nservice_controller_loadbalancer_sync_total" in reply.body


def test_an_account_without_the_grant_is_forbidden(
    polyccm: Polyccm, kube_api: KubeApi, accounts: Accounts
) -> None:
    reply = polyccm.get("/metrics", token=accounts.token(kube_api, "stranger"))
    assert reply.status == 403
    user = f"system:serviceaccount:{accounts.namespace}:stranger"
    assert _status(reply)["message"] == f'forbidden: User "{user}" cannot get path "/metrics"'


def _apiserver_requests(control_plane: ControlPlane, kube_api: KubeApi) -> Callable[[str], int]:
    """Reads how many requests for a resource the API server has served, from its metrics."""
    token = kube_api.configuration.get_api_key_with_prefix("BearerToken", alias="authorization")

    def count(resource: str) -> int:
        request = urllib.request.Request(
            control_plane.api_url + "/metrics", headers={"Authorization": token}
        )
        with urllib.request.urlopen(
            request, timeout=10, context=control_plane.ssl_context()
        ) as answer:
            text = answer.read().decode()
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in text.splitlines()
            if line.startswith("apiserver_request_total{") and f'resource="{resource}"' in line
        )

    return count


def test_repeated_scrapes_within_the_ttl_are_reviewed_once(
    polyccm: Polyccm, control_plane: ControlPlane, kube_api: KubeApi, accounts: Accounts
) -> None:
    # Two accounts of their own, so that nothing of theirs is cached yet: one may scrape.
    suffix = secrets.token_hex(3)
    scraper, outsider = f"scraper-{suffix}", f"outsider-{suffix}"
    binding = make_service_account(
        kube_api, accounts.namespace, scraper, cluster_role=accounts.reader_role
    )
    make_service_account(kube_api, accounts.namespace, outsider)
    try:
        user = f"system:serviceaccount:{accounts.namespace}:{scraper}"
        wait_for(lambda: _may_get_metrics(kube_api, user), 10, "the scraper's binding")
        tokens = accounts.token(kube_api, scraper), accounts.token(kube_api, outsider)
        count = _apiserver_requests(control_plane, kube_api)
        before = count("tokenreviews"), count("subjectaccessreviews")
        assert [polyccm.get("/metrics", token=tokens[0]).status for _ in range(3)] == [200] * 3
        assert [polyccm.get("/metrics", token=tokens[1]).status for _ in range(3)] == [403] * 3
        # One TokenReview per token, one SubjectAccessReview per user: allowed and denied
        # answers are both reused.
        wait_for(lambda: count("subjectaccessreviews") - before[1] >= 2, 10, "the reviews")
        assert count("tokenreviews") - before[0] == 2
        assert count("subjectaccessreviews") - before[1] == 2
    finally:
        kube_api.delete(CLUSTER_ROLE_BINDINGS, binding)


def test_tokens_never_reach_the_log(
    polyccm: Polyccm, kube_api: KubeApi, accounts: Accounts
) -> None:
    tokens = [accounts.token(kube_api, "reader"), "garbage-token-never-to-be-logged"]
    for token in tokens:
        polyccm.get("/metrics", token=token)
    output = polyccm.output()
    assert "GET /metrics" in output, "--v=10 logs each request"
    for token in tokens:
        assert token not in output
        assert token[-20:] not in output


def test_always_allow_paths_open_metrics_and_a_cert_dir_certificate_survives_a_restart(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    cert_dir = tmp_path / "certs"
    args = (f"--cert-dir={cert_dir}", "--authorization-always-allow-paths=/metrics,/healthz*")
    first = start_polyccm(control_plane, tmp_path, *args)
    try:
        assert first.get("/metrics").status == 200
        assert first.get("/healthz/ping").status == 200, "a trailing * opens a prefix"
        served = first.get("/healthz").certificate
    finally:
        first.stop()
    serving, ca = x509.load_pem_x509_certificates(
        (cert_dir / "cloud-controller-manager.crt").read_bytes()
    )
    assert served == serving.public_bytes(serialization.Encoding.DER)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))

    second = start_polyccm(control_plane, tmp_path, *args)
    try:
        reply = second.get("/metrics", cafile=ca_file)  # verified against the written CA
        assert reply.status == 200
        assert reply.certificate == served, "the restart serves the same certificate"
    finally:
        second.stop()


def test_the_given_certificate_is_served(control_plane: ControlPlane, tmp_path: Path) -> None:
    pki = generate(tmp_path / "pki")
    running = start_polyccm(
        control_plane,
        tmp_path,
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
    )
    try:
        reply = running.get("/healthz", cafile=pki.ca_cert)  # verified against its CA
        assert reply.status == 200
        assert reply.certificate == ssl.PEM_cert_to_DER_cert(pki.serving_cert.read_text())
        with pytest.raises(OSError):  # and no plain HTTP beside it
            urllib.request.urlopen(f"http://127.0.0.1:{running.port}/healthz", timeout=5)
    finally:
        running.stop()
    assert running.process.returncode == 0


def test_reviews_that_cannot_be_made_fail_closed_and_are_logged_once(
    control_plane: ControlPlane, kube_api: KubeApi, accounts: Accounts, tmp_path: Path
) -> None:
    # Token reviews go to an API server that is not there; access reviews to one that refuses
    # them (an account without system:auth-delegator).
    unreachable = tmp_path / "unreachable.kubeconfig"
    unreachable.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: do-not-log-me}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    stranger = service_account_kubeconfig(
        kube_api, control_plane, tmp_path, namespace=accounts.namespace, name="stranger"
    )
    running = start_polyccm(
        control_plane,
        tmp_path,
        f"--authentication-kubeconfig={unreachable}",
        f"--authorization-kubeconfig={stranger}",
    )
    token = accounts.token(kube_api, "reader")
    try:
        with ThreadPoolExecutor(4) as pool:
            anonymous = list(pool.map(lambda _: running.get("/metrics"), range(2)))
            with_token = list(pool.map(lambda _: running.get("/metrics", token=token), range(2)))
        assert running.get("/healthz").status == 200, "open paths need no review"
    finally:
        running.stop()
    assert [reply.status for reply in anonymous] == [500, 500]
    assert [reply.status for reply in with_token] == [401, 401]
    output = running.output()
    assert output.count("TokenReview failed") == 1, output
    assert output.count("SubjectAccessReview failed") == 1, output
    assert "system:auth-delegator" in output, "the log says what the account lacks"
    assert token not in output and "do-not-log-me" not in output
    assert "Traceback" not in output


@dataclass(frozen=True)
class ClientCerts:
    """polyccm started with ``--client-ca-file`` (and ``--tls-min-version=VersionTLS13``), the
    CA it trusts, another it does not, and a group granted get on /metrics."""

    polyccm: Polyccm
    trusted: Pki
    untrusted: Pki
    readers: str
    directory: Path

    def certificate(self, user: str, *groups: str, **options: Any) -> tuple[Path, Path]:
        return client_certificate(
            options.pop("ca", self.trusted), self.directory, user=user, groups=groups, **options
        )

    def get(self, certificate: tuple[Path, Path] | None, **options: Any) -> Reply:
        context = client_context(client_cert=certificate, **options)
        return secure_get(self.polyccm.port, "/metrics", context=context)


@pytest.fixture(scope="module")
def client_certs(
    control_plane: ControlPlane,
    kube_api: KubeApi,
    accounts: Accounts,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ClientCerts]:
    directory = tmp_path_factory.mktemp("client-certs")
    trusted, untrusted = generate(directory / "trusted"), generate(directory / "untrusted")
    readers = f"{accounts.namespace}-cert-readers"
    group = {"kind": "Group", "name": readers, "apiGroup": "rbac.authorization.k8s.io"}
    bind_cluster_role(kube_api, readers, accounts.reader_role, group)
    running = start_polyccm(
        control_plane,
        directory,
        f"--client-ca-file={trusted.ca_cert}",
        "--tls-min-version=VersionTLS13",
    )
    try:
        yield ClientCerts(running, trusted, untrusted, readers, directory)
    finally:
        running.stop()
        kube_api.delete(CLUSTER_ROLE_BINDINGS, readers)


def test_a_client_certificate_names_the_user_and_its_organizations_the_groups(
    client_certs: ClientCerts, kube_api: KubeApi
) -> None:
    # apiserver v0.35.4 pkg/authentication/request/x509/x509.go:279-302 (CommonNameUserConversion:
    # CN the user, O the groups), authorized as any user by a SubjectAccessReview.
    reader = client_certs.certificate("cert-reader", client_certs.readers)
    wait_for(lambda: client_certs.get(reader).status == 200, 10, "the group's binding")
    reply = client_certs.get(client_certs.certificate("cert-stranger", "some-group"))
    assert reply.status == 403
    message = _status(reply)["message"]
    assert message == 'forbidden: User "cert-stranger" cannot get path "/metrics"'
    # upstream's always-allowed group needs no review
    assert client_certs.get(client_certs.certificate("admin", "system:masters")).status == 200
    # without a certificate: anonymous, as before
    assert client_certs.get(None).status == 403


def test_a_client_certificate_that_does_not_verify_is_refused(client_certs: ClientCerts) -> None:
    other_ca = client_certs.certificate(
        "cert-reader", client_certs.readers, ca=client_certs.untrusted
    )
    assert client_certs.get(other_ca).status == 0, "the handshake fails (upstream: 401)"
    server_only = client_certs.certificate("cert-reader", client_certs.readers, client_auth=False)
    assert client_certs.get(server_only).status == 0, "not a client certificate"
    # x509.go:325-327: two UIDs are an authentication error: 401.
    two_uids = client_certs.certificate("cert-reader", client_certs.readers, uids=("a", "b"))
    reply = client_certs.get(two_uids)
    assert reply.status == 401 and _status(reply)["reason"] == "Unauthorized"


def test_tls_settings_reach_the_secure_port(client_certs: ClientCerts) -> None:
    assert client_certs.get(None, maximum_version=ssl.TLSVersion.TLSv1_2).status == 0
    assert client_certs.get(None).tls_version == "TLSv1.3"


def test_without_client_ca_file_a_certificate_is_not_looked_at(
    polyccm: Polyccm, tmp_path: Path
) -> None:
    pki = generate(tmp_path / "pki")
    masters = client_certificate(pki, tmp_path, user="admin", groups=("system:masters",))
    reply = secure_get(polyccm.port, "/metrics", context=client_context(client_cert=masters))
    assert reply.status == 403, "anonymous"
