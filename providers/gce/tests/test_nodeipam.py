"""Node IPAM on a VPC-native cluster (issue 28), as cloud-provider-gcp's ``nodeipam``
controller with ``--cidr-allocator-type=CloudAllocator`` does it
(pkg/controller/nodeipam/ipam/cloud_cidr_allocator.go@4e24531): the real ``polyccm --provider
gce`` process, the real kube-apiserver, the instances made through the emulator's compute API
with alias IP ranges from a subnetwork's secondary range. Routes are not needed: the route
controller is off (``--configure-cloud-routes=false``) and no route is made.

Before: polyccm had no ``nodeipam`` controller (``--controllers=*,-nodeipam`` was an unknown
controller, exit 2) and nodes never got a pod CIDR.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from polyccm.kube.api import NODES, KubeApi
from polyccm.objects import Node
from polyccm_gce_emulator import switch
from polyccm_gce_emulator.testing import (
    REGION,
    ZONE,
    ComputeApi,
    RunningEmulator,
    emulator_thread,
)
from polyccm_testing.demo import running_polyccm
from polyccm_testing.kubeobjects import events_for, make_node, stays, wait_for
from polyccm_testing.opstools import run_polyccm

pytestmark = pytest.mark.timeout(180)

CLUSTER = "ipam"
POD_RANGE = "10.64.0.0/14"
SUBNET = f"regions/{REGION}/subnetworks/nodes"


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with emulator_thread() as running:
        yield running


def _vpc(compute: ComputeApi, *, ipv6: str = "") -> None:
    """A custom network with subnetwork ``nodes`` whose secondary range ``pods`` holds the
    pod ranges (as a VPC-native cluster's is made), dual-stack when ``ipv6`` is an access
    type."""
    compute.do("POST", "global/networks", {"name": "vpc", "autoCreateSubnetworks": False})
    subnet: dict[str, Any] = {
        "name": "nodes", "network": "global/networks/vpc", "ipCidrRange": "10.0.0.0/24",
        "secondaryIpRanges": [{"rangeName": "pods", "ipCidrRange": POD_RANGE}],
    }  # fmt: skip
    if ipv6:
        subnet.update(stackType="IPV4_IPV6", ipv6AccessType=ipv6)
    compute.do("POST", f"regions/{REGION}/subnetworks", subnet)


def _instance(compute: ComputeApi, name: str, *, alias: bool = True, ipv6: str = "") -> str:
    """An instance in ``nodes``; with ``alias``, a /24 of ``pods`` (GCE picks it); its alias
    range as the instance shows it ("" without)."""
    ranges = [{"ipCidrRange": "/24", "subnetworkRangeName": "pods"}] if alias else []
    made = compute.create_instance(name, subnetwork=SUBNET, alias_ip_ranges=ranges, ipv6=ipv6)
    aliases = made["networkInterfaces"][0].get("aliasIpRanges") or [{}]
    return str(aliases[0].get("ipCidrRange", ""))


@contextmanager
def _polyccm(
    emulator: RunningEmulator, control_plane: Any, tmp_path: Path, *flags: str
) -> Iterator[Path]:
    config = tmp_path / "gce.conf"
    config.write_text(
        "[global]\n"
        f"project-id = {emulator.api().project}\n"
        "network-name = vpc\n"
        "subnetwork-name = nodes\n"
        f"local-zone = {ZONE}\n"
        f"api-endpoint = {emulator.endpoint}/compute/v1/\n"
    )
    env = switch.ccm_environment(emulator.endpoint, tmp_path)
    args = [
        f"--cloud-config={config}",
        f"--cluster-name={CLUSTER}",
        f"--cluster-cidr={POD_RANGE}",
        "--configure-cloud-routes=false",
        *flags,
    ]
    with running_polyccm(
        "gce", state=tmp_path, env=env, kubeconfig=control_plane.kubeconfig, args=args
    ) as log:
        yield log


def _network_unavailable(api: KubeApi, name: str) -> dict[str, Any] | None:
    for condition in api.get(NODES, name).get("status", {}).get("conditions") or ():
        if condition["type"] == "NetworkUnavailable":
            return dict(condition)
    return None


def _pod_cidrs(api: KubeApi, name: str) -> tuple[str, ...]:
    return Node(api.get(NODES, name)).pod_cidrs


def _wait_cidrs(api: KubeApi, name: str, log: Path) -> tuple[str, ...]:
    wait_for(lambda: _pod_cidrs(api, name), 60, f"{name}'s pod CIDR; log:\n{log.read_text()}")
    return _pod_cidrs(api, name)


def test_vpc_native_nodes_get_their_alias_ranges_and_no_route(
    emulator: RunningEmulator,
    control_plane: Any,
    kube_api: KubeApi,
    clean_nodes: None,
    cluster_id: str,
    tmp_path: Path,
) -> None:
    # cloud_cidr_allocator.go:452-466 (IPv4: the default interface's first alias range),
    # :550-553 (spec.podCIDR and podCIDRs) and :556-575 (NetworkUnavailable False,
    # RouteCreated); --allocate-node-cidrs and --cidr-allocator-type as upstream reads them
    # (k8s.io/cloud-provider options/kubecloudshared.go:65-66).
    compute = emulator.api()
    _vpc(compute)
    aliases = {name: _instance(compute, name) for name in ("ipam-a", "ipam-b")}
    for name in aliases:
        make_node(kube_api, name)

    with _polyccm(emulator, control_plane, tmp_path, "--allocate-node-cidrs",
                  "--cidr-allocator-type=CloudAllocator") as log:  # fmt: skip
        for name, alias in aliases.items():
            assert _wait_cidrs(kube_api, name, log) == (alias,)
            wait_for(lambda n=name: _network_unavailable(kube_api, n), 30, "the condition")
            condition = _network_unavailable(kube_api, name)
            assert condition is not None
            assert (condition["status"], condition["reason"]) == ("False", "RouteCreated")
        text = log.read_text()

    assert sorted(aliases.values()) == ["10.64.0.0/24", "10.64.1.0/24"]
    assert compute.list_all("global/routes", filter='name eq "ipam-.*"') == []
    assert "--allocate-node-cidrs is accepted for compatibility and ignored" not in text


def test_dual_stack_nodes_get_both_families_in_the_service_ranges_order(
    emulator: RunningEmulator,
    control_plane: Any,
    kube_api: KubeApi,
    clean_nodes: None,
    cluster_id: str,
    tmp_path: Path,
) -> None:
    # cloud_cidr_allocator.go:132-144 (the stack from --service-cluster-ip-range's families),
    # :457-468 (IPv6 after IPv4 for IPv4_IPv6, before it for IPv6_IPv4); the IPv6 range is the
    # /112 at the start of the interface's /96 (gce_instances.go:619-633).
    compute = emulator.api()
    _vpc(compute, ipv6="INTERNAL")
    alias = _instance(compute, "ipam-dual", ipv6="INTERNAL")
    nic = compute.get(f"zones/{ZONE}/instances/ipam-dual")["networkInterfaces"][0]
    ipv6 = f"{nic['ipv6Address']}/112"
    make_node(kube_api, "ipam-dual")
    compute.create_instance(
        "ipam-dual-v6-first", subnetwork=SUBNET, ipv6="INTERNAL",
        alias_ip_ranges=[{"ipCidrRange": "/24", "subnetworkRangeName": "pods"}],
    )  # fmt: skip

    with _polyccm(emulator, control_plane, tmp_path, "--allocate-node-cidrs",
                  "--cidr-allocator-type=CloudAllocator",
                  "--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112") as log:  # fmt: skip
        assert _wait_cidrs(kube_api, "ipam-dual", log) == (alias, ipv6)

    make_node(kube_api, "ipam-dual-v6-first")  # registered once the IPv4-first run is over
    with _polyccm(emulator, control_plane, tmp_path, "--allocate-node-cidrs",
                  "--cidr-allocator-type=CloudAllocator",
                  "--service-cluster-ip-range=fd00:10:96::/112,10.96.0.0/16") as log:  # fmt: skip
        cidrs = _wait_cidrs(kube_api, "ipam-dual-v6-first", log)
    assert [":" in cidr for cidr in cidrs] == [True, False]


def test_a_node_without_an_alias_range_gets_an_event_and_no_cidr(
    emulator: RunningEmulator,
    control_plane: Any,
    kube_api: KubeApi,
    clean_nodes: None,
    cluster_id: str,
    tmp_path: Path,
) -> None:
    # cloud_cidr_allocator.go:420-429: no alias range and no IPv6 address: a Normal event
    # CIDRNotAvailable ("Node <name> status is now: CIDRNotAvailable", pkg/util/
    # controller_utils.go:30-42) from source cidrAllocator (:121), and no CIDR.
    compute = emulator.api()
    _vpc(compute)
    _instance(compute, "ipam-none", alias=False)
    alias = _instance(compute, "ipam-some")
    make_node(kube_api, "ipam-none")
    make_node(kube_api, "ipam-some")

    with _polyccm(emulator, control_plane, tmp_path, "--allocate-node-cidrs",
                  "--cidr-allocator-type=CloudAllocator") as log:  # fmt: skip
        assert _wait_cidrs(kube_api, "ipam-some", log) == (alias,)
        wait_for(lambda: ("Normal", "CIDRNotAvailable", "Node ipam-none status is now: "
                          "CIDRNotAvailable") in events_for(kube_api, "default", "ipam-none"),
                 30, "the CIDRNotAvailable event")  # fmt: skip
        assert _pod_cidrs(kube_api, "ipam-none") == ()
        assert _network_unavailable(kube_api, "ipam-none") is None

        # The failed node is retried with backoff (cloud_cidr_allocator.go:366-394, at most
        # 15 s apart): an alias range given later through updateNetworkInterface is taken.
        nic = compute.get(f"zones/{ZONE}/instances/ipam-none")["networkInterfaces"][0]
        compute.do("PATCH", f"zones/{ZONE}/instances/ipam-none/updateNetworkInterface"
                   "?networkInterface=nic0", {"fingerprint": nic["fingerprint"], "aliasIpRanges":
                   [{"ipCidrRange": "10.64.9.0/24", "subnetworkRangeName": "pods"}]})  # fmt: skip
        assert _wait_cidrs(kube_api, "ipam-none", log) == ("10.64.9.0/24",)


def test_controllers_without_nodeipam_leave_pod_cidrs_empty(
    emulator: RunningEmulator,
    control_plane: Any,
    kube_api: KubeApi,
    clean_nodes: None,
    cluster_id: str,
    tmp_path: Path,
) -> None:
    # main.go:157-158: "nodeipam" is the controller's name in --controllers.
    compute = emulator.api()
    _vpc(compute)
    _instance(compute, "ipam-off")
    make_node(kube_api, "ipam-off")

    with _polyccm(
        emulator,
        control_plane,
        tmp_path,
        "--allocate-node-cidrs",
        "--cidr-allocator-type=CloudAllocator",
        "--controllers=*,-nodeipam",
    ) as log:
        wait_for(lambda: Node(kube_api.get(NODES, "ipam-off")).provider_id, 60,
                 f"the node initialised; log:\n{log.read_text()}")  # fmt: skip
        assert stays(lambda: _pod_cidrs(kube_api, "ipam-off") == (), 3.0)


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        # cidr_allocator.go:124-131: RangeAllocator (upstream's default) allocates from
        # --cluster-cidr; polyccm's GCE nodeipam has CloudAllocator only.
        (["--allocate-node-cidrs"],
         "polyccm: error: --cidr-allocator-type=RangeAllocator: polyccm's GCE nodeipam has "
         "only CloudAllocator (pod CIDRs from the instances' alias IP ranges); give "
         "--cidr-allocator-type=CloudAllocator, or --controllers=*,-nodeipam"),
        (["--allocate-node-cidrs", "--cidr-allocator-type=Magic"],
         "polyccm: error: --cidr-allocator-type: invalid CIDR allocator type: Magic"),
        # starter.go:59-63: ProcessCIDRs of an empty --cluster-cidr fails.
        (["--allocate-node-cidrs", "--cidr-allocator-type=CloudAllocator", "--cluster-cidr="],
         "polyccm: error: --allocate-node-cidrs needs --cluster-cidr (upstream's nodeipam "
         "will not start without it), or disable node IPAM with --controllers=*,-nodeipam"),
        # options/nodeipamcontroller.go:77-80.
        (["--service-cluster-ip-range=10.0.0.0/16,fd00::/108,10.1.0.0/16"],
         "polyccm: error: --service-cluster-ip-range can not contain more than two entries"),
    ],
)  # fmt: skip
def test_allocators_and_ranges_upstream_refuses_or_polyccm_lacks_are_one_line(
    tmp_path: Path, flags: list[str], line: str
) -> None:
    config = tmp_path / "gce.conf"
    config.write_text("[global]\nproject-id = p\nlocal-zone = us-central1-a\n")

    result = run_polyccm(["--provider=gce", f"--cloud-config={config}",
                          f"--cluster-cidr={POD_RANGE}", *flags])  # fmt: skip

    assert (result.status, result.stderr) == (2, line + "\n")
