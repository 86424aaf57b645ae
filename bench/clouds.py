"""Each provider's side of the benchmark: its world built through the emulator's own API,
instances made and terminated as a user would, the emulator's call counts, and how polyccm
and each upstream Go CCM (its peer) are pointed at it.

Call counts come from the emulator (``/_polyccm/calls``) under the emulator's names; the
harness's own calls while a CCM runs (instances made and terminated in the churn phase) are
learnt once, from a probe instance made and terminated before any CCM runs, and left out of
the CCM's counts (:attr:`BenchCloud.harness_operations`).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from polyccm_testing.peers.recording import Recorder

CLUSTER = "kubernetes"


def normalise(operation: str) -> str:
    """An operation name in a form both the emulators' and polyccm's metric names reduce to
    (``loadBalancers_get``, ``load_balancers.get`` -> ``loadbalancersget``)."""
    return re.sub(r"[^a-z0-9]", "", operation.lower())


class BenchCloud:
    """What the scenario needs of a provider's emulator; each provider subclasses it."""

    name: ClassVar[str]
    #: The load balancer the provider makes for a Service, as the tables name it.
    balancer_kind: ClassVar[str] = "load balancers"
    #: What changes the provider's emulator was given to measure the CCM rather than waits.
    notes: ClassVar[tuple[str, ...]] = ()
    #: Variables the emulator is started with.
    emulator_env: ClassVar[dict[str, str]] = {}

    def __init__(self, env: Mapping[str, str], directory: Path) -> None:
        self.env = dict(env)
        self.directory = directory
        self.harness_operations: frozenset[str] = frozenset()
        self._probe = 0

    # -- to implement -------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every resource and count; build the cluster's world (network, CCM host)."""
        raise NotImplementedError

    def create(self, names: list[str]) -> list[str]:
        """Instances for ``names`` (node name prefixes or names); their node names."""
        raise NotImplementedError

    def terminate(self, nodes: list[str]) -> None:
        raise NotImplementedError

    def calls(self) -> Counter[str]:
        """Calls the emulator received so far, by operation."""
        raise NotImplementedError

    def polyccm_args(self) -> list[str]:
        """Flags polyccm needs for this cloud, beyond :class:`bench.ccms.Knobs`."""
        return []

    def polyccm_env(self) -> dict[str, str]:
        return dict(self.env)

    def service_annotations(self, index: int) -> dict[str, str]:
        del index
        return {}

    def go_args(self) -> list[str]:
        """The upstream Go CCM's ``--cloud-provider`` and cloud config, as a deployment of it
        against this emulator gives them."""
        raise NotImplementedError

    def go_env(self) -> dict[str, str]:
        """What the upstream Go CCM needs in its environment to reach this emulator alone."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the cloud started for the run (a proxy); nothing by default."""

    # -- shared ---------------------------------------------------------------------------

    def learn_harness_operations(self) -> None:
        """Make and terminate one instance, no CCM running: the operations that took are the
        harness's own (they are left out of every CCM's counts)."""
        before = self.calls()
        self._probe += 1
        (node,) = self.create([f"probe-{self._probe}"])
        self.terminate([node])
        self.harness_operations = frozenset((self.calls() - before).keys())

    def ccm_calls(self, since: Counter[str]) -> Counter[str]:
        """Calls since ``since``, the harness's own left out."""
        delta = self.calls() - since
        return Counter({k: v for k, v in delta.items() if k not in self.harness_operations})


def _parallel(action: Any, items: list[Any], workers: int = 8) -> list[Any]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(action, items))


# -- AWS --------------------------------------------------------------------------------------


