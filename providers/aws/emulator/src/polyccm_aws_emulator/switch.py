"""The AWS switch scenario of issue 25: upstream's CCM (k8s.io/cloud-provider-aws v1.37.1) runs
first, then polyccm takes over the same cluster and cloud.

* :data:`ANNOTATIONS`: upstream's annotation table, each with the line of its constant in
  ``pkg/providers/v1/aws.go`` of v1.37.1; every one changes what upstream asks of AWS.
* :data:`SERVICES`: the scenario's Services, classic ELBs and NLBs, that between them carry
  every annotation of that table (:func:`uncovered` is empty), with fixed node ports so that two
  runs of the scenario make the same cloud.
* :class:`SwitchCloud`: the cloud the Services need, made through the AWS API: the cluster's
  VPC in two zones (:class:`~polyccm_aws_emulator.testing.World`), nodes' instances in both, a
  certificate, an access-log bucket, two Elastic IPs, two security groups of the user's.
* :func:`cloud_state`: every load-balancer resource read back through the EC2, ELB and ELBv2
  describe calls, made comparable between runs (ids replaced by what they name, timestamps
  and generated DNS names dropped, lists in a canonical order).
* the edits of step 4, as a user makes them through the Kubernetes API: :data:`EDITS`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import boto3
from polyccm.kube.api import SERVICES as SERVICE_RESOURCE
from polyccm.kube.api import KubeApi

from polyccm_aws_emulator.testing import CLUSTER, World

#: Where upstream's table is, read for every entry below.
UPSTREAM = "k8s.io/cloud-provider-aws@v1.37.1 pkg/providers/v1/aws.go"
PREFIX = "service.beta.kubernetes.io/aws-load-balancer-"

#: Every annotation of upstream's table (the ``ServiceAnnotation*`` constants), by the line of
#: its constant in :data:`UPSTREAM`.
ANNOTATIONS: Mapping[str, int] = {
    "type": 99,
    "internal": 103,
    "proxy-protocol": 110,
    "access-log-emit-interval": 114,
    "access-log-enabled": 118,
    "access-log-s3-bucket-name": 122,
    "access-log-s3-bucket-prefix": 126,
    "connection-draining-enabled": 130,
    "connection-draining-timeout": 134,
    "connection-idle-timeout": 138,
    "cross-zone-load-balancing-enabled": 142,
    "extra-security-groups": 146,
    "security-groups": 151,
    "ssl-cert": 157,
    "ssl-ports": 162,
    "ssl-negotiation-policy": 167,
    "backend-protocol": 178,
    "additional-resource-tags": 184,
    "healthcheck-protocol": 189,
    "healthcheck-port": 194,
    "healthcheck-path": 199,
    "healthcheck-healthy-threshold": 205,
    "healthcheck-unhealthy-threshold": 210,
    "healthcheck-timeout": 215,
    "healthcheck-interval": 219,
    "target-group-attributes": 225,
    "eip-allocations": 230,
    "private-ipv4-addresses": 235,
    "target-node-labels": 241,
    "subnets": 251,
}

NAMESPACE = "switch"
REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b")
#: The label ``target-node-labels`` selects: the node of zone b carries it.
EDGE_LABEL = ("switch.polyccm.io/edge", "true")
BUCKET = "polyccm-switch-logs"


@dataclass(frozen=True)
class SwitchService:
    """One Service of the scenario: its annotations (values may name a :class:`SwitchCloud`
    resource as ``{cert}``, ``{eips}``, ``{private_subnets}``, ``{own_group}``,
    ``{extra_group}``) and its ports as ``(name, port, node port)``."""

    name: str
    annotations: Mapping[str, str]
    ports: tuple[tuple[str, int, int], ...] = (("http", 80, 30100),)

    @property
    def nlb(self) -> bool:
        return self.annotations.get("type") == "nlb"


SERVICES: tuple[SwitchService, ...] = (
    SwitchService("plain", {}, (("http", 80, 30101),)),
    SwitchService(
        "elb-attributes",
        {
            "access-log-enabled": "true",
            "access-log-emit-interval": "5",
            "access-log-s3-bucket-name": BUCKET,
            "access-log-s3-bucket-prefix": "elb",
            "connection-draining-enabled": "true",
            "connection-draining-timeout": "30",
            "connection-idle-timeout": "120",
            "cross-zone-load-balancing-enabled": "true",
            "additional-resource-tags": "team=web,tier=front",
        },
        (("http", 80, 30111),),
    ),
    SwitchService(
        "elb-health",
        {
            "proxy-protocol": "*",
            "healthcheck-protocol": "HTTP",
            "healthcheck-path": "/healthz",
            "healthcheck-port": "30122",
            "healthcheck-healthy-threshold": "3",
            "healthcheck-unhealthy-threshold": "4",
            "healthcheck-timeout": "6",
            "healthcheck-interval": "15",
        },
        (("http", 80, 30121), ("status", 8080, 30122)),
    ),
    SwitchService(
        "elb-tls",
        {
            "ssl-cert": "{cert}",
            "ssl-ports": "https",
            "ssl-negotiation-policy": "ELBSecurityPolicy-TLS-1-2-2017-01",
            "backend-protocol": "http",
        },
        (("http", 80, 30131), ("https", 443, 30132)),
    ),
    SwitchService(
        "elb-internal",
        {
            "internal": "true",
            "subnets": "{private_subnets}",
            "security-groups": "{own_group}",
            "extra-security-groups": "{extra_group}",
            "target-node-labels": "=".join(EDGE_LABEL),
        },
        (("http", 80, 30141),),
    ),
    SwitchService("nlb-plain", {"type": "nlb"}, (("http", 80, 30151),)),
    SwitchService(
        "nlb-attributes",
        {
            "type": "nlb",
            "cross-zone-load-balancing-enabled": "true",
            "access-log-enabled": "true",
            "access-log-s3-bucket-name": BUCKET,
            "access-log-s3-bucket-prefix": "nlb",
            "additional-resource-tags": "team=api",
            "target-group-attributes": "preserve_client_ip.enabled=false",
            "healthcheck-protocol": "http",
            "healthcheck-path": "/ready",
            "healthcheck-port": "30162",
            "healthcheck-interval": "10",
            "healthcheck-healthy-threshold": "2",
            "healthcheck-unhealthy-threshold": "2",
        },
        (("http", 80, 30161), ("status", 8080, 30162)),
    ),
    SwitchService(
        "nlb-internal",
        {
            "type": "nlb",
            "internal": "true",
            "subnets": "{private_subnets}",
            "private-ipv4-addresses": "10.0.10.50,10.0.11.50",
        },
        (("http", 80, 30171),),
    ),
    SwitchService(
        "nlb-eip",
        {
            "type": "nlb",
            "eip-allocations": "{eips}",
            "target-node-labels": "=".join(EDGE_LABEL),
        },
        (("http", 80, 30181),),
    ),
    SwitchService(
        "nlb-tls",
        {
            "type": "nlb",
            "ssl-cert": "{cert}",
            "ssl-ports": "443",
            "ssl-negotiation-policy": "ELBSecurityPolicy-TLS13-1-2-2021-06",
            "backend-protocol": "ssl",
        },
        (("http", 80, 30191), ("https", 443, 30192)),
    ),
)


#: Services whose cloud result still differs between upstream and polyccm (issue 26), run
#: apart so that the scenario above stays a clean switch.
DIFFERING: tuple[SwitchService, ...] = (
    # aws.go:1935-1952 (getPortSets): ssl-ports entries are split on "," and neither trimmed
    # nor lower-cased, so " 8443" names no port and 8443 stays plain TCP under upstream.
    SwitchService(
        "elb-ssl-spaced",
        {"ssl-cert": "{cert}", "ssl-ports": "https, 8443"},
        (("https", 443, 30211), ("alt", 8443, 30212)),
    ),
    # aws.go:2244: an NLB's healthcheck-timeout is parsed, and the target group is made
    # without it (aws_loadbalancer.go ensureTargetGroup sends no HealthCheckTimeoutSeconds).
    SwitchService(
        "nlb-hc-timeout",
        {"type": "nlb", "healthcheck-timeout": "6"},
        (("http", 80, 30221),),
    ),
)
#: An instance type DescribeInstanceTopology describes (the emulator's list, as AWS's), whose
#: node upstream labels ``topology.k8s.aws/network-node-layer-N``.
TOPOLOGY_TYPE = "p4d.24xlarge"


def uncovered() -> set[str]:
    """The annotations of upstream's table no Service of :data:`SERVICES` carries."""
    return set(ANNOTATIONS) - {key for s in SERVICES for key in s.annotations}


