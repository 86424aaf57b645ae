"""deploy/kustomize: the base and one overlay per provider, rendered with the pinned kustomize.

Each kustomization is rendered by the kustomize that ``polyccm_testing.devenv.binaries`` builds
(a pinned release, as ``kubectl apply -k`` would render it) and goes to the real kube-apiserver:
every object passes a server-side dry run with strict field validation, each Deployment's pod
passes pod admission, its flags parse with polyccm's own parser, and an overlay adds exactly the
rules ``polyccm rbac`` prints for its provider. The base's RBAC is applied for real and a polyccm
process running on the ServiceAccount's token alone does its job: every request it sends is
recorded with the API server's answer, none is refused, and every permission the roles grant is
used, while requests outside the role are refused. Then each rule is taken out in turn and the
same process is refused a request that rule grants; and every grant is one upstream's
cloud-controller-manager has too. On the same token its HTTPS port serves the probes' paths to
anyone and /metrics to the metrics-reader's subject, through the system:auth-delegator binding.

Run as a program (``python tests/test_deploy.py --provider=fake ARGS``) this file is that
recorded polyccm process (see :func:`recorded_polyccm`).
"""

from __future__ import annotations

import base64
import copy
import functools
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
from polyccm import cli
from polyccm.app import commandline
from polyccm.app.options import LeaderElection
from polyccm.kube.api import EVENTS, LEASES, NODES, SECRETS, SERVICES, ApiError, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT
from polyccm.plugins import plugin_manager
from polyccm_testing.apply import apply
from polyccm_testing.crds import PODMONITORS
from polyccm_testing.crds import install as install_crd
from polyccm_testing.devenv.binaries import (
    BinaryError,
    helm_path,
    kube_scheduler_path,
    kustomize_path,
)
from polyccm_testing.devenv.processes import free_ports
from polyccm_testing.kubeobjects import (
    make_node,
    make_service,
    make_service_account,
    reasons_for,
    service_account_kubeconfig,
    service_account_token,
    wait_for,
)
from polyccm_testing.secureport import secure_get
from polyccm_testing.workspace import ROOT, workspace_providers

KUSTOMIZE = ROOT / "deploy" / "kustomize"
BASE = KUSTOMIZE / "base"
OVERLAYS = KUSTOMIZE / "overlays"
METRICS_READER = KUSTOMIZE / "metrics-reader"
SINGLE_REPLICA = KUSTOMIZE / "components" / "single-replica"
PLAN_JOBS = ROOT / "deploy" / "migrate" / "plan"
CHART = ROOT / "deploy" / "helm" / "polyccm"
DOCKERFILE = ROOT / "deploy" / "images" / "Dockerfile"
KUBE_SYSTEM = "kube-system"
SERVICE_ACCOUNT = "polyccm-cloud-controller-manager"
SERVICE_ACCOUNT_USER = f"system:serviceaccount:{KUBE_SYSTEM}:{SERVICE_ACCOUNT}"
SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
#: Providers whose controllers include routes, so their Deployment passes --cluster-cidr.
ROUTE_PROVIDERS = {"aws", "gce"}
PROVIDERS = workspace_providers()
#: The overlay file a provider's cloud config (``--cloud-config``) is generated from.
CLOUD_CONFIG_FILES = {"aws": "cloud.conf", "gce": "gce.conf"}
#: How each provider gets its credentials in its Deployment: env var -> (Secret, key), the
#: Secret generated from the overlay's env file (see CREDENTIAL_FILES).
SECRET_ENV = {
    "aws": {},
    "gce": {},
    "digitalocean": {"DO_ACCESS_TOKEN": ("digitalocean", "access-token")},
    "packet": {
        "METAL_API_KEY": ("metal-cloud-config", "api-key"),
        "METAL_PROJECT_ID": ("metal-cloud-config", "project-id"),
    },
}
CREDENTIAL_FILES = {"digitalocean": "digitalocean.env", "packet": "metal-cloud-config.env"}
#: The base's binding of the ServiceAccount to system:auth-delegator (the secure port's reviews).
AUTH_DELEGATOR_BINDING = "polyccm:cloud-controller-manager:auth-delegator"
PLACEHOLDER = "REPLACE_WITH_"


# -- the kustomizations ----------------------------------------------------------------------


