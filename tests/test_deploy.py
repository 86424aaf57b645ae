"""deploy/: the per-provider image recipe and the manifests.

No Docker engine runs here, so the Dockerfile is checked against the workspace (providers, paths,
entrypoints, the locked dependency set of each image) and its build-stage commands are run on a
copy of the build context. The manifests go to the real kube-apiserver: every object passes a
server-side dry run with strict field validation, each Deployment's pod passes pod admission, and
rbac.yaml is applied for real and a polyccm process running on the ServiceAccount's token alone
does its job: every request it sends is recorded with the API server's answer, none is refused,
and every permission the roles grant is used, while requests outside the role are refused.

Run as a program (``python tests/test_deploy.py --provider=fake ARGS``) this file is that
recorded polyccm process (see :func:`recorded_polyccm`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from polyccm.app.options import LeaderElection
from polyccm.cli import parse
from polyccm.kube.api import EVENTS, LEASES, NODES, SECRETS, SERVICES, ApiError, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT
from polyccm.plugins import plugin_manager
from polyccm_testing.kubeobjects import make_node, make_service, reasons_for, wait_for
from polyccm_testing.workspace import ROOT, workspace_providers

IMAGES = ROOT / "deploy" / "images"
MANIFESTS = ROOT / "deploy" / "manifests"
DOCKERFILE = IMAGES / "Dockerfile"
DOCKERIGNORE = IMAGES / "Dockerfile.dockerignore"
KUBE_SYSTEM = "kube-system"
SERVICE_ACCOUNT = "cloud-controller-manager"
SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
#: Providers whose controllers include routes, so their Deployment passes --cluster-cidr.
ROUTE_PROVIDERS = {"aws", "gce"}
PROVIDERS = workspace_providers()
#: How each provider gets its credentials in its Deployment: env var -> (Secret, key).
SECRET_ENV = {
    "aws": {},
    "gce": {},
    "digitalocean": {"DO_ACCESS_TOKEN": ("digitalocean", "access-token")},
    "packet": {
        "METAL_API_KEY": ("metal-cloud-config", "api-key"),
        "METAL_PROJECT_ID": ("metal-cloud-config", "project-id"),
    },
}


# -- the manifests ---------------------------------------------------------------------------


def load(name: str) -> list[dict[str, Any]]:
    with (MANIFESTS / name).open() as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc]


def manifest_files() -> list[str]:
    return sorted(p.name for p in MANIFESTS.glob("*.yaml"))


def deployment(provider: str) -> dict[str, Any]:
    (only,) = load(f"deployment-{provider}.yaml")
    assert only["kind"] == "Deployment"
    return only


def container(provider: str) -> dict[str, Any]:
    (only,) = deployment(provider)["spec"]["template"]["spec"]["containers"]
    return only


def test_manifests_are_rbac_and_one_deployment_per_provider() -> None:
    assert manifest_files() == sorted(["rbac.yaml", *(f"deployment-{p}.yaml" for p in PROVIDERS)])


_DISCOVERY: dict[str, dict[str, tuple[str, bool]]] = {}


def collection_path(api: KubeApi, obj: dict[str, Any]) -> str:
    """The collection URL of ``obj``'s kind, found through API discovery."""
    group_version = obj["apiVersion"]
    if group_version not in _DISCOVERY:
        prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        listing = api.request("GET", prefix)
        _DISCOVERY[group_version] = {
            r["kind"]: (r["name"], r["namespaced"])
            for r in listing["resources"]
            if "/" not in r["name"]
        }
    plural, namespaced = _DISCOVERY[group_version][obj["kind"]]
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    if namespaced:
        return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{plural}"
    return f"{prefix}/{plural}"


def ensure_namespace(api: KubeApi, name: str) -> None:
    try:
        api.request("GET", f"/api/v1/namespaces/{name}")
    except ApiError as error:
        if not error.not_found:
            raise
        api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})


DRY_RUN = {"dryRun": "All", "fieldValidation": "Strict"}


def exists(api: KubeApi, url: str) -> bool:
    try:
        api.request("GET", url)
    except ApiError as error:
        if error.not_found:
            return False
        raise
    return True