@dataclass
class SwitchCloud:
    """The cloud of the scenario, made with the AWS API (boto3 pointed at the emulator)."""

    world: World = field(default_factory=World)
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Node label (``a1``, ``b1``, ``b2``: zone and count) -> RunInstances' description."""
    resources: dict[str, str] = field(default_factory=dict)
    """What the Services' annotations name (``cert``, ``eips``, ...), by placeholder."""
    labels: dict[str, str] = field(default_factory=dict)
    """Cloud id -> what it names, for :func:`cloud_state`."""

    @classmethod
    def create(cls) -> SwitchCloud:
        cloud = cls()
        world = cloud.world
        cloud.labels.update({world.vpc_id: "vpc", world.node_group: "sg:nodes"})
        for zone in ZONES:
            cloud.labels[world.public[zone]] = f"subnet:public:{zone}"
            cloud.labels[world.private[zone]] = f"subnet:private:{zone}"
        for zone in ZONES:
            cloud.add_instance(zone)
        cert = boto3.client("acm").request_certificate(DomainName="switch.example.com")
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        eips = [world.ec2.allocate_address(Domain="vpc")["AllocationId"] for _ in ZONES]
        own = world.security_group("switch-own", "the user's own ELB group", cluster_tag="none")
        extra = world.security_group("switch-extra", "an extra group", cluster_tag="none")
        cloud.resources.update(
            cert=cert["CertificateArn"],
            eips=",".join(eips),
            private_subnets=",".join(world.private[zone] for zone in ZONES),
            own_group=own,
            extra_group=extra,
        )
        cloud.labels.update({cert["CertificateArn"]: "cert", own: "sg:own", extra: "sg:extra"})
        cloud.labels.update({eip: f"eip:{index}" for index, eip in enumerate(eips)})
        return cloud

    def add_instance(self, zone: str, instance_type: str = "m5.large") -> dict[str, Any]:
        """A running instance of the cluster in ``zone``; its label is the zone's letter and
        its count there."""
        (instance,) = self.world.instances(1, zone, instance_type)
        label = f"{zone[-1]}{sum(1 for key in self.instances if key[0] == zone[-1]) + 1}"
        self.instances[label] = instance
        self.labels[instance["InstanceId"]] = f"node:{label}"
        self.labels[instance["PrivateDnsName"]] = f"node-name:{label}"
        return instance

    def node_labels(self, label: str) -> dict[str, str]:
        """The labels the kubelet registers node ``label`` with (the edge label on b1)."""
        return dict([EDGE_LABEL]) if label == "b1" else {}

    def cloud_config(self) -> str:
        """cloud.conf as an operator gives upstream's CCM without instance metadata: region,
        zone, VPC, subnet and cluster id (upstream's config.go [Global] keys)."""
        zone = ZONES[0]
        return (
            "[Global]\n"
            f"Region = {REGION}\n"
            f"Zone = {zone}\n"
            f"VPC = {self.world.vpc_id}\n"
            f"SubnetID = {self.world.public[zone]}\n"
            f"KubernetesClusterID = {CLUSTER}\n"
        )


