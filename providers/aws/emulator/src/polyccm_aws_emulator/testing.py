"""Test support for the AWS provider: run the emulator, and build a small AWS world in it.

Used by this package's tests and usable by demos and cross-package tests. Importing it imports
boto3; nothing here talks to anything but the loopback emulator it is pointed at.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from polyccm.objects import Node, Service

from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.metadata import CCM_HOST_TAG
from polyccm_aws_emulator.plugin import emulator_launch

CLUSTER = "kubernetes"
CLUSTER_TAG = f"kubernetes.io/cluster/{CLUSTER}"


@contextmanager
def emulator_in_this_process() -> Iterator[str]:
    """The emulator's app served on a free loopback port from this process (so that a test can
    put moto's own code back for a moment); moto's state is reset when it stops."""
    import threading

    from werkzeug.serving import make_server

    from polyccm_aws_emulator.app import build_app

    server = make_server("127.0.0.1", 0, build_app(), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield url
    finally:
        EmulatorControl(url).reset()
        server.shutdown()
        server.server_close()


@contextmanager
def moto_code_put_back(patched: Iterable[tuple[str, str]]) -> Iterator[None]:
    """For the duration, moto's own code in place of the emulator's patches, each given as
    (owner's import path, attribute) and found through its ``__wrapped__``."""
    import importlib

    places = []
    for path, name in patched:
        module, _, owner = path.rpartition(".")
        places.append((getattr(importlib.import_module(module), owner), name))
    ours = [owner.__dict__[name] for owner, name in places]
    for (owner, name), function in zip(places, ours, strict=True):
        setattr(owner, name, function.__wrapped__)
    try:
        yield
    finally:
        for (owner, name), function in zip(places, ours, strict=True):
            setattr(owner, name, function)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_emulator(state_dir: Path) -> Iterator[Mapping[str, str]]:
    """Run the emulator as the plugin registers it; yield the environment that reaches it."""
    port = free_port()
    launch = emulator_launch(port, state_dir)
    log_path = state_dir / "aws-emulator.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(list(launch.argv), stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(f"http://127.0.0.1:{port}{launch.health_path}", process, log_path)
            yield dict(launch.env)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"AWS emulator did not start; see {log_path}") from None
            time.sleep(0.2)


