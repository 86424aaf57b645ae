"""``make demo``: the whole job of a cloud-controller-manager, on this machine, in under a minute.

Starts the local control plane (etcd + kube-apiserver) and the AWS emulator (moto's server),
creates EC2 instances in two zones and their Node objects as kubelets with
``--cloud-provider=external`` would register them (tainted, no providerID), runs
``polyccm --provider aws``, creates a LoadBalancer Service, prints what the controller did, then
deletes the Service, shows the load balancer gone from the cloud, and cleans everything up.
Everything listens on 127.0.0.1; no real cloud is contacted.
"""

from __future__ import annotations

import sys
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from polyccm.kube.api import NAMESPACES, NODES, SERVICES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_testing.demo import register_node, running_polyccm, say, service_gone, table, wait
from polyccm_testing.devenv import controlplane

from polyccm_aws_emulator.metadata import CCM_HOST_TAG

CLUSTER = "demo"
REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b")
INSTANCE_TYPES = ("m5.large", "c5.xlarge", "t3.medium")
NAMESPACE = "demo"


def make_cloud(env: dict[str, str]) -> tuple[Any, Any, list[dict[str, str]]]:
    """A VPC with one public subnet per zone, tagged for the cluster, and three instances."""
    import boto3

    session = boto3.session.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=REGION,
    )
    ec2 = session.client("ec2", endpoint_url=env["AWS_ENDPOINT_URL"])
    elb = session.client("elb", endpoint_url=env["AWS_ENDPOINT_URL"])
    cluster_tag = {"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    public = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=public, DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway)
    instances: list[dict[str, str]] = []
    for index, zone in enumerate(ZONES):
        subnet = ec2.create_subnet(
            VpcId=vpc, CidrBlock=f"10.0.{index + 1}.0/24", AvailabilityZone=zone
        )["Subnet"]["SubnetId"]
        ec2.associate_route_table(RouteTableId=public, SubnetId=subnet)
        ec2.modify_subnet_attribute(SubnetId=subnet, MapPublicIpOnLaunch={"Value": True})
        ec2.create_tags(
            Resources=[subnet],
            Tags=[cluster_tag, {"Key": "kubernetes.io/role/elb", "Value": "1"}],
        )
        count = 2 if index == 0 else 1
        reservation = ec2.run_instances(
            ImageId="ami-12c6146b",
            MinCount=count,
            MaxCount=count,
            InstanceType=INSTANCE_TYPES[index],
            SubnetId=subnet,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [cluster_tag]}],
        )
        for instance in reservation["Instances"]:
            instances.append({"id": instance["InstanceId"], "dns": instance["PrivateDnsName"]})
    # polyccm "runs on" the first instance: the emulator's metadata service names it, and
    # polyccm reads the cluster id from its kubernetes.io/cluster/<id> tag, as upstream does.
    ec2.create_tags(Resources=[instances[0]["id"]], Tags=[{"Key": CCM_HOST_TAG, "Value": "true"}])
    return ec2, elb, instances


def running_ccm(state: Path, env: dict[str, str], kubeconfig: Path) -> AbstractContextManager[Path]:
    config = state / "cloud.conf"
    config.write_text(f"[Global]\nRegion = {REGION}\n")  # the cluster id comes from the tags
    return running_polyccm(
        "aws",
        state=state,
        env=env,
        kubeconfig=kubeconfig,
        args=[
            f"--cloud-config={config}",
            f"--cluster-name={CLUSTER}",
            "--configure-cloud-routes=false",
        ],
    )


def show_nodes(api: KubeApi) -> None:
    rows = []
    for raw in sorted(api.list(NODES)["items"], key=lambda n: n["metadata"]["name"]):
        node = Node(raw)
        addresses = ", ".join(f"{t}={a}" for t, a in node.addresses if t != "Hostname")
        rows.append(
            [
                node.name,
                node.provider_id,
                node.labels.get("topology.kubernetes.io/zone", ""),
                node.labels.get("node.kubernetes.io/instance-type", ""),
                addresses,
            ]
        )
    print(table(["NODE", "PROVIDER ID", "ZONE", "TYPE", "ADDRESSES"], rows), flush=True)


def run_scenario(api: KubeApi, ec2: Any, elb: Any) -> None:
    """Wait for the nodes, serve a LoadBalancer Service, delete it, and show what is left."""
    wait(
        "nodes to be initialised",
        lambda: all(
            not Node(n).has_taint(UNINITIALIZED_TAINT) and Node(n).addresses
            for n in api.list(NODES)["items"]
        ),
    )
    show_nodes(api)
    api.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    api.create(
        SERVICES,
        {
            "metadata": {"name": "web", "namespace": NAMESPACE},
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        },
        NAMESPACE,
    )
    say("created Service demo/web of type LoadBalancer")

    def hostname() -> str | None:
        status = api.get(SERVICES, "web", NAMESPACE).get("status", {})
        ingress = status.get("loadBalancer", {}).get("ingress") or [{}]
        return str(ingress[0].get("hostname") or "") or None

    lb_hostname = wait("the load balancer", hostname)
    balancers = elb.describe_load_balancers()["LoadBalancerDescriptions"]
    rows = [
        [
            b["LoadBalancerName"],
            b["DNSName"],
            str(len(b["Instances"])),
            ", ".join(
                f"{x['LoadBalancerPort']}->{x['InstancePort']}"
                for x in (d["Listener"] for d in b["ListenerDescriptions"])
            ),
        ]
        for b in balancers
    ]
    print(f"Service demo/web: status.loadBalancer.ingress[0].hostname = {lb_hostname}")
    print(table(["ELB", "DNS NAME", "INSTANCES", "LISTENERS"], rows), flush=True)

    api.delete(SERVICES, "web", NAMESPACE)
    say("deleted the Service")
    wait("the Service to be finalised", lambda: service_gone(api, NAMESPACE, "web"))
    left = elb.describe_load_balancers()["LoadBalancerDescriptions"]
    groups = [
        g["GroupName"]
        for g in ec2.describe_security_groups()["SecurityGroups"]
        if g["GroupName"].startswith("k8s-elb-")
    ]
    print(f"load balancers left in the cloud: {len(left)}; ELB security groups left: {len(groups)}")


def main() -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="polyccm-demo-") as directory:
        state = Path(directory)
        say("starting etcd, kube-apiserver and the AWS emulator on 127.0.0.1")
        plane = controlplane.start(state / "dev", clouds=("aws",), die_with_caller=True)
        try:
            api = plane.kube_api(qps=0)
            env = {k: v for k, v in plane.env.items() if k.startswith("AWS_")}
            ec2, elb, instances = make_cloud(env)
            say(
                f"created {len(instances)} EC2 instances in {', '.join(ZONES)}, tagged "
                f"kubernetes.io/cluster/{CLUSTER}; polyccm runs on {instances[0]['id']}"
            )
            for instance in instances:
                register_node(api, instance["dns"])
            say(
                "registered their Nodes, tainted as `kubelet --cloud-provider=external` leaves them"
            )
            with running_ccm(state, env, plane.kubeconfig) as log:
                say("running polyccm --provider aws")
                try:
                    run_scenario(api, ec2, elb)
                except SystemExit:
                    print("--- polyccm log (last lines) ---", file=sys.stderr)
                    print(log.read_text()[-4000:], file=sys.stderr)
                    raise
        finally:
            say("stopping everything")
            plane.stop()
    say(f"done in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
