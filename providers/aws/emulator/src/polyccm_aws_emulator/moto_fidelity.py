"""moto answering as AWS does where it does not: patches applied when the emulator starts.

* :func:`describe_instance_topology`: EC2's DescribeInstanceTopology, which moto fails;
* :func:`give_classic_elbs_a_default_health_check`: a new classic ELB has AWS's default
  health check (moto gives none until ConfigureHealthCheck);
* :func:`filter_interfaces_by_attachment_status`: DescribeNetworkInterfaces takes the
  ``attachment.status`` filter (moto refuses it; upstream's Fargate lookup sends it);
* :func:`give_network_load_balancers_their_dns_names`: an NLB's DNS name has AWS's form for
  network load balancers, ``<name>-<id>.elb.<region>.amazonaws.com`` (moto gives every ELBv2
  balancer the classic form, ``<name>-1.<region>.elb.amazonaws.com``);
* :func:`keep_classic_listeners_instance_protocol`: a classic ELB listener keeps the
  ``InstanceProtocol`` it was created with (moto answers its front protocol instead);
* :func:`keep_classic_additional_attributes_unique`: ModifyLoadBalancerAttributes leaves one
  ``elb.http.desyncmitigationmode`` among a classic ELB's additional attributes (moto appends
  another on every call);
* :func:`keep_ssl_policies_to_tls_listeners`: an ELBv2 listener has an ``SslPolicy`` only
  when it terminates TLS (moto gives every listener ELBSecurityPolicy-2016-08);
* :func:`give_network_target_groups_their_attributes`: a TCP, TLS, UDP or TCP_UDP target group
  has ``preserve_client_ip.enabled`` and ``proxy_protocol_v2.enabled`` among its attributes;
* :func:`apply_rules_quota`: the account's quota of rules per security group given in
  ``POLYCCM_AWS_RULES_PER_SECURITY_GROUP`` (AWS's default, 60, without it).
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs

from polyccm_aws_emulator.metadata import StartResponse

#: The instance types DescribeInstanceTopology describes (AWS's API reference lists these
#: families); it leaves every other instance out of its answer.
TOPOLOGY_INSTANCE_TYPES = re.compile(
    r"^(hpc6a|hpc6id|hpc7a|hpc7g|p3dn|p4d|p4de|p5|p5e|trn1|trn1n)\."
)


TOPOLOGY_IDS_PER_CALL = 100
"""The most instance ids one DescribeInstanceTopology call takes."""
TOPOLOGY_PAGE = 20
"""Items in a page of DescribeInstanceTopology without ``MaxResults``."""


def describe_instance_topology(
    environ: dict[str, Any], start_response: StartResponse
) -> Iterable[bytes]:
    """EC2's DescribeInstanceTopology, which moto lacks (it answers 500): the instances asked
    for (``InstanceId.N``, at most 100; all of the region without), those of a supported type
    each with three network nodes, the others left out, as AWS answers. Paged as AWS's API
    reference says: ``MaxResults`` (5 to 1000, 20 by default: with instance ids too) items a
    page, the rest behind ``NextToken``; ``MaxResults`` and instance ids together, more than 100
    ids or a foreign token are refused (InvalidParameterValue / InvalidParameterCombination)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    params = parse_qs(str(environ.get("QUERY_STRING", "")))
    params.update(parse_qs(body.decode("utf-8", "replace")))
    wanted = [v[0] for k, v in sorted(params.items()) if k.startswith("InstanceId.")]
    size_text = (params.get("MaxResults") or [""])[0]
    token = (params.get("NextToken") or [""])[0]
    if len(wanted) > TOPOLOGY_IDS_PER_CALL:
        return _ec2_error(start_response, "InvalidParameterValue",
                          f"at most {TOPOLOGY_IDS_PER_CALL} instance ids may be given")  # fmt: skip
    if wanted and size_text:
        return _ec2_error(start_response, "InvalidParameterCombination",
                          "MaxResults cannot be combined with InstanceIds")  # fmt: skip
    if size_text and not (size_text.isdigit() and 5 <= int(size_text) <= 1000):
        return _ec2_error(start_response, "InvalidParameterValue",
                          f"MaxResults {size_text!r} is not between 5 and 1000")  # fmt: skip
    if token and not re.fullmatch(r"topology-[0-9]+", token):
        return _ec2_error(start_response, "InvalidParameterValue", "invalid NextToken")
    scope = str(environ.get("HTTP_AUTHORIZATION", "")).split("Credential=", 1)[-1].split("/")
    region = scope[2] if len(scope) > 2 else "us-east-1"
    items = []
    for instance in ec2_backends[DEFAULT_ACCOUNT_ID][region].all_instances():
        if wanted and instance.id not in wanted:
            continue
        if not TOPOLOGY_INSTANCE_TYPES.match(str(instance.instance_type)):
            continue
        digest = uuid.uuid5(uuid.NAMESPACE_OID, str(instance.id)).hex
        nodes = "".join(f"<item>nn-{digest[i * 8 : i * 8 + 8]}</item>" for i in range(3))
        items.append(
            f"<item><instanceId>{instance.id}</instanceId>"
            f"<instanceType>{instance.instance_type}</instanceType>"
            f"<availabilityZone>{instance.placement.zone}</availabilityZone>"
            f"<networkNodeSet>{nodes}</networkNodeSet></item>"
        )
    first = int(token.removeprefix("topology-")) if token else 0
    size = int(size_text) if size_text else TOPOLOGY_PAGE
    page = items[first : first + size]
    rest = f"<nextToken>topology-{first + size}</nextToken>" if first + size < len(items) else ""
    answer = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<DescribeInstanceTopologyResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>{uuid.uuid4()}</requestId><instanceSet>{''.join(page)}</instanceSet>{rest}"
        "</DescribeInstanceTopologyResponse>"
    ).encode()
    start_response("200 OK", [("Content-Type", "text/xml"), ("Content-Length", str(len(answer)))])
    return [answer]


