"""Network Load Balancers (``aws-load-balancer-type: nlb``), reconciled as cloud-provider-aws does.

An NLB called ``a<uid>`` gets one listener per service port, each forwarding to an instance
target group named ``k8s-<ns>-<svc>-<hash>`` on the node port; running backends are registered
as targets; node groups get client and health-check rules labelled with the NLB's name. With
``NLBSecurityGroupMode = Managed`` the NLB also gets its own security group. A create cut short
is completed by the next ensure (a target group left without a listener is found by name and
reused). Deleting removes the NLB, its target groups, its rules and its managed group, and also
whatever an interrupted create or deletion left: target groups by name and tags, rules by the
NLB's name, the managed group by name.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from polyccm.cloud import LoadBalancerIngress, LoadBalancerStatus
from polyccm.errors import CloudError, RetryAfter
from polyccm.objects import Service

from polyccm_aws import annotations as ann
from polyccm_aws.api import AwsApiError, error_code
from polyccm_aws.instance_store import Instance
from polyccm_aws.lb_kind import BalancerKind, wanted_backends
from polyccm_aws.lb_spec import LoadBalancerSpec, PortMapping, config_warnings
from polyccm_aws.naming import (
    NLB_SECURITY_GROUP_DESCRIPTION,
    nlb_security_group_name,
    target_group_name,
    target_group_prefix,
)
from polyccm_aws.network import no_subnets_error
from polyccm_aws.security_groups import SecurityGroup, node_security_group
from polyccm_aws.sg_rules import (
    NLB_MTU_RULE,
    Rule,
    is_nlb_rule_of,
    load_balancer_rules,
    mtu_rules_for,
    nlb_node_rules,
    ungroup,
)
from polyccm_aws.tagging import SERVICE_NAME_TAG, tag_list, tag_map
from polyccm_aws.together import together

log = logging.getLogger(__name__)

Description = Mapping[str, Any]
#: Targets per RegisterTargets or DeregisterTargets call. AWS's own load balancer controller
#: sends 200 (upstream's CCM 100): at 5,000 nodes, 25 calls per target group instead of 50.
TARGETS_PER_CALL = 200


def nlb_status(description: Description) -> LoadBalancerStatus:
    """The service status of an NLB: its DNS name while active or provisioning."""
    hostname = str(description.get("DNSName") or "")
    state = str((description.get("State") or {}).get("Code", "active"))
    if hostname and state in ("active", "provisioning"):
        return LoadBalancerStatus((LoadBalancerIngress(hostname=hostname),))
    return LoadBalancerStatus()


def _chunks(items: list[dict[str, Any]], size: int) -> Iterable[list[dict[str, Any]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class NetworkLb(BalancerKind):
    """Create, update and delete NLBs."""

    def describe(self, name: str) -> Description | None:
        answer = self._describe("elbv2", Names=[name])
        if answer is None:
            return None
        found = [lb for lb in answer.get("LoadBalancers") or () if lb.get("Type") == "network"]
        return found[0] if found else None

    def _tags(self, service: Service, spec: LoadBalancerSpec) -> dict[str, str]:
        return self._tagging.owned_tags({**spec.additional_tags, SERVICE_NAME_TAG: service.key})

    # -- ensure -------------------------------------------------------------------------------

    def ensure(
        self,
        service: Service,
        spec: LoadBalancerSpec,
        name: str,
        instances: Mapping[str, Instance],
        existing: Description | None,
        *,
        cluster_name: str,
    ) -> LoadBalancerStatus:
        vpc_id = str(existing["VpcId"]) if existing else self._network.vpc_id(instances.values())
        if existing is None:
            subnets = self._network.subnets_for(spec.subnets, internal=spec.internal, vpc_id=vpc_id)
            if not subnets:
                raise no_subnets_error(name, internal=spec.internal, tagging=self._tagging)
            self._check_static_addresses(spec, subnets)
        else:
            subnets = [str(z["SubnetId"]) for z in existing.get("AvailabilityZones") or ()]
        group_ids, managed = self._security_groups(service, spec, existing, cluster_name, vpc_id)
        if existing is None:
            description = self._create(service, spec, name, subnets=subnets, group_ids=group_ids)

            def listeners() -> None:
                for port_mapping in spec.mappings:
                    self._create_listener(service, spec, description, port_mapping, instances)

        else:
            description = existing

            def listeners() -> None:
                self._sync(service, spec, existing, group_ids, instances)

        arn = str(description["LoadBalancerArn"])

        def targets() -> None:
            listeners()
            if spec.target_group_attributes:
                self._sync_target_group_attributes(spec, arn)

        def own_rules() -> None:
            if managed is not None:
                ports = [(m.frontend_protocol.lower(), m.frontend_port) for m in spec.mappings]
                ports = [("tcp" if p == "tls" else p, port) for p, port in ports]
                self._groups.set_rules(managed, load_balancer_rules(ports, spec.source_ranges))

        # Upstream makes the listeners and target groups, then sets the attributes, then the
        # managed group's rules, then the node groups' rules, each once the one before is done
        # (cloud-provider-aws pkg/providers/v1/aws.go:2494-2556 at 63ec440c). Once the NLB
        # exists each needs only the NLB, so they go out together; a failed one is retried
        # with the whole ensure, as upstream's.
        together(
            targets,
            lambda: self._sync_attributes(spec, arn),
            own_rules,
            lambda: self.sync_node_rules(
                name, self._desired_node_rules(name, spec, subnets), instances
            ),
        )
        status = nlb_status(description)
        return dataclasses.replace(status, warnings=config_warnings(spec, self._config))

    @staticmethod
    def _check_static_addresses(spec: LoadBalancerSpec, subnets: list[str]) -> None:
        for annotation, values in (
            (ann.EIP_ALLOCATIONS, spec.eip_allocations),
            (ann.PRIVATE_IPV4_ADDRESSES, spec.private_ipv4_addresses),
        ):
            if values and len(values) != len(subnets):
                raise ann.invalid(
                    annotation,
                    ",".join(values),
                    f"needs one entry per subnet ({len(subnets)} subnets: {', '.join(subnets)})",
                )

    def _security_groups(
        self,
        service: Service,
        spec: LoadBalancerSpec,
        existing: Description | None,
        cluster_name: str,
        vpc_id: str,
    ) -> tuple[list[str], SecurityGroup | None]:
        """Groups for the NLB, and the one that is ours to manage as just read or made (``None``
        when none is: upstream's rules, only in Managed mode, and never added to an NLB created
        without groups)."""
        current = [str(g) for g in (existing or {}).get("SecurityGroups") or ()]
        if not self._config.nlb_security_groups_managed:
            return current, None
        if existing is not None and not current:
            return [], None
        if spec.security_groups:
            return list(spec.security_groups), None
        group = self._groups.ensure(
            nlb_security_group_name(cluster_name, service),
            NLB_SECURITY_GROUP_DESCRIPTION,
            vpc_id,
            spec.additional_tags,
        )
        return [str(group["GroupId"])], group

    def _create(
        self,
        service: Service,
        spec: LoadBalancerSpec,
        name: str,
        *,
        subnets: list[str],
        group_ids: list[str],
    ) -> Description:
        """The new NLB (its listeners are made by the caller)."""
        mappings: list[dict[str, str]] = []
        for index, subnet in enumerate(subnets):
            mapping = {"SubnetId": subnet}
            if spec.eip_allocations:
                mapping["AllocationId"] = spec.eip_allocations[index]
            if spec.private_ipv4_addresses:
                mapping["PrivateIPv4Address"] = spec.private_ipv4_addresses[index]
            mappings.append(mapping)
        params: dict[str, Any] = {
            "Name": name,
            "Type": "network",
            "SubnetMappings": mappings,
            "Tags": tag_list(self._tags(service, spec)),
        }
        if spec.internal:
            params["Scheme"] = "internal"
        if group_ids:
            params["SecurityGroups"] = group_ids
        log.info("creating NLB %s for %s", name, service.key)
        answer = self._api.call("elbv2", "create_load_balancer", **params)
        description: Description = answer["LoadBalancers"][0]
        return description

    def _create_listener(
        self,
        service: Service,
        spec: LoadBalancerSpec,
        description: Description,
        mapping: PortMapping,
        instances: Mapping[str, Instance],
    ) -> None:
        group = self._target_group_for(service, spec, description, mapping, instances)
        params: dict[str, Any] = {
            "LoadBalancerArn": description["LoadBalancerArn"],
            "Port": mapping.frontend_port,
            "Protocol": mapping.frontend_protocol,
            "DefaultActions": [{"Type": "forward", "TargetGroupArn": group["TargetGroupArn"]}],
            "Tags": tag_list(self._tags(service, spec)),
        }
        params.update(self._tls(mapping))
        self._api.call("elbv2", "create_listener", **params)

    @staticmethod
    def _tls(mapping: PortMapping) -> dict[str, Any]:
        if mapping.frontend_protocol != "TLS":
            return {}
        tls: dict[str, Any] = {"Certificates": [{"CertificateArn": mapping.certificate_arn}]}
        if mapping.ssl_policy:
            tls["SslPolicy"] = mapping.ssl_policy
        return tls

    def _target_group_for(
        self,
        service: Service,
        spec: LoadBalancerSpec,
        description: Description,
        mapping: PortMapping,
        instances: Mapping[str, Instance],
    ) -> Description:
        """The target group for ``mapping``, created with its targets, or (after an interrupted
        create left it unattached) the existing one of that name, brought up to date."""
        group = self._create_target_group(service, spec, str(description["VpcId"]), mapping)
        if group is not None:
            self._sync_targets(str(group["TargetGroupArn"]), mapping.traffic_port, instances, [])
            return group
        group = self._existing_target_group(service, mapping, str(description["LoadBalancerArn"]))
        self._sync_targets(str(group["TargetGroupArn"]), mapping.traffic_port, instances)
        self._sync_health_check(group, mapping)
        return group

    def _target_group_name(self, service: Service, mapping: PortMapping) -> str:
        return target_group_name(
            cluster_id=self._tagging.cluster_id,
            namespace=service.namespace,
            name=service.name,
            service_port=mapping.frontend_port,
            node_port=mapping.traffic_port,
            target_protocol=mapping.traffic_protocol,
            health_check_protocol=mapping.health_check.protocol,
            health_check_interval=mapping.health_check.interval,
        )

    def _existing_target_group(
        self, service: Service, mapping: PortMapping, load_balancer_arn: str
    ) -> Description:
        """The target group named for ``mapping``, when no other load balancer uses it."""
        name = self._target_group_name(service, mapping)
        answer = self._api.call("elbv2", "describe_target_groups", Names=[name])
        group: Description = answer["TargetGroups"][0]
        others = sorted(set(group.get("LoadBalancerArns") or ()) - {load_balancer_arn})
        if others and self._attached({"LoadBalancerArns": others}):
            raise CloudError(
                f"target group {name} of {service.key} is in use by another load balancer "
                f"({', '.join(others)}); delete it or that load balancer"
            )
        log.info("reusing target group %s for %s", name, service.key)
        return group

    def _create_target_group(
        self, service: Service, spec: LoadBalancerSpec, vpc_id: str, mapping: PortMapping
    ) -> Description | None:
        """A new target group for ``mapping``; None when one of that name exists already."""
        check = mapping.health_check
        name = self._target_group_name(service, mapping)
        params: dict[str, Any] = {
            "Name": name,
            "VpcId": vpc_id,
            "Port": mapping.traffic_port,
            "Protocol": mapping.traffic_protocol,
            "TargetType": "instance",
            "HealthCheckProtocol": check.protocol,
            "HealthCheckPort": check.port,
            "HealthCheckIntervalSeconds": check.interval,
            "HealthyThresholdCount": check.healthy_threshold,
            "UnhealthyThresholdCount": check.unhealthy_threshold,
            "Tags": tag_list(self._tags(service, spec)),
        }
        if check.protocol != "TCP":
            params["HealthCheckPath"] = check.path
        log.info("creating target group %s for %s", name, service.key)
        try:
            answer = self._api.call("elbv2", "create_target_group", **params)
        except AwsApiError as error:
            # AWS answers an identical re-create with the existing group; moto (and AWS, when
            # a setting differs) refuses it instead. Either way the group is there already.
            if error_code(error) == "DuplicateTargetGroupName":
                return None
            raise
        group: Description = answer["TargetGroups"][0]
        return group

    def _sync(
        self,
        service: Service,
        spec: LoadBalancerSpec,
        existing: Description,
        group_ids: list[str],
        instances: Mapping[str, Instance],
    ) -> None:
        arn = str(existing["LoadBalancerArn"])
        current_groups = [str(g) for g in existing.get("SecurityGroups") or ()]
        if group_ids and set(group_ids) != set(current_groups):
            self._api.call(
                "elbv2", "set_security_groups", LoadBalancerArn=arn, SecurityGroups=group_ids
            )
            self._groups.delete_owned(sorted(set(current_groups) - set(group_ids)))
        listeners = self._api.call("elbv2", "describe_listeners", LoadBalancerArn=arn).get(
            "Listeners", []
        )
        groups = self._target_groups(arn)
        by_port = {int(listener["Port"]): listener for listener in listeners}
        for mapping in spec.mappings:
            listener = by_port.pop(mapping.frontend_port, None)
            if listener is None:
                self._create_listener(service, spec, existing, mapping, instances)
            else:
                self._sync_listener(
                    service,
                    spec,
                    existing,
                    listener=listener,
                    groups=groups,
                    mapping=mapping,
                    instances=instances,
                )
        for listener in by_port.values():
            self._api.call("elbv2", "delete_listener", ListenerArn=listener["ListenerArn"])
            for action in listener.get("DefaultActions") or ():
                if action.get("TargetGroupArn"):
                    self.delete_target_group(str(action["TargetGroupArn"]))

    def _target_groups(self, load_balancer_arn: str) -> dict[str, Description]:
        """The target groups the load balancer's listeners use."""
        try:
            answer = self._api.call(
                "elbv2", "describe_target_groups", LoadBalancerArn=load_balancer_arn
            )
        except AwsApiError as error:
            # A load balancer without listeners (its create was interrupted) has no groups;
            # moto says so with this error rather than an empty list.
            if error_code(error) == "TargetGroupNotFound":
                return {}
            raise
        return {str(g["TargetGroupArn"]): g for g in answer.get("TargetGroups") or ()}

    def _sync_listener(
        self,
        service: Service,
        spec: LoadBalancerSpec,
        description: Description,
        *,
        listener: Description,
        groups: Mapping[str, Description],
        mapping: PortMapping,
        instances: Mapping[str, Instance],
    ) -> None:
        actions = listener.get("DefaultActions") or [{}]
        group = groups.get(str(actions[0].get("TargetGroupArn", "")))
        check = mapping.health_check
        recreate = (
            group is None
            or group.get("Protocol") != mapping.traffic_protocol
            or int(group.get("Port", 0)) != mapping.traffic_port
            or str(group.get("HealthCheckProtocol", "")).upper() != check.protocol
            or group.get("HealthCheckIntervalSeconds") != check.interval
        )
        certificates = [c.get("CertificateArn") for c in listener.get("Certificates") or ()]
        # AWS picks a default policy when none is asked for, so only a requested one counts.
        policy_differs = (
            bool(mapping.ssl_policy) and listener.get("SslPolicy") != mapping.ssl_policy
        )
        wanted_certificates = [mapping.certificate_arn] if mapping.certificate_arn else []
        modify = (
            recreate
            or listener.get("Protocol") != mapping.frontend_protocol
            or policy_differs
            or (mapping.frontend_protocol == "TLS" and certificates != wanted_certificates)
        )
        if recreate:
            group = self._target_group_for(service, spec, description, mapping, instances)
        else:
            assert group is not None
            self._sync_targets(str(group["TargetGroupArn"]), mapping.traffic_port, instances)
            self._sync_health_check(group, mapping)
        if modify:
            params: dict[str, Any] = {
                "ListenerArn": listener["ListenerArn"],
                "Port": mapping.frontend_port,
                "Protocol": mapping.frontend_protocol,
                "DefaultActions": [{"Type": "forward", "TargetGroupArn": group["TargetGroupArn"]}],
            }
            params.update(self._tls(mapping))
            self._api.call("elbv2", "modify_listener", **params)
        old = str(actions[0].get("TargetGroupArn", ""))
        if recreate and old and old != group["TargetGroupArn"]:
            self.delete_target_group(old)

    def _sync_health_check(self, group: Description, mapping: PortMapping) -> None:
        check = mapping.health_check
        changes: dict[str, Any] = {}
        if str(group.get("HealthCheckPort", "")) != check.port:
            changes["HealthCheckPort"] = check.port
        if group.get("HealthyThresholdCount") != check.healthy_threshold:
            changes["HealthyThresholdCount"] = check.healthy_threshold
        if group.get("UnhealthyThresholdCount") != check.unhealthy_threshold:
            changes["UnhealthyThresholdCount"] = check.unhealthy_threshold
        if check.protocol != "TCP" and group.get("HealthCheckPath") != check.path:
            changes["HealthCheckPath"] = check.path
        if changes:
            self._api.call(
                "elbv2", "modify_target_group", TargetGroupArn=group["TargetGroupArn"], **changes
            )

    def _sync_targets(
        self,
        group_arn: str,
        port: int,
        instances: Mapping[str, Instance],
        current: list[tuple[str, int]] | None = None,
    ) -> None:
        """Register exactly ``instances`` on ``port`` (``current`` None: ask AWS what is)."""
        if current is None:
            health = self._api.call("elbv2", "describe_target_health", TargetGroupArn=group_arn)
            current = [
                (str(d["Target"]["Id"]), int(d["Target"].get("Port", port)))
                for d in health.get("TargetHealthDescriptions") or ()
                if (d.get("TargetHealth") or {}).get("Reason") != "Target.DeregistrationInProgress"
            ]
        registered = {instance_id for instance_id, _ in current}
        wanted = {(instance_id, port) for instance_id in wanted_backends(instances, registered)}
        stale = [{"Id": i, "Port": p} for i, p in sorted(set(current) - wanted)]
        missing = [{"Id": i, "Port": p} for i, p in sorted(wanted - set(current))]
        for chunk in _chunks(stale, TARGETS_PER_CALL):
            self._api.call("elbv2", "deregister_targets", TargetGroupArn=group_arn, Targets=chunk)
        for chunk in _chunks(missing, TARGETS_PER_CALL):
            self._api.call("elbv2", "register_targets", TargetGroupArn=group_arn, Targets=chunk)

    def _sync_attributes(self, spec: LoadBalancerSpec, arn: str) -> None:
        answer = self._api.call("elbv2", "describe_load_balancer_attributes", LoadBalancerArn=arn)
        actual = {str(a["Key"]): str(a.get("Value", "")) for a in answer.get("Attributes") or ()}
        changed = [
            {"Key": key, "Value": value}
            for key, value in spec.nlb_attributes.desired().items()
            if actual.get(key) != value
        ]
        if changed:
            self._api.call(
                "elbv2",
                "modify_load_balancer_attributes",
                LoadBalancerArn=arn,
                Attributes=changed,
            )

    def _sync_target_group_attributes(self, spec: LoadBalancerSpec, arn: str) -> None:
        for group_arn in self._target_groups(arn):
            answer = self._api.call(
                "elbv2", "describe_target_group_attributes", TargetGroupArn=group_arn
            )
            actual = {str(a["Key"]): str(a.get("Value")) for a in answer.get("Attributes") or ()}
            changed = [
                {"Key": key, "Value": value}
                for key, value in spec.target_group_attributes.items()
                if actual.get(key) != value
            ]
            if changed:
                self._api.call(
                    "elbv2",
                    "modify_target_group_attributes",
                    TargetGroupArn=group_arn,
                    Attributes=changed,
                )

    # -- node security groups -----------------------------------------------------------------

    def _desired_node_rules(
        self, name: str, spec: LoadBalancerSpec, subnets: list[str]
    ) -> set[Rule] | None:
        """The node rules ``spec`` asks for (None when node rules are disabled: no lookup)."""
        if self._config.disable_security_group_ingress:
            return None
        return self._node_rules(name, spec, self._network.subnet_cidrs(subnets))

    def sync_node_rules(
        self, name: str, desired: set[Rule] | None, instances: Mapping[str, Instance]
    ) -> None:
        """Put ``desired`` (client and health-check rules of NLB ``name``) on the backends' node
        groups, and none of this NLB's rules elsewhere; an empty set removes them all. With
        ``desired`` None the NLB keeps the rules it has, extended to new backends' groups
        (used when the service's annotations cannot be read)."""
        if self._config.disable_security_group_ingress:
            return
        cluster = self._groups.cluster_groups()
        wanted_groups = {
            node_group
            for instance in instances.values()
            if (node_group := node_security_group(instance, cluster)) is not None
        }
        groups = dict(cluster)
        for group in self._groups.describe(wanted_groups - set(cluster)):
            groups[str(group["GroupId"])] = group
        if desired is None:
            desired = {
                rule
                for group in groups.values()
                for rule in ungroup(group.get("IpPermissions") or ())
                if is_nlb_rule_of(rule, name)
            }
        for group_id, group in sorted(groups.items()):
            actual = ungroup(group.get("IpPermissions") or ())
            ours = {r for r in actual if is_nlb_rule_of(r, name)}
            wanted = desired if group_id in wanted_groups else set()
            self._groups.change(group_id, add=wanted - actual, remove=ours - wanted)
            if not (ours or wanted):
                continue
            # Checked even when the client rules were already right: an interrupted sync may
            # have added them and not the MTU rule.
            after = (actual - ours) | wanted
            mtu = {r for r in after if r.description == NLB_MTU_RULE}
            wanted_mtu = mtu_rules_for(after)
            self._groups.change(group_id, add=wanted_mtu - mtu, remove=mtu - wanted_mtu)

    @staticmethod
    def _node_rules(name: str, spec: LoadBalancerSpec, subnet_cidrs: list[str]) -> set[Rule]:
        health_ports = [
            m.traffic_port if m.health_check.port == ann.TRAFFIC_PORT else int(m.health_check.port)
            for m in spec.mappings
        ]
        udp = any(m.traffic_protocol == "UDP" for m in spec.mappings)
        return nlb_node_rules(
            load_balancer_name=name,
            protocol="udp" if udp else "tcp",
            traffic_ports=[m.traffic_port for m in spec.mappings],
            health_ports=health_ports,
            client_cidrs=spec.source_ranges,
            subnet_cidrs=subnet_cidrs,
        )

    # -- update and delete --------------------------------------------------------------------

    def update(
        self, spec: LoadBalancerSpec | None, name: str, instances: Mapping[str, Instance]
    ) -> None:
        """Point NLB ``name`` at ``instances``: its target groups' targets and the node rules.
        Everything is read from the NLB itself, so ``spec`` None (annotations that do not
        validate) still updates the backends; the node rules are then kept as they are."""
        description = self.describe(name)
        if description is None:
            raise CloudError(f"load balancer {name} not found")
        for group in self._target_groups(str(description["LoadBalancerArn"])).values():
            self._sync_targets(str(group["TargetGroupArn"]), int(group["Port"]), instances)
        desired = None
        if spec is not None:
            subnets = [str(z["SubnetId"]) for z in description.get("AvailabilityZones") or ()]
            desired = self._desired_node_rules(name, spec, subnets)
        self.sync_node_rules(name, desired, instances)

    def delete(
        self, service: Service, name: str, *, cluster_name: str, annotated: tuple[str, ...]
    ) -> bool:
        """Delete the NLB, its target groups, node rules and managed group; False when there
        was no NLB. Whatever an interrupted create or deletion left is found again and removed
        too: target groups no listener uses (by name and tags), rules labelled with the NLB's
        name, the managed group (by name)."""
        description = self.describe(name)
        target_groups: list[str] = []
        security_groups: list[str] = []
        if description is not None:
            arn = str(description["LoadBalancerArn"])
            target_groups = list(self._target_groups(arn))
            security_groups = [
                str(g) for g in description.get("SecurityGroups") or () if g not in set(annotated)
            ]
            log.info("deleting NLB %s of %s", name, service.key)
            self._api.call("elbv2", "delete_load_balancer", LoadBalancerArn=arn)
        self.sync_node_rules(name, set(), {})
        for group_arn in target_groups:
            self.delete_target_group(group_arn)
        self._delete_leftover_target_groups(service)
        security_groups += self._managed_groups(service, cluster_name, set(security_groups))
        self._groups.delete_owned(security_groups)
        return description is not None

    def delete_target_group(self, arn: str) -> None:
        """Delete target group ``arn``; gone already is fine, in use is retried shortly."""
        try:
            self._api.call("elbv2", "delete_target_group", TargetGroupArn=arn)
        except AwsApiError as error:
            if error_code(error) == "TargetGroupNotFound":
                return
            if error_code(error) == "ResourceInUse":
                raise RetryAfter(f"target group {arn} is still in use; will retry", 5.0) from error
            raise

    def _delete_leftover_target_groups(self, service: Service) -> None:
        """Target groups of this service not attached to any load balancer."""
        prefix = target_group_prefix(service.namespace, service.name)
        candidates = [
            g
            for page in self._api.pages("elbv2", "describe_target_groups")
            for g in page.get("TargetGroups") or ()
            if str(g.get("TargetGroupName", "")).startswith(prefix + "-")
        ]
        arns = [str(g["TargetGroupArn"]) for g in candidates if not self._attached(g)]
        for start in range(0, len(arns), 20):
            answer = self._api.call("elbv2", "describe_tags", ResourceArns=arns[start : start + 20])
            for description in answer.get("TagDescriptions") or ():
                tags = tag_map(description.get("Tags"))
                if tags.get(SERVICE_NAME_TAG) == service.key and self._tagging.has_cluster_tag(
                    description.get("Tags")
                ):
                    self.delete_target_group(str(description["ResourceArn"]))

    def _attached(self, group: Description) -> bool:
        """Whether a target group still serves a load balancer that exists."""
        arns = [str(a) for a in group.get("LoadBalancerArns") or ()]
        if not arns:
            return False
        try:
            answer = self._api.call("elbv2", "describe_load_balancers", LoadBalancerArns=arns)
        except AwsApiError as error:
            if error_code(error) == "LoadBalancerNotFound":
                return False
            raise
        return bool(answer.get("LoadBalancers"))

    def _managed_groups(self, service: Service, cluster_name: str, known: set[str]) -> list[str]:
        """The managed security group of ``service`` (Managed mode), unless already ``known``."""
        if not self._config.nlb_security_groups_managed:
            return []
        found = self._groups.find_by_name(nlb_security_group_name(cluster_name, service))
        return [str(g["GroupId"]) for g in found if str(g["GroupId"]) not in known]
