"""Classic Elastic Load Balancers, reconciled the way cloud-provider-aws does.

A load balancer called ``a<uid>`` is created, or an existing one of that name adopted, with one
listener per service port, the service's health check, attributes and policies, its own security
group ``k8s-elb-<name>`` (unless the service or the cloud config names groups), a rule on each
backend's node group admitting the load balancer, and the running backend instances registered.
Only what differs from the desired state is changed, so a steady-state sync makes few calls, and
a create cut short is completed by the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from polyccm.cloud import LoadBalancerIngress, LoadBalancerStatus
from polyccm.errors import CloudError
from polyccm.objects import Service

from polyccm_aws.instance_store import Instance
from polyccm_aws.lb_kind import BalancerKind, wanted_backends
from polyccm_aws.lb_spec import LoadBalancerSpec
from polyccm_aws.naming import elb_security_group_description, elb_security_group_name
from polyccm_aws.network import no_subnets_error
from polyccm_aws.security_groups import SecurityGroup, SecurityGroupInUse, node_security_group
from polyccm_aws.sg_rules import group_rule, load_balancer_rules
from polyccm_aws.tagging import SERVICE_NAME_TAG, tag_list, tag_map
from polyccm_aws.together import together

log = logging.getLogger(__name__)

Description = Mapping[str, Any]
PROXY_PROTOCOL_POLICY = "k8s-proxyprotocol-enabled"
SSL_POLICY_FORMAT = "k8s-SSLNegotiationPolicy-{}"


def elb_status(description: Description) -> LoadBalancerStatus:
    """The service status of a classic ELB: its DNS name."""
    hostname = str(description.get("DNSName") or "")
    return LoadBalancerStatus((LoadBalancerIngress(hostname=hostname),) if hostname else ())


def attributes_differ(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """Whether any attribute we set differs from the described ones."""
    for section, values in desired.items():
        current = actual.get(section) or {}
        for key, value in values.items():
            if current.get(key) != value:
                return True
    return False


class ClassicElb(BalancerKind):
    """Create, update and delete classic ELBs."""

    def describe(self, name: str) -> Description | None:
        answer = self._describe("elb", LoadBalancerNames=[name])
        if answer is None:
            return None
        found = answer.get("LoadBalancerDescriptions") or []
        return found[0] if found else None

    # -- ensure -------------------------------------------------------------------------------

    def ensure(
        self,
        service: Service,
        spec: LoadBalancerSpec,
        name: str,
        instances: Mapping[str, Instance],
        existing: Description | None,
    ) -> LoadBalancerStatus:
        vpc_id = self._network.vpc_id(instances.values())
        subnets = self._network.subnets_for(spec.subnets, internal=spec.internal, vpc_id=vpc_id)
        if not subnets:
            raise no_subnets_error(name, internal=spec.internal, tagging=self._tagging)
        group_ids, managed = self._security_groups(service, spec, name, vpc_id)
        described: list[Description | None] = [existing]

        def balancer() -> None:
            changed = True
            if existing is None:
                self._create(service, spec, name, subnets, group_ids)
            else:
                changed = self._sync(spec, name, existing, subnets, group_ids)
            described[0] = self.describe(name) if changed else existing

        def own_rules() -> None:
            if managed is not None:
                ports = [("tcp", listener.load_balancer_port) for listener in spec.listeners]
                self._groups.set_rules(managed, load_balancer_rules(ports, spec.source_ranges))

        # Upstream opens the ELB's own group before it makes the ELB (cloud-provider-aws
        # pkg/providers/v1/aws.go:2709-2715 at 63ec440c); neither needs the other and the
        # service is answered once both are done, so they go side by side.
        together(balancer, own_rules)
        description = described[0]
        if description is None:
            raise CloudError(f"load balancer {name} vanished while being configured")

        def health_check() -> None:
            self._sync_ssl_policy(spec, name, description)
            if spec.health_check is not None and not spec.health_check.matches(
                description.get("HealthCheck") or {}
            ):
                self._api.call(
                    "elb",
                    "configure_health_check",
                    LoadBalancerName=name,
                    HealthCheck=spec.health_check.to_api(),
                )

        # Upstream then sets, one after the other, the attributes, the health check, the node
        # groups' rules and the instances (aws.go:2715-2806): each needs only the ELB, so
        # they go out together (a failed one is retried with the whole ensure, as upstream's).
        together(
            lambda: self._sync_attributes(spec, name),
            health_check,
            lambda: self.sync_node_rules(group_ids[0], instances),
            lambda: self._sync_instances(name, description, instances),
        )
        return elb_status(description)

    def _security_groups(
        self, service: Service, spec: LoadBalancerSpec, name: str, vpc_id: str
    ) -> tuple[list[str], SecurityGroup | None]:
        """The groups for the ELB, primary first, and the primary as just read or made when it
        is ours to manage (``None`` when it is not)."""
        if spec.security_groups:
            return [*spec.security_groups, *spec.extra_security_groups], None
        if self._config.elb_security_group:
            return [self._config.elb_security_group, *spec.extra_security_groups], None
        group = self._groups.ensure(
            elb_security_group_name(name),
            elb_security_group_description(name, service),
            vpc_id,
            spec.additional_tags,
        )
        return [str(group["GroupId"]), *spec.extra_security_groups], group

    def _create(
        self,
        service: Service,
        spec: LoadBalancerSpec,
        name: str,
        subnets: list[str],
        group_ids: list[str],
    ) -> None:
        tags = self._tagging.owned_tags({**spec.additional_tags, SERVICE_NAME_TAG: service.key})
        params: dict[str, Any] = {
            "LoadBalancerName": name,
            "Listeners": [listener.to_api() for listener in spec.listeners],
            "Subnets": subnets,
            "SecurityGroups": group_ids,
            "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
        }
        if spec.internal:
            params["Scheme"] = "internal"
        log.info("creating classic ELB %s for %s", name, service.key)
        self._api.call("elb", "create_load_balancer", **params)
        if spec.proxy_protocol:
            self._create_proxy_policy(name)
            for listener in spec.listeners:
                self._set_backend_policies(name, listener.instance_port, [PROXY_PROTOCOL_POLICY])

    def _sync(
        self,
        spec: LoadBalancerSpec,
        name: str,
        existing: Description,
        subnets: list[str],
        group_ids: list[str],
    ) -> bool:
        """Bring an existing ELB in line; True when anything changed."""
        changed = False
        actual_subnets = set(existing.get("Subnets") or ())
        if removed := sorted(actual_subnets - set(subnets)):
            changed = True
            self._api.call(
                "elb", "detach_load_balancer_from_subnets", LoadBalancerName=name, Subnets=removed
            )
        if added := sorted(set(subnets) - actual_subnets):
            changed = True
            self._api.call(
                "elb", "attach_load_balancer_to_subnets", LoadBalancerName=name, Subnets=added
            )
        actual_groups = set(existing.get("SecurityGroups") or ())
        if actual_groups != set(group_ids):
            changed = True
            self._api.call(
                "elb",
                "apply_security_groups_to_load_balancer",
                LoadBalancerName=name,
                SecurityGroups=group_ids,
            )
            replaced = actual_groups - set(group_ids) - {self._config.elb_security_group}
            try:
                self._groups.delete_owned(sorted(replaced))
            except SecurityGroupInUse as error:
                # Not fatal: deleting the service looks the group up by name again.
                log.warning("load balancer %s: %s", name, error)
        changed = self._sync_listeners(spec, name, existing) or changed
        changed = self._sync_proxy_protocol(spec, name, existing) or changed
        self._sync_tags(spec, name)
        return changed

    def _sync_tags(self, spec: LoadBalancerSpec, name: str) -> None:
        """Add the annotated tags the ELB lacks (or has with another value); never remove."""
        if not spec.additional_tags:
            return
        answer = self._api.call("elb", "describe_tags", LoadBalancerNames=[name])
        current = {
            key: value
            for description in answer.get("TagDescriptions") or ()
            for key, value in tag_map(description.get("Tags")).items()
        }
        missing = {k: v for k, v in spec.additional_tags.items() if current.get(k) != v}
        if missing:
            self._api.call("elb", "add_tags", LoadBalancerNames=[name], Tags=tag_list(missing))

    def _sync_listeners(self, spec: LoadBalancerSpec, name: str, existing: Description) -> bool:
        actual = [d["Listener"] for d in existing.get("ListenerDescriptions") or ()]
        removals = sorted(
            {a["LoadBalancerPort"] for a in actual if not any(w.matches(a) for w in spec.listeners)}
        )
        additions = [w.to_api() for w in spec.listeners if not any(w.matches(a) for a in actual)]
        # One port per call: moto mishandles several ports at once, and port changes are rare.
        for port in removals:
            self._api.call(
                "elb",
                "delete_load_balancer_listeners",
                LoadBalancerName=name,
                LoadBalancerPorts=[port],
            )
        if additions:
            self._api.call(
                "elb", "create_load_balancer_listeners", LoadBalancerName=name, Listeners=additions
            )
        return bool(removals or additions)

    def _sync_proxy_protocol(
        self, spec: LoadBalancerSpec, name: str, existing: Description
    ) -> bool:
        enabled_ports = {
            b["InstancePort"]
            for b in existing.get("BackendServerDescriptions") or ()
            if PROXY_PROTOCOL_POLICY in (b.get("PolicyNames") or ())
        }
        known_ports = {b["InstancePort"] for b in existing.get("BackendServerDescriptions") or ()}
        wanted_ports = {listener.instance_port for listener in spec.listeners}
        policies = existing.get("Policies") or {}
        changed = False
        if spec.proxy_protocol and PROXY_PROTOCOL_POLICY not in (
            policies.get("OtherPolicies") or ()
        ):
            self._create_proxy_policy(name)
            changed = True
        for port in sorted(wanted_ports):
            if (port in enabled_ports) != spec.proxy_protocol:
                policy = [PROXY_PROTOCOL_POLICY] if spec.proxy_protocol else []
                self._set_backend_policies(name, port, policy)
                changed = True
        for port in sorted(known_ports - wanted_ports):
            if port in enabled_ports:
                self._set_backend_policies(name, port, [])
                changed = True
        return changed

    def _create_proxy_policy(self, name: str) -> None:
        self._api.call(
            "elb",
            "create_load_balancer_policy",
            LoadBalancerName=name,
            PolicyName=PROXY_PROTOCOL_POLICY,
            PolicyTypeName="ProxyProtocolPolicyType",
            PolicyAttributes=[{"AttributeName": "ProxyProtocol", "AttributeValue": "true"}],
        )

    def _set_backend_policies(self, name: str, port: int, policies: list[str]) -> None:
        self._api.call(
            "elb",
            "set_load_balancer_policies_for_backend_server",
            LoadBalancerName=name,
            InstancePort=port,
            PolicyNames=policies,
        )

    def _sync_attributes(self, spec: LoadBalancerSpec, name: str) -> None:
        desired = spec.elb_attributes.to_api()
        actual = self._api.call(
            "elb", "describe_load_balancer_attributes", LoadBalancerName=name
        ).get("LoadBalancerAttributes", {})
        if attributes_differ(desired, actual):
            self._api.call(
                "elb",
                "modify_load_balancer_attributes",
                LoadBalancerName=name,
                LoadBalancerAttributes=desired,
            )

    def _sync_ssl_policy(self, spec: LoadBalancerSpec, name: str, description: Description) -> None:
        if not spec.ssl_negotiation_policy:
            return
        policy = SSL_POLICY_FORMAT.format(spec.ssl_negotiation_policy)
        if policy not in ((description.get("Policies") or {}).get("OtherPolicies") or ()):
            self._api.call(
                "elb",
                "create_load_balancer_policy",
                LoadBalancerName=name,
                PolicyName=policy,
                PolicyTypeName="SSLNegotiationPolicyType",
                PolicyAttributes=[
                    {
                        "AttributeName": "Reference-Security-Policy",
                        "AttributeValue": spec.ssl_negotiation_policy,
                    }
                ],
            )
        for listener_description in description.get("ListenerDescriptions") or ():
            listener = listener_description["Listener"]
            secure = str(listener.get("Protocol", "")).upper() in ("SSL", "HTTPS")
            if secure and policy not in (listener_description.get("PolicyNames") or ()):
                self._api.call(
                    "elb",
                    "set_load_balancer_policies_of_listener",
                    LoadBalancerName=name,
                    LoadBalancerPort=listener["LoadBalancerPort"],
                    PolicyNames=[policy],
                )

    def _sync_instances(
        self, name: str, description: Description, instances: Mapping[str, Instance]
    ) -> None:
        actual = {str(i["InstanceId"]) for i in description.get("Instances") or ()}
        wanted = wanted_backends(instances, actual)
        if added := sorted(wanted - actual):
            self._api.call(
                "elb",
                "register_instances_with_load_balancer",
                LoadBalancerName=name,
                Instances=[{"InstanceId": i} for i in added],
            )
        if removed := sorted(actual - wanted):
            self._api.call(
                "elb",
                "deregister_instances_from_load_balancer",
                LoadBalancerName=name,
                Instances=[{"InstanceId": i} for i in removed],
            )

    # -- node security groups -----------------------------------------------------------------

    def sync_node_rules(
        self, load_balancer_group: str, instances: Mapping[str, Instance], *, deleting: bool = False
    ) -> None:
        """Let ``load_balancer_group`` reach the node groups of ``instances`` and no others
        (rules in groups not tagged for the cluster are left alone unless ``deleting``)."""
        if self._config.disable_security_group_ingress:
            return
        groups = self._groups.cluster_groups()
        cluster = frozenset(groups)
        wanted = {
            node_group
            for instance in instances.values()
            if (node_group := node_security_group(instance, cluster)) is not None
        }
        wanted.discard(self._config.elb_security_group)
        rule = group_rule(load_balancer_group)
        # Rules in groups outside the cluster are only removed when deleting: otherwise the
        # cluster's groups (one shared read per burst of ensures) tell all there is to change.
        referencing = (
            self._groups.referencing(load_balancer_group)
            if deleting or not wanted <= cluster
            else self._groups.referencing_among(groups, load_balancer_group)
        )
        for group in referencing:
            group_id = str(group["GroupId"])
            if group_id in wanted:
                wanted.discard(group_id)
            elif deleting or group_id in cluster:
                self._groups.remove_source(group, load_balancer_group)
        for group_id in sorted(wanted):
            self._groups.change(group_id, add={rule}, remove=set())

    # -- update and delete --------------------------------------------------------------------

    @staticmethod
    def primary_group(
        description: Description, annotated: tuple[str, ...], extra: tuple[str, ...]
    ) -> str | None:
        """The group that node rules admit: the first annotated one, else the LB's own
        (upstream's ordering of the ELB's groups)."""
        if annotated:
            return annotated[0]
        groups = [g for g in description.get("SecurityGroups") or () if g not in set(extra)]
        return str(groups[0]) if groups else None

    def update(
        self,
        name: str,
        instances: Mapping[str, Instance],
        annotated: tuple[str, ...],
        extra: tuple[str, ...],
    ) -> None:
        """Point ELB ``name`` at ``instances`` and let it reach their node groups. Only the ELB
        and the service's security-group annotations (``annotated``, ``extra``) are needed."""
        description = self.describe(name)
        if description is None:
            raise CloudError(f"load balancer {name} not found")
        self._sync_instances(name, description, instances)
        group = self.primary_group(description, annotated, extra)
        if group is not None:
            self.sync_node_rules(group, instances)

    def delete(
        self, service: Service, name: str, *, annotated: tuple[str, ...], extra: tuple[str, ...]
    ) -> bool:
        """Delete the ELB and what was made for it; False when there was no ELB.

        ``annotated`` and ``extra`` are the service's security-group annotations: those groups
        are the user's and stay. A group still in use raises SecurityGroupInUse after the ELB
        itself is gone; the next call finds the group by name and finishes the job."""
        description = self.describe(name)
        named = self._groups.find_by_name(elb_security_group_name(name))
        if description is None:
            self._groups.delete_owned([str(g["GroupId"]) for g in named], described=named)
            return False
        keep = {*annotated, *extra, self._config.elb_security_group}
        groups = [str(g) for g in description.get("SecurityGroups") or () if g not in keep]
        # The group this ELB once had may linger detached (annotations replaced it).
        groups += [
            str(g["GroupId"])
            for g in named
            if g["GroupId"] not in groups and g["GroupId"] not in keep
        ]
        primary = self.primary_group(description, annotated, extra)
        unreferenced: set[str] = set()
        if primary and not self._config.disable_security_group_ingress:
            self.sync_node_rules(primary, {}, deleting=primary in groups)
            if primary in groups:
                unreferenced.add(primary)  # every rule admitting it, wherever, is gone
        log.info("deleting classic ELB %s of %s", name, service.key)
        self._api.call("elb", "delete_load_balancer", LoadBalancerName=name)
        self._groups.delete_owned(groups, described=named, unreferenced=unreferenced)
        return True