def _ec2_error(start_response: StartResponse, code: str, message: str) -> Iterable[bytes]:
    answer = (
        '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
        f"<Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()
    headers = [("Content-Type", "text/xml"), ("Content-Length", str(len(answer)))]
    start_response("400 Bad Request", headers)
    return [answer]


#: The health check AWS gives a classic ELB made without ConfigureHealthCheck (the API's default
#: in AWS's Classic Load Balancer guide: a TCP ping every 30 s, 5 s timeout, unhealthy after 2
#: failures, healthy after 10 successes), pinging the first listener's instance port.
DEFAULT_ELB_HEALTH_CHECK = {
    "interval": "30",
    "timeout": "5",
    "unhealthy_threshold": "2",
    "healthy_threshold": "10",
}


def give_classic_elbs_a_default_health_check() -> None:
    """Make moto answer as AWS does: a classic ELB has a health check from its creation. moto
    leaves it out until ConfigureHealthCheck, and a client that reads it first (upstream's AWS
    CCM does) fails on the missing field."""
    from moto.elb.models import ELBBackend

    original = ELBBackend.create_load_balancer
    if getattr(original, "polyccm_default_health_check", False):
        return

    @functools.wraps(original)
    def create_load_balancer(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        balancer = original(self, name, *args, **kwargs)
        if balancer.health_check is None and balancer.listeners:
            port = balancer.listeners[0].instance_port
            self.configure_health_check(name, target=f"TCP:{port}", **DEFAULT_ELB_HEALTH_CHECK)
        return balancer

    create_load_balancer.polyccm_default_health_check = True  # type: ignore[attr-defined]
    ELBBackend.create_load_balancer = create_load_balancer  # type: ignore[method-assign]


def filter_interfaces_by_attachment_status() -> None:
    """Make moto's network interfaces answer the ``attachment.status`` filter as AWS's API
    reference for DescribeNetworkInterfaces defines it: ``attached`` for an interface attached
    to an instance, none of the statuses for one that is not (moto has no transitional state).
    moto raises FilterNotImplementedError for it."""
    from moto.ec2.models.elastic_network_interfaces import NetworkInterface

    original = NetworkInterface.get_filter_value
    if getattr(original, "polyccm_attachment_status", False):
        return

    @functools.wraps(original)
    def get_filter_value(self: Any, filter_name: str, method_name: str | None = None) -> Any:
        if filter_name == "attachment.status":
            return "attached" if self.instance is not None else None
        return original(self, filter_name, method_name)

    get_filter_value.polyccm_attachment_status = True  # type: ignore[attr-defined]
    NetworkInterface.get_filter_value = get_filter_value  # type: ignore[method-assign]


def give_network_load_balancers_their_dns_names() -> None:
    """Make moto name NLBs as AWS does: ``<name>-<16 hex digits>.elb.<region>.amazonaws.com``.
    moto names every ELBv2 balancer like a classic ELB (``<name>-1.<region>.elb.amazonaws.com``),
    and upstream's AWS CCM tells the two kinds apart by that suffix: on the next sync of an NLB
    Service whose status carries a classic-looking name, it refuses it as a change of the type
    annotation (k8s.io/cloud-provider-aws v1.37.1 pkg/providers/v1/aws_validations.go:59-67)."""
    from moto.elbv2.models import ELBv2Backend

    original = ELBv2Backend.create_load_balancer
    if getattr(original, "polyccm_nlb_dns_names", False):
        return

    @functools.wraps(original)
    def create_load_balancer(self: Any, *args: Any, **kwargs: Any) -> Any:
        balancer = original(self, *args, **kwargs)
        if balancer.type == "network":
            # The ARN ends with the balancer's id, 16 hex digits, as AWS's DNS name does.
            identifier = str(balancer.arn).rsplit("/", 1)[-1]
            balancer.dns_name = f"{balancer.name}-{identifier}.elb.{self.region_name}.amazonaws.com"
        return balancer

    create_load_balancer.polyccm_nlb_dns_names = True  # type: ignore[attr-defined]
    ELBv2Backend.create_load_balancer = create_load_balancer  # type: ignore[method-assign]


def _instance_protocols(ports: Iterable[Any]) -> dict[str, str]:
    """Front port (as text) -> the ``InstanceProtocol`` asked for, upper-cased as AWS answers."""
    found: dict[str, str] = {}
    for port in ports or ():
        protocol = port.get("InstanceProtocol") or port.get("instance_protocol")
        front = port.get("LoadBalancerPort") or port.get("load_balancer_port")
        if protocol and front is not None:
            found[str(front)] = str(protocol).upper()
    return found


def keep_classic_listeners_instance_protocol() -> None:
    """Make moto keep a classic ELB listener's ``InstanceProtocol``: it drops it and answers
    the front protocol in its place, so an ``https:443 -> http:30132`` listener (upstream's
    for an ssl-cert port with ``backend-protocol: http``, cloud-provider-aws v1.37.1
    pkg/providers/v1/aws.go:2102-2131) reads back as ``https -> https``, and every CCM that
    compares replaces it on every sync. Without one given, the front protocol stays the
    answer, as before."""
    from moto.elb.models import ELBBackend, FakeListener

    if getattr(FakeListener, "polyccm_instance_protocol", False):
        return

    def instance_protocol(self: Any) -> str:
        return str(getattr(self, "polyccm_instance_protocol_value", None) or self.protocol)

    FakeListener.instance_protocol = property(instance_protocol)  # type: ignore[assignment,method-assign]
    FakeListener.polyccm_instance_protocol = True  # type: ignore[attr-defined]

    def remember(balancer: Any, ports: Iterable[Any]) -> None:
        wanted = _instance_protocols(ports)
        for listener in getattr(balancer, "listeners", ()) if balancer is not None else ():
            protocol = wanted.get(str(listener.load_balancer_port))
            if protocol:
                listener.polyccm_instance_protocol_value = protocol

    create = ELBBackend.create_load_balancer

    @functools.wraps(create)
    def create_load_balancer(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        balancer = create(self, name, *args, **kwargs)
        ports = kwargs.get("ports", args[1] if len(args) > 1 else ())
        remember(balancer, ports)
        return balancer

    add = ELBBackend.create_load_balancer_listeners

    @functools.wraps(add)
    def create_load_balancer_listeners(self: Any, name: str, ports: Any) -> Any:
        balancer = add(self, name, ports)
        remember(self.load_balancers.get(name), ports)
        return balancer

    ELBBackend.create_load_balancer = create_load_balancer  # type: ignore[method-assign]
    ELBBackend.create_load_balancer_listeners = create_load_balancer_listeners  # type: ignore[method-assign]


def keep_classic_additional_attributes_unique() -> None:
    """Make ModifyLoadBalancerAttributes of a classic ELB keep one value per additional
    attribute, as AWS does: moto appends ``elb.http.desyncmitigationmode`` again on each call
    that names no additional attribute, so a balancer synced often lists it many times."""
    from moto.elb.models import ELBBackend

    original = ELBBackend.modify_load_balancer_attributes
    if getattr(original, "polyccm_unique_attributes", False):
        return

    @functools.wraps(original)
    def modify_load_balancer_attributes(
        self: Any, load_balancer_name: str, *args: Any, **kwargs: Any
    ) -> Any:
        answer = original(self, load_balancer_name, *args, **kwargs)
        attributes = self.get_load_balancer(load_balancer_name).attributes
        attributes["additional_attributes"] = list(
            dict(attributes.get("additional_attributes") or ()).items()
        )
        return answer

    modify_load_balancer_attributes.polyccm_unique_attributes = True  # type: ignore[attr-defined]
    ELBBackend.modify_load_balancer_attributes = modify_load_balancer_attributes  # type: ignore[method-assign]


def keep_ssl_policies_to_tls_listeners() -> None:
    """Make moto answer an ``SslPolicy`` only for a listener that terminates TLS (HTTPS, TLS),
    as AWS does: it gives every listener ELBSecurityPolicy-2016-08, and upstream's AWS CCM
    modifies a TCP listener that has one on every sync (cloud-provider-aws v1.37.1
    pkg/providers/v1/aws_loadbalancer.go:296-303)."""
    from moto.elbv2.models import ELBv2Backend

    original = ELBv2Backend.create_listener
    if getattr(original, "polyccm_tls_only_policies", False):
        return

    @functools.wraps(original)
    def create_listener(self: Any, *args: Any, **kwargs: Any) -> Any:
        listener: Any = original(self, *args, **kwargs)
        if listener.protocol not in ("HTTPS", "TLS"):
            listener.ssl_policy = None
        return listener

    create_listener.polyccm_tls_only_policies = True  # type: ignore[attr-defined]
    ELBv2Backend.create_listener = create_listener  # type: ignore[method-assign]


def give_network_target_groups_their_attributes() -> None:
    """Make a network target group (TCP, TLS, UDP, TCP_UDP) list the attributes AWS lists for
    one: ``preserve_client_ip.enabled`` (true for instance targets and for UDP, false for IP
    targets of TCP and TLS: AWS's documented defaults) and ``proxy_protocol_v2.enabled``
    (false). moto lists neither, and upstream's AWS CCM skips an attribute of the
    ``target-group-attributes`` annotation that DescribeTargetGroupAttributes does not list
    (cloud-provider-aws v1.37.1 pkg/providers/v1/aws_loadbalancer.go:659-663)."""
    from moto.elbv2.models import ELBv2Backend

    original = ELBv2Backend.create_target_group
    if getattr(original, "polyccm_network_attributes", False):
        return

    @functools.wraps(original)
    def create_target_group(self: Any, name: str, **kwargs: Any) -> Any:
        group = original(self, name, **kwargs)
        if group.protocol in ("TCP", "TLS", "UDP", "TCP_UDP"):
            preserve = group.target_type == "instance" or group.protocol in ("UDP", "TCP_UDP")
            group.attributes.setdefault("preserve_client_ip.enabled", str(preserve).lower())
            group.attributes.setdefault("proxy_protocol_v2.enabled", "false")
        return group

    create_target_group.polyccm_network_attributes = True  # type: ignore[attr-defined]
    ELBv2Backend.create_target_group = create_target_group  # type: ignore[method-assign]


#: Sets the emulated account's quota of rules per VPC security group: AWS's default is 60 and
#: an account may have it raised (Service Quotas), as a cluster with hundreds of load balancers
#: needs (each adds rules to the nodes' group). Unset: AWS's default.
RULES_QUOTA_VARIABLE = "POLYCCM_AWS_RULES_PER_SECURITY_GROUP"


def apply_rules_quota(quota: int) -> None:
    """Refuse a rule that would take a VPC security group past ``quota`` rules, as AWS does
    past the account's quota (moto's own check has AWS's default, 60, built in)."""
    from moto.ec2.exceptions import RulesPerSecurityGroupLimitExceededError
    from moto.ec2.models.security_groups import SecurityGroupBackend

    def verify(
        self: Any, group: Any, current: int, ip_ranges: Any, *rest: Any, **named: Any
    ) -> None:
        del self
        sources = named.get("source_groups", rest[0] if rest else None)
        limit = quota if group.vpc_id else max(quota, 100)
        if current + len(ip_ranges or ()) + len(sources or ()) > limit:
            raise RulesPerSecurityGroupLimitExceededError

    check = "_verify_group_will_respect_rule_count_limit"
    setattr(SecurityGroupBackend, check, verify)  # moto's own check, replaced