@functools.cache
def _built(directory: Path) -> tuple[dict[str, Any], ...]:
    try:
        kustomize = kustomize_path()
    except BinaryError as error:
        pytest.fail(f"no kustomize: {error}", pytrace=False)
    completed = subprocess.run(
        [str(kustomize), "build", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    where = os.path.relpath(directory, ROOT)
    assert completed.returncode == 0, f"kustomize build {where}:\n{completed.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(completed.stdout) if doc)


def rendered(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kustomize build directory`` prints (a copy: change it at will)."""
    return copy.deepcopy(list(_built(directory)))


def only(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return found


def deployment(provider: str) -> dict[str, Any]:
    return only(rendered(OVERLAYS / provider), "Deployment")


def container(deploy: dict[str, Any]) -> dict[str, Any]:
    (main,) = deploy["spec"]["template"]["spec"]["containers"]
    return dict(main)


def flag_values(args: list[str]) -> dict[str, str]:
    values = {}
    for arg in args:
        assert arg.startswith("--") and "=" in arg, f"{arg!r}: use --flag=value"
        key, _, value = arg.partition("=")
        values[key] = value
    return values


#: Quantity suffixes of memory, in MiB.
_MEMORY_UNITS = {"Mi": 1.0, "Gi": 1024.0, "M": 1e6 / 2**20, "G": 1e9 / 2**20}


def mebibytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", quantity).groups()  # type: ignore[union-attr]
    return float(number) * _MEMORY_UNITS[unit]


def benchmark_peak_rss() -> list[float]:
    """polyccm's peak RSS in the committed benchmark results (bench/results/<provider>.json,
    what the README's table quotes), in MiB, every provider and scale."""
    peaks = []
    for name in PROVIDERS:
        results = json.loads((ROOT / "bench" / "results" / f"{name}.json").read_text())
        peaks += [
            run["peak_rss_mib"]
            for scale in results["scales"]
            for run in scale["runs"]
            if run["key"] == "polyccm" and run.get("peak_rss_mib")
        ]
    return peaks


BENCHMARK_PEAK_RSS_MIB = benchmark_peak_rss()


def test_there_is_one_overlay_per_provider() -> None:
    assert sorted(p.name for p in OVERLAYS.iterdir() if p.is_dir()) == PROVIDERS


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


KUSTOMIZATIONS = {
    "base": BASE,
    **{f"overlays/{p}": OVERLAYS / p for p in PROVIDERS},
    "metrics-reader": METRICS_READER,
    **{f"migrate/plan/{p}": PLAN_JOBS / p for p in PROVIDERS},
}


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_render_passes_server_side_dry_run(kube_api: KubeApi, name: str) -> None:
    for obj in rendered(KUSTOMIZATIONS[name]):
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


def base_rbac() -> list[dict[str, Any]]:
    """The base's ServiceAccount, roles and bindings, as rendered."""
    return [o for o in rendered(BASE) if o["kind"] != "Deployment"]


@pytest.fixture
def applied_rbac(
    kube_api: KubeApi, request: pytest.FixtureRequest
) -> Iterator[list[dict[str, Any]]]:
    """The base's RBAC created for real (cluster-scoped objects too), removed after the test;
    the Helm chart's instead when the test is parametrized with ``rbac_source="helm"``."""
    source = getattr(request, "param", "kustomize")
    objects = base_rbac() if source == "kustomize" else chart_rbac("aws")
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
    """The pod a Deployment makes passes admission: its ServiceAccount exists (the base's
    RBAC) and gets a token volume, its priority class resolves, and the pod spec validates
    strictly."""
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


def test_base_has_two_replicas_under_leader_election_probed_limited_and_tolerant() -> None:
    objects = rendered(BASE)
    assert sorted(o["kind"] for o in objects) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "Deployment",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    deploy = only(objects, "Deployment")
    spec = deploy["spec"]
    pod = spec["template"]["spec"]
    main = container(deploy)
    assert deploy["metadata"]["namespace"] == KUBE_SYSTEM
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    flags = flag_values(main["args"])
    assert flags["--leader-elect"] == "true"
    assert flags["--bind-address"] == "0.0.0.0"
    assert flags["--secure-port"] == "10258"

    # Probes on the secure port, which serves HTTPS only; the health paths need no token.
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = main[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, 10258, "HTTPS")
    assert [p["containerPort"] for p in main["ports"]] == [10258]
    assert set(main["resources"]["requests"]) == {"cpu", "memory"}
    assert set(main["resources"]["limits"]) == {"cpu", "memory"}

    # Control-plane nodes, even before they are initialised; never two pods on one node, as
    # they share the host's network and port.
    tolerated = {t["key"] for t in pod["tolerations"]}
    assert {
        UNINITIALIZED_TAINT,
        "node-role.kubernetes.io/control-plane",
        "node-role.kubernetes.io/master",
        "CriticalAddonsOnly",
        "node.kubernetes.io/network-unavailable",
        "node.kubernetes.io/not-ready",
    } <= tolerated
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod["hostNetwork"] is True
    (anti,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    # The role label matched whatever its value ("" from kubeadm, "true" elsewhere): a
    # nodeSelector would match one value only.
    assert "nodeSelector" not in pod
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": key, "operator": "Exists"}]}
        for key in ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
    ]

    # Memory above the benchmark's largest peak RSS (bench/results: DigitalOcean, 274 MiB at
    # 5,000 nodes and 500 Services).
    assert len(BENCHMARK_PEAK_RSS_MIB) == 3 * len(PROVIDERS), "every provider at every scale"
    assert mebibytes(main["resources"]["limits"]["memory"]) > max(BENCHMARK_PEAK_RSS_MIB)

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
    assert {m["mountPath"] for m in main["volumeMounts"]} == {"/tmp"}


#: What an overlay may change in the base's Deployment: labels, the image, the flags it
#: appends, its configuration volume and its credentials.
OVERLAY_CHANGES = {"image", "args", "env", "volumeMounts"}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_overlay_runs_its_provider_image_with_upstream_flags(provider: str, tmp_path: Path) -> None:
    objects = rendered(OVERLAYS / provider)
    base = only(rendered(BASE), "Deployment")
    deploy = only(objects, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    main = container(deploy)
    base_main = container(base)

    # Everything the base says holds: the overlay only adds.
    for key in set(base_main) - OVERLAY_CHANGES:
        assert main[key] == base_main[key], key
    for key in set(base["spec"]["template"]["spec"]) - {"containers", "volumes"}:
        assert pod[key] == base["spec"]["template"]["spec"][key], key
    assert {k: v for k, v in deploy["spec"].items() if k != "template"} == {
        k: v for k, v in base["spec"].items() if k != "template"
    }
    assert main["args"][: len(base_main["args"])] == base_main["args"]
    instance = {"app.kubernetes.io/instance": f"polyccm-{provider}"}
    assert deploy["spec"]["template"]["metadata"]["labels"].items() >= instance.items()
    assert main["image"] == f"ghcr.io/polyccm/polyccm-{provider}:0.1.0"
    assert "command" not in main, "the image's entrypoint chooses the provider"

    flags = flag_values(main["args"])
    assert flags["--cluster-name"] == "kubernetes"
    assert ("--cluster-cidr" in flags) == (provider in ROUTE_PROVIDERS)
    assert "--leader-elect-resource-name" not in flags
    assert "--leader-elect-resource-namespace" not in flags

    # The cloud config: generated from the overlay's file, mounted read-only where
    # --cloud-config points.
    args = list(main["args"])
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert ("--cloud-config" in flags) == (provider in CLOUD_CONFIG_FILES)
    if "--cloud-config" in flags:
        mount = mounts[flags["--cloud-config"]]
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        config_map = only(objects, "ConfigMap", volume["configMap"]["name"])
        assert config_map["metadata"]["name"].startswith(f"{provider}-cloud-config-")
        assert mount["subPath"] == "cloud.conf" and mount["readOnly"] is True
        source = OVERLAYS / provider / CLOUD_CONFIG_FILES[provider]
        assert config_map["data"] == {"cloud.conf": source.read_text()}
        local = tmp_path / "cloud.conf"
        local.write_text(config_map["data"]["cloud.conf"])
        args = [f"--cloud-config={local}" if a.startswith("--cloud-config=") else a for a in args]

    # The args as polyccm reads them.
    options, _ = commandline.parse([f"--provider={provider}", *args], plugin_manager())
    assert options.provider == provider
    assert options.leader_election.enabled
    assert options.secure_port == 10258 and options.bind_address == "0.0.0.0"
    assert options.configure_cloud_routes == (provider in ROUTE_PROVIDERS)

    # Credentials: from the Secret the overlay generates, none in the Deployment itself.
    env = {e["name"]: e for e in main.get("env", [])}
    assert set(env) == set(SECRET_ENV[provider])
    for name, (secret, key) in SECRET_ENV[provider].items():
        ref = env[name]["valueFrom"]["secretKeyRef"]
        generated = only(objects, "Secret", ref["name"])
        assert generated["metadata"]["name"].startswith(f"{secret}-")
        assert ref["key"] == key and key in generated["data"]
        assert "value" not in env[name]


@pytest.mark.parametrize("provider", sorted(CREDENTIAL_FILES))
def test_credentials_are_placeholders_in_the_file_the_readme_names(provider: str) -> None:
    (secret,) = [o for o in rendered(OVERLAYS / provider) if o["kind"] == "Secret"]
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert values and all(v.startswith(PLACEHOLDER) for v in values.values()), values
    readme = (KUSTOMIZE / "README.md").read_text()
    assert f"overlays/{provider}/{CREDENTIAL_FILES[provider]}" in readme


def test_aws_cloud_config_is_valid() -> None:
    from polyccm_aws.config import load_cloud_config

    config = load_cloud_config(OVERLAYS / "aws" / CLOUD_CONFIG_FILES["aws"])
    assert config.region == "us-east-1"


def test_gce_cloud_config_is_valid() -> None:
    from polyccm_gce.config import load_cloud_config

    config = load_cloud_config(OVERLAYS / "gce" / CLOUD_CONFIG_FILES["gce"])
    assert config.network_name == "default"
    assert config.node_tags and config.node_tags[0].startswith(PLACEHOLDER)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_overlay_cluster_role_is_the_one_polyccm_rbac_prints(
    provider: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rules an overlay adds to the base's are those of its provider's own controllers,
    as ``polyccm rbac --provider NAME`` prints them after the core's."""
    assert cli.main(["rbac", f"--provider={provider}"], plugin_manager()) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    base = only(rendered(BASE), "ClusterRole")
    role = only(rendered(OVERLAYS / provider), "ClusterRole")
    assert role["metadata"]["name"] == printed["metadata"]["name"] == base["metadata"]["name"]
    assert printed["rules"][: len(base["rules"])] == base["rules"]
    assert role["rules"] == printed["rules"]


def test_rbac_bindings_give_the_roles_to_the_service_account() -> None:
    objects = base_rbac()
    account = only(objects, "ServiceAccount")
    assert (account["metadata"]["name"], account["metadata"]["namespace"]) == (
        SERVICE_ACCOUNT,
        KUBE_SYSTEM,
    )
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    referenced = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in bindings}
    assert referenced == {
        ("ClusterRole", only(objects, "ClusterRole")["metadata"]["name"]),
        ("Role", only(objects, "Role")["metadata"]["name"]),
        # TokenReviews and SubjectAccessReviews for the secure port, as upstream binds it.
        ("ClusterRole", "system:auth-delegator"),
    }
    for binding in bindings:
        assert binding["roleRef"]["apiGroup"] == "rbac.authorization.k8s.io"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": KUBE_SYSTEM}
        ]


def test_lease_role_matches_the_default_leader_election_flags() -> None:
    election = LeaderElection()
    role = only(base_rbac(), "Role")
    assert role["metadata"]["namespace"] == election.resource_namespace
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert [r["resourceNames"] for r in named] == [[election.resource_name]]
    assert {r for rule in role["rules"] for r in rule["resources"]} == {"leases"}


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


#: What :func:`start_recorded` writes in its directory: the requests, the process's output.
RECORD_FILE = "requests.jsonl"
LOG_FILE = "polyccm.log"


def start_recorded(
    directory: Path, kubeconfig: Path, scenario: dict[str, Any], *flags: str
) -> subprocess.Popen[bytes]:
    """The recorded polyccm process (fake cloud with routes, no secure port) on
    ``kubeconfig``'s credentials, its cloud arranged by ``scenario``: it records its requests in
    ``directory/requests.jsonl`` and writes its output to ``directory/polyccm.log``."""
    (directory / "scenario.json").write_text(json.dumps(scenario))
    with (directory / LOG_FILE).open("wb") as log:
        return subprocess.Popen(
            [
                *RECORDED_POLYCCM,
                f"--kubeconfig={kubeconfig}",
                "--cluster-cidr=10.244.0.0/16",
                "--secure-port=0",
                "--node-monitor-period=1s",
                *flags,
            ],
            env={
                **os.environ,
                RECORD_VARIABLE: str(directory / RECORD_FILE),
                SCENARIO_VARIABLE: str(directory / "scenario.json"),
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def stop(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM ``process`` if it still runs, and SIGKILL it if it does not end in 30 s."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


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
    namespace: str = ""
    name: str = ""

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
        namespace = ""
        if len(rest) > 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
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
        requests.append(
            Request(
                entry["method"],
                url.path,
                entry["status"],
                verb,
                group,
                resource,
                namespace,
                rest[1] if named else "",
            )
        )
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


def account_kubeconfig(api: KubeApi, control_plane: Any, directory: Path) -> Path:
    """A kubeconfig holding a TokenRequest token of polyccm's ServiceAccount."""
    return service_account_kubeconfig(
        api, control_plane, directory, namespace=KUBE_SYSTEM, name=SERVICE_ACCOUNT
    )


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
@pytest.mark.parametrize("applied_rbac", ["kustomize", "helm"], indirect=True)
def test_service_account_alone_runs_every_controller_and_nothing_more(
    kube_api: KubeApi,
    control_plane: Any,
    applied_rbac: list[dict[str, Any]],
    namespace: str,
    clean_nodes: None,
    tmp_path: Path,
) -> None:
    kubeconfig = account_kubeconfig(kube_api, control_plane, tmp_path)
    account = KubeApi.from_kubeconfig(str(kubeconfig), qps=0.0, user_agent="polyccm-tests")
    suffix = secrets.token_hex(3)
    new, stray, old, lost = (f"{n}-{suffix}" for n in ("new", "stray", "old", "lost"))
    touched = {"metadata": {"labels": {"polyccm.test/touched": "true"}}}
    gates = tmp_path / "gates"
    gates.mkdir()
    scenario = {
        "instances": [new, old],
        # Held so that the test changes the object meanwhile: polyccm's write that follows
        # conflicts, and it reads the object again.
        "hold": {
            "instances_metadata": new,
            "ensure_load_balancer_deleted": f"{namespace}/web",
        },
        "gates": str(gates),
    }
    process: subprocess.Popen[bytes] | None = None
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

        process = start_recorded(tmp_path, kubeconfig, scenario, "--leader-elect=true")

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
        stop(process)
        account.close()
        delete_events_about(kube_api, "default", [new, stray, old, lost])
    output = (tmp_path / LOG_FILE).read_text(errors="replace")

    requests = recorded_requests(tmp_path / RECORD_FILE)
    # The scenario took the conflict paths: the two guarded writes were refused once each.
    # (The node's guarded write is its taint removal: the conflict makes polyccm read the
    # node again.)
    conflicts = {(r.method, r.resource) for r in requests if r.status == 409}
    assert ("PATCH", "nodes") in conflicts, conflicts
    assert ("PATCH", "services") in conflicts, conflicts
    # The API server's authorizer allowed every request polyccm made on the role's token...
    refused = sorted({str(r) for r in requests if r.status in (401, 403)})
    assert not refused, "refused:\n" + "\n".join(refused)
    assert not re.search(r"\b403\b|forbidden", output, re.IGNORECASE), output[-4000:]
    # ... and the roles grant nothing that polyccm did not use.
    unused = granted_rules(applied_rbac) - {r.rule for r in requests}
    assert not unused, f"the base's roles grant what polyccm never asked for: {sorted(unused)}"


def access_review(
    api: KubeApi, user: str, groups: list[str], attributes: dict[str, str], *, resource: bool
) -> bool:
    """Whether the API server's authorizer lets ``user`` do what ``attributes`` say (a
    SubjectAccessReview: ``resourceAttributes``, or ``nonResourceAttributes`` for a path)."""
    kind = "resourceAttributes" if resource else "nonResourceAttributes"
    answer = api.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, kind: attributes},
        },
    )
    return bool(answer["status"].get("allowed"))


def service_account_groups(namespace: str) -> list[str]:
    return ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]


def account_may(api: KubeApi, group: str, resource: str, verb: str, **where: str) -> bool:
    """Whether polyccm's ServiceAccount may ``verb`` ``resource`` (``nodes/status`` form) of
    ``group``, in ``namespace`` and on ``name`` when given."""
    plural, _, subresource = resource.partition("/")
    attributes = {"group": group, "resource": plural, "subresource": subresource, "verb": verb}
    return access_review(
        api,
        SERVICE_ACCOUNT_USER,
        service_account_groups(KUBE_SYSTEM),
        {**attributes, **where},
        resource=True,
    )


def test_service_account_may_review_tokens_and_access_for_its_secure_port(
    kube_api: KubeApi, control_plane: Any, applied_rbac: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The system:auth-delegator binding: on its own token, polyccm's ServiceAccount creates the
    TokenReviews and SubjectAccessReviews its secure port asks about a scrape's token."""
    kubeconfig = account_kubeconfig(kube_api, control_plane, tmp_path)
    token = service_account_token(kube_api, KUBE_SYSTEM, SERVICE_ACCOUNT)
    account = KubeApi.from_kubeconfig(str(kubeconfig), qps=0.0, user_agent="polyccm-tests")
    try:
        wait_for(lambda: not forbidden(lambda: account.list(NODES)), 10, "the bindings in force")
        review = account.request(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        assert review["status"]["authenticated"] is True
        assert review["status"]["user"]["username"] == SERVICE_ACCOUNT_USER
        # The ServiceAccount itself may not read /metrics: the metrics-reader role is separate.
        assert not access_review(
            account,
            SERVICE_ACCOUNT_USER,
            service_account_groups(KUBE_SYSTEM),
            {"path": "/metrics", "verb": "get"},
            resource=False,
        )
    finally:
        account.close()


def test_metrics_reader_lets_its_service_account_get_metrics(kube_api: KubeApi) -> None:
    """The example metrics-reader kustomization, applied for real, lets the ServiceAccount it
    binds GET /metrics, the question polyccm's secure port puts to the API server."""
    objects = rendered(METRICS_READER)
    role = only(objects, "ClusterRole")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    binding = only(objects, "ClusterRoleBinding")
    (subject,) = binding["subjects"]
    scraper = f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
    metrics = {"path": "/metrics", "verb": "get"}
    groups = service_account_groups(subject["namespace"])
    remove(kube_api, objects)
    try:
        assert not access_review(kube_api, scraper, groups, metrics, resource=False)
        for obj in objects:
            kube_api.request("POST", collection_path(kube_api, obj), body=obj)
        wait_for(
            lambda: access_review(kube_api, scraper, groups, metrics, resource=False),
            10,
            "the scraper allowed /metrics",
        )
        assert not access_review(
            kube_api, scraper, groups, {"path": "/healthz/x", "verb": "get"}, resource=False
        )
    finally:
        remove(kube_api, objects)


@pytest.mark.timeout(120)
def test_secure_port_serves_probes_and_the_metrics_reader_through_the_auth_delegator_binding(
    kube_api: KubeApi,
    control_plane: Any,
    applied_rbac: list[dict[str, Any]],
    namespace: str,
    tmp_path: Path,
) -> None:
    """polyccm on the ServiceAccount's token alone serves the probes' paths to anyone and
    /metrics to the metrics-reader's subject, asking the API server through the
    system:auth-delegator binding; without that binding its reviews are refused, and so is a
    scrape."""
    objects = rendered(METRICS_READER)
    # The subject: a ServiceAccount of the test's namespace in place of a Prometheus's.
    make_service_account(kube_api, namespace, "scraper")
    only(objects, "ClusterRoleBinding")["subjects"] = [
        {"kind": "ServiceAccount", "name": "scraper", "namespace": namespace}
    ]
    remove(kube_api, objects)
    for obj in objects:
        kube_api.request("POST", collection_path(kube_api, obj), body=obj)
    (port,) = free_ports(1)
    process = start_recorded(
        tmp_path,
        account_kubeconfig(kube_api, control_plane, tmp_path),
        {"instances": [], "hold": {}, "gates": str(tmp_path)},
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
    )
    try:
        # The kubelet's probes: HTTPS, no token.
        for path in ("/healthz", "/readyz", "/livez"):
            wait_for(lambda p=path: secure_get(port, p).status == 200, 30, f"{path} answered")
        assert secure_get(port, "/metrics").status == 403  # system:anonymous
        own = service_account_token(kube_api, KUBE_SYSTEM, SERVICE_ACCOUNT)
        assert secure_get(port, "/metrics", token=own).status == 403
        scraper = service_account_token(kube_api, namespace, "scraper")
        scraped = secure_get(port, "/metrics", token=scraper)
        assert scraped.status == 200 and "# TYPE" in scraped.body, scraped.status

        # Without system:auth-delegator: a token not reviewed yet is refused (401).
        remove(kube_api, [only(applied_rbac, "ClusterRoleBinding", AUTH_DELEGATOR_BINDING)])
        wait_for(
            lambda: not account_may(kube_api, "authentication.k8s.io", "tokenreviews", "create"),
            10,
            "TokenReviews refused to the ServiceAccount",
        )
        fresh = service_account_token(kube_api, namespace, "scraper")
        assert secure_get(port, "/metrics", token=fresh).status == 401
        assert secure_get(port, "/healthz").status == 200
    finally:
        stop(process)
        remove(kube_api, objects)
    reviews = {
        (r.resource, r.status)
        for r in recorded_requests(tmp_path / RECORD_FILE)
        if r.resource in ("tokenreviews", "subjectaccessreviews")
    }
    assert reviews == {
        ("tokenreviews", 201),
        ("subjectaccessreviews", 201),
        ("tokenreviews", 403),
    }, reviews


# -- RBAC: every rule is needed --------------------------------------------------------------
#
# Each rule of the base's ClusterRole and Lease Role is taken out in turn, and the recorded
# polyccm process runs on the ServiceAccount's token until the API server refuses it a request:
# that request must be one the rule grants. A rule no run needs would fail its test.


def role_rules() -> list[tuple[str, int, str]]:
    """``(kind, index, id)`` of every rule of the base's ClusterRole and Role (read from the
    file at collection: the render, checked equal by other tests, is used when running)."""
    found = []
    for obj in yaml.safe_load_all((BASE / "rbac.yaml").read_text()):
        if obj and obj["kind"] in ("ClusterRole", "Role"):
            for index, rule in enumerate(obj["rules"]):
                named = "".join(f"[{n}]" for n in rule.get("resourceNames", ()))
                what = f"{','.join(rule['resources'])}{named}:{','.join(rule['verbs'])}"
                found.append((obj["kind"], index, f"{obj['kind']}:{what}"))
    return found


def grants(rule: dict[str, Any], request: Request, namespace: str | None) -> bool:
    """Whether ``rule`` (of a Role in ``namespace``, or of a ClusterRole when ``None``) grants
    ``request``."""
    return bool(
        request.group in rule["apiGroups"]
        and request.resource in rule["resources"]
        and request.verb in rule["verbs"]
        and (not rule.get("resourceNames") or request.name in rule["resourceNames"])
        and (namespace is None or request.namespace == namespace)
    )


def replace_rules(api: KubeApi, role: dict[str, Any], rules: list[dict[str, Any]]) -> None:
    url = f"{collection_path(api, role)}/{role['metadata']['name']}"
    current = api.request("GET", url)
    api.request("PUT", url, body={**current, "rules": rules})


def refused(record: Path) -> list[Request]:
    if not record.exists():
        return []
    return [r for r in recorded_requests(record) if r.status == 403]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("kind", "index"), [(k, i) for k, i, _ in role_rules()], ids=[n for *_, n in role_rules()]
)
def test_without_this_rule_polyccm_is_refused_what_it_grants(
    kube_api: KubeApi,
    control_plane: Any,
    applied_rbac: list[dict[str, Any]],
    namespace: str,
    clean_nodes: None,
    tmp_path: Path,
    kind: str,
    index: int,
) -> None:
    role = only(applied_rbac, kind)
    rule = role["rules"][index]
    scope = role["metadata"].get("namespace")
    replace_rules(kube_api, role, [r for i, r in enumerate(role["rules"]) if i != index])
    # The authorizer follows the role (its caches catch up within a moment).
    first = {
        "group": rule["apiGroups"][0],
        "resource": rule["resources"][0],
        "verb": rule["verbs"][0],
        "namespace": scope or "",
        "name": (rule.get("resourceNames") or [""])[0],
    }
    wait_for(lambda: not account_may(kube_api, **first), 10, f"{first} refused")

    # What every controller works on: a kubelet's new node with its instance in the cloud
    # (cloud-node; route, with its pod CIDR) and a LoadBalancer service (service, events).
    node = f"new-{secrets.token_hex(3)}"
    make_node(kube_api, node, tainted=True, pod_cidrs=("10.244.9.0/24",))
    make_service(kube_api, namespace, "web")
    kubeconfig = account_kubeconfig(kube_api, control_plane, tmp_path)
    scenario = {"instances": [node], "hold": {}, "gates": str(tmp_path)}
    # Leader election only where the rule is the Lease's: without it the controllers start
    # at once.
    election = "--leader-elect=true" if kind == "Role" else "--leader-elect=false"
    process = start_recorded(tmp_path, kubeconfig, scenario, election)
    try:
        wait_for(
            lambda: refused(tmp_path / RECORD_FILE) or process.poll() is not None,
            60,
            f"a request refused without {rule}",
        )
    finally:
        stop(process)
        delete_events_about(kube_api, "default", [node])
    denied = refused(tmp_path / RECORD_FILE)
    output = (tmp_path / LOG_FILE).read_text(errors="replace")
    assert denied, f"nothing refused without {rule}:\n{output[-3000:]}"
    outside = [str(r) for r in denied if not grants(rule, r, scope)]
    assert not outside, f"refused beyond {rule}: {outside}"


# -- RBAC: nothing upstream does not grant ---------------------------------------------------
#
# Upstream's cloud-controller-manager roles, as tables of (API group, resource, verbs).

#: kubernetes/cloud-provider-aws v1.35.2, charts/aws-cloud-controller-manager/values.yaml
#: (``clusterRoleRules``: the ClusterRole system:cloud-controller-manager its chart installs).
UPSTREAM_CLUSTER_ROLE = (
    ("", "events", "create patch update"),
    ("", "nodes", "*"),
    ("", "nodes/status", "patch"),
    ("", "services", "list patch update watch"),
    ("", "services/status", "list patch update watch"),
    ("", "serviceaccounts", "create"),
    ("", "persistentvolumes", "get list update watch"),
    ("", "endpoints", "create get list watch update"),
    ("coordination.k8s.io", "leases", "create get list watch update"),
    ("", "serviceaccounts/token", "create"),
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
)

#: The events rule every controller role below has (``eventsRule()`` upstream).
_EVENT_RECORDER = (
    ("", "events", "create patch update"),
    ("events.k8s.io", "events", "create patch update"),
)

#: kubernetes v1.35, plugin/pkg/auth/authorizer/rbac/bootstrappolicy/controller_policy.go: the
#: roles k8s.io/cloud-provider v0.35 (app/controllermanager.go) runs its controllers under with
#: --use-service-account-credentials: cloud-node and cloud-node-lifecycle as node-controller,
#: service as service-controller, route as route-controller.
UPSTREAM_CONTROLLER_ROLES = {
    "system:controller:node-controller": (
        ("", "nodes", "delete get list patch update watch"),
        ("", "nodes/status", "patch update"),
        ("", "pods/status", "patch update"),
        ("", "pods", "delete get list watch"),
        *_EVENT_RECORDER,
    ),
    "system:controller:service-controller": (
        ("", "services", "get list watch"),
        ("", "services/status", "patch update"),
        ("", "nodes", "list watch"),
        *_EVENT_RECORDER,
    ),
    "system:controller:route-controller": (
        ("", "nodes", "list watch"),
        ("", "nodes/status", "patch"),
        *_EVENT_RECORDER,
    ),
}


def table_grants(table: tuple[tuple[str, str, str], ...]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for group, resource, verbs in table for verb in verbs.split()}


def api_grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", ())
        for resource in rule.get("resources", ())
        for verb in rule["verbs"]
    }


def test_roles_grant_nothing_upstream_does_not() -> None:
    upstream = table_grants(UPSTREAM_CLUSTER_ROLE).union(
        *(table_grants(table) for table in UPSTREAM_CONTROLLER_ROLES.values())
    )
    ours = granted_rules(base_rbac())
    beyond = {
        (group, resource, verb)
        for group, resource, verb in ours
        if (group, resource, verb) not in upstream and (group, resource, "*") not in upstream
    }
    assert not beyond, f"granted, and by no upstream role: {sorted(beyond)}"


def test_upstream_controller_roles_are_those_this_api_server_has(kube_api: KubeApi) -> None:
    """The controller roles in the table are the kube-apiserver's own bootstrap roles."""
    for name, table in UPSTREAM_CONTROLLER_ROLES.items():
        role = kube_api.request("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")
        assert api_grants(role["rules"]) == table_grants(table), name


# -- RBAC: beside an upstream CCM's --------------------------------------------------------
#
# Upstream's RBAC objects, as cloud-provider-aws's chart names them (v1.35.2,
# charts/aws-cloud-controller-manager/values.yaml: clusterRoleName
# system:cloud-controller-manager, serviceAccountName cloud-controller-manager, roleBindingName
# cloud-controller-manager:apiserver-authentication-reader; templates/clusterrole.yaml,
# cluserrolebinding.yaml, rolebinding.yaml, serviceaccount.yaml). DigitalOcean's release
# manifest (releases/digitalocean-cloud-controller-manager/v0.1.68.yml) uses the same
# ServiceAccount, ClusterRole and ClusterRoleBinding names.
UPSTREAM_ACCOUNT = "cloud-controller-manager"


def upstream_rbac() -> list[dict[str, Any]]:
    """The objects cloud-provider-aws's chart installs for its CCM (its rules from
    :data:`UPSTREAM_CLUSTER_ROLE`)."""
    subject = {"kind": "ServiceAccount", "name": UPSTREAM_ACCOUNT, "namespace": KUBE_SYSTEM}
    rules = [
        {"apiGroups": [group], "resources": [resource], "verbs": verbs.split()}
        for group, resource, verbs in UPSTREAM_CLUSTER_ROLE
    ]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": UPSTREAM_ACCOUNT, "namespace": KUBE_SYSTEM},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:cloud-controller-manager"},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:cloud-controller-manager"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:cloud-controller-manager",
            },
            "subjects": [subject],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {
                "name": "cloud-controller-manager:apiserver-authentication-reader",
                "namespace": KUBE_SYSTEM,
            },
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "extension-apiserver-authentication-reader",
            },
            "subjects": [subject],
        },
    ]