def service_manifest(service: SwitchService, cloud: SwitchCloud) -> dict[str, Any]:
    """The Service as a user applies it, in :data:`NAMESPACE`."""
    annotations = {
        PREFIX + key: value.format(**cloud.resources) for key, value in service.annotations.items()
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service.name, "namespace": NAMESPACE, "annotations": annotations},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": service.name},
            "ports": [
                {"name": name, "port": port, "targetPort": port, "nodePort": node_port}
                for name, port, node_port in service.ports
            ],
        },
    }


# -- the edits of step 4 -------------------------------------------------------------------------

#: Each edit a user makes, in order, by what it does.
EDIT_PORT = ("plain", ("admin", 8443, 30103))
EDIT_ANNOTATIONS = (
    ("elb-attributes", "connection-idle-timeout", "300"),
    ("nlb-attributes", "healthcheck-interval", "30"),
)
EDIT_DELETED = ("nlb-plain", "elb-health")


def add_port(api: KubeApi) -> None:
    """A port added to a Service."""
    name, (port_name, port, node_port) = EDIT_PORT
    current = api.get(SERVICE_RESOURCE, name, NAMESPACE)
    ports = [*current["spec"]["ports"]]
    ports.append({"name": port_name, "port": port, "targetPort": port, "nodePort": node_port})
    api.patch(SERVICE_RESOURCE, name, {"spec": {"ports": ports}}, NAMESPACE)