@pytest.mark.parametrize("name", manifest_files())
def test_manifest_passes_server_side_dry_run(kube_api: KubeApi, name: str) -> None:
    for obj in load(name):
        namespace = obj["metadata"].get("namespace")
        if namespace:
            assert namespace == KUBE_SYSTEM
            ensure_namespace(kube_api, namespace)
        path = collection_path(kube_api, obj)
        url = f"{path}/{obj['metadata']['name']}"
        what = f"{name}: {obj['kind']} {obj['metadata']['name']}"
        existed = exists(kube_api, url)
        try:
            if existed:
                # Already there (a dev control plane someone applied this to): as an update.
                answer = kube_api.request(
                    "PATCH",
                    url,
                    query={**DRY_RUN, "fieldManager": "polyccm-tests", "force": True},
                    body=obj,
                    content_type="application/apply-patch+yaml",
                )
            else:
                answer = kube_api.request("POST", path, query=DRY_RUN, body=obj)
        except ApiError as error:
            pytest.fail(f"{what}: {error}")
        assert answer["kind"] == obj["kind"]
        assert answer["metadata"]["name"] == obj["metadata"]["name"]
        if not existed:
            assert not exists(kube_api, url), f"{what}: stored by a dry run"


def remove(api: KubeApi, objects: list[dict[str, Any]]) -> None:
    for obj in reversed(objects):
        try:
            api.request("DELETE", f"{collection_path(api, obj)}/{obj['metadata']['name']}")
        except ApiError as error:
            if not error.not_found:
                raise


def delete_lease(api: KubeApi) -> None:
    try:
        api.delete(LEASES, LeaderElection().resource_name, KUBE_SYSTEM)
    except ApiError as error:
        if not error.not_found:
            raise


@pytest.fixture
def applied_rbac(kube_api: KubeApi) -> Iterator[list[dict[str, Any]]]:
    """rbac.yaml created for real (cluster-scoped objects too), and removed after the test."""
    objects = load("rbac.yaml")
    ensure_namespace(kube_api, KUBE_SYSTEM)
    remove(kube_api, objects)  # anything an interrupted run left behind
    delete_lease(kube_api)
    try:
        for obj in objects:
            kube_api.request("POST", collection_path(kube_api, obj), body=obj)
        yield objects
    finally:
        remove(kube_api, objects)
        delete_lease(kube_api)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_deployment_pod_is_admitted_in_kube_system(
    kube_api: KubeApi, applied_rbac: list[dict[str, Any]], provider: str
) -> None:
    """The pod a Deployment makes passes admission: its ServiceAccount exists (rbac.yaml) and
    gets a token volume, its priority class resolves, and the pod spec validates strictly."""
    template = deployment(provider)["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template["metadata"],
            "generateName": "cloud-controller-manager-",
            "namespace": KUBE_SYSTEM,
        },
        "spec": template["spec"],
    }
    answer = kube_api.request(
        "POST", f"/api/v1/namespaces/{KUBE_SYSTEM}/pods", query=DRY_RUN, body=pod
    )
    spec = answer["spec"]
    assert spec["serviceAccountName"] == SERVICE_ACCOUNT
    assert spec["priority"] == 2_000_000_000, "system-cluster-critical"
    projected = [v for v in spec["volumes"] if v.get("name", "").startswith("kube-api-access-")]
    assert projected, "the ServiceAccount admission mounted no API token"


def flag_values(args: list[str]) -> dict[str, str]:
    values = {}
    for arg in args:
        assert arg.startswith("--") and "=" in arg, f"{arg!r}: use --flag=value"
        key, _, value = arg.partition("=")
        values[key] = value
    return values