def stored(api: KubeApi, obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server holds of ``obj``: its rules, roleRef and subjects."""
    current = api.request("GET", f"{collection_path(api, obj)}/{obj['metadata']['name']}")
    return {k: current.get(k) for k in ("rules", "roleRef", "subjects")}


def server_side_apply(api: KubeApi, objects: list[dict[str, Any]], manager: str) -> None:
    """``kubectl apply --server-side`` of ``objects``, as field manager ``manager``."""
    for obj in objects:
        api.request(
            "PATCH",
            f"{collection_path(api, obj)}/{obj['metadata']['name']}",
            query={"fieldManager": manager, "force": "true"},
            body=obj,
            content_type="application/apply-patch+yaml",
        )


@pytest.mark.parametrize("overlay", PROVIDERS)
def test_installs_beside_upstream_without_touching_its_rbac(
    kube_api: KubeApi, overlay: str
) -> None:
    """An upstream CCM's RBAC is installed first (cloud-provider-aws's chart's names); polyccm's
    overlay applied after it changes none of upstream's objects, and once upstream is
    uninstalled (its objects deleted, as ``helm uninstall`` does) polyccm's ServiceAccount still
    has every grant of its roles; the reverse holds too."""
    ours = [o for o in rendered(OVERLAYS / overlay) if o["kind"] not in ("Deployment",)]
    theirs = upstream_rbac()
    ensure_namespace(kube_api, KUBE_SYSTEM)
    remove(kube_api, ours)
    remove(kube_api, theirs)
    try:
        server_side_apply(kube_api, theirs, "helm")
        before = {o["metadata"]["name"] + o["kind"]: stored(kube_api, o) for o in theirs}
        server_side_apply(kube_api, ours, "kubectl")
        names = {(o["kind"], o["metadata"]["name"]) for o in ours}
        shared = names & {(o["kind"], o["metadata"]["name"]) for o in theirs}
        assert not shared, f"polyccm's objects take upstream's names: {sorted(shared)}"
        after = {o["metadata"]["name"] + o["kind"]: stored(kube_api, o) for o in theirs}
        assert after == before, "applying polyccm changed upstream's RBAC"

        # helm uninstall of upstream: polyccm keeps every grant.
        remove(kube_api, theirs)
        roles = [o for o in ours if o["kind"] in ("ClusterRole", "Role")]
        for role in roles:
            scope = role["metadata"].get("namespace", "")
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            name = (rule.get("resourceNames") or [""])[0]
                            where = {"namespace": scope, "name": name}
                            assert wait_for(
                                lambda g=group, r=resource, v=verb, w=where: account_may(
                                    kube_api, g, r, v, **w
                                ),
                                10,
                                f"{verb} {resource} still granted to polyccm",
                            )
        assert account_may(kube_api, "authentication.k8s.io", "tokenreviews", "create")

        # And polyccm's removal leaves upstream's objects alone.
        server_side_apply(kube_api, theirs, "helm")
        remove(kube_api, ours)
        after = {o["metadata"]["name"] + o["kind"]: stored(kube_api, o) for o in theirs}
        assert after == before, "removing polyccm changed upstream's RBAC"
    finally:
        remove(kube_api, ours)
        remove(kube_api, theirs)


# -- The read-only plan Job of the migration runbooks ----------------------------------------

READ_VERBS = {"get", "list", "watch"}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_plan_job_runs_plan_in_the_provider_image_on_a_read_only_account(provider: str) -> None:
    """deploy/migrate/plan/<provider>: a Job running ``plan`` in the provider's image, once, on
    the polyccm-plan ServiceAccount, whose every rule only reads; its flags parse."""
    objects = rendered(PLAN_JOBS / provider)
    job = only(objects, "Job")
    pod = job["spec"]["template"]["spec"]
    (main,) = pod["containers"]
    assert main["image"] == f"ghcr.io/polyccm/polyccm-{provider}:0.1.0"
    assert main["args"][0] == "plan" and "command" not in main
    assert (job["spec"]["backoffLimit"], pod["restartPolicy"]) == (0, "Never")
    assert "ports" not in main, "plan serves nothing"
    account = only(objects, "ServiceAccount")["metadata"]["name"]
    assert pod["serviceAccountName"] == account == "polyccm-plan"
    for role in (o for o in objects if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= READ_VERBS, (role["metadata"]["name"], rule)
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert bindings and all(
        b["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": KUBE_SYSTEM}]
        for b in bindings
    )
    # The controller's objects are not there: applying the Job starts no polyccm.
    assert not [o for o in objects if o["kind"] in ("Deployment", "DaemonSet")]
    arguments = [a for a in main["args"][1:] if not a.startswith("--cloud-config=")]
    options, _ = commandline.parse([f"--provider={provider}", *arguments], plugin_manager())
    assert options.provider == provider


@pytest.mark.timeout(120)
def test_plan_runs_on_the_plan_account_with_nothing_refused(
    kube_api: KubeApi, control_plane: Any, namespace: str, clean_nodes: None, tmp_path: Path
) -> None:
    """``polyccm plan`` on a token of the plan Job's ServiceAccount reads the cluster with no
    request refused, and writes nothing."""
    objects = [o for o in rendered(PLAN_JOBS / "packet") if o["kind"] != "Job"]
    ensure_namespace(kube_api, KUBE_SYSTEM)
    remove(kube_api, objects)
    for obj in objects:
        kube_api.request("POST", collection_path(kube_api, obj), body=obj)
    try:
        node = f"plan-{secrets.token_hex(3)}"
        make_node(kube_api, node, tainted=True)
        make_service(kube_api, namespace, "web")
        kubeconfig = service_account_kubeconfig(
            kube_api, control_plane, tmp_path, namespace=KUBE_SYSTEM, name="polyccm-plan"
        )
        (tmp_path / "scenario.json").write_text(
            json.dumps({"instances": [node], "hold": {}, "gates": str(tmp_path)})
        )
        completed = subprocess.run(
            [
                *RECORDED_POLYCCM,
                "plan",
                "--configure-cloud-routes=false",
                f"--kubeconfig={kubeconfig}",
            ],
            env={
                **os.environ,
                RECORD_VARIABLE: str(tmp_path / RECORD_FILE),
                SCENARIO_VARIABLE: str(tmp_path / "scenario.json"),
            },
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    finally:
        remove(kube_api, objects)
    # Something to do (a node to initialise, a load balancer to create): exit 1, as the Job
    # then fails and its log says what.
    assert completed.returncode == 1, completed.stderr[-3000:]
    assert node in completed.stdout and "web" in completed.stdout
    requests = recorded_requests(tmp_path / RECORD_FILE)
    assert requests
    assert not [str(r) for r in requests if r.status in (401, 403)]
    assert {r.verb for r in requests} <= READ_VERBS, sorted({str(r) for r in requests})


RUNBOOKS = ROOT / "docs" / "migrate"
#: Upstream's paths the runbooks name (in their repositories, not this one).
UPSTREAM_PATHS = {
    "deploy/template/deployment.yaml",  # kubernetes-sigs/cloud-provider-equinix-metal
    "deploy/packages/default/manifest.yaml",  # kubernetes/cloud-provider-gcp
}


def test_each_provider_has_a_migration_runbook_naming_what_exists() -> None:
    """docs/migrate: a runbook per provider; every repository path a runbook names exists, and
    the label selectors its commands use for polyccm's pods select the Deployment's pods."""
    assert sorted(p.stem for p in RUNBOOKS.glob("*.md") if p.stem != "README") == PROVIDERS
    labels = deployment("aws")["spec"]["template"]["metadata"]["labels"]
    for runbook in RUNBOOKS.glob("*.md"):
        text = runbook.read_text()
        for path in re.findall(r"(?<![\w/.-])((?:deploy|docs|providers)/[\w./-]*[\w])", text):
            concrete = path.replace("<provider>", "aws")
            if concrete in UPSTREAM_PATHS:
                continue
            assert (ROOT / concrete).exists(), f"{runbook.name}: {path}"
        for selector in re.findall(r"-l (app\.kubernetes\.io/name=polyccm\S*)", text):
            wanted = dict(pair.split("=") for pair in selector.split(","))
            assert wanted.items() <= labels.items(), f"{runbook.name}: {selector}"
        if runbook.stem in PROVIDERS:
            assert f"deploy/migrate/plan/{runbook.stem}" in text
            assert f"deploy/kustomize/overlays/{runbook.stem}" in text


# -- Scheduling: the real kube-scheduler places the pods -------------------------------------
#
# No kubelet: a Node object is all the scheduler reads (labels, taints, allocatable). Each pod
# is one the Deployment's ReplicaSet would make from the rendered template (no
# kube-controller-manager runs here), and kube-scheduler binds it or records why not.

CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"


@functools.cache
def _composed(overlay: Path, component: Path | None, directory: Path) -> tuple[Any, ...]:
    """``kustomize build`` of a kustomization of ``overlay`` with ``component`` added."""
    directory.mkdir(parents=True, exist_ok=True)
    body: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(overlay, directory)],
    }
    if component:
        body["components"] = [os.path.relpath(component, directory)]
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(body))
    return tuple(rendered(directory))


def with_single_replica(provider: str, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """The provider's overlay with the single-replica component, as the component's comment
    says to compose them."""
    where = tmp_path_factory.getbasetemp() / f"single-replica-{provider}"
    return copy.deepcopy(list(_composed(OVERLAYS / provider, SINGLE_REPLICA, where)))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_single_replica_component_changes_only_the_replica_count(
    provider: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    single = with_single_replica(provider, tmp_path_factory)
    plain = rendered(OVERLAYS / provider)
    assert only(single, "Deployment")["spec"]["replicas"] == 1
    only(single, "Deployment")["spec"]["replicas"] = only(plain, "Deployment")["spec"]["replicas"]
    assert single == plain


def control_plane_node(
    api: KubeApi,
    name: str,
    *,
    role_value: str = "",
    taints: tuple[tuple[str, str], ...] = (),
    labels: dict[str, str] | None = None,
) -> None:
    """A Node as a kubelet registers it (allocatable included) on a control-plane machine:
    kubeadm's role label (``role_value`` ``""``; other installers set ``"true"``) and taint,
    plus ``taints`` ``(key, effect)``; ``role_value=None``-like workers pass ``labels``."""
    node_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    node_labels.update(labels if labels is not None else {CONTROL_PLANE_ROLE: role_value})
    # The kubelet registers the uninitialized taint with the value "true" (kubernetes v1.35,
    # pkg/kubelet/kubelet_node_status.go:325-330, initialNode), which the toleration names.
    all_taints = [
        {"key": key, "effect": effect, **({"value": "true"} if key == UNINITIALIZED_TAINT else {})}
        for key, effect in taints
    ]
    if labels is None:
        all_taints.insert(0, {"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"})
    api.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels},
            "spec": {"taints": all_taints},
        },
    )
    resources = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    api.request(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        body={"status": {"capacity": resources, "allocatable": resources}},
        content_type="application/merge-patch+json",
    )


@pytest.fixture
def scheduler(control_plane: Any, kube_api: KubeApi, tmp_path: Path) -> Iterator[None]:
    """kube-scheduler of the kube-apiserver's release on the control plane (admin
    credentials, no leader election, no serving port), stopped after the test."""
    try:
        binary = kube_scheduler_path()
    except BinaryError as error:
        pytest.fail(f"no kube-scheduler: {error}", pytrace=False)
    log = tmp_path / "kube-scheduler.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(binary),
                f"--kubeconfig={control_plane.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                "--v=2",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        time.sleep(0.5)
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        yield
    finally:
        stop(process)
        for pod in kube_api.request("GET", f"/api/v1/namespaces/{KUBE_SYSTEM}/pods")["items"]:
            if pod["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "polyccm":
                try:
                    kube_api.request(
                        "DELETE",
                        f"/api/v1/namespaces/{KUBE_SYSTEM}/pods/{pod['metadata']['name']}",
                        query={"gracePeriodSeconds": "0"},
                    )
                except ApiError as error:
                    if not error.not_found:
                        raise


def replicas_of(api: KubeApi, deploy: dict[str, Any]) -> list[str]:
    """Create the pods the Deployment's ReplicaSet would (``spec.replicas`` of them, from its
    template) and return their names."""
    template = deploy["spec"]["template"]
    names = []
    for _ in range(deploy["spec"]["replicas"]):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **template["metadata"],
                "generateName": f"{deploy['metadata']['name']}-",
                "namespace": KUBE_SYSTEM,
            },
            "spec": template["spec"],
        }
        created = api.request("POST", f"/api/v1/namespaces/{KUBE_SYSTEM}/pods", body=pod)
        names.append(created["metadata"]["name"])
    return names


def placement(api: KubeApi, name: str) -> tuple[str, str]:
    """``(node, "")`` once the pod is bound, ``("", message)`` once the scheduler has
    recorded it unschedulable, ``("", "")`` before either."""
    pod = api.request("GET", f"/api/v1/namespaces/{KUBE_SYSTEM}/pods/{name}")
    if pod["spec"].get("nodeName"):
        return pod["spec"]["nodeName"], ""
    for condition in pod.get("status", {}).get("conditions") or ():
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return "", str(condition.get("message", "Unschedulable"))
    return "", ""


#: The taints a fresh control-plane node has before polyccm and the pod network run: the
#: kubelet's (--cloud-provider=external), and the node lifecycle's while the node is not ready.
FRESH_NODE_TAINTS = (
    (UNINITIALIZED_TAINT, "NoSchedule"),
    ("node.kubernetes.io/not-ready", "NoSchedule"),
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("role_value", "taints"),
    [
        pytest.param("", FRESH_NODE_TAINTS, id="kubeadm"),
        pytest.param(
            "true",
            (
                ("CriticalAddonsOnly", "NoSchedule"),
                ("node.kubernetes.io/network-unavailable", "NoSchedule"),
            ),
            id="role-true-critical-addons",
        ),
    ],
)
def test_single_replica_is_scheduled_on_the_one_control_plane_node(
    kube_api: KubeApi,
    applied_rbac: list[dict[str, Any]],
    clean_nodes: None,
    scheduler: None,
    tmp_path_factory: pytest.TempPathFactory,
    role_value: str,
    taints: tuple[tuple[str, str], ...],
) -> None:
    """One control-plane node (kubeadm's label and taint, or a role label "true" and the
    CriticalAddonsOnly taint), tainted as before any CCM and pod network ran, and a worker
    with room: the single-replica Deployment's one pod is bound to the control-plane node,
    so a rollout completes."""
    suffix = secrets.token_hex(3)
    control, worker = f"control-{suffix}", f"worker-{suffix}"
    control_plane_node(kube_api, control, role_value=role_value, taints=taints)
    control_plane_node(kube_api, worker, labels={})
    deploy = only(with_single_replica("aws", tmp_path_factory), "Deployment")
    (pod,) = replicas_of(kube_api, deploy)
    node, why = wait_for(lambda: any(placement(kube_api, pod)) and placement(kube_api, pod), 60)
    assert (node, why) == (control, ""), why


@pytest.mark.timeout(120)
def test_base_spreads_two_replicas_over_two_control_plane_nodes_and_waits_on_one(
    kube_api: KubeApi,
    applied_rbac: list[dict[str, Any]],
    clean_nodes: None,
    scheduler: None,
) -> None:
    """The base's two replicas land on two control-plane nodes, never together; with one
    control-plane node the second stays Pending (the host port keeps it off the node whatever
    the affinity), which is what the single-replica component is for."""
    suffix = secrets.token_hex(3)
    first, second = f"control-a-{suffix}", f"control-b-{suffix}"
    control_plane_node(kube_api, first, taints=FRESH_NODE_TAINTS)
    control_plane_node(kube_api, f"worker-{suffix}", labels={})
    deploy = deployment("aws")
    pods = replicas_of(kube_api, deploy)
    assert len(pods) == 2
    placed = wait_for(
        lambda: (
            all(any(placement(kube_api, p)) for p in pods)
            and [placement(kube_api, p) for p in pods]
        ),
        60,
        "both pods bound or unschedulable",
    )
    assert sorted(node for node, _ in placed) == ["", first]
    (why,) = [message for node, message in placed if not node]
    assert "free ports" in why or "anti-affinity" in why, why

    # A second control-plane node: the pending replica goes there.
    control_plane_node(kube_api, second, taints=FRESH_NODE_TAINTS)
    wait_for(
        lambda: sorted(placement(kube_api, p)[0] for p in pods) == [first, second],
        60,
        "the second replica on the second control-plane node",
    )


# -- The Helm chart (deploy/helm/polyccm) ----------------------------------------------------
#
# Rendered by the pinned helm (``polyccm_testing.devenv.binaries.helm_path``, built from the Go
# module proxy like kustomize), then held to what the kustomize overlays are held to.

#: Values a release of each provider needs (credentials for the two that take a Secret).
CHART_VALUES: dict[str, dict[str, Any]] = {
    "aws": {"cloudConfig": (OVERLAYS / "aws" / "cloud.conf").read_text()},
    "gce": {
        "cloudConfig": (OVERLAYS / "gce" / "gce.conf").read_text(),
        "routes": {"enabled": True, "clusterCIDR": "10.244.0.0/16"},
    },
    "digitalocean": {"credentials": {"existingSecret": "digitalocean"}},
    "packet": {"credentials": {"values": {"api-key": "REPLACE_WITH_KEY", "project-id": "p"}}},
}


def helm_binary() -> Path:
    try:
        return helm_path()
    except BinaryError as error:
        pytest.skip(f"no helm (it is built with Go): {str(error).splitlines()[0]}")


def helm_template(
    values: dict[str, Any], tmp_dir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart with ``values`` (a values file), as ``helm install``
    would render it."""
    directory = tmp_dir or Path(os.environ.get("TMPDIR", "/tmp"))
    values_file = directory / f"values-{secrets.token_hex(4)}.yaml"
    values_file.write_text(yaml.safe_dump(values))
    try:
        return subprocess.run(
            [
                str(helm_binary()),
                "template",
                "polyccm",
                str(CHART),
                "--namespace",
                KUBE_SYSTEM,
                "--values",
                str(values_file),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    finally:
        values_file.unlink()


@functools.cache
def _chart(values_json: str) -> tuple[dict[str, Any], ...]:
    completed = helm_template(json.loads(values_json))
    assert completed.returncode == 0, completed.stderr
    return tuple(doc for doc in yaml.safe_load_all(completed.stdout) if doc)


def chart(provider: str, **values: Any) -> list[dict[str, Any]]:
    """The chart's objects for ``provider`` with its :data:`CHART_VALUES` and ``values``."""
    merged = {"provider": provider, **CHART_VALUES[provider], **values}
    return copy.deepcopy(list(_chart(json.dumps(merged, sort_keys=True))))


def chart_rbac(provider: str) -> list[dict[str, Any]]:
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    return [o for o in chart(provider) if o["kind"] in kinds]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_chart_passes_server_side_dry_run(kube_api: KubeApi, provider: str) -> None:
    """Every object the chart renders for the provider (two replicas: the
    PodDisruptionBudget too) is accepted by the real API server, strictly validated, and its
    pod passes admission."""
    objects = chart(provider)
    assert {"Deployment", "PodDisruptionBudget", "ClusterRole", "Role"} <= {
        o["kind"] for o in objects
    }
    ensure_namespace(kube_api, KUBE_SYSTEM)
    for obj in objects:
        assert obj["metadata"].get("namespace", KUBE_SYSTEM) == KUBE_SYSTEM
        path = collection_path(kube_api, obj)
        url = f"{path}/{obj['metadata']['name']}"
        try:
            if exists(kube_api, url):  # a dev control plane it was applied to: as an update
                kube_api.request(
                    "PATCH",
                    url,
                    query={**DRY_RUN, "fieldManager": "polyccm-tests", "force": True},
                    body=obj,
                    content_type="application/apply-patch+yaml",
                )
            else:
                kube_api.request("POST", path, query=DRY_RUN, body=obj)
        except ApiError as error:
            pytest.fail(f"{provider}: {obj['kind']} {obj['metadata']['name']}: {error}")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_chart_deployment_is_the_overlays(provider: str, tmp_path: Path) -> None:
    """The chart's Deployment runs the same pod as the provider's kustomize overlay: image,
    scheduling, probes, limits, security, and flags polyccm's parser reads alike."""
    deploy = only(chart(provider), "Deployment")
    overlay = deployment(provider)
    assert deploy["metadata"]["name"] == overlay["metadata"]["name"]
    assert deploy["spec"]["replicas"] == overlay["spec"]["replicas"] == 2
    pod, overlay_pod = deploy["spec"]["template"]["spec"], overlay["spec"]["template"]["spec"]
    for key in (
        "serviceAccountName",
        "priorityClassName",
        "hostNetwork",
        "dnsPolicy",
        "affinity",
        "tolerations",
        "securityContext",
    ):
        assert pod[key] == overlay_pod[key], key
    main, overlay_main = container(deploy), container(overlay)
    for key in (
        "image",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
    ):
        assert main[key] == overlay_main[key], key
    args = [
        f"--cloud-config={tmp_path / 'cloud.conf'}" if a.startswith("--cloud-config=") else a
        for a in main["args"]
    ]
    if provider in CLOUD_CONFIG_FILES:
        config_map = only(chart(provider), "ConfigMap")
        (tmp_path / "cloud.conf").write_text(config_map["data"]["cloud.conf"])
    options, _ = commandline.parse([f"--provider={provider}", *args], plugin_manager())
    assert options.provider == provider and options.leader_election.enabled
    assert options.configure_cloud_routes == (provider == "gce")
    assert ("--cloud-config" in flag_values(main["args"])) == (provider in CLOUD_CONFIG_FILES)
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in main.get("env", [])}
    expected = {
        name: {
            "name": "digitalocean" if provider == "digitalocean" else "polyccm-cloud-credentials",
            "key": key,
        }
        for name, (_, key) in SECRET_ENV[provider].items()
    }
    assert env == expected


@pytest.mark.parametrize("provider", PROVIDERS)
def test_chart_rbac_is_the_overlays(provider: str) -> None:
    """Same names, same rules, same bindings as the kustomize overlay (whose every grant the
    ServiceAccount scenario uses, and whose every rule the rule-by-rule runs need), and a
    ClusterRole equal to what ``polyccm rbac --provider NAME`` prints."""

    def essence(objects: list[dict[str, Any]]) -> list[Any]:
        kept = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
        return sorted(
            (
                o["kind"],
                o["metadata"]["name"],
                o["metadata"].get("namespace"),
                o.get("rules"),
                o.get("roleRef"),
                o.get("subjects"),
            )
            for o in objects
            if o["kind"] in kept
        )

    assert essence(chart_rbac(provider)) == essence(rendered(OVERLAYS / provider))


def test_chart_runs_metal_on_upstreams_cloud_sa_json(kube_api: KubeApi) -> None:
    """Equinix Metal with upstream's own Secret metal-cloud-config (key cloud-sa.json, as
    cloud-provider-equinix-metal's deploy/template/secret.yaml names it) as the cloud config:
    no credentials Secret of polyccm's, the file mounted where --cloud-config points, and the
    render passes a server-side dry run."""
    existing = {"kind": "Secret", "name": "metal-cloud-config", "key": "cloud-sa.json"}
    values = {"provider": "packet", "existingCloudConfig": existing}
    objects = copy.deepcopy(list(_chart(json.dumps(values, sort_keys=True))))
    assert not [o for o in objects if o["kind"] == "Secret"]
    deploy = only(objects, "Deployment")
    main = container(deploy)
    assert "env" not in main
    mount = next(m for m in main["volumeMounts"] if m["name"] == "cloud-config")
    assert mount["mountPath"] == flag_values(main["args"])["--cloud-config"]
    assert mount["subPath"] == "cloud-sa.json"
    (volume,) = [
        v for v in deploy["spec"]["template"]["spec"]["volumes"] if v["name"] == "cloud-config"
    ]
    assert volume["secret"]["secretName"] == "metal-cloud-config"
    kube_api.request("POST", collection_path(kube_api, deploy), query=DRY_RUN, body=deploy)


def test_chart_single_replica_has_no_disruption_budget() -> None:
    one = chart("aws", replicas=1)
    assert only(one, "Deployment")["spec"]["replicas"] == 1
    assert not [o for o in one if o["kind"] == "PodDisruptionBudget"]
    (budget,) = [o for o in chart("aws") if o["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["maxUnavailable"] == 1
    labels = only(chart("aws"), "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_chart_takes_replicas_affinity_tolerations_resources_and_extra_args() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cp"]}]}
                ]
            }
        }
    }
    tolerations = [{"key": "dedicated", "operator": "Exists"}]
    resources = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "2Gi"}}
    deploy = only(
        chart(
            "aws",
            replicas=3,
            affinity=affinity,
            tolerations=tolerations,
            resources=resources,
            extraArgs=["--kube-api-qps=1000", "--concurrent-service-syncs=4"],
            image={"repository": "registry.example.com/polyccm-aws", "tag": "1.2.3"},
        ),
        "Deployment",
    )
    pod = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 3
    # Lists replace the defaults; maps merge with them (helm's rule), so the default
    # anti-affinity stays beside the given node affinity until it is set to null.
    assert pod["tolerations"] == tolerations
    assert pod["affinity"]["nodeAffinity"] == affinity["nodeAffinity"]
    assert (
        pod["affinity"]["podAntiAffinity"]
        == deployment("aws")["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    )
    without = only(chart("aws", affinity={**affinity, "podAntiAffinity": None}), "Deployment")
    assert without["spec"]["template"]["spec"]["affinity"] == affinity
    main = container(deploy)
    assert main["resources"] == {  # merged too: the default CPU limit stays
        "requests": {"cpu": "50m", "memory": "64Mi"},
        "limits": {"cpu": "1", "memory": "2Gi"},
    }
    assert main["image"] == "registry.example.com/polyccm-aws:1.2.3"
    assert main["args"][-2:] == ["--kube-api-qps=1000", "--concurrent-service-syncs=4"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "provider must be one of aws, gce, digitalocean, packet"),
        ({"provider": "azure"}, "provider must be one of"),
        ({"provider": "digitalocean"}, "provider digitalocean needs credentials"),
        ({"provider": "packet"}, "provider packet needs credentials"),
        (
            {
                "provider": "packet",
                "credentials": {"existingSecret": "m"},
                "routes": {"enabled": True},
            },
            "provider packet has no cloud routes",
        ),
        (
            {"provider": "aws", "routes": {"enabled": True}},
            "routes.enabled needs routes.clusterCIDR",
        ),
    ],
)
def test_chart_refuses_incomplete_values_with_one_line(
    values: dict[str, Any], message: str, tmp_path: Path
) -> None:
    completed = helm_template(values, tmp_path)
    assert completed.returncode != 0
    assert message in completed.stderr, completed.stderr