class AwsCloud(BenchCloud):
    """moto behind polyccm's AWS emulator: a VPC with two zones, instances by RunInstances,
    half the Services as classic ELBs and half as NLBs."""

    name = "aws"
    balancer_kind = "load balancers (half classic ELB, half NLB)"
    REGION = "us-east-1"
    # Each load balancer adds rules to the nodes' security group: past 60 (AWS's default
    # quota) a cluster's account has it raised, up to AWS's maximum of 1,000.
    emulator_env: ClassVar[dict[str, str]] = {"POLYCCM_AWS_RULES_PER_SECURITY_GROUP": "1000"}
    notes = ("the account's quota of rules per security group raised to 1,000 (default 60)",)

    def __init__(self, env: Mapping[str, str], directory: Path) -> None:
        from polyccm_aws_emulator.control import EmulatorControl
        from polyccm_aws_emulator.testing import FOREIGN_VARIABLES, isolated_environment

        super().__init__(env, directory)
        for variable in FOREIGN_VARIABLES:
            os.environ.pop(variable, None)
        self.env = isolated_environment(
            {k: v for k, v in env.items() if k.startswith("AWS_") or k == "KUBECONFIG"}
        )
        self.env.pop("KUBECONFIG", None)
        os.environ.update(self.env)
        os.environ["AWS_SDK_UA_APP_ID"] = "polyccm-bench"
        self.control = EmulatorControl(self.env["AWS_ENDPOINT_URL"])
        self.world: Any = None
        self.node_subnets: list[str] = []
        self._ids: dict[str, str] = {}

    def reset(self) -> None:
        import boto3
        from botocore.config import Config
        from polyccm_aws_emulator.testing import World

        self.control.reset()
        self.world = World(CLUSTER)
        # RunInstances of 500 can outlast botocore's 60 s read timeout on a busy machine, and a
        # retry after a timeout would launch the instances twice: wait instead, never retry.
        self.world.ec2 = boto3.client(
            "ec2", config=Config(read_timeout=600, retries={"total_max_attempts": 1})
        )
        self.world.instances(1, ccm_host=True, tags={self.world.cluster_tag: "owned"})
        # moto builds its ELB and ELBv2 services on their first request (an emulator start-up
        # cost, 0.2 s of an idle core and over a second on a busy one, that AWS never charges):
        # built here, before every CCM alike, not in the first one's services phase.
        self.world.elb.describe_load_balancers()
        self.world.elbv2.describe_load_balancers()
        self._ids.clear()
        # The world's /24 subnets hold 251 instances; the nodes get a /18 in each zone.
        self.node_subnets = [
            self.world.ec2.create_subnet(
                VpcId=self.world.vpc_id,
                CidrBlock=f"10.0.{64 * (index + 1)}.0/18",
                AvailabilityZone=zone,
                TagSpecifications=[{"ResourceType": "subnet", "Tags": [
                    {"Key": self.world.cluster_tag, "Value": "shared"}]}],
            )["Subnet"]["SubnetId"]
            for index, zone in enumerate(sorted(self.world.public))
        ]  # fmt: skip

    def create(self, names: list[str]) -> list[str]:
        made: list[str] = []
        tags = [{"Key": self.world.cluster_tag, "Value": "owned"}]
        # RunInstances in pieces of 500, alternating zones, as an autoscaling group would.
        for start in range(0, len(names), 500):
            count = min(500, len(names) - start)
            subnet = self.node_subnets[(start // 500) % len(self.node_subnets)]
            answer = self.world.ec2.run_instances(
                ImageId="ami-12c6146b",
                MinCount=count,
                MaxCount=count,
                InstanceType="m5.large",
                SubnetId=subnet,
                SecurityGroupIds=[self.world.node_group],
                TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
            )
            for instance in answer["Instances"]:
                self._ids[instance["PrivateDnsName"]] = instance["InstanceId"]
                made.append(instance["PrivateDnsName"])
        return made

    def terminate(self, nodes: list[str]) -> None:
        self.world.ec2.terminate_instances(InstanceIds=[self._ids.pop(n) for n in nodes])

    def calls(self) -> Counter[str]:
        return Counter(self.control.calls(by_service=True))

    def cloud_config(self) -> Path:
        path = self.directory / "aws-cloud.conf"
        path.write_text(f"[Global]\nRegion = {self.REGION}\n")
        return path

    def polyccm_args(self) -> list[str]:
        return [f"--cloud-config={self.cloud_config()}", f"--cluster-name={CLUSTER}"]

    def go_cloud_config(self) -> Path:
        """cloud.conf for the upstream CCM: no instance metadata, so region, zone, VPC, subnet
        and cluster id are given."""
        zone = sorted(self.world.public)[0]
        path = self.directory / "aws-go-cloud.conf"
        path.write_text(
            "[Global]\n"
            f"Region = {self.REGION}\n"
            f"Zone = {zone}\n"
            f"VPC = {self.world.vpc_id}\n"
            f"SubnetID = {self.world.public[zone]}\n"
            f"KubernetesClusterID = {CLUSTER}\n"
        )
        return path

    def go_args(self) -> list[str]:
        return ["--cloud-provider=aws", f"--cloud-config={self.go_cloud_config()}"]

    def go_env(self) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if k != "AWS_EC2_METADATA_SERVICE_ENDPOINT"}
        env.update(AWS_EC2_METADATA_DISABLED="true", AWS_REGION=self.REGION)
        return env

    def service_annotations(self, index: int) -> dict[str, str]:
        if index % 2:
            return {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
        return {}


# -- GCE --------------------------------------------------------------------------------------


class GceCloud(BenchCloud):
    """The GCE emulator: VMs by instances.insert in one zone (operations done at once) in a
    /16 subnetwork, network load balancers (forwarding rule, target pool, health check,
    firewall)."""

    name = "gce"
    balancer_kind = "network load balancers"
    SUBNET = "bench-nodes"
    #: A project with hundreds of load balancers and thousands of VMs has these raised.
    QUOTAS: ClassVar[dict[str, int]] = {
        "INSTANCES": 6000, "FORWARDING_RULES": 600, "TARGET_POOLS": 600,
        "HEALTH_CHECKS": 600, "FIREWALLS": 1200,
    }  # fmt: skip
    notes = (
        "the emulator's operations finish at once (pending and running 0 s)",
        "the project's quotas raised: instances 6,000, forwarding rules, target pools and "
        "health checks 600, firewalls 1,200; nodes in a /16 subnetwork (the region's default "
        "/20 holds 4,092)",
    )

    def __init__(self, env: Mapping[str, str], directory: Path) -> None:
        from polyccm_gce_emulator.control import EmulatorControl
        from polyccm_gce_emulator.testing import ComputeApi

        super().__init__(env, directory)
        self.control = EmulatorControl(env["POLYCCM_GCE_API_ENDPOINT"])
        self.compute = ComputeApi(env["POLYCCM_GCE_API_ENDPOINT"], env["GOOGLE_CLOUD_PROJECT"])
        self._config = Path(env["POLYCCM_GCE_CLOUD_CONFIG"]).read_text()
        self.network = "global/networks/default"

    def reset(self) -> None:
        from polyccm_gce_emulator.testing import REGION, ZONE

        self.control.reset()
        settings = self.control.configure(
            pending_seconds=0.0, running_seconds=0.0, quotas=self.QUOTAS
        )
        self.network = f"global/networks/{settings['network']}"
        self.compute.do(
            "POST",
            f"regions/{REGION}/subnetworks",
            {"name": self.SUBNET, "network": self.network, "ipCidrRange": "10.64.0.0/16"},
        )
        self.compute.create_instance(
            "ccm-host", zone=ZONE, labels={"polyccm-ccm-host": "true"}, tags=[f"{CLUSTER}-node"]
        )

    def _insert(self, name: str) -> str:
        from polyccm_gce_emulator.testing import REGION, ZONE

        nic = {
            "network": self.network,
            "subnetwork": f"regions/{REGION}/subnetworks/{self.SUBNET}",
            "accessConfigs": [{"type": "ONE_TO_ONE_NAT"}],
        }
        body = {
            "name": name,
            "machineType": f"zones/{ZONE}/machineTypes/e2-medium",
            "networkInterfaces": [nic],
            "disks": [
                {
                    "boot": True,
                    "autoDelete": True,
                    "initializeParams": {
                        "sourceImage": "projects/debian-cloud/global/images/debian-12"
                    },
                }
            ],
            "canIpForward": True,
            # A tag that prefixes the instances' names (node-00000...): without node-tags in
            # gce.conf the firewall targets it, as upstream's computeHostTags picks it.
            "tags": {"items": ["node"]},
        }
        # No wait: the emulator finishes operations at once (reset() set it so).
        self.compute.request("POST", f"zones/{ZONE}/instances", body)
        return name

    def create(self, names: list[str]) -> list[str]:
        return _parallel(self._insert, names)

    def terminate(self, nodes: list[str]) -> None:
        from polyccm_gce_emulator.testing import ZONE

        _parallel(lambda n: self.compute.request("DELETE", f"zones/{ZONE}/instances/{n}"), nodes)

    def calls(self) -> Counter[str]:
        return Counter(self.control.calls())

    def polyccm_args(self) -> list[str]:
        config = self.directory / "gce.conf"
        config.write_text(self._config)
        return [f"--cloud-config={config}", f"--cluster-name={CLUSTER}"]

    def go_args(self) -> list[str]:
        """cloud-provider-gcp's gce.conf (gce.go ConfigGlobal) as kube-up writes one: the
        project, zone, network and subnetwork, the nodes' tag (its firewalls target it), and
        the emulator as ``api-endpoint``."""
        from polyccm_gce_emulator.testing import ZONE

        config = self.directory / "gce-go.conf"
        config.write_text(
            "[global]\n"
            f"project-id = {self.compute.project}\n"
            f"network-name = {self.network.rsplit('/', 1)[-1]}\n"
            f"subnetwork-name = {self.SUBNET}\n"
            f"local-zone = {ZONE}\n"
            "multizone = true\n"
            "node-tags = node\n"  # the tag the instances carry (see _insert)
            f"api-endpoint = {self.env['POLYCCM_GCE_API_ENDPOINT'].rstrip('/')}/compute/v1/\n"
        )
        # cloud-provider-gcp starts its node-ipam-controller by default and exits when node
        # CIDRs are not allocated (controllermanager.go "the AllocateNodeCIDRs is not
        # enabled"): the benchmark runs the controllers the other CCMs run.
        return [
            "--cloud-provider=gce",
            f"--cloud-config={config}",
            f"--cluster-name={CLUSTER}",
            "--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller",
        ]

    def go_env(self) -> dict[str, str]:
        """The emulator's metadata server for the token (``GCE_METADATA_HOST``), and an empty
        gcloud directory, so no developer's credentials are found first."""
        names = ("GCE_METADATA_HOST", "GCE_METADATA_IP", "CLOUDSDK_CONFIG")
        return {name: self.env[name] for name in names if name in self.env}


# -- DigitalOcean -----------------------------------------------------------------------------


class DigitalOceanCloud(BenchCloud):
    """The DigitalOcean emulator: droplets by ``POST /v2/droplets`` (ten a request), load
    balancers active one second after they are made."""

    name = "digitalocean"
    LB_ACTIVE_DELAY = 1.0
    #: The harness shares the CCM's token: the emulated account's limits are raised so that
    #: making thousands of droplets leaves the CCM's budget alone.
    ACCOUNT = {"droplet_limit": 6000, "rate_limit_per_hour": 1_000_000,
               "rate_limit_per_minute": 100_000}  # fmt: skip
    #: polyccm's client-side limit follows the account's raised hourly one.
    RAISED_QPS = ACCOUNT["rate_limit_per_hour"] // 3600
    notes = (
        f"load balancers turn active {LB_ACTIVE_DELAY:g} s after they are made",
        "the account's droplet limit (1,000) and API rate limits (5,000 an hour, 250 a minute) "
        "raised, as the harness makes its droplets with the CCM's token; polyccm's client-side "
        "limit (DO_API_RATE_LIMIT_QPS, default 1.25 requests a second, under 5,000 an hour) "
        f"set to the raised hourly limit ({RAISED_QPS:g} requests a second)",
        "droplets in a /16 VPC of their own, the cluster's (DO_CLUSTER_VPC_ID): the region's "
        "default /20 holds about 4,000",
    )

    def __init__(self, env: Mapping[str, str], directory: Path) -> None:
        from polyccm_digitalocean_emulator.testing import DigitalOceanApi, control

        super().__init__(env, directory)
        self.control = control(env)
        self.api = DigitalOceanApi(env)
        self._ids: dict[str, int] = {}
        self._vpc = ""

    def reset(self) -> None:
        self.control.reset()
        self.control.configure(lb_active_delay=self.LB_ACTIVE_DELAY, **self.ACCOUNT)
        self._ids.clear()
        vpc = {"name": "bench-nodes", "region": "nyc3", "ip_range": "10.64.0.0/16"}
        self._vpc = str(self.api.ok("POST", "/v2/vpcs", vpc)["vpc"]["id"])

    def create(self, names: list[str]) -> list[str]:
        def ten(chunk: list[str]) -> list[dict[str, Any]]:
            body = {"names": chunk, "region": "nyc3", "size": "s-1vcpu-1gb",
                    "image": "ubuntu-24-04-x64", "tags": ["k8s"],
                    "vpc_uuid": self._vpc}  # fmt: skip
            droplets: list[dict[str, Any]] = self.api.ok("POST", "/v2/droplets", body)["droplets"]
            return droplets

        chunks = [names[i : i + 10] for i in range(0, len(names), 10)]
        made: list[str] = []
        for droplets in _parallel(ten, chunks):
            for droplet in droplets:
                self._ids[droplet["name"]] = int(droplet["id"])
                made.append(droplet["name"])
        return made

    def terminate(self, nodes: list[str]) -> None:
        _parallel(lambda n: self.api.delete_droplet(self._ids.pop(n)), nodes)

    def calls(self) -> Counter[str]:
        return Counter(self.control.calls())

    def polyccm_env(self) -> dict[str, str]:
        return {**self.env, "REGION": "nyc3", "DO_CLUSTER_VPC_ID": self._vpc,
                "DO_API_RATE_LIMIT_QPS": str(self.RAISED_QPS)}  # fmt: skip

    def go_args(self) -> list[str]:
        return ["--cloud-provider=digitalocean"]

    def go_env(self) -> dict[str, str]:
        """Upstream's variables (cloud.go:50-60 at v0.1.68) with polyccm's values: token,
        endpoint (TLS verified against the emulator's CA: ``SSL_CERT_FILE``), region, the
        cluster's VPC and the same raised client-side limit; its metrics on a free loopback
        port (by default :80)."""
        from polyccm_digitalocean_emulator.plugin import CA_BUNDLE_VARIABLE

        from bench.processes import free_port

        return {"DO_ACCESS_TOKEN": self.env["DO_ACCESS_TOKEN"],
                "DO_OVERRIDE_URL": self.env["DO_OVERRIDE_URL"],
                "SSL_CERT_FILE": self.env[CA_BUNDLE_VARIABLE], "REGION": "nyc3",
                "DO_CLUSTER_VPC_ID": self._vpc,
                "DO_API_RATE_LIMIT_QPS": str(self.RAISED_QPS),
                "METRICS_ADDR": f"127.0.0.1:{free_port()}"}  # fmt: skip


# -- Equinix Metal ----------------------------------------------------------------------------


class PacketCloud(BenchCloud):
    """The Equinix Metal emulator: devices by ``POST /projects/{id}/devices``, Elastic IPs for
    Services (``METAL_LOAD_BALANCER=kube-vip://``) with BGP peers on each node."""

    name = "packet"
    balancer_kind = "Elastic IPs (kube-vip)"

    def __init__(self, env: Mapping[str, str], directory: Path) -> None:
        from polyccm_packet_emulator.testing import MetalApi, control

        super().__init__(env, directory)
        self.env.update(METAL_LOAD_BALANCER="kube-vip://", METAL_LOCAL_ASN="65000")
        self.control = control(self.env)
        self.api = MetalApi(self.env)
        self._ids: dict[str, str] = {}
        self._relay: Recorder | None = None

    def reset(self) -> None:
        self.control.reset()
        self._ids.clear()

    def _device(self, name: str) -> str:
        body = {"hostname": name, "metro": "da", "plan": "c3.small.x86",
                "operating_system": "ubuntu_24_04", "tags": []}  # fmt: skip
        device = self.api.ok("POST", f"/projects/{self.api.project_id}/devices", body)
        self._ids[name] = str(device["id"])
        return name

    def create(self, names: list[str]) -> list[str]:
        return _parallel(self._device, names)

    def terminate(self, nodes: list[str]) -> None:
        _parallel(lambda n: self.api.ok("DELETE", f"/devices/{self._ids.pop(n)}"), nodes)

    def calls(self) -> Counter[str]:
        return Counter(self.control.calls())

    def go_args(self) -> list[str]:
        """Upstream's ``cloud-sa.json`` (deploy/template/secret.yaml) with polyccm's settings:
        key, project, metro and ``kube-vip://``."""
        config = self.directory / "cloud-sa.json"
        config.write_text(json.dumps({
            "apiKey": self.env["METAL_API_KEY"], "projectID": self.env["METAL_PROJECT_ID"],
            "metro": self.env.get("METAL_METRO", "da"),
            "loadbalancer": self.env["METAL_LOAD_BALANCER"]}))  # fmt: skip
        return ["--cloud-provider=equinixmetal", f"--cloud-config={config}"]

    def go_env(self) -> dict[str, str]:
        """Upstream always dials ``api.equinix.com`` (config.go parses ``base-url``; nothing
        reads it): ``HTTPS_PROXY`` at a loopback relay that terminates TLS for that name with
        a throwaway CA (``SSL_CERT_FILE``) and forwards to the emulator, keeping nothing."""
        if self._relay is None:
            from polyccm_packet_emulator.switch import INTERCEPT, emulator_base
            from polyccm_testing.peers.recording import Recorder

            self._relay = Recorder(emulator_base(self.env), intercept=INTERCEPT, keep=False)
            self._relay.__enter__()
        assert self._relay.client_ca_file is not None
        return {"HTTPS_PROXY": self._relay.url, "SSL_CERT_FILE": str(self._relay.client_ca_file),
                "NO_PROXY": "127.0.0.1,localhost",
                "METAL_LOCAL_ASN": self.env["METAL_LOCAL_ASN"]}  # fmt: skip

    def close(self) -> None:
        if self._relay is not None:
            self._relay.close()
            self._relay = None


CLOUDS: dict[str, type[BenchCloud]] = {
    cloud.name: cloud for cloud in (AwsCloud, GceCloud, DigitalOceanCloud, PacketCloud)
}