@pytest.mark.parametrize("provider", PROVIDERS)
def test_deployment_runs_its_provider_image_with_upstream_flags(
    provider: str, tmp_path: Path
) -> None:
    spec = deployment(provider)["spec"]
    pod = spec["template"]["spec"]
    main = container(provider)
    assert deployment(provider)["metadata"]["namespace"] == KUBE_SYSTEM
    assert spec["replicas"] == 2
    assert main["image"] == f"ghcr.io/polyccm/polyccm-{provider}:0.1.0"
    assert "command" not in main, "the image's entrypoint chooses the provider"
    flags = flag_values(main["args"])
    assert flags["--leader-elect"] == "true"
    assert flags["--bind-address"] == "0.0.0.0"
    assert flags["--secure-port"] == "10258"
    assert ("--cluster-cidr" in flags) == (provider in ROUTE_PROVIDERS)

    # The args as polyccm reads them, with the mounted cloud config in place.
    mounts = {m["mountPath"]: m for m in main.get("volumeMounts", [])}
    args = list(main["args"])
    if "--cloud-config" in flags:
        mount = mounts[flags["--cloud-config"]]
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        assert volume["configMap"]["name"] == f"{provider}-cloud-config"
        assert mount["subPath"] == "cloud.conf" and mount["readOnly"] is True
        local = tmp_path / "cloud.conf"
        example = MANIFESTS / "examples" / f"{provider}-cloud.conf"
        local.write_text(example.read_text() if example.exists() else "")
        args = [f"--cloud-config={local}" if a.startswith("--cloud-config=") else a for a in args]
    options, _ = parse([f"--provider={provider}", *args], plugin_manager())
    assert options.provider == provider
    assert options.leader_election.enabled
    assert options.secure_port == 10258 and options.bind_address == "0.0.0.0"
    assert options.configure_cloud_routes == (provider in ROUTE_PROVIDERS)

    # Probes on the health port, plain HTTP.
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = main[probe]["httpGet"]
        assert (get["path"], get["port"], get.get("scheme", "HTTP")) == (path, 10258, "HTTP")
    assert [p["containerPort"] for p in main["ports"]] == [10258]

    # Scheduling on control-plane nodes that are not initialised yet.
    tolerated = {t["key"] for t in pod["tolerations"]}
    assert {
        UNINITIALIZED_TAINT,
        "node-role.kubernetes.io/control-plane",
        "node-role.kubernetes.io/master",
    } <= tolerated
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert set(main["resources"]["requests"]) == {"cpu", "memory"}
    assert set(main["resources"]["limits"]) >= {"memory"}

    # Non-root (the image's user), read-only root filesystem, no privileges.
    (image_user,) = re.findall(r"^USER (\S+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}" == (
        image_user
    )
    security = main["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]

    # Credentials: from a Secret where the provider takes a token, none in the manifest itself.
    env = {e["name"]: e for e in main.get("env", [])}
    assert set(env) == set(SECRET_ENV[provider])
    for name, (secret, key) in SECRET_ENV[provider].items():
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == (secret, key)
        assert "value" not in env[name]


def test_example_aws_cloud_config_is_valid() -> None:
    from polyccm_aws.config import load_cloud_config

    config = load_cloud_config(MANIFESTS / "examples" / "aws-cloud.conf")
    assert config.region == "us-east-1"


def test_rbac_bindings_give_both_roles_to_the_service_account() -> None:
    objects = load("rbac.yaml")
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    assert (account["metadata"]["name"], account["metadata"]["namespace"]) == (
        SERVICE_ACCOUNT,
        KUBE_SYSTEM,
    )
    for role_kind, binding_kind in (("ClusterRole", "ClusterRoleBinding"), ("Role", "RoleBinding")):
        (role,) = [o for o in objects if o["kind"] == role_kind]
        (binding,) = [o for o in objects if o["kind"] == binding_kind]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": role["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": KUBE_SYSTEM}
        ]


def test_lease_role_matches_the_default_leader_election_flags() -> None:
    election = LeaderElection()
    roles = [o for o in load("rbac.yaml") if o["kind"] == "Role"]
    (role,) = roles
    assert role["metadata"]["namespace"] == election.resource_namespace
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert [r["resourceNames"] for r in named] == [[election.resource_name]]
    for deploy in PROVIDERS:
        flags = flag_values(container(deploy)["args"])
        assert "--leader-elect-resource-name" not in flags
        assert "--leader-elect-resource-namespace" not in flags


# -- RBAC: the ServiceAccount's permissions are enough, and no more --------------------------
#
# What polyccm needs is not written down here: a polyccm process runs on the ServiceAccount's
# token through a scenario that takes every code path that talks to the API server (node
# initialisation with a write conflict, lifecycle deletion, routes, a load balancer whose
# finalizer write conflicts, repeated events, the Lease), and every request it sends is
# recorded with the API server's answer. The API server's authorizer has then judged each one.

#: The recorded process's environment: the file that gets one JSON line per API request, and
#: the JSON scenario of its fake cloud (see :func:`recorded_polyccm`).
RECORD_VARIABLE = "POLYCCM_TEST_API_RECORD"
SCENARIO_VARIABLE = "POLYCCM_TEST_SCENARIO"
#: How the recorded process is started: this file run as a program.
RECORDED_POLYCCM = (sys.executable, str(Path(__file__).resolve()), "--provider=fake")


def hold_once(operation: str, subject: str, gates: Path) -> Callable[[tuple[str, ...]], None]:
    """A fake-cloud observer: the first call of ``operation`` about ``subject`` writes
    ``<operation>.held`` in ``gates`` and waits (60 s at most) for ``<operation>.release``."""
    held = threading.Event()

    def observe(subjects: tuple[str, ...]) -> None:
        if subject not in subjects or held.is_set():
            return
        held.set()
        (gates / f"{operation}.held").touch()
        deadline = time.monotonic() + 60
        while not (gates / f"{operation}.release").exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    return observe


def recorded_polyccm(argv: list[str]) -> int:
    """``python tests/test_deploy.py --provider=fake ARGS``: the ``polyccm`` command with the
    fake cloud, as ``polyccm_testing.fake_main`` runs it, plus

    * every HTTP request the process sends, with the status of its answer, appended to the file
      named by ``$POLYCCM_TEST_API_RECORD``. It is recorded in urllib3, under every client of the
      process, so no request is missed whichever client sends it;
    * a fake cloud arranged by the JSON file named by ``$POLYCCM_TEST_SCENARIO``:
      ``{"instances": [name, ...], "hold": {operation: subject}, "gates": directory}``, where
      each held operation waits at its first call about its subject (see :func:`hold_once`) so
      that the test can change the object meanwhile."""
    import urllib3.connectionpool
    from polyccm.cli import main
    from polyccm.cloud import CloudProvider
    from polyccm.hookspecs import hookimpl
    from polyccm.plugins import ProviderSettings, plugin_manager
    from polyccm_testing.fake import FakeCloud
    from polyccm_testing.fake_main import FakeCloudPlugin

    record = Path(os.environ[RECORD_VARIABLE])
    scenario = json.loads(Path(os.environ[SCENARIO_VARIABLE]).read_text())
    lock = threading.Lock()
    send = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def recording_urlopen(
        pool: urllib3.connectionpool.HTTPConnectionPool,
        method: str,
        url: str,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        response = send(pool, method, url, *args, **kwargs)
        line = json.dumps({"method": method, "url": url, "status": response.status})
        with lock, record.open("a") as out:
            out.write(line + "\n")
        return response

    urllib3.connectionpool.HTTPConnectionPool.urlopen = recording_urlopen  # type: ignore[method-assign]

    cloud = FakeCloud()
    for name in scenario["instances"]:
        cloud.add_instance(name)
    for operation, subject in scenario["hold"].items():
        cloud.observe(operation, hold_once(operation, subject, Path(scenario["gates"])))

    class ArrangedCloud(FakeCloudPlugin):
        @hookimpl
        def polyccm_build_provider(self, settings: ProviderSettings) -> CloudProvider | None:
            return cloud if settings.provider == "fake" else None

    return main(argv, plugin_manager([ArrangedCloud()]))


def while_held(gates: Path, operation: str, action: Callable[[], Any]) -> None:
    """Once polyccm's first held ``operation`` call waits, run ``action``, then let it go on."""
    wait_for((gates / f"{operation}.held").exists, 60, f"polyccm's {operation} call")
    try:
        action()
    finally:
        (gates / f"{operation}.release").touch()


@dataclass(frozen=True)
class Request:
    """One recorded request, as the RBAC authorizer sees it."""

    method: str
    path: str
    status: int
    verb: str
    group: str
    resource: str
    """The resource with its subresource, as RBAC rules name it: ``nodes/status``."""

    @property
    def rule(self) -> tuple[str, str, str]:
        return (self.group, self.resource, self.verb)

    def __str__(self) -> str:
        return f"{self.method} {self.path} -> {self.status}"


def recorded_requests(record: Path) -> list[Request]:
    requests = []
    for line in record.read_text().splitlines():
        entry = json.loads(line)
        url = urlsplit(entry["url"])
        parts = url.path.strip("/").split("/")
        if parts[0] == "api":
            group, rest = "", parts[2:]
        elif parts[0] == "apis":
            group, rest = parts[1], parts[3:]
        else:
            group, rest = "", []  # a non-resource URL (discovery, /version)
        if len(rest) > 2 and rest[0] == "namespaces":
            rest = rest[2:]
        resource = "/".join(rest[:1] + rest[2:3])
        named = len(rest) > 1
        watching = parse_qs(url.query).get("watch") == ["true"]
        verb = {
            "GET": "get" if named else ("watch" if watching else "list"),
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if named else "deletecollection",
        }[entry["method"]]
        requests.append(Request(entry["method"], url.path, entry["status"], verb, group, resource))
    return requests


def granted_rules(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """``(group, resource, verb)`` for every grant of the ClusterRole and the Role."""
    granted = set()
    for role in (o for o in objects if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    granted.update((group, resource, verb) for verb in rule["verbs"])
    return granted


def service_account_kubeconfig(kube_api: KubeApi, control_plane: Any, directory: Path) -> Path:
    """A kubeconfig holding a TokenRequest token of the ServiceAccount."""
    answer = kube_api.request(
        "POST",
        f"/api/v1/namespaces/{KUBE_SYSTEM}/serviceaccounts/{SERVICE_ACCOUNT}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    token = answer["status"]["token"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {
                    "server": control_plane.api_url,
                    "certificate-authority": str(control_plane.ca_cert),
                },
            }
        ],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "ccm", "context": {"cluster": "test", "user": SERVICE_ACCOUNT}}],
        "current-context": "ccm",
    }
    path = directory / "cloud-controller-manager.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def forbidden(call: Callable[[], Any]) -> bool:
    try:
        call()
    except ApiError as error:
        return error.status == 403
    return False