def change_annotations(api: KubeApi) -> None:
    """An annotation changed on a classic ELB's Service and on an NLB's."""
    for name, key, value in EDIT_ANNOTATIONS:
        patch = {"metadata": {"annotations": {PREFIX + key: value}}}
        api.patch(SERVICE_RESOURCE, name, patch, NAMESPACE)


def delete_services(api: KubeApi) -> None:
    """Services deleted (their load balancers must go)."""
    for name in EDIT_DELETED:
        api.delete(SERVICE_RESOURCE, name, NAMESPACE)


# -- the cloud, read back ------------------------------------------------------------------------

#: Keys whose values differ between two runs that made the same thing: generated names and
#: times.
VOLATILE = frozenset(
    {
        "ResponseMetadata",
        "CreatedTime",
        "CreatedTimestamp",
        "DNSName",
        "CanonicalHostedZoneName",
        "CanonicalHostedZoneNameID",
        "CanonicalHostedZoneId",
        "OwnerId",
        "SecurityGroupRuleId",
    }
)


def _read(call: Callable[..., Mapping[str, Any]], key: str, **arguments: Any) -> list[Any]:
    found: list[Any] = list(call(**arguments).get(key) or ())
    return found


def raw_cloud_state(cloud: SwitchCloud) -> dict[str, Any]:
    """Every load-balancer resource of the VPC, as the describe calls answer (nothing
    replaced): classic ELBs with attributes, policies, tags and instances; NLBs with attributes,
    tags, listeners; target groups with attributes, tags and targets; the VPC's security
    groups with rules and tags."""
    world = cloud.world
    state: dict[str, Any] = {"elb": {}, "nlb": {}, "target_groups": {}, "security_groups": {}}
    for elb in _read(world.elb.describe_load_balancers, "LoadBalancerDescriptions"):
        name = elb["LoadBalancerName"]
        state["elb"][name] = {
            "description": elb,
            "attributes": world.elb.describe_load_balancer_attributes(LoadBalancerName=name)[
                "LoadBalancerAttributes"
            ],
            "policies": _read(
                world.elb.describe_load_balancer_policies,
                "PolicyDescriptions",
                LoadBalancerName=name,
            ),
            "tags": _read(world.elb.describe_tags, "TagDescriptions", LoadBalancerNames=[name])[
                0
            ].get("Tags", []),
        }
    for nlb in _read(world.elbv2.describe_load_balancers, "LoadBalancers"):
        arn = nlb["LoadBalancerArn"]
        listeners = _read(world.elbv2.describe_listeners, "Listeners", LoadBalancerArn=arn)
        state["nlb"][nlb["LoadBalancerName"]] = {
            "description": nlb,
            "attributes": _read(
                world.elbv2.describe_load_balancer_attributes, "Attributes", LoadBalancerArn=arn
            ),
            "tags": _read(world.elbv2.describe_tags, "TagDescriptions", ResourceArns=[arn])[0].get(
                "Tags", []
            ),
            "listeners": listeners,
        }
    for group in _read(world.elbv2.describe_target_groups, "TargetGroups"):
        arn = group["TargetGroupArn"]
        health = _read(
            world.elbv2.describe_target_health, "TargetHealthDescriptions", TargetGroupArn=arn
        )
        state["target_groups"][group["TargetGroupName"]] = {
            "description": group,
            "attributes": _read(
                world.elbv2.describe_target_group_attributes, "Attributes", TargetGroupArn=arn
            ),
            "tags": _read(world.elbv2.describe_tags, "TagDescriptions", ResourceArns=[arn])[0].get(
                "Tags", []
            ),
            "targets": sorted(f"{t['Target']['Id']}:{t['Target'].get('Port')}" for t in health),
        }
    groups = world.ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}]
    )["SecurityGroups"]
    for group in groups:
        state["security_groups"][group["GroupName"]] = group
    return state