#: Variables that could point boto3 somewhere other than the emulator.
FOREIGN_VARIABLES = ("AWS_PROFILE", "AWS_REGION", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN")


def isolated_environment(emulator_env: Mapping[str, str]) -> dict[str, str]:
    """Variables that point boto3 at the emulator alone: its API and instance metadata
    endpoints and fake keys, and no profile or config file. Unset :data:`FOREIGN_VARIABLES` as
    well."""
    if "AWS_EC2_METADATA_SERVICE_ENDPOINT" not in emulator_env:
        raise ValueError("the emulator's environment names no instance metadata endpoint")
    return {
        **emulator_env,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


def point_boto3_at(
    emulator_env: Mapping[str, str],
    setenv: Callable[[str, str], None],
    unsetenv: Callable[[str], None],
) -> EmulatorControl:
    """Point boto3 at the emulator alone (through ``setenv``/``unsetenv``, e.g. a pytest
    monkeypatch), reset the emulator, and return its control client."""
    for name in FOREIGN_VARIABLES:
        unsetenv(name)
    for name, value in isolated_environment(emulator_env).items():
        setenv(name, value)
    control = EmulatorControl(emulator_env["AWS_ENDPOINT_URL"])
    control.reset()
    return control


class World:
    """Builds the AWS side of a cluster in the emulator, and the Kubernetes views of it."""

    def __init__(self, cluster: str = CLUSTER) -> None:
        """A VPC whose subnets, node security group and route table are tagged for ``cluster``."""
        self.cluster_tag = f"kubernetes.io/cluster/{cluster}"
        self.ec2 = boto3.client("ec2")
        self.elb = boto3.client("elb")
        self.elbv2 = boto3.client("elbv2")
        self.vpc_id = self.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        gateway = self.ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
        self.ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=self.vpc_id)
        public_table = self.ec2.create_route_table(VpcId=self.vpc_id)["RouteTable"]["RouteTableId"]
        self.ec2.create_route(
            RouteTableId=public_table, DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway
        )
        self.public: dict[str, str] = {}
        self.private: dict[str, str] = {}
        for index, zone in enumerate(("us-east-1a", "us-east-1b")):
            public = self._subnet(f"10.0.{index}.0/24", zone, "kubernetes.io/role/elb")
            self.ec2.associate_route_table(RouteTableId=public_table, SubnetId=public)
            self.public[zone] = public
            self.private[zone] = self._subnet(
                f"10.0.{index + 10}.0/24", zone, "kubernetes.io/role/internal-elb"
            )
        self.node_group = self.security_group("nodes", "cluster nodes")
        self.route_table = self.ec2.create_route_table(
            VpcId=self.vpc_id,
            TagSpecifications=[
                {
                    "ResourceType": "route-table",
                    "Tags": [{"Key": self.cluster_tag, "Value": "owned"}],
                }
            ],
        )["RouteTable"]["RouteTableId"]

    def security_group(self, name: str, description: str, cluster_tag: str = "") -> str:
        """A security group in the VPC tagged ``<cluster_tag>=owned`` (this cluster's tag by
        default); its id."""
        group: str = self.ec2.create_security_group(
            GroupName=name,
            Description=description,
            VpcId=self.vpc_id,
            TagSpecifications=[
                {
                    "ResourceType": "security-group",
                    "Tags": [{"Key": cluster_tag or self.cluster_tag, "Value": "owned"}],
                }
            ],
        )["GroupId"]
        return group

    def _subnet(self, cidr: str, zone: str, role: str) -> str:
        subnet: str = self.ec2.create_subnet(
            VpcId=self.vpc_id,
            CidrBlock=cidr,
            AvailabilityZone=zone,
            TagSpecifications=[
                {
                    "ResourceType": "subnet",
                    "Tags": [
                        {"Key": role, "Value": "1"},
                        {"Key": self.cluster_tag, "Value": "shared"},
                    ],
                }
            ],
        )["Subnet"]["SubnetId"]
        return subnet

    def instances(
        self,
        count: int = 1,
        zone: str = "us-east-1a",
        instance_type: str = "m5.large",
        *,
        tags: Mapping[str, str] | None = None,
        ccm_host: bool = False,
    ) -> list[dict[str, Any]]:
        """Running instances in ``zone``'s public subnet, in the node security group, tagged
        ``tags`` (default: owned by the world's cluster). ``ccm_host`` makes the (first) instance
        the one polyccm runs on: the emulator's metadata service names it."""
        wanted = dict({self.cluster_tag: "owned"} if tags is None else tags)
        if ccm_host:
            wanted[CCM_HOST_TAG] = "true"
        answer = self.ec2.run_instances(
            ImageId="ami-12c6146b",
            MinCount=count,
            MaxCount=count,
            InstanceType=instance_type,
            SubnetId=self.public[zone],
            SecurityGroupIds=[self.node_group],
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in sorted(wanted.items())],
                }
            ]
            if wanted
            else [],
        )
        instances: list[dict[str, Any]] = answer["Instances"]
        return instances

    def describe(self, instance_id: str) -> dict[str, Any]:
        reservations = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        instance: dict[str, Any] = reservations[0]["Instances"][0]
        return instance

    @staticmethod
    def node(
        instance: Mapping[str, Any],
        *,
        provider_id: str | None = None,
        by_name: bool = False,
        labels: Mapping[str, str] | None = None,
        pod_cidr: str | None = None,
    ) -> Node:
        """The node of ``instance``: named by private DNS name, with its providerID unless
        ``by_name`` (a node the cloud-node controller has not initialised yet)."""
        zone = instance["Placement"]["AvailabilityZone"]
        raw: dict[str, Any] = {
            "metadata": {
                "name": instance["PrivateDnsName"],
                "uid": str(uuid.uuid4()),
                "labels": dict(labels or {}),
            },
            "spec": {},
        }
        if not by_name:
            raw["spec"]["providerID"] = provider_id or f"aws:///{zone}/{instance['InstanceId']}"
        if pod_cidr:
            raw["spec"]["podCIDR"] = pod_cidr
        return Node(raw)

    @staticmethod
    def service(
        name: str = "web",
        namespace: str = "default",
        *,
        annotations: Mapping[str, str] | None = None,
        ports: list[dict[str, Any]] | None = None,
        uid: str | None = None,
        **spec: Any,
    ) -> Service:
        status = spec.pop("status", {})
        raw: dict[str, Any] = {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid or str(uuid.uuid4()),
                "annotations": dict(annotations or {}),
            },
            "spec": {
                "type": "LoadBalancer",
                "ports": ports
                or [{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}],
                **spec,
            },
            "status": status,
        }
        return Service(raw)


# -- the conformance kit's adapter --------------------------------------------------------------

#: Action prefixes of the AWS APIs that only read.
_READ_ACTIONS = ("Describe", "Get", "List")