def holder(api: KubeApi) -> str:
    try:
        lease = api.get(LEASES, LeaderElection().resource_name, KUBE_SYSTEM)
    except ApiError:
        return ""
    return str(lease.get("spec", {}).get("holderIdentity") or "")


def node_condition(api: KubeApi, name: str, kind: str) -> dict[str, Any] | None:
    for condition in api.get(NODES, name).get("status", {}).get("conditions") or ():
        if condition.get("type") == kind:
            return dict(condition)
    return None


def gone(call: Callable[[], Any]) -> bool:
    try:
        call()
    except ApiError as error:
        return error.not_found
    return False


def delete_events_about(api: KubeApi, namespace: str, names: list[str]) -> None:
    for name in names:
        listing = api.list(EVENTS, namespace, fieldSelector=f"involvedObject.name={name}")
        for event in listing["items"]:
            try:
                api.delete(EVENTS, event["metadata"]["name"], namespace)
            except ApiError as error:
                if not error.not_found:
                    raise


def event_count(api: KubeApi, namespace: str, name: str, reason: str) -> int:
    listing = api.list(EVENTS, namespace, fieldSelector=f"involvedObject.name={name}")
    return sum(int(e.get("count") or 1) for e in listing["items"] if e.get("reason") == reason)


@pytest.mark.timeout(240)
def test_service_account_alone_runs_every_controller_and_nothing_more(
    kube_api: KubeApi,
    control_plane: Any,
    applied_rbac: list[dict[str, Any]],
    namespace: str,
    clean_nodes: None,
    tmp_path: Path,
) -> None:
    kubeconfig = service_account_kubeconfig(kube_api, control_plane, tmp_path)
    account = KubeApi.from_kubeconfig(str(kubeconfig), qps=0.0, user_agent="polyccm-tests")
    suffix = secrets.token_hex(3)
    new, stray, old, lost = (f"{n}-{suffix}" for n in ("new", "stray", "old", "lost"))
    touched = {"metadata": {"labels": {"polyccm.test/touched": "true"}}}
    gates = tmp_path / "gates"
    gates.mkdir()
    record = tmp_path / "requests.jsonl"
    scenario = tmp_path / "scenario.json"
    scenario.write_text(
        json.dumps(
            {
                "instances": [new, old],
                # Held so that the test changes the object meanwhile: polyccm's write that
                # follows conflicts, and it reads the object again.
                "hold": {
                    "instances_metadata": new,
                    "ensure_load_balancer_deleted": f"{namespace}/web",
                },
                "gates": str(gates),
            }
        )
    )
    process: subprocess.Popen[bytes] | None = None
    log_path = tmp_path / "polyccm.log"
    try:
        # The bindings are in force (the authorizer's caches follow the new objects at once).
        wait_for(lambda: not forbidden(lambda: account.list(NODES)), 10, "nodes list allowed")

        # Outside the role: secrets, other leases, creating or deleting workloads, node PUTs.
        assert forbidden(lambda: account.list(SECRETS, KUBE_SYSTEM))
        assert forbidden(lambda: account.request("GET", "/api/v1/secrets"))
        assert forbidden(lambda: account.get(LEASES, "kube-scheduler", KUBE_SYSTEM))
        assert forbidden(lambda: account.list(LEASES, KUBE_SYSTEM))
        assert forbidden(lambda: make_service(account, namespace, "not-mine"))
        assert forbidden(lambda: account.delete(SERVICES, "x", namespace))
        assert forbidden(lambda: account.request("GET", "/api/v1/pods"))
        assert forbidden(
            lambda: account.request("POST", "/api/v1/nodes", body={"metadata": {"name": "x"}})
        )

        # A kubelet's new node with an instance in the cloud, one without (it cannot be
        # initialised), an initialised node with work to do, and one whose instance is gone.
        make_node(kube_api, new, tainted=True)
        make_node(kube_api, stray, tainted=True)
        make_node(
            kube_api,
            old,
            tainted=False,
            provider_id=f"fake://region-1/{old}",
            labels={"beta.kubernetes.io/instance-type": "fake.small"},
            pod_cidrs=("10.244.7.0/24",),
        )
        kube_api.patch(
            NODES, old, {"spec": {"taints": [{"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}]}}
        )
        make_node(kube_api, lost, tainted=False, ready=False, provider_id="fake://region-1/gone")
        make_service(kube_api, namespace, "web")

        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    *RECORDED_POLYCCM,
                    f"--kubeconfig={kubeconfig}",
                    "--cluster-cidr=10.244.0.0/16",
                    "--secure-port=0",
                    "--node-monitor-period=1s",
                    "--leader-elect=true",
                ],
                env={**os.environ, RECORD_VARIABLE: str(record), SCENARIO_VARIABLE: str(scenario)},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        # leases get/create/update in kube-system: it leads.
        leader = wait_for(lambda: holder(kube_api), 30, "a holder of the Lease in kube-system")
        assert leader

        # nodes patch guarded by resourceVersion, which conflicts with the test's change made
        # during the cloud lookup; nodes get, to retry; nodes/status patch, the addresses.
        while_held(gates, "instances_metadata", lambda: kube_api.patch(NODES, new, touched))

        def initialised() -> bool:
            node = kube_api.get(NODES, new)
            taints = {t["key"] for t in node["spec"].get("taints") or ()}
            return bool(
                UNINITIALIZED_TAINT not in taints
                and node["spec"].get("providerID") == f"fake://region-1/{new}"
                and node["status"].get("addresses")
            )

        wait_for(initialised, 60, "the new node initialised")

        # events create, and patch when the same event repeats (namespace default for nodes).
        wait_for(
            lambda: event_count(kube_api, "default", stray, "FailedToInitialize") >= 2,
            60,
            "a repeated FailedToInitialize event about the node without an instance",
        )
        assert UNINITIALIZED_TAINT in {
            t["key"] for t in kube_api.get(NODES, stray)["spec"].get("taints", [])
        }

        # nodes patch: GA labels copied from beta ones, shutdown taint off a Ready node.
        def old_node_patched() -> bool:
            node = kube_api.get(NODES, old)
            labels = node["metadata"].get("labels", {})
            taints = {t["key"] for t in node["spec"].get("taints") or ()}
            return labels.get("node.kubernetes.io/instance-type") == "fake.small" and (
                SHUTDOWN_TAINT not in taints
            )

        wait_for(old_node_patched, 60, "labels and taints of the initialised node")
        # nodes/status patch: the route controller's condition.
        condition = wait_for(
            lambda: node_condition(kube_api, old, "NetworkUnavailable"), 60, "route condition"
        )
        assert (condition["status"], condition["reason"]) == ("False", "RouteCreated")

        # nodes delete: the instance is gone.
        wait_for(lambda: gone(lambda: kube_api.get(NODES, lost)), 60, "the lost node deleted")
        wait_for(
            lambda: "DeletingNode" in reasons_for(kube_api, "default", lost),
            30,
            "DeletingNode event about the lost node",
        )

        # services patch (finalizer) and services/status patch (ingress), events in the
        # service's namespace.
        def served() -> str:
            service = kube_api.get(SERVICES, "web", namespace)
            if FINALIZER not in (service["metadata"].get("finalizers") or ()):
                return ""
            ingress = service.get("status", {}).get("loadBalancer", {}).get("ingress") or []
            return str(ingress[0].get("ip", "")) if ingress else ""

        assert wait_for(served, 60, "finalizer and load-balancer ingress")
        wait_for(
            lambda: "EnsuredLoadBalancer" in reasons_for(kube_api, namespace, "web"),
            30,
            "EnsuredLoadBalancer event about the service",
        )
        # The finalizer's removal conflicts with the test's change made during the cloud
        # deletion: services get, to retry with the fresh object.
        kube_api.delete(SERVICES, "web", namespace)
        while_held(
            gates,
            "ensure_load_balancer_deleted",
            lambda: kube_api.patch(SERVICES, "web", touched, namespace),
        )
        wait_for(
            lambda: gone(lambda: kube_api.get(SERVICES, "web", namespace)),
            60,
            "the service gone once its finalizer is removed",
        )

        # Still leading, and a clean stop releases the Lease (update).
        assert holder(kube_api) == leader
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert holder(kube_api) == ""
    finally:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        account.close()
        delete_events_about(kube_api, "default", [new, stray, old, lost])
    output = log_path.read_text(errors="replace")

    requests = recorded_requests(record)
    # The scenario took the conflict paths: the two guarded writes were refused once each.
    # (The node's first guarded write is its NetworkUnavailable condition when routes are
    # managed, else the taint removal: either conflict makes polyccm read the node again.)
    conflicts = {(r.method, r.resource) for r in requests if r.status == 409}
    assert conflicts & {("PATCH", "nodes"), ("PATCH", "nodes/status")}, conflicts
    assert ("PATCH", "services") in conflicts, conflicts
    # The API server's authorizer allowed every request polyccm made on the role's token...
    refused = sorted({str(r) for r in requests if r.status in (401, 403)})
    assert not refused, "refused:\n" + "\n".join(refused)
    assert not re.search(r"\b403\b|forbidden", output, re.IGNORECASE), output[-4000:]
    # ... and the roles grant nothing that polyccm did not use.
    unused = granted_rules(applied_rbac) - {r.rule for r in requests}
    assert not unused, f"rbac.yaml grants what polyccm never asked for: {sorted(unused)}"


if __name__ == "__main__":
    sys.exit(recorded_polyccm(sys.argv[1:]))
