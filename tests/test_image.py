"""The AWS image, built and run here with buildah (no Docker engine): what it holds, and its
polyccm against the real control plane and the AWS emulator through nodes' initialisation and a
load balancer's whole life, as a Deployment would run it.

The image is built once per session as ``make image PROVIDER=aws`` builds it
(polyccm_testing.images: a debootstrap Debian base, ``buildah bud --isolation chroot``, an OCI
archive), and the containers come from that archive. Skipped, saying why, when buildah or
debootstrap is missing (``make image-tools`` installs them as root; ``make test`` runs it).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from polyccm.kube.api import NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node, Service
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World, isolated_environment
from polyccm_testing.demo import service_gone
from polyccm_testing.images.build import BuiltImage, build_image, megabytes
from polyccm_testing.images.buildah import Container, buildah, inspect_image, remove_image, stop
from polyccm_testing.images.tools import ToolsMissing, ensure_tools
from polyccm_testing.kubeobjects import make_node, make_service, wait_for

# A cold build (debootstrap, then every wheel downloaded) takes a few minutes of the first test.
pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]

#: Where the container finds the files a Deployment mounts.
CONFIG_DIR = "/etc/polyccm"
#: Modules only the other providers, the emulators, the test kit and the developer tools bring.
FOREIGN_MODULES = (
    "google.cloud.compute",
    "googleapiclient",
    "pydo",
    "equinix",
    "metal_python",
    "polyccm_gce",
    "polyccm_digitalocean",
    "polyccm_packet",
    "polyccm_testing",
    "polyccm_aws_emulator",
    "moto",
    "werkzeug",
    "openapi_core",
    "pytest",
)
#: Compilers and installers, absent from the final image.
FOREIGN_COMMANDS = ("gcc", "cc", "c++", "make", "uv", "pip", "pip3")
PROBE = """
import importlib.util, json, os, shutil, sys
from importlib.metadata import entry_points