class AwsCloudUnderTest:
    """The AWS provider on the emulator, for :mod:`polyccm_testing.conformance` (a
    ``CloudUnderTest``): a :class:`World` for the cluster, instances made with RunInstances,
    and every load-balancer resource read back through the EC2, ELB and ELBv2 APIs.

    Point boto3 at a reset emulator first (:func:`point_boto3_at`); ``control`` is its control
    client, whose call counter gives :meth:`write_calls`."""

    cluster_name = CLUSTER

    def __init__(self, control: EmulatorControl) -> None:
        from polyccm_aws.config import CloudConfig
        from polyccm_aws.provider import AwsProvider

        self.control = control
        self.world = World(CLUSTER)
        # No instance cache: the kit stops and deletes instances and asks again at once.
        self.provider = AwsProvider(
            CloudConfig(), cluster_name=CLUSTER, cache_ttl=0.0, max_attempts=3
        )
        self._ids: dict[str, str] = {}
        """Node name (the private DNS name) -> instance id."""

    def create_instance(self, name: str) -> str:
        # Spread over both zones, as a cluster's nodes are.
        zone = sorted(self.world.public)[len(self._ids) % len(self.world.public)]
        tags = {self.world.cluster_tag: "owned", "Name": name}
        (instance,) = self.world.instances(zone=zone, tags=tags)
        node_name = str(instance["PrivateDnsName"])
        self._ids[node_name] = str(instance["InstanceId"])
        return node_name

    def delete_instance(self, name: str) -> None:
        self.world.ec2.terminate_instances(InstanceIds=[self._ids[name]])

    def stop_instance(self, name: str) -> None:
        self.world.ec2.stop_instances(InstanceIds=[self._ids[name]])

    def load_balancer_resources(self) -> frozenset[str]:
        """Classic ELBs and their listeners, NLBs, their listeners and target groups, and
        every security group of the VPC with each of its rules."""
        found: set[str] = set()
        for elb in self.world.elb.describe_load_balancers()["LoadBalancerDescriptions"]:
            name = elb["LoadBalancerName"]
            found.add(f"elb:{name}")
            for described in elb.get("ListenerDescriptions", ()):
                listener = described["Listener"]
                found.add(
                    f"elb:{name}:listener:{listener['Protocol']}:{listener['LoadBalancerPort']}"
                    f"->{listener['InstanceProtocol']}:{listener['InstancePort']}"
                )
        for nlb in self.world.elbv2.describe_load_balancers()["LoadBalancers"]:
            name = nlb["LoadBalancerName"]
            found.add(f"elbv2:{name}")
            listeners = self.world.elbv2.describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"])
            for listener in listeners["Listeners"]:
                found.add(f"elbv2:{name}:listener:{listener['Protocol']}:{listener['Port']}")
        for group in self.world.elbv2.describe_target_groups()["TargetGroups"]:
            found.add(f"target-group:{group['TargetGroupName']}")
        groups = self.world.ec2.describe_security_groups(
            Filters=[{"Name": "vpc-id", "Values": [self.world.vpc_id]}]
        )["SecurityGroups"]
        for group in groups:
            found.add(f"sg:{group['GroupId']}")
            for direction, rules in (
                ("in", group.get("IpPermissions", ())),
                ("out", group.get("IpPermissionsEgress", ())),
            ):
                found.update(f"sg:{group['GroupId']}:{direction}:{rule}" for rule in _rules(rules))
        return frozenset(found)

    def write_calls(self) -> int:
        return sum(
            count
            for action, count in self.control.calls().items()
            if not action.startswith(_READ_ACTIONS)
        )

    def delete_load_balancer_out_of_band(self, service: Service) -> None:
        """Delete the classic ELB or the NLB itself, as from the console; its security groups,
        target groups and node rules stay."""
        name = self._name(service)
        self.world.elb.delete_load_balancer(LoadBalancerName=name)
        for nlb in self._nlbs(name):
            self.world.elbv2.delete_load_balancer(LoadBalancerArn=nlb["LoadBalancerArn"])

    def backends(self, service: Service) -> frozenset[str]:
        """Instance ids registered with the service's ELB, or with its NLB's target groups."""
        name = self._name(service)
        ids: set[str] = set()
        elbs = self.world.elb.describe_load_balancers()["LoadBalancerDescriptions"]
        for elb in elbs:
            if elb["LoadBalancerName"] == name:
                ids.update(i["InstanceId"] for i in elb.get("Instances", ()))
        for nlb in self._nlbs(name):
            groups = self.world.elbv2.describe_target_groups(
                LoadBalancerArn=nlb["LoadBalancerArn"]
            )["TargetGroups"]
            for group in groups:
                health = self.world.elbv2.describe_target_health(
                    TargetGroupArn=group["TargetGroupArn"]
                )
                ids.update(t["Target"]["Id"] for t in health["TargetHealthDescriptions"])
        return frozenset(ids)

    def _name(self, service: Service) -> str:
        balancer = self.provider.load_balancer()
        return balancer.get_load_balancer_name(CLUSTER, service)

    def _nlbs(self, name: str) -> list[dict[str, Any]]:
        nlbs = self.world.elbv2.describe_load_balancers()["LoadBalancers"]
        return [n for n in nlbs if n["LoadBalancerName"] == name]