def test_chart_pod_monitor_scrapes_the_https_port_with_a_metrics_reader_token(
    kube_api: KubeApi,
) -> None:
    """podMonitor.enabled: a PodMonitor on the pods' https port with a bearer token from a
    ServiceAccount the chart makes, which the API server lets get /metrics (what polyccm's
    secure port asks it)."""
    objects = chart("aws", podMonitor={"enabled": True})
    monitor = only(objects, "PodMonitor")
    deploy = only(objects, "Deployment")
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in container(deploy)["ports"]}
    assert (endpoint["scheme"], endpoint["path"]) == ("https", "/metrics")
    secret = only(objects, "Secret", endpoint["authorization"]["credentials"]["name"])
    account = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    reader = [
        o
        for o in objects
        if o["kind"] != "PodMonitor" and "metrics-reader" in o["metadata"]["name"]
    ]
    remove(kube_api, reader)
    try:
        for obj in reader:
            kube_api.request("POST", collection_path(kube_api, obj), body=obj)
        user = f"system:serviceaccount:{KUBE_SYSTEM}:{account}"
        groups = service_account_groups(KUBE_SYSTEM)
        metrics = {"path": "/metrics", "verb": "get"}
        wait_for(
            lambda: access_review(kube_api, user, groups, metrics, resource=False),
            10,
            "the chart's metrics reader allowed /metrics",
        )
    finally:
        remove(kube_api, reader)
    assert not [o for o in chart("aws") if o["kind"] == "PodMonitor"], "off by default"