def importable(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False

modules, commands = json.loads(sys.argv[1]), json.loads(sys.argv[2])
present = [m for m in modules if importable(m)]
import boto3, polyccm.cli, polyccm_aws.plugin  # what `polyccm --provider=aws` imports

def compiled_again(spec):
    # Whether the interpreter compiles this module's source instead of reading its byte code
    # (none, another version's, or one whose source's recorded time or size differs).
    if not spec.cached or not (spec.origin or "").endswith(".py"):
        return False
    try:
        with open(spec.cached, "rb") as pyc:
            head = pyc.read(16)
    except OSError:
        return True
    if head[:4] != importlib.util.MAGIC_NUMBER:
        return True
    flags = int.from_bytes(head[4:8], "little")
    if flags & 1:  # hash-based: used as is unless checked (PEP 552)
        if not flags & 2:
            return False
        with open(spec.origin, "rb") as source:
            return importlib.util.source_hash(source.read()) != head[8:16]
    status = os.stat(spec.origin)
    return head[8:16] != (
        (int(status.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
        + (status.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    )

# Modules whose byte code is not used: compiled again, in memory, at every start.
uncompiled = sorted(
    name for name, module in list(sys.modules.items())
    if getattr(module, "__spec__", None) is not None and compiled_again(module.__spec__)
)
print(json.dumps({
    "uid": os.getuid(),
    "optimize": sys.flags.optimize,
    "uncompiled": uncompiled,
    "present": present,
    "commands": [c for c in commands if shutil.which(c)],
    "providers": sorted(e.name for e in entry_points(group="polyccm")),
}))
"""


@dataclass(frozen=True)
class LoadedImage:
    built: BuiltImage
    id: str
    """The image loaded from the built OCI archive."""


@pytest.fixture(scope="session")
def aws_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoadedImage]:
    """The AWS image, built once and loaded from its OCI archive."""
    try:
        ensure_tools(install=False)
    except ToolsMissing as error:
        pytest.skip(str(error))
    output = tmp_path_factory.mktemp("image")
    built = build_image("aws", output=output, tag="test", build_log=output / "build.log")
    print(f"\n{built.summary()}")
    loaded = buildah("pull", "--quiet", f"oci-archive:{built.archive}").split()[-1]
    yield LoadedImage(built, loaded)
    for image in {loaded, built.id}:
        remove_image(image)


def test_the_aws_image_holds_the_core_and_boto3_alone_and_runs_as_non_root(
    aws_image: LoadedImage, record_property: Any
) -> None:
    built = aws_image.built
    record_property("image_bytes", built.size)
    record_property("archive_bytes", built.archive_size)
    config = inspect_image(aws_image.id)
    assert config.layers == inspect_image(built.id).layers, "the archive holds what was built"
    print(f"polyccm-aws: {megabytes(built.size)} unpacked, archive {megabytes(built.archive_size)}")
    assert config.entrypoint == ("polyccm", "--provider=aws")
    assert config.user == "65532:65532"
    # The version from its one place (core/pyproject.toml), as `polyccm --version` prints it.
    assert config.labels["org.opencontainers.image.version"] == metadata.version("polyccm")

    with Container(aws_image.id) as container:
        whoami = container.run(["id", "-u"])
        probe = container.run(
            [
                "python3",
                "-c",
                PROBE,
                json.dumps(["boto3", "polyccm_aws", "pip", *FOREIGN_MODULES]),
                json.dumps(["polyccm", *FOREIGN_COMMANDS]),
            ]
        )
        usage = container.run([*config.entrypoint, "--help"])

    assert whoami.returncode == 0, whoami.stderr
    assert whoami.stdout.strip() == "65532"
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert found["uid"] == 65532
    # Optimised (no docstrings), from byte code compiled at build time for that level, the
    # standard library's included.
    assert found["optimize"] == 2
    assert found["uncompiled"] == []
    assert found["present"] == ["boto3", "polyccm_aws"]
    assert found["commands"] == ["polyccm"]
    assert found["providers"] == ["aws"]
    assert usage.returncode == 0, usage.stderr
    assert "installed providers: aws" in usage.stdout


def container_kubeconfig(control_plane: Any, directory: Path) -> dict[Path, str]:
    """The control plane's admin kubeconfig and CA, readable by the image's user, mounted
    where the kubeconfig names them. Returns the mounts (host path -> path inside)."""
    config = yaml.safe_load(Path(control_plane.kubeconfig).read_text())
    (cluster,) = config["clusters"]
    ca = Path(cluster["cluster"]["certificate-authority"])
    cluster["cluster"]["certificate-authority"] = f"{CONFIG_DIR}/ca.crt"
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    kubeconfig.chmod(0o644)
    return {kubeconfig: f"{CONFIG_DIR}/kubeconfig", ca: f"{CONFIG_DIR}/ca.crt"}


def hostname(api: KubeApi, namespace: str, name: str) -> str:
    ingress = Service(api.get(SERVICES, name, namespace)).load_balancer_status.get("ingress")
    return str((ingress or [{}])[0].get("hostname") or "")


def test_the_images_polyccm_initialises_nodes_and_runs_a_load_balancer_to_its_end(
    aws_image: LoadedImage,
    kube_api: KubeApi,
    namespace: str,
    aws: EmulatorControl,
    emulator: Mapping[str, str],
    control_plane: Any,
    clean_nodes: None,
    tmp_path: Path,
) -> None:
    world = World()
    # polyccm runs on the first instance: the metadata service names it, and its cluster tag
    # gives the cluster id.
    (first,) = world.instances(1, "us-east-1a", "m5.large", ccm_host=True)
    (second,) = world.instances(1, "us-east-1b", "c5.large")
    names = [str(i["PrivateDnsName"]) for i in (first, second)]
    for name in names:
        make_node(kube_api, name)  # as kubelets register them: tainted, no providerID
    mounts = container_kubeconfig(control_plane, tmp_path)
    cloud_config = tmp_path / "cloud.conf"
    cloud_config.write_text("[Global]\nRegion = us-east-1\n")
    cloud_config.chmod(0o644)
    mounts[cloud_config] = f"{CONFIG_DIR}/cloud.conf"
    entrypoint = inspect_image(aws_image.id).entrypoint
    args = [
        f"--kubeconfig={CONFIG_DIR}/kubeconfig",
        f"--cloud-config={CONFIG_DIR}/cloud.conf",
        f"--cluster-name={CLUSTER}",
        "--leader-elect=false",
        "--configure-cloud-routes=false",
        "--secure-port=0",
    ]
    log_path = tmp_path / "polyccm.log"

    with Container(aws_image.id) as container, log_path.open("wb") as log:
        # chroot isolation: the host's network, so the loopback API server and emulator.
        command = container.command(
            [*entrypoint, *args], env=isolated_environment(emulator), volumes=mounts
        )
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

        def running(predicate: Any, what: str, timeout: float = 60) -> Any:
            def check() -> Any:
                if process.poll() is not None:
                    tail = log_path.read_text(errors="replace")[-3000:]
                    pytest.fail(f"polyccm in the image exited ({process.returncode}):\n{tail}")
                return predicate()

            return wait_for(check, timeout=timeout, what=what)

        try:

            def initialised() -> list[Node] | None:
                nodes = [Node(kube_api.get(NODES, n)) for n in names]
                done = all(not n.has_taint(UNINITIALIZED_TAINT) and n.provider_id for n in nodes)
                return nodes if done else None

            nodes = running(initialised, "both nodes initialised by the image's polyccm")
            assert nodes[0].provider_id == f"aws:///us-east-1a/{first['InstanceId']}"
            assert nodes[1].provider_id == f"aws:///us-east-1b/{second['InstanceId']}"
            assert nodes[1].labels["topology.kubernetes.io/zone"] == "us-east-1b"
            assert nodes[1].labels["node.kubernetes.io/instance-type"] == "c5.large"
            assert nodes[0].labels["topology.kubernetes.io/region"] == "us-east-1"

            service = make_service(kube_api, namespace, "web")
            lb_name = ("a" + service["metadata"]["uid"].replace("-", ""))[:32]
            running(lambda: hostname(kube_api, namespace, "web"), "the ELB's hostname")
            (elb,) = boto3.client("elb").describe_load_balancers()["LoadBalancerDescriptions"]
            assert elb["LoadBalancerName"] == lb_name
            assert hostname(kube_api, namespace, "web") == elb["DNSName"]
            assert {i["InstanceId"] for i in elb["Instances"]} == {
                first["InstanceId"],
                second["InstanceId"],
            }

            kube_api.delete(SERVICES, "web", namespace)
            running(lambda: service_gone(kube_api, namespace, "web"), "the service finalised")
            assert boto3.client("elb").describe_load_balancers()["LoadBalancerDescriptions"] == []
            groups = boto3.client("ec2").describe_security_groups()["SecurityGroups"]
            assert not [g for g in groups if g["GroupName"] == f"k8s-elb-{lb_name}"]
        finally:
            status = stop(process) if process.poll() is None else process.returncode
    assert status == 0, log_path.read_text(errors="replace")[-3000:]
