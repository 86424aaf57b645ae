"""Instances: created, stopped, started and deleted through the API, as users make VMs.

``instances.insert`` shows the instance at once as PROVISIONING, STAGING while its operation
runs and RUNNING when it is DONE; ``stop`` goes STOPPING -> TERMINATED and gives the ephemeral
external address back, ``start`` goes STAGING -> RUNNING with a new one. Internal addresses
come from the subnetwork of the instance's region (or the legacy network's range); a ``natIP``
must be a static address reserved in that region.
"""

from __future__ import annotations

import re
from typing import Any

from polyccm_gce_emulator.errors import (
    AlreadyExists,
    ConditionNotMet,
    Invalid,
    OperationFailure,
    ResourceNotReady,
)
from polyccm_gce_emulator.models import ipv6
from polyccm_gce_emulator.models.aliases import alias_ranges, held_aliases
from polyccm_gce_emulator.models.base import ProjectBase, Resource, check_name, reference
from polyccm_gce_emulator.models.common import Link, fingerprint, timestamp
from polyccm_gce_emulator.models.geography import GeographyMixin, region_of
from polyccm_gce_emulator.models.network import NetworkMixin
from polyccm_gce_emulator.models.operations import Operation

_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
#: Fields an instances.insert body may carry (others answer 400 unless output-only).
INSTANCE_INPUT = frozenset(
    {
        "name",
        "description",
        "machineType",
        "networkInterfaces",
        "disks",
        "labels",
        "tags",
        "metadata",
        "serviceAccounts",
        "canIpForward",
        "scheduling",
        "deletionProtection",
        "hostname",
        "minCpuPlatform",
    }
)


def check_labels(labels: object, field_name: str = "resource.labels") -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise Invalid(f"Invalid value for field '{field_name}': '{labels}'.")
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(str(key)) or not _LABEL_VALUE.fullmatch(str(value)):
            raise Invalid(
                f"Invalid value for field '{field_name}': '{key}={value}'. Label keys and "
                "values may contain only lowercase letters, digits, '_' and '-'."
            )
    return {str(key): str(value) for key, value in labels.items()}