@pytest.mark.parametrize(
    "pod_monitor",
    [
        {"enabled": True},
        # Every value the PodMonitor takes, set: a scrape secret of one's own, labels for a
        # Prometheus's podMonitorSelector, another interval.
        {
            "enabled": True,
            "interval": "1m",
            "labels": {"release": "kube-prometheus-stack"},
            "tokenSecret": {"name": "prometheus-scrape-token", "key": "jwt"},
        },
    ],
    ids=["defaults", "every-value"],
)
def test_chart_pod_monitor_passes_server_side_apply_with_the_prometheus_operator_crd(
    kube_api: KubeApi, pod_monitor: dict[str, Any]
) -> None:
    """With prometheus-operator's PodMonitor CRD installed (vendored at the version
    polyccm_testing/crds/SOURCE.md names), everything the chart renders with podMonitor
    values passes a server-side apply dry run with strict field validation, the PodMonitor
    validated against the CRD's schema and kept whole."""
    install_crd(kube_api, PODMONITORS)
    ensure_namespace(kube_api, KUBE_SYSTEM)
    objects = chart("aws", podMonitor=pod_monitor)
    monitor = only(objects, "PodMonitor")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["interval"] == pod_monitor.get("interval", "30s")
    for obj in objects:
        try:
            answer = apply(kube_api, obj, dry_run=True)
        except ApiError as error:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {error}", pytrace=False)
        assert answer["metadata"]["name"] == obj["metadata"]["name"]
        if obj["kind"] == "PodMonitor":
            assert answer["spec"] == monitor["spec"]
            assert answer["metadata"]["labels"] == monitor["metadata"]["labels"]


if __name__ == "__main__":
    sys.exit(recorded_polyccm(sys.argv[1:]))
