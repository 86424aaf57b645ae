"""deploy/observability fits how polyccm serves /metrics: the PodMonitor selects the pods of
deploy/kustomize/base, scrapes their secure port by its name over HTTPS (hostNetwork, no
Service), and sends the token of an account that the real API server lets get /metrics from
a running polyccm (its delegated authorization), and no more. With prometheus-operator's
PodMonitor CRD installed (vendored: polyccm_testing/crds/SOURCE.md), the real API server accepts
the whole kustomization by server-side apply, the PodMonitor validated against the CRD's
schema."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm.kube.api import NAMESPACES, SECRETS, ApiError, KubeApi, Resource
from polyccm_testing.apply import apply
from polyccm_testing.crds import PODMONITORS
from polyccm_testing.crds import install as install_crd
from polyccm_testing.devenv.binaries import BinaryError, kustomize_path
from polyccm_testing.fake_main import COMMAND as FAKE_MAIN
from polyccm_testing.kubeobjects import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    SERVICE_ACCOUNTS,
    service_account_token,
    wait_for,
)
from polyccm_testing.scrape import samples, value
from polyccm_testing.secureport import secure_get
from polyccm_testing.workspace import ROOT

OBSERVABILITY = ROOT / "deploy" / "observability"
DEPLOYMENT = ROOT / "deploy" / "kustomize" / "base" / "deployment.yaml"


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _one(kind: str) -> dict[str, Any]:
    found = [
        d
        for path in sorted(OBSERVABILITY.glob("*.yaml"))
        for d in _documents(path)
        if d.get("kind") == kind
    ]
    assert len(found) == 1, kind
    return found[0]


def test_the_podmonitor_scrapes_the_secure_port_of_the_deployments_pods() -> None:
    monitor = _one("PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (deployment,) = _documents(DEPLOYMENT)
    template = deployment["spec"]["template"]
    # Host network and no Service: a PodMonitor, in the Deployment's namespace.
    assert template["spec"]["hostNetwork"] is True
    namespace = deployment["metadata"]["namespace"]
    assert monitor["metadata"]["namespace"] == namespace
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [namespace]
    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= template["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (container,) = template["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    flags = dict(a.split("=", 1) for a in container["args"] if "=" in a)
    secure_port = int(flags["--secure-port"])
    assert ports[endpoint["port"]] == secure_port  # the named port is the secure port
    assert (endpoint["scheme"], endpoint["path"]) == ("https", "/metrics")
    # The token comes from the reader account's Secret, in the PodMonitor's namespace.
    credentials = endpoint["authorization"]["credentials"]
    secret = _one("Secret")
    assert secret["metadata"]["name"] == credentials["name"] and credentials["key"] == "token"
    assert secret["metadata"]["namespace"] == namespace
    assert secret["type"] == "kubernetes.io/service-account-token"
    account = _one("ServiceAccount")["metadata"]
    owner = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    assert owner == account["name"]


def test_the_cluster_role_is_deploy_kustomizes_metrics_reader() -> None:
    # One grant under one name, whichever of the two kustomizations is applied.
    theirs = ROOT / "deploy" / "kustomize" / "metrics-reader" / "metrics-reader.yaml"
    (role,) = [d for d in _documents(theirs) if d["kind"] == "ClusterRole"]
    assert _one("ClusterRole") == role
    assert _one("ClusterRoleBinding")["roleRef"]["name"] == role["metadata"]["name"]


def test_the_dashboard_configmap_is_generated_from_the_dashboard() -> None:
    kustomization = yaml.safe_load((OBSERVABILITY / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == ["grafana-dashboard.json"]
    assert generator["options"]["labels"] == {"grafana_dashboard": "1"}
    for resource in kustomization["resources"]:
        assert (OBSERVABILITY / resource).is_file()
    board = json.loads((OBSERVABILITY / "grafana-dashboard.json").read_text())
    assert board["uid"] == "polyccm" and board["panels"]


_RESOURCES = {
    "ServiceAccount": SERVICE_ACCOUNTS,
    "Secret": SECRETS,
    "ClusterRole": CLUSTER_ROLES,
    "ClusterRoleBinding": CLUSTER_ROLE_BINDINGS,
}


@pytest.fixture
def reader(kube_api: KubeApi) -> Iterator[dict[str, Any]]:
    """metrics-reader.yaml created on the real API server as written, and deleted after."""
    made: list[tuple[Resource, str, str | None]] = []
    try:
        for document in _documents(OBSERVABILITY / "metrics-reader.yaml"):
            resource = _RESOURCES[document["kind"]]
            namespace = document["metadata"].get("namespace")
            try:
                kube_api.create(resource, document, namespace)
            except ApiError as error:
                if not error.conflict:  # the shared ClusterRole, made by another test
                    raise
                continue
            made.append((resource, document["metadata"]["name"], namespace))
        yield _one("ServiceAccount")["metadata"]
    finally:
        for resource, name, namespace in reversed(made):
            with contextlib.suppress(ApiError):
                kube_api.delete(resource, name, namespace)


def _may(api: KubeApi, user: str, spec: dict[str, Any]) -> bool:
    """A SubjectAccessReview: whether the API server lets ``user`` do what ``spec`` says."""
    answer = api.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, **spec},
        },
    )
    return bool(answer.get("status", {}).get("allowed"))


def test_the_reader_account_may_scrape_a_running_polyccm_and_do_nothing_else(
    kube_api: KubeApi, control_plane: Any, reader: dict[str, Any], tmp_path: Path
) -> None:
    user = f"system:serviceaccount:{reader['namespace']}:{reader['name']}"
    metrics = {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    wait_for(lambda: _may(kube_api, user, metrics), 10, "the binding to reach the authorizer")
    for other in ({"path": "/debug/pprof/", "verb": "get"}, {"path": "/metrics", "verb": "post"}):
        assert not _may(kube_api, user, {"nonResourceAttributes": other})
    for other in ({"resource": "secrets", "verb": "list"}, {"resource": "nodes", "verb": "get"}):
        assert not _may(kube_api, user, {"resourceAttributes": other})
    token = service_account_token(kube_api, reader["namespace"], reader["name"])
    from polyccm_testing.devenv.processes import free_ports

    (port,) = free_ports(1)
    log = tmp_path / "polyccm.log"
    with log.open("w") as output:
        # Upstream's default open paths (/healthz, /readyz, /livez): /metrics is reviewed.
        process = subprocess.Popen(
            [*FAKE_MAIN, f"--kubeconfig={control_plane.kubeconfig}", "--leader-elect=false",
             "--configure-cloud-routes=false", "--bind-address=127.0.0.1", f"--secure-port={port}"],
            stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: secure_get(port, "/healthz").status == 200, 60, f"/healthz ({log})")
        assert secure_get(port, "/metrics").status == 403  # anonymous: forbidden
        reply = secure_get(port, "/metrics", token=token)
        assert reply.status == 200, reply.body
        assert value(samples(reply.body), "polyccm_build_info") == 1
    finally:
        process.terminate()
        process.wait(timeout=30)


# -- deploy/observability applied to the real API server with prometheus-operator's CRD -------


@pytest.fixture(scope="module")
def podmonitor_crd(kube_api: KubeApi) -> dict[str, Any]:
    """prometheus-operator's PodMonitor CRD (vendored: polyccm_testing/crds/SOURCE.md) installed,
    so the API server validates PodMonitors against its schema."""
    return install_crd(kube_api, PODMONITORS)


def _kustomize_build(directory: Path) -> list[dict[str, Any]]:
    try:
        kustomize = kustomize_path()
    except BinaryError as error:
        pytest.fail(f"no kustomize: {error}", pytrace=False)
    built = subprocess.run(
        [str(kustomize), "build", str(directory)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return [d for d in yaml.safe_load_all(built.stdout) if d]


def _ensure_namespace(api: KubeApi, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    with contextlib.suppress(ApiError):  # there already: a conflict
        api.create(NAMESPACES, body)


def test_the_observability_kustomization_passes_server_side_apply_with_the_podmonitor_crd(
    kube_api: KubeApi, podmonitor_crd: dict[str, Any]
) -> None:
    """`kubectl apply --server-side -k deploy/observability` on a cluster with
    prometheus-operator's CRDs: every object, the PodMonitor too, passes a dry run with strict
    field validation, and the PodMonitor's endpoint is kept whole (no field unknown to the
    schema, none pruned)."""
    objects = _kustomize_build(OBSERVABILITY)
    assert {o["kind"] for o in objects} >= {"PodMonitor", "ConfigMap", "Secret"}
    _ensure_namespace(kube_api, "kube-system")
    for obj in objects:
        try:
            answer = apply(kube_api, obj, dry_run=True)
        except ApiError as error:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {error}", pytrace=False)
        assert (answer["kind"], answer["metadata"]["name"]) == (
            obj["kind"],
            obj["metadata"]["name"],
        )
        if obj["kind"] == "PodMonitor":
            assert answer["spec"] == obj["spec"]
            served = podmonitor_crd["spec"]["versions"]
            assert [v["name"] for v in served if v["served"]] == ["v1"]


@pytest.mark.parametrize(
    ("path", "wrong", "complaint"),
    [
        # A Prometheus duration: "30 seconds" would be rejected by the operator at reconcile time.
        (("podMetricsEndpoints", 0, "interval"), "30 seconds", "interval"),
        # A misspelt field, which the operator would never read ("field not declared in schema").
        (("podMetricsEndpoints", 0, "tlsConfig", "insecureSkipVerfy"), True, "insecureSkipVerfy"),
        (("podMetricsEndpoints", 0, "scheme"), "htps", "scheme"),
    ],
)
def test_the_crd_schema_refuses_a_podmonitor_prometheus_operator_could_not_use(
    kube_api: KubeApi,
    podmonitor_crd: dict[str, Any],
    path: tuple[str | int, ...],
    wrong: Any,
    complaint: str,
) -> None:
    """The dry run above is a real check: the same PodMonitor with one mistake in it is refused
    by the API server, in one message naming the field."""
    monitor = json.loads(json.dumps(_one("PodMonitor")))
    where: Any = monitor["spec"]
    for step in path[:-1]:
        where = where[step]
    where[path[-1]] = wrong
    _ensure_namespace(kube_api, "kube-system")
    with pytest.raises(ApiError) as refused:
        apply(kube_api, monitor, dry_run=True)
    assert complaint in str(refused.value)
