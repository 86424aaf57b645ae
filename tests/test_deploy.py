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
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
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
from polyccm.plugins import installed_providers, plugin_manager
from polyccm_testing.kubeobjects import make_node, make_service, reasons_for, wait_for

ROOT = Path(__file__).resolve().parents[1]
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


# -- the workspace ---------------------------------------------------------------------------


def _toml(path: Path) -> dict[str, Any]:
    with path.open("rb") as handle:
        return tomllib.load(handle)


def workspace_members() -> list[Path]:
    """Directories of the uv workspace members, from the root pyproject.toml."""
    patterns = _toml(ROOT / "pyproject.toml")["tool"]["uv"]["workspace"]["members"]
    members: list[Path] = []
    for pattern in patterns:
        members.extend(sorted(p.parent for p in ROOT.glob(f"{pattern}/pyproject.toml")))
    return members


def provider_projects() -> dict[str, dict[str, Any]]:
    """Provider name (the entry point in group ``polyccm``) -> its ``[project]`` table."""
    providers: dict[str, dict[str, Any]] = {}
    for member in workspace_members():
        project = _toml(member / "pyproject.toml")["project"]
        names = list(project.get("entry-points", {}).get("polyccm", {}))
        if names:
            assert len(names) == 1, f"{member.name} registers several entry points: {names}"
            providers[names[0]] = project
    return providers


PROVIDERS = sorted(provider_projects())


def test_the_workspace_has_the_four_providers() -> None:
    assert PROVIDERS == ["aws", "digitalocean", "gce", "packet"]
    for name, project in provider_projects().items():
        assert project["name"] == f"polyccm-{name}"


# -- the Dockerfile --------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        keyword, _, rest = pending.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """Instructions per stage, keyed by stage name (``""`` for the unnamed final stage)."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for keyword, rest in dockerfile_instructions():
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            assert name not in stages, f"stage {name!r} defined twice"
            current = stages[name] = [(keyword, rest)]
        elif current is not None:
            current.append((keyword, rest))
    return stages


def global_args() -> dict[str, str]:
    """The ``ARG`` defaults declared before the first ``FROM``."""
    args: dict[str, str] = {}
    for keyword, rest in dockerfile_instructions():
        if keyword == "FROM":
            break
        if keyword == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
    return args


def test_dockerfile_has_one_entrypoint_stage_per_workspace_provider() -> None:
    stages = dockerfile_stages()
    entrypoints = {}
    for name, instructions in stages.items():
        for keyword, rest in instructions:
            if keyword == "ENTRYPOINT":
                entrypoints[name] = yaml.safe_load(rest)  # exec form is a JSON list
    assert sorted(entrypoints) == [f"provider-{p}" for p in PROVIDERS]
    for provider in PROVIDERS:
        assert entrypoints[f"provider-{provider}"] == ["polyccm", f"--provider={provider}"]
    # The default target picks the stage named after the build argument.
    assert stages[""] == [("FROM", "provider-${PROVIDER}")]
    assert "PROVIDER" in global_args()
    # The build refuses any other PROVIDER with a message, before installing anything.
    run_lines = [rest for keyword, rest in stages["build"] if keyword == "RUN"]
    case = re.search(r'case "\$\{PROVIDER\}" in\s+([\w|]+)\)', run_lines[0])
    assert case is not None, run_lines[0]
    assert sorted(case.group(1).split("|")) == PROVIDERS


def test_entrypoint_provider_names_are_the_installed_providers() -> None:
    # The console script the entrypoint runs is the core's, and each name it passes to
    # --provider is one the installed distributions register.
    assert _toml(ROOT / "core" / "pyproject.toml")["project"]["scripts"]["polyccm"]
    installed = set(installed_providers(plugin_manager()))
    assert set(PROVIDERS) <= installed, installed
    for provider in PROVIDERS:
        options, _ = parse(
            [f"--provider={provider}", "--cluster-cidr=10.0.0.0/8"], plugin_manager()
        )
        assert options.provider == provider


def test_dockerfile_base_image_user_and_install_command() -> None:
    stages = dockerfile_stages()
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", global_args()["PYTHON_IMAGE"])
    for stage in ("build", "runtime"):
        assert stages[stage][0] == ("FROM", f"${{PYTHON_IMAGE}} AS {stage}")
    users = [rest for keyword, rest in stages["runtime"] if keyword == "USER"]
    assert len(users) == 1
    uid, _, gid = users[0].partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0, users
    syncs = [rest for keyword, rest in stages["build"] if keyword == "RUN" and "uv sync" in rest]
    assert len(syncs) == 1
    words = shlex.split(syncs[0])
    assert {"--frozen", "--no-dev", "--no-editable"} <= set(words)
    assert words[words.index("--package") + 1] == "polyccm-${PROVIDER}"
    # The runtime stage takes only the environment from the build stage (no uv, no sources).
    copies = [rest for keyword, rest in stages["runtime"] if keyword == "COPY"]
    assert copies == ["--from=build /opt/polyccm /opt/polyccm"]


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """``(excluded, regex)`` per line of the Dockerfile's ignore file, in order."""
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        excluded = not line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = ""
        index = 0
        while index < len(pattern):
            if pattern.startswith("**/", index):
                regex += "(?:.*/)?"
                index += 3
            elif pattern.startswith("**", index):
                regex += ".*"
                index += 2
            elif pattern[index] == "*":
                regex += "[^/]*"
                index += 1
            elif pattern[index] == "?":
                regex += "[^/]"
                index += 1
            else:
                regex += re.escape(pattern[index])
                index += 1
        rules.append((excluded, re.compile(regex)))
    return rules