class InstancesMixin(GeographyMixin, NetworkMixin, ProjectBase):
    """instances.insert/get/list/aggregatedList/delete/stop/start/setLabels/setTags."""

    def insert_instance(self, zone: str, body: dict[str, Any]) -> Operation:
        self.zone(zone)
        name = check_name(body.get("name"))
        if not body.get("machineType"):
            raise Invalid("Required field 'resource.machineType' not specified")
        machine_type = self.machine_type(body["machineType"], zone)
        requested = body.get("networkInterfaces") or []
        if not requested:
            raise Invalid(
                "Invalid value for field 'resource.networkInterfaces': ''. "
                "At least one network interface is required."
            )
        if name in self.collection(f"zones/{zone}", "instances"):
            # Checked before addresses are taken, so a duplicate leaks none.
            raise AlreadyExists(self.path(f"zones/{zone}", "instances", name))
        self._check_quota("instances")
        labels = check_labels(body.get("labels"))
        tags = [str(tag) for tag in (body.get("tags") or {}).get("items", [])]
        metadata_items = [
            {"key": str(item["key"]), "value": str(item.get("value", ""))}
            for item in (body.get("metadata") or {}).get("items", [])
        ]
        interfaces: list[dict[str, Any]] = []
        try:
            for index, nic in enumerate(requested):
                interfaces.append(self._interface(zone, index, nic, interfaces))
        except Exception as error:
            # A later interface was refused: give back what the earlier ones took.
            self._release_interfaces(interfaces)
            if isinstance(error, OperationFailure):
                # No address left (IP_SPACE_EXHAUSTED): GCE accepts the insert and its
                # operation ends in the error, with no instance made.
                return self._failed_insert(zone, name, error)
            raise
        stored: dict[str, Any] = {
            "name": name,
            "description": body.get("description", ""),
            "machineType": machine_type,
            "status": "PROVISIONING",
            "zone": Link(f"projects/{self.project}/zones/{zone}"),
            "canIpForward": bool(body.get("canIpForward", False)),
            "networkInterfaces": interfaces,
            "disks": [
                self._disk(zone, name, index, disk)
                for index, disk in enumerate(body.get("disks") or [])
            ],
            "metadata": {
                "kind": "compute#metadata",
                "fingerprint": fingerprint(metadata_items),
                **({"items": metadata_items} if metadata_items else {}),
            },
            "tags": {"fingerprint": fingerprint(tags), **({"items": tags} if tags else {})},
            "labels": labels,
            "labelFingerprint": fingerprint(labels),
            "scheduling": {
                "onHostMaintenance": "MIGRATE",
                "automaticRestart": True,
                "preemptible": False,
                "provisioningModel": "STANDARD",
                **(body.get("scheduling") or {}),
            },
            "cpuPlatform": "Unknown CPU Platform",
            "deletionProtection": bool(body.get("deletionProtection", False)),
            "startRestricted": False,
            "fingerprint": fingerprint([name, zone]),
        }
        if not labels:
            del stored["labels"]
        if body.get("serviceAccounts"):
            stored["serviceAccounts"] = [
                {
                    "email": str(account.get("email", "default")),
                    "scopes": [str(scope) for scope in account.get("scopes", [])],
                }
                for account in body["serviceAccounts"]
            ]
        if body.get("hostname"):
            stored["hostname"] = str(body["hostname"])
        instance_ref: list[Resource] = []

        def staging() -> None:
            instance_ref[0].body["status"] = "STAGING"

        def running() -> None:
            instance = instance_ref[0]
            instance.body.update(
                status="RUNNING",
                cpuPlatform="Intel Broadwell",
                lastStartTimestamp=timestamp(self.clock()),
            )

        operation = self.create(
            f"zones/{zone}",
            "instances",
            stored,
            kind="compute#instance",
            visible_while_creating=True,
            on_start=staging,
            on_done=running,
        )
        instance = self.collection(f"zones/{zone}", "instances")[name]
        instance_ref.append(instance)
        self._claim_static_addresses(instance)
        operation.on_fail = self._wrap(operation.on_fail, lambda: self._release(instance))
        return operation

    def _failed_insert(self, zone: str, name: str, failure: OperationFailure) -> Operation:
        def fail() -> None:
            raise failure

        return self.create(
            f"zones/{zone}", "instances", {"name": name}, kind="compute#instance", on_done=fail
        )

    @staticmethod
    def _wrap(first: Any, then: Any) -> Any:
        def both() -> None:
            if first is not None:
                first()
            then()

        return both

    def _interface(
        self, zone: str, index: int, nic: dict[str, Any], siblings: list[dict[str, Any]]
    ) -> dict[str, Any]:
        prefix = f"resource.networkInterfaces[{index}]"
        region = region_of(zone)
        subnet: Resource | None = None
        if nic.get("subnetwork"):
            subnet_link = reference(
                nic["subnetwork"], self.project, f"{prefix}.subnetwork", "subnetworks"
            )
            subnet = self.require_link(subnet_link)
            if subnet.scope != f"regions/{region}":
                raise Invalid(
                    f"Invalid value for field '{prefix}.subnetwork': '{nic['subnetwork']}'. "
                    f"Subnetwork must be in region '{region}'."
                )
        if nic.get("network"):
            network_link = reference(nic["network"], self.project, f"{prefix}.network", "networks")
        elif subnet is not None:
            network_link = Link(subnet.body["network"])
        else:
            network_link = Link(self.path("global", "networks", self.settings.network))
        network = self.require_network(network_link)
        if subnet is None and "IPv4Range" not in network.body:
            subnet = next(
                (
                    s
                    for s in self.every("subnetworks")
                    if s.body["network"] == network_link and s.scope == f"regions/{region}"
                ),
                None,
            )
            if subnet is None:
                raise Invalid(
                    f"Invalid value for field '{prefix}.network': '{network_link}'. "
                    f"The network has no subnetwork in region '{region}'."
                )
        if subnet is not None and subnet.body["network"] != network_link:
            raise Invalid(
                f"Invalid value for field '{prefix}.subnetwork': the subnetwork is not in "
                "the interface's network."
            )
        pool = subnet if subnet is not None else network
        # Every instance's aliases, read only when this interface asks for some: a scan of
        # the project per insert made 5,000 instances take 30 s of CPU (quadratic).
        in_use = (
            held_aliases(self.every("instances"))
            + [a["ipCidrRange"] for other in siblings for a in other.get("aliasIpRanges", [])]
            if nic.get("aliasIpRanges")
            else []
        )
        aliases = alias_ranges(
            subnet.body if subnet is not None else None, nic.get("aliasIpRanges"), prefix, in_use
        )
        address = self.allocate_internal(pool, nic.get("networkIP"))
        interface: dict[str, Any] = {
            "kind": "compute#networkInterface",
            "name": f"nic{index}",
            "network": network_link,
            "networkIP": address,
            "fingerprint": fingerprint([network_link, address]),
            **ipv6.interface_fields(
                subnet.body if subnet is not None else None, nic, address, prefix
            ),
        }
        if subnet is not None:
            interface["subnetwork"] = subnet.link
        if aliases:
            interface["aliasIpRanges"] = aliases
        configs = nic.get("accessConfigs") or []
        if len(configs) > 1:
            raise Invalid(
                f"Invalid value for field '{prefix}.accessConfigs': at most one access "
                "config per interface."
            )
        if configs:
            interface["accessConfigs"] = [self._access_config(zone, prefix, configs[0])]
        return interface

    def _access_config(self, zone: str, prefix: str, config: dict[str, Any]) -> dict[str, Any]:
        kind = config.get("type", "ONE_TO_ONE_NAT")
        if kind != "ONE_TO_ONE_NAT":
            raise Invalid(f"Invalid value for field '{prefix}.accessConfigs[0].type': '{kind}'.")
        result: dict[str, Any] = {
            "kind": "compute#accessConfig",
            "type": kind,
            "name": str(config.get("name", "External NAT")),
            "networkTier": str(config.get("networkTier", "PREMIUM")),
        }
        nat = config.get("natIP")
        if nat:
            region = f"regions/{region_of(zone)}"
            static = next(
                (a for a in self.every("addresses") if a.body.get("address") == nat), None
            )
            if static is None or static.scope != region or static.body.get("status") != "RESERVED":
                raise Invalid(
                    f"Invalid value for field '{prefix}.accessConfigs[0].natIP': '{nat}'. "
                    "The specified external IP address is not reserved in the instance's "
                    "region or is in use."
                )
            result["natIP"] = nat
        else:
            result["natIP"] = self.allocate_external()
        return result

    def _disk(self, zone: str, instance: str, index: int, disk: dict[str, Any]) -> dict[str, Any]:
        device = str(disk.get("deviceName") or (instance if index == 0 else f"{instance}-{index}"))
        source = disk.get("source") or f"projects/{self.project}/zones/{zone}/disks/{device}"
        size = (disk.get("initializeParams") or {}).get("diskSizeGb", "10")
        return {
            "kind": "compute#attachedDisk",
            "type": str(disk.get("type", "PERSISTENT")),
            "mode": str(disk.get("mode", "READ_WRITE")),
            "source": reference(source, self.project, f"resource.disks[{index}].source", "disks"),
            "deviceName": device,
            "index": index,
            "boot": bool(disk.get("boot", index == 0)),
            "autoDelete": bool(disk.get("autoDelete", False)),
            "interface": str(disk.get("interface", "SCSI")),
            "diskSizeGb": str(size),
        }

    # -- addresses an instance holds -------------------------------------------------------

    def _static_address(self, address: str) -> Resource | None:
        return next((a for a in self.every("addresses") if a.body.get("address") == address), None)

    def _claim_static_addresses(self, instance: Resource) -> None:
        for nic in instance.body["networkInterfaces"]:
            for config in nic.get("accessConfigs", []):
                static = self._static_address(config.get("natIP", ""))
                if static is not None:
                    static.body.update(status="IN_USE", users=[instance.link])

    def _release_nat(self, instance: Resource, *, keep_static: bool) -> None:
        """Give back the instance's external addresses: ephemeral ones to the pool (the access
        config loses its natIP), static ones to RESERVED unless ``keep_static`` (a stopped
        instance keeps its static address)."""
        for nic in instance.body["networkInterfaces"]:
            for config in nic.get("accessConfigs", []):
                nat = config.get("natIP")
                if not nat:
                    continue
                static = self._static_address(nat)
                if static is None:
                    self.release_external(nat)
                    del config["natIP"]
                elif not keep_static:
                    static.body["status"] = "RESERVED"
                    static.body.pop("users", None)

    def _release(self, instance: Resource) -> None:
        self._release_nat(instance, keep_static=False)
        self._release_interfaces(instance.body["networkInterfaces"])

    def _release_interfaces(self, interfaces: list[dict[str, Any]]) -> None:
        for nic in interfaces:
            pool = nic.get("subnetwork") or nic["network"]
            self.release_internal(pool, nic["networkIP"])
            for config in nic.get("accessConfigs", []):
                if config.get("natIP") and self._static_address(config["natIP"]) is None:
                    self.release_external(config["natIP"])

    # -- lifecycle -------------------------------------------------------------------------

    def instance(self, zone: str, name: str) -> Resource:
        self.zone(zone)
        return self.find(f"zones/{zone}", "instances", name)

    def delete_instance(self, zone: str, name: str) -> Operation:
        instance = self.instance(zone, name)
        if instance.body.get("deletionProtection"):
            raise Invalid(
                f"Invalid resource usage: 'Resource cannot be deleted if it's protected "
                f"against deletion.'. ({instance.path})"
            )

        def stopping() -> None:
            instance.body["status"] = "STOPPING"

        return self.delete(instance, on_start=stopping, on_done=lambda: self._release(instance))

    def stop_instance(self, zone: str, name: str) -> Operation:
        instance = self.instance(zone, name)
        self._require_ready(instance)
        if instance.body["status"] == "TERMINATED":
            return self.schedule(instance, "stop")
        instance.busy = True
        instance.body["status"] = "STOPPING"

        def stopped() -> None:
            instance.body.update(status="TERMINATED", lastStopTimestamp=timestamp(self.clock()))
            self._release_nat(instance, keep_static=True)

        operation = self.schedule(instance, "stop", on_done=stopped)
        operation.finished.append(lambda: setattr(instance, "busy", False))
        return operation

    def start_instance(self, zone: str, name: str) -> Operation:
        instance = self.instance(zone, name)
        self._require_ready(instance)
        status = instance.body["status"]
        if status == "RUNNING":
            return self.schedule(instance, "start")
        if status != "TERMINATED":
            raise ResourceNotReady(f"The resource '{instance.path}' is not ready")
        instance.busy = True
        instance.body["status"] = "STAGING"

        def started() -> None:
            for nic in instance.body["networkInterfaces"]:
                for config in nic.get("accessConfigs", []):
                    if "natIP" not in config:
                        config["natIP"] = self.allocate_external()
            instance.body.update(status="RUNNING", lastStartTimestamp=timestamp(self.clock()))

        operation = self.schedule(instance, "start", on_done=started)
        operation.finished.append(lambda: setattr(instance, "busy", False))
        return operation

    def set_instance_labels(self, zone: str, name: str, body: dict[str, Any]) -> Operation:
        instance = self.instance(zone, name)
        labels = check_labels(body.get("labels"), "labels")
        if body.get("labelFingerprint") != instance.body["labelFingerprint"]:
            raise ConditionNotMet(
                "Labels fingerprint either invalid or resource labels have changed"
            )

        def apply() -> None:
            instance.body["labelFingerprint"] = fingerprint(labels)
            if labels:
                instance.body["labels"] = labels
            else:
                instance.body.pop("labels", None)

        return self.schedule(instance, "setLabels", on_done=apply)

    def update_network_interface(
        self, zone: str, name: str, interface: str, body: dict[str, Any]
    ) -> Operation:
        """``instances.updateNetworkInterface``: the interface's ``aliasIpRanges`` replaced
        (the fields the method may change that the emulator models), its ``fingerprint`` the
        one last read."""
        instance = self.instance(zone, name)
        nic = next((n for n in instance.body["networkInterfaces"] if n["name"] == interface), None)
        if nic is None:
            raise Invalid(
                f"Invalid value for field 'networkInterface': '{interface}'. No such network "
                "interface."
            )
        if body.get("fingerprint") != nic["fingerprint"]:
            raise ConditionNotMet(
                "Supplied fingerprint does not match current network interface fingerprint. "
                "Please retry the request."
            )
        subnet = self.require_link(nic["subnetwork"]) if nic.get("subnetwork") else None
        aliases = alias_ranges(
            subnet.body if subnet is not None else None,
            body.get("aliasIpRanges", []),
            "resource",
            held_aliases(self.every("instances"), skip=nic),
        )

        def apply() -> None:
            if aliases:
                nic["aliasIpRanges"] = aliases
            else:
                nic.pop("aliasIpRanges", None)
            nic["fingerprint"] = fingerprint([nic["network"], nic["networkIP"], aliases])

        return self.schedule(instance, "updateNetworkInterface", on_done=apply)

    def set_instance_tags(self, zone: str, name: str, body: dict[str, Any]) -> Operation:
        instance = self.instance(zone, name)
        tags = [str(tag) for tag in body.get("items", [])]
        if body.get("fingerprint") != instance.body["tags"]["fingerprint"]:
            raise ConditionNotMet(
                "Supplied fingerprint does not match current tags fingerprint. "
                "Please retry the request."
            )

        def apply() -> None:
            instance.body["tags"] = {
                "fingerprint": fingerprint(tags),
                **({"items": tags} if tags else {}),
            }

        return self.schedule(instance, "setTags", on_done=apply)