class AwsFaultCloudUnderTest(AwsCloudUnderTest):
    """The fault-conformance adapter (a ``FaultCloudUnderTest``): ``polyccm --provider aws``
    on the emulator (``emulator_env``: what :func:`running_emulator` yields), every load
    balancer resource (classic ELBs, NLBs, listeners, target groups, security groups and their
    rules), and write faults answered ``ValidationError`` (400) as AWS refuses a request."""

    def __init__(self, control: EmulatorControl, emulator_env: Mapping[str, str]) -> None:
        super().__init__(control)
        self.emulator_env = emulator_env

    def launch(self, workdir: Path) -> Any:
        import os
        import sys

        from polyccm_testing.conformance.faults import Launch

        config = workdir / "cloud.conf"
        # polyccm runs on no instance here: the cloud config names the cluster and its VPC.
        config.write_text(
            f"[Global]\nRegion = us-east-1\nKubernetesClusterID = {CLUSTER}\n"
            f"VPC = {self.world.vpc_id}\n"
        )
        return Launch(
            argv=(
                sys.executable,
                "-m",
                "polyccm.cli",
                "--provider=aws",
                f"--cloud-config={config}",
                f"--cluster-name={CLUSTER}",
            ),
            env={**os.environ, **isolated_environment(self.emulator_env)},
        )

    def cluster_resources(self) -> frozenset[str]:
        return self.load_balancer_resources()

    def load_balancers_per_service(self) -> Mapping[str, int]:
        from collections import Counter

        counts: Counter[str] = Counter()
        names = [
            e["LoadBalancerName"]
            for e in self.world.elb.describe_load_balancers()["LoadBalancerDescriptions"]
        ]
        for start in range(0, len(names), 20):
            described = self.world.elb.describe_tags(LoadBalancerNames=names[start : start + 20])
            for entry in described["TagDescriptions"]:
                counts[_service_tag(entry.get("Tags", ()), entry["LoadBalancerName"])] += 1
        nlbs = self.world.elbv2.describe_load_balancers()["LoadBalancers"]
        arns = [n["LoadBalancerArn"] for n in nlbs]
        for start in range(0, len(arns), 20):
            described = self.world.elbv2.describe_tags(ResourceArns=arns[start : start + 20])
            for entry in described["TagDescriptions"]:
                counts[_service_tag(entry.get("Tags", ()), entry["ResourceArn"])] += 1
        return counts

    def fail_write(self, after: int) -> None:
        self.control.inject("*", code="ValidationError", status=400, after=after, writes_only=True)

    def clear_faults(self) -> None:
        self.control.clear_faults()

    def calls_by_process(self) -> list[tuple[float, str, str]]:
        """The calls whose User-Agent named a ``polyccm`` process (botocore's
        ``user_agent_extra``), from the emulator's call log."""
        return self.control.calls_by_caller()

    def throttle(self, seconds: float) -> None:
        """Every call throttled as AWS does it: EC2 ``RequestLimitExceeded`` (503), ELB and
        ELBv2 ``Throttling`` (400), until ``clear_faults`` (the kit calls it when the stretch
        of ``seconds`` is over)."""
        del seconds
        for service, code in (
            ("ec2", "RequestLimitExceeded"),
            ("elb", "Throttling"),
            ("elbv2", "Throttling"),
        ):
            self.control.inject("*", service=service, code=code, count=THROTTLED_CALLS)

    def all_calls(self) -> int:
        return sum(self.control.calls().values())


THROTTLED_CALLS = 1_000_000
"""Calls a throttling stretch's fault answers (more than any stretch makes)."""


def _service_tag(tags: Iterable[Mapping[str, str]], default: str) -> str:
    """The ``kubernetes.io/service-name`` tag's value, or ``default``."""
    for tag in tags:
        if tag["Key"] == "kubernetes.io/service-name":
            return tag["Value"]
    return default


def _rules(permissions: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """One line per (protocol, ports, source) of a security group's permissions."""
    for permission in permissions:
        protocol = permission.get("IpProtocol")
        ports = f"{protocol}:{permission.get('FromPort')}-{permission.get('ToPort')}"
        for source in permission.get("IpRanges", ()):
            yield f"{ports}:{source['CidrIp']}"
        for source in permission.get("Ipv6Ranges", ()):
            yield f"{ports}:{source['CidrIpv6']}"
        for source in permission.get("UserIdGroupPairs", ()):
            yield f"{ports}:{source['GroupId']}"