def sent_to_builder(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker sends ``path`` (relative to the context): the last rule that matches the
    path or one of its parent directories decides, as in Docker's ignore files."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    sent = True
    for excluded, regex in rules:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            sent = not excluded
    return sent


def tracked_files() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in listing.stdout.splitlines() if (ROOT / line).is_file()]


def build_context() -> list[str]:
    rules = dockerignore_patterns()
    return [path for path in tracked_files() if sent_to_builder(path, rules)]


def test_dockerfile_copies_existing_paths_and_the_context_holds_every_source() -> None:
    context = set(build_context())
    for stage in dockerfile_stages().values():
        for keyword, rest in stage:
            if keyword != "COPY" or rest.startswith("--from="):
                continue
            *sources, _destination = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: no such path"
                prefix = source.rstrip("/")
                assert any(p == prefix or p.startswith(prefix + "/") for p in context), source
    # What hatchling builds the wheels from (sources, READMEs) is sent; tests and the rest are not.
    for member in workspace_members():
        relative = member.relative_to(ROOT).as_posix()
        project = _toml(member / "pyproject.toml")["project"]
        assert f"{relative}/pyproject.toml" in context
        assert f"{relative}/{project['readme']}" in context
        sources = [p for p in tracked_files() if p.startswith(f"{relative}/src/")]
        if project["name"] == "polyccm-testing":
            # Its metadata reads the lock; its code (dev control plane, fake cloud) stays out.
            assert sources and not set(sources) & context, relative
            continue
        assert sources and set(sources) <= context, relative
    assert {"pyproject.toml", "uv.lock"} <= context
    assert not [p for p in context if "/tests/" in p or p.startswith(("tests/", "deploy/"))]
    assert not [p for p in context if "__pycache__" in p or p.endswith(".pyc")]


def uv_command() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.fail("uv is needed to check the image's locked dependencies (run under `uv run`)")
    return found


def exported_requirements(provider: str) -> set[str]:
    """Distribution names the image of ``provider`` installs, from the workspace lock."""
    return _exported_names(f"polyccm-{provider}")


def _exported_names(package: str) -> set[str]:
    """Distribution names ``uv sync --package PACKAGE --no-dev`` installs, from the lock."""
    answer = subprocess.run(
        [
            uv_command(),
            "export",
            "--frozen",
            "--no-dev",
            "--no-hashes",
            "--no-header",
            "--no-annotate",
            "--package",
            package,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    names = set()
    for line in answer.stdout.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-e "):
            path = ROOT / line[3:].strip()
            names.add(_toml(path / "pyproject.toml")["project"]["name"])
        else:
            names.add(_requirement_name(line))
    return names


def _requirement_name(requirement: str) -> str:
    return re.split(r"[=<>!~;\s\[]", requirement, maxsplit=1)[0].lower()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_each_image_installs_the_core_and_its_provider_only(provider: str) -> None:
    names = exported_requirements(provider)
    projects = provider_projects()
    assert {"polyccm", f"polyccm-{provider}"} <= names
    # What the core brings anyway (the kubernetes client needs requests and google-auth) is
    # nobody's SDK.
    core = _exported_names("polyccm")
    for other, project in projects.items():
        if other == provider:
            continue
        assert project["name"] not in names
        sdks = {_requirement_name(d) for d in project["dependencies"]} - {"polyccm"}
        own = {_requirement_name(d) for d in projects[provider]["dependencies"]}
        assert not (sdks - own - core) & names, f"{provider}'s image would carry {other}'s SDK"
    # Neither the emulator extra nor the developer tools.
    assert not names & {
        "moto",
        "pytest",
        "ruff",
        "mypy",
        "import-linter",
        "flask",
        "polyccm-testing",
    }


def test_build_stage_commands_install_one_provider_from_a_copy_of_the_context(
    tmp_path: Path,
) -> None:
    """The build stage's RUN lines, relocated from /opt/polyccm and /src to a scratch directory
    and from the image's python to this one, on the files the ignore file lets through."""
    provider = "aws"
    source = tmp_path / "src"
    for path in build_context():
        target = source / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, target)
    environment = tmp_path / "opt-polyccm"
    build = dockerfile_stages()["build"]
    env = dict(os.environ)
    for key in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH"):
        env.pop(key, None)
    for keyword, rest in build:
        if keyword == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = value.replace("/opt/polyccm", str(environment))
    env["PROVIDER"] = provider
    uv_dir = str(Path(uv_command()).parent)
    env["PATH"] = f"{uv_dir}{os.pathsep}{env.get('PATH', '')}"
    base_python = getattr(sys, "_base_executable", sys.executable)
    runs = [rest for keyword, rest in build if keyword == "RUN"]
    assert runs
    for command in runs:
        command = command.replace("/opt/polyccm", str(environment)).replace(
            "/usr/local/bin/python3.11", base_python
        )
        result = subprocess.run(
            ["sh", "-c", command], cwd=source, env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    installed = subprocess.run(
        [str(environment / "bin" / "polyccm"), "--help"], capture_output=True, text=True, env=env
    )
    assert installed.returncode == 0, installed.stderr
    assert "installed providers: aws" in installed.stdout
    # A wrong PROVIDER stops the build at the first RUN.
    refused = subprocess.run(
        ["sh", "-c", runs[0]],
        cwd=source,
        env={**env, "PROVIDER": "azure"},
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "azure" in refused.stderr


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
    image_user = next(rest for keyword, rest in dockerfile_stages()["runtime"] if keyword == "USER")
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