def cloud_state(cloud: SwitchCloud, services: Mapping[str, str]) -> dict[str, Any]:
    """:func:`raw_cloud_state` comparable between runs: every id of :attr:`SwitchCloud.labels`,
    every load balancer's name (``services`` maps a Service's UID to its name) and ARN, and
    every security group id, replaced by what it names; :data:`VOLATILE` keys dropped; lists in
    a canonical order."""
    raw = raw_cloud_state(cloud)
    labels = dict(cloud.labels)
    for uid, name in services.items():
        labels[("a" + uid.replace("-", ""))[:32]] = f"lb:{name}"
    # Names that hold a load balancer's name are labelled with it replaced first.
    named = dict(labels)
    for name, entry in raw["nlb"].items():
        balancer = _replace(name, named)
        labels[entry["description"]["LoadBalancerArn"]] = f"arn:{balancer}"
        for listener in entry["listeners"]:
            labels[listener["ListenerArn"]] = f"arn:listener:{balancer}:{listener['Port']}"
    for name, entry in raw["target_groups"].items():
        labels[entry["description"]["TargetGroupArn"]] = f"arn:target-group:{name}"
    for name, group in raw["security_groups"].items():
        labels.setdefault(group["GroupId"], f"sg:{_replace(name, named)}")
    state: dict[str, Any] = canonical(_replace(raw, labels))
    return state


def _replace(value: Any, labels: Mapping[str, str]) -> Any:
    """``value`` with every occurrence of a key of ``labels`` (whole or inside a longer string,
    such as an ARN or a group name) replaced by its label; longest keys first."""
    if not labels:
        return value
    pattern = re.compile("|".join(re.escape(key) for key in sorted(labels, key=len, reverse=True)))

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return pattern.sub(lambda match: labels[match.group(0)], item)
        if isinstance(item, Mapping):
            return {walk(key): walk(inner) for key, inner in item.items()}
        if isinstance(item, list | tuple):
            return [walk(inner) for inner in item]
        return item

    return walk(value)


def canonical(value: Any, volatile: Iterable[str] = VOLATILE) -> Any:
    """``value`` without the ``volatile`` keys (at any depth), its lists sorted by their
    JSON text (the order AWS lists things in is not part of what was made), datetimes as
    text."""
    dropped = frozenset(volatile)

    def walk(item: Any) -> Any:
        if isinstance(item, Mapping):
            return {key: walk(inner) for key, inner in item.items() if key not in dropped}
        if isinstance(item, list | tuple):
            return sorted((walk(inner) for inner in item), key=_sort_key)
        if isinstance(item, str | int | float | bool) or item is None:
            return item
        return str(item)

    return walk(value)


def _sort_key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, default=str)


def differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Where two :func:`cloud_state` values differ, one line per path (``a/b/0``)."""
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        found: list[str] = []
        for key in sorted(set(left) | set(right), key=str):
            where = f"{path}/{key}"
            if key not in left:
                found.append(f"{where}: only in the second: {_short(right[key])}")
            elif key not in right:
                found.append(f"{where}: only in the first: {_short(left[key])}")
            else:
                found += differences(left[key], right[key], where)
        return found
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [
            line
            for index, (a, b) in enumerate(zip(left, right, strict=True))
            for line in differences(a, b, f"{path}/{index}")
        ]
    if left != right:
        return [f"{path}: {_short(left)} != {_short(right)}"]
    return []


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def lb_addresses(state: Mapping[str, Any]) -> dict[str, Any]:
    """Per load balancer of a :func:`raw_cloud_state`, what clients reach it by: its DNS name
    and (NLB) the addresses of its zones."""
    found: dict[str, Any] = {}
    for name, entry in state["elb"].items():
        found[name] = entry["description"].get("DNSName")
    for name, entry in state["nlb"].items():
        zones = entry["description"].get("AvailabilityZones", ())
        found[name] = (
            entry["description"].get("DNSName"),
            sorted(
                json.dumps(zone.get("LoadBalancerAddresses", []), default=str) for zone in zones
            ),
        )
    return found


def service_names(services: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """UID -> name of the given Service objects."""
    return {s["metadata"]["uid"]: s["metadata"]["name"] for s in services}
