"""``polyccm plan`` for AWS: the ensure code itself, run with its writes recorded, not sent
(:mod:`polyccm.ops.recording`).

:class:`RecordingApi` is an :class:`~polyccm_aws.api.AwsApi` over the same clients whose
``describe_*``/``get_*``/``list_*`` calls go to AWS and whose every other call is written down and
answered with a stand-in (a new security group's id, a new target group's ARN) so that ensure
goes on as if it had been made. :class:`AwsLoadBalancerPlanner` runs the provider's own
:meth:`~polyccm_aws.load_balancer.AwsLoadBalancer.ensure_load_balancer` on such an API: the spec
building, validation, naming, adoption and comparison are the ones the controller runs, and the
recorded calls are exactly the writes it would make. None means ``adopt``; some mean ``update``,
one :class:`~polyccm.ops.contract.Difference` each. A load balancer that does not exist yet
stops the run at its ``CreateLoadBalancer`` (nothing after it could be read back): ``create``,
with what was recorded up to there and the health check and backends the spec asks for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyccm.objects import Node, Service
from polyccm.ops.contract import (
    ATTRIBUTES,
    BACKENDS,
    HEALTH_CHECK,
    LISTENERS,
    SECURITY_GROUPS,
    SUBNETS,
    TAGS,
    TARGET_GROUPS,
    Difference,
)
from polyccm.ops.recording import (
    Describer,
    PlannedCreate,
    RecordedCall,
    RecordingPlanner,
    WriteRecorder,
    describe_calls,
)

from polyccm_aws.api import AwsApi, Response
from polyccm_aws.config import CloudConfig
from polyccm_aws.instance_store import InstanceStore
from polyccm_aws.lb_spec import HealthProbeDefaults, LoadBalancerSpec, build_spec
from polyccm_aws.load_balancer import AwsLoadBalancer
from polyccm_aws.node_directory import NodeDirectory
from polyccm_aws.sg_rules import Rule, ungroup
from polyccm_aws.tagging import ClusterTagging, tag_map
from polyccm_aws.zones import Zones

CREATES = ("elb:create_load_balancer", "elbv2:create_load_balancer")


class RecordingApi(AwsApi):
    """``api``'s clients, with every call that is not a read (``SERVICE:operation``) handed to
    ``recorder`` and answered by a stand-in instead of being sent."""

    def __init__(self, api: AwsApi, recorder: WriteRecorder) -> None:
        # Not AwsApi.__init__: the same session and clients (created on first use) serve both.
        self.region = api.region
        self._config = api._config
        self._client_config = api._client_config
        self._session = api._session
        self._clients = api._clients
        self.recorder = recorder

    def call(self, service: str, operation: str, **params: Any) -> Response:
        if self.recorder.is_read(f"{service}:{operation}"):
            return super().call(service, operation, **params)
        self.recorder.record(f"{service}:{operation}", params)  # a create stops here
        if operation == "create_security_group":
            return {"GroupId": f"(new {params['GroupName']})"}
        if operation == "create_target_group":
            name = str(params["Name"])
            return {"TargetGroups": [{**params, "TargetGroupArn": f"(new {name})"}]}
        return {}


class AwsLoadBalancerPlanner(RecordingPlanner):
    """Plans with a second :class:`AwsLoadBalancer` over a :class:`RecordingApi` (the same
    code, the same clients and caches; only the writes are held back)."""

    def __init__(
        self,
        api: AwsApi,
        config: CloudConfig,
        tagging: ClusterTagging,
        *,
        store: InstanceStore,
        zones: Zones,
        directory: NodeDirectory,
    ) -> None:
        recorder = WriteRecorder(creates=CREATES)
        balancer = AwsLoadBalancer(
            RecordingApi(api, recorder),
            config,
            tagging,
            store=store,
            zones=zones,
            directory=directory,
        )
        super().__init__(balancer, recorder)
        self._probe = HealthProbeDefaults.from_config(config)

    def spec_warnings(self, service: Service) -> Sequence[str]:
        return build_spec(service, self._probe).warnings  # ImplementedElsewhere: the core's skip

    def describe(self, calls: Sequence[RecordedCall]) -> list[Difference]:
        return describe_calls(calls, _DESCRIBERS)

    def created(
        self, service: Service, nodes: Sequence[Node], stop: PlannedCreate
    ) -> list[Difference]:
        """What was recorded up to the create, and the health check and backends the spec
        asks for (set up after it)."""
        spec = build_spec(service, self._probe)
        return [*self.describe(self.recorder.calls), *_after_create(spec, nodes)]


def _after_create(spec: LoadBalancerSpec, nodes: Sequence[Node]) -> list[Difference]:
    """What ensure sets up after creating the load balancer, as the spec asks for it."""
    parts: list[Difference] = []
    if spec.is_nlb:
        for mapping in spec.mappings:
            target = mapping.health_check
            parts.append(
                Difference(
                    LISTENERS,
                    f"add {mapping.frontend_protocol}:{mapping.frontend_port} -> target group "
                    f"{mapping.traffic_protocol}:{mapping.traffic_port}",
                )
            )
            parts.append(
                Difference(
                    HEALTH_CHECK,
                    f"{target.protocol}:{target.port}{target.path} every {target.interval}s",
                )
            )
    elif spec.health_check is not None:
        check = spec.health_check
        parts.append(Difference(HEALTH_CHECK, f"{check.target} every {check.interval}s"))
    if nodes:
        parts.append(Difference(BACKENDS, f"the running instances of {len(nodes)} node(s)"))
    return parts


# -- recorded calls as differences -------------------------------------------------------------


def _name(arn: object) -> str:
    """A readable name for an ARN (``.../targetgroup/NAME/hash`` is NAME)."""
    text = str(arn)
    parts = text.split("/")
    return parts[-2] if text.startswith("arn:") and len(parts) >= 3 else text


def _rule(rule: Rule) -> str:
    ports = "all" if rule.protocol == "-1" else f"{rule.protocol} {rule.from_port}-{rule.to_port}"
    source = rule.group_id or rule.cidr
    label = f" ({rule.description})" if rule.description else ""
    return f"{ports} from {source}{label}"


def _elb_listener(listener: Mapping[str, Any]) -> str:
    certificate = listener.get("SSLCertificateId")
    return (
        f"{listener['Protocol']}:{listener['LoadBalancerPort']} -> "
        f"{listener['InstanceProtocol']}:{listener['InstancePort']}"
        + (f" with {certificate}" if certificate else "")
    )


def _tags(tags: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(tag_map(tags).items()))


def _attributes(params: Mapping[str, Any]) -> str:
    attributes = params.get("Attributes") or params.get("LoadBalancerAttributes")
    if isinstance(attributes, list):
        return ", ".join(f"{a['Key']}={a['Value']}" for a in attributes)
    return ", ".join(
        f"{section}.{key}={value}"
        for section, values in sorted((attributes or {}).items())
        for key, value in sorted(values.items())
    )


def _created_load_balancer(params: Mapping[str, Any]) -> list[Difference]:
    parts = [
        Difference(LISTENERS, f"add {_elb_listener(li)}") for li in params.get("Listeners", ())
    ]
    subnets = params.get("Subnets") or [m["SubnetId"] for m in params.get("SubnetMappings", ())]
    parts.append(Difference(SUBNETS, ", ".join(subnets)))
    if params.get("SecurityGroups"):
        parts.append(Difference(SECURITY_GROUPS, ", ".join(params["SecurityGroups"])))
    scheme = params.get("Scheme", "internet-facing")
    kind = "NLB" if params.get("Type") == "network" else "classic ELB"
    parts.insert(0, Difference("load-balancer", f"create {scheme} {kind}"))
    return parts


def _targets(verb: str) -> Callable[[Mapping[str, Any]], list[Difference]]:
    def describe(params: Mapping[str, Any]) -> list[Difference]:
        group = _name(params["TargetGroupArn"])
        targets = ", ".join(f"{t['Id']}:{t.get('Port', '')}" for t in params["Targets"])
        return [Difference(BACKENDS, f"{verb} {targets} ({group})")]

    return describe


def _instances(verb: str) -> Callable[[Mapping[str, Any]], list[Difference]]:
    def describe(params: Mapping[str, Any]) -> list[Difference]:
        ids = ", ".join(i["InstanceId"] for i in params["Instances"])
        return [Difference(BACKENDS, f"{verb} {ids}")]

    return describe


def _ingress(verb: str) -> Callable[[Mapping[str, Any]], list[Difference]]:
    def describe(params: Mapping[str, Any]) -> list[Difference]:
        group = params["GroupId"]
        rules = sorted(ungroup(params.get("IpPermissions") or ()))
        return [Difference(SECURITY_GROUPS, f"{verb} {_rule(r)} on {group}") for r in rules]

    return describe


def _one(aspect: str, text: Callable[[Mapping[str, Any]], str]) -> Callable[..., list[Difference]]:
    return lambda params: [Difference(aspect, text(params))]


ParamsDescriber = Callable[[Mapping[str, Any]], list[Difference]]


def _by_params(describe: ParamsDescriber) -> Describer:
    return lambda call: describe(call.params)


_BY_OPERATION: dict[str, ParamsDescriber] = {
    "elb:create_load_balancer": _created_load_balancer,
    "elbv2:create_load_balancer": _created_load_balancer,
    "elb:create_load_balancer_listeners": lambda p: [
        Difference(LISTENERS, f"add {_elb_listener(li)}") for li in p["Listeners"]
    ],
    "elb:delete_load_balancer_listeners": _one(
        LISTENERS, lambda p: f"remove port {', '.join(map(str, p['LoadBalancerPorts']))}"
    ),
    "elb:attach_load_balancer_to_subnets": _one(
        SUBNETS, lambda p: f"attach {', '.join(p['Subnets'])}"
    ),
    "elb:detach_load_balancer_from_subnets": _one(
        SUBNETS, lambda p: f"detach {', '.join(p['Subnets'])}"
    ),
    "elb:apply_security_groups_to_load_balancer": _one(
        SECURITY_GROUPS, lambda p: f"set {', '.join(p['SecurityGroups'])}"
    ),
    "elb:create_load_balancer_policy": _one(
        LISTENERS, lambda p: f"create policy {p['PolicyName']} ({p['PolicyTypeName']})"
    ),
    "elb:set_load_balancer_policies_for_backend_server": _one(
        LISTENERS,
        lambda p: (
            f"instance port {p['InstancePort']}: policies {', '.join(p['PolicyNames']) or 'none'}"
        ),
    ),
    "elb:set_load_balancer_policies_of_listener": _one(
        LISTENERS,
        lambda p: f"port {p['LoadBalancerPort']}: policies {', '.join(p['PolicyNames']) or 'none'}",
    ),
    "elb:configure_health_check": _one(
        HEALTH_CHECK,
        lambda p: (
            "set {Target} every {Interval}s, timeout {Timeout}s, healthy after "
            "{HealthyThreshold}, unhealthy after {UnhealthyThreshold}".format(**p["HealthCheck"])
        ),
    ),
    "elb:modify_load_balancer_attributes": _one(ATTRIBUTES, _attributes),
    "elb:add_tags": _one(TAGS, lambda p: f"add {_tags(p['Tags'])}"),
    "elb:register_instances_with_load_balancer": _instances("register"),
    "elb:deregister_instances_from_load_balancer": _instances("deregister"),
    "ec2:create_security_group": _one(
        SECURITY_GROUPS, lambda p: f"create {p['GroupName']} in {p['VpcId']}"
    ),
    "ec2:delete_security_group": _one(SECURITY_GROUPS, lambda p: f"delete {p['GroupId']}"),
    "ec2:authorize_security_group_ingress": _ingress("allow"),
    "ec2:revoke_security_group_ingress": _ingress("revoke"),
    "ec2:create_tags": _one(
        TAGS, lambda p: f"tag {', '.join(p['Resources'])} with {_tags(p['Tags'])}"
    ),
    "elbv2:create_listener": _one(
        LISTENERS,
        lambda p: (
            f"add {p['Protocol']}:{p['Port']} -> {_name(p['DefaultActions'][0]['TargetGroupArn'])}"
        ),
    ),
    "elbv2:modify_listener": _one(
        LISTENERS,
        lambda p: (
            f"change {p['Protocol']}:{p['Port']} -> "
            f"{_name(p['DefaultActions'][0]['TargetGroupArn'])}"
        ),
    ),
    "elbv2:delete_listener": _one(LISTENERS, lambda p: f"remove {_name(p['ListenerArn'])}"),
    "elbv2:create_target_group": _one(
        TARGET_GROUPS,
        lambda p: (
            f"create {p['Name']} ({p['Protocol']}:{p['Port']}, health check "
            f"{p['HealthCheckProtocol']}:{p['HealthCheckPort']} every "
            f"{p['HealthCheckIntervalSeconds']}s)"
        ),
    ),
    "elbv2:delete_target_group": _one(
        TARGET_GROUPS, lambda p: f"delete {_name(p['TargetGroupArn'])}"
    ),
    "elbv2:modify_target_group": _one(
        HEALTH_CHECK,
        lambda p: (
            f"{_name(p['TargetGroupArn'])}: "
            + ", ".join(f"{k}={v}" for k, v in sorted(p.items()) if k != "TargetGroupArn")
        ),
    ),
    "elbv2:register_targets": _targets("register"),
    "elbv2:deregister_targets": _targets("deregister"),
    "elbv2:modify_load_balancer_attributes": _one(ATTRIBUTES, _attributes),
    "elbv2:modify_target_group_attributes": _one(
        ATTRIBUTES, lambda p: f"{_name(p['TargetGroupArn'])}: {_attributes(p)}"
    ),
    "elbv2:set_security_groups": _one(
        SECURITY_GROUPS, lambda p: f"set {', '.join(p['SecurityGroups'])}"
    ),
}
_DESCRIBERS: dict[str, Describer] = {
    operation: _by_params(describe) for operation, describe in _BY_OPERATION.items()
}
