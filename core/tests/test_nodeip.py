"""The addresses a node with a provided node IP gets, table by table, against upstream's rules.

A kubelet started with ``--node-ip`` writes ``alpha.kubernetes.io/provided-node-ip``; the
cloud-node controller then keeps, of each address type a provided IP matches, only that IP
(kubernetes #61921: a cloud's secondary IPs must not become the node's IP). Upstream:
k8s.io/cloud-provider v0.35.4 node/helpers/address.go:53-93 (GetNodeAddressesFromNodeIP, whose
cases in address_test.go:95-330 these tables follow) and k8s.io/component-helpers v0.35.4
node/util/ips.go:33-83 (ParseNodeIPAnnotation). Pure functions: no API server needed.
"""

from __future__ import annotations

import pytest
from polyccm.cloud import InstanceMetadata, NodeAddress
from polyccm.controllers import nodeinfo, nodeip
from polyccm.objects import PROVIDED_NODE_IP_ANNOTATION, Node

HOST = "node.example"


def addrs(*pairs: str) -> tuple[NodeAddress, ...]:
    """``"InternalIP=10.1.1.1"`` strings as addresses."""
    return tuple(NodeAddress(*pair.split("=", 1)) for pair in pairs)


# (case, provided IP annotation, cloud addresses, the node's addresses)
SELECTED = [
    (
        "the provided InternalIP alone",
        "10.1.1.1",
        addrs("InternalIP=10.1.1.1", f"Hostname={HOST}"),
        addrs("InternalIP=10.1.1.1", f"Hostname={HOST}"),
    ),
    (
        "a provided ExternalIP goes first",
        "55.55.55.55",
        addrs("InternalIP=10.1.1.1", "ExternalIP=55.55.55.55", f"Hostname={HOST}"),
        addrs("ExternalIP=55.55.55.55", "InternalIP=10.1.1.1", f"Hostname={HOST}"),
    ),
    (
        "an IP that is both internal and external keeps both, and drops the other pair",
        "55.55.55.55",
        addrs(
            "InternalIP=44.44.44.44",
            "ExternalIP=44.44.44.44",
            "InternalIP=55.55.55.55",
            "ExternalIP=55.55.55.55",
            f"Hostname={HOST}",
        ),
        addrs("InternalIP=55.55.55.55", "ExternalIP=55.55.55.55", f"Hostname={HOST}"),
    ),
    (
        "DNS names and other types are kept in the cloud's order",
        "10.1.1.1",
        addrs(
            "InternalIP=10.1.1.1",
            "ExternalIP=55.55.55.55",
            "InternalDNS=ip-10-1-1-1.internal",
            "ExternalDNS=ec2-55.example",
            f"Hostname={HOST}",
        ),
        addrs(
            "InternalIP=10.1.1.1",
            "ExternalIP=55.55.55.55",
            "InternalDNS=ip-10-1-1-1.internal",
            "ExternalDNS=ec2-55.example",
            f"Hostname={HOST}",
        ),
    ),
    (
        "the cloud's secondary InternalIPs are dropped",
        "10.1.1.1",
        addrs(
            "InternalIP=10.2.2.2",
            "InternalIP=10.1.1.1",
            "InternalIP=10.3.3.3",
            "ExternalIP=55.55.55.55",
            f"Hostname={HOST}",
        ),
        addrs("InternalIP=10.1.1.1", "ExternalIP=55.55.55.55", f"Hostname={HOST}"),
    ),
    (
        "an IPv6 provided IP matches however the cloud spells it, and is kept as spelt",
        "2600:1f14:1d4:d101::ba3d",
        addrs(
            "InternalIP=10.1.1.1", "InternalIP=2600:1f14:1d4:d101:0:0:0:ba3d", f"Hostname={HOST}"
        ),
        addrs("InternalIP=2600:1f14:1d4:d101:0:0:0:ba3d", f"Hostname={HOST}"),
    ),
    (
        "dual stack, IPv4 first in the annotation, IPv6 first in the cloud",
        "10.1.1.1,fc01:1234::5678",
        addrs("InternalIP=fc01:1234::5678", "InternalIP=10.1.1.1", f"Hostname={HOST}"),
        addrs("InternalIP=10.1.1.1", "InternalIP=fc01:1234::5678", f"Hostname={HOST}"),
    ),
    (
        "dual stack: one InternalIP per family, the secondary ones dropped",
        "10.1.1.1,fc01:1234::5678",
        addrs(
            "InternalIP=10.1.1.1",
            "InternalIP=10.1.1.2",
            "InternalIP=fc01:1234::1234",
            "InternalIP=fc01:1234::5678",
            f"Hostname={HOST}",
        ),
        addrs("InternalIP=10.1.1.1", "InternalIP=fc01:1234::5678", f"Hostname={HOST}"),
    ),
    (
        "dual stack: ExternalIPs of both families stay when no provided IP is external",
        "fc01:1234::5678,10.1.1.1",
        addrs(
            "InternalIP=10.1.1.1",
            "ExternalIP=55.55.55.55",
            "InternalIP=fc01:1234::5678",
            "ExternalIP=2001:db1::1",
            f"Hostname={HOST}",
        ),
        addrs(
            "InternalIP=fc01:1234::5678",
            "InternalIP=10.1.1.1",
            "ExternalIP=55.55.55.55",
            "ExternalIP=2001:db1::1",
            f"Hostname={HOST}",
        ),
    ),
    (
        "dual stack: an external IPv4 and an internal IPv6 drop the internal IPv4 and external "
        "IPv6",
        "55.55.55.55,fc01:1234::5678",
        addrs(
            "InternalIP=10.1.1.1",
            "ExternalIP=55.55.55.55",
            "InternalIP=fc01:1234::5678",
            "ExternalIP=2001:db1::1",
            f"Hostname={HOST}",
        ),
        addrs("ExternalIP=55.55.55.55", "InternalIP=fc01:1234::5678", f"Hostname={HOST}"),
    ),
    (
        "IPv4 with leading zeros is read as decimal, as Go's ParseIPSloppy does",
        "010.001.001.001",
        addrs("InternalIP=10.1.1.2", "InternalIP=10.1.1.1"),
        addrs("InternalIP=10.1.1.1"),
    ),
]


@pytest.mark.parametrize(
    ("provided", "cloud", "expected"),
    [case[1:] for case in SELECTED],
    ids=[case[0] for case in SELECTED],
)
def test_a_provided_ip_is_the_only_address_of_its_type(
    provided: str, cloud: tuple[NodeAddress, ...], expected: tuple[NodeAddress, ...]
) -> None:
    assert nodeip.select_addresses(provided, cloud) == list(expected)


# (case, provided IP annotation, cloud addresses, what the error says)
REFUSED = [
    ("an IP the cloud does not have", "10.2.2.2", addrs("InternalIP=10.1.1.1"), "matches ip"),
    (
        "a dual-stack request on a single-stack cloud",
        "10.1.1.1,fc01:1234::5678",
        addrs("InternalIP=10.1.1.1"),
        "matches ip: fc01:1234::5678",
    ),
    ("two IPv4 addresses", "10.1.1.1,10.1.1.2", addrs("InternalIP=10.1.1.1"), "dual-stack pair"),
    ("three addresses", "10.1.1.1,fc01::1,10.1.1.2", addrs("InternalIP=10.1.1.1"), "single IP"),
    ("an unspecified IP in a pair", "0.0.0.0,fc01::1", addrs("InternalIP=0.0.0.0"), "'0.0.0.0'"),
    ("a space after the comma", "10.1.1.1, fc01::1", addrs("InternalIP=10.1.1.1"), "' fc01::1'"),
    ("an empty annotation", "", addrs("InternalIP=10.1.1.1"), "could not parse ''"),
    ("a name, not an IP", "node-1", addrs("InternalIP=10.1.1.1"), "'node-1'"),
    ("an IPv6 zone", "fe80::1%eth0", addrs("InternalIP=fe80::1"), "'fe80::1%eth0'"),
    ("no cloud addresses at all", "10.1.1.1", (), "matches ip: 10.1.1.1"),
]


@pytest.mark.parametrize(
    ("provided", "cloud", "message"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_a_provided_ip_that_does_not_fit_is_refused(
    provided: str, cloud: tuple[NodeAddress, ...], message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        nodeip.select_addresses(provided, cloud)
    assert message in str(raised.value)


def bare_node(provided: str | None, *addresses: str) -> Node:
    annotations = {} if provided is None else {PROVIDED_NODE_IP_ANNOTATION: provided}
    pairs = [dict(zip(("type", "address"), a.split("=", 1), strict=True)) for a in addresses]
    return Node(
        {
            "metadata": {"name": "n1", "annotations": annotations},
            "spec": {},
            "status": {"addresses": pairs},
        }
    )


def test_the_kubelets_hostname_is_added_before_the_provided_ip_narrows_the_list() -> None:
    # Upstream's updateNodeAddress (cloud-provider v0.35.4 controllers/node/node_controller.go
    # :373-391) appends the kubelet's Hostname when the cloud has none, then applies the
    # provided IP to the whole list.
    node = bare_node("10.1.1.1", f"Hostname={HOST}", "InternalIP=10.9.9.9")
    cloud = addrs("InternalIP=10.1.1.2", "InternalIP=10.1.1.1", "ExternalIP=55.55.55.55")
    assert nodeinfo.node_addresses(node, cloud) == addrs(
        "InternalIP=10.1.1.1", "ExternalIP=55.55.55.55", f"Hostname={HOST}"
    )
    # Without the annotation every cloud address is kept, in the cloud's order.
    assert nodeinfo.node_addresses(bare_node(None, f"Hostname={HOST}"), cloud) == (
        *cloud,
        NodeAddress("Hostname", HOST),
    )


def test_a_provided_ip_is_checked_before_initialisation_even_without_cloud_addresses() -> None:
    # Upstream checks the provided IP against the cloud's addresses before it removes the
    # taint (node_controller.go:503-509 at v0.35.4), also when the cloud reports none.
    metadata = InstanceMetadata(provider_id="fake://r/n1")
    with pytest.raises(nodeip.NodeIPMismatch):
        nodeinfo.initial_fields(bare_node("10.1.1.1"), metadata)
    assert nodeinfo.initial_fields(bare_node(None), metadata) == ("fake://r/n1", None)


# (case, the node's labels, the labels written)
GA_LABELS = [
    (
        "a missing GA label is copied from the beta one",
        {"failure-domain.beta.kubernetes.io/zone": "z1"},
        {"topology.kubernetes.io/zone": "z1"},
    ),
    (
        "a GA label that differs takes the beta one's value",
        {
            "failure-domain.beta.kubernetes.io/region": "r1",
            "topology.kubernetes.io/region": "r2",
            "beta.kubernetes.io/instance-type": "m",
            "node.kubernetes.io/instance-type": "m",
        },
        {"topology.kubernetes.io/region": "r1"},
    ),
    ("a GA label without a beta one is left alone", {"topology.kubernetes.io/zone": "z9"}, {}),
]


@pytest.mark.parametrize(
    ("labels", "written"), [case[1:] for case in GA_LABELS], ids=[case[0] for case in GA_LABELS]
)
def test_ga_labels_follow_the_beta_labels(labels: dict[str, str], written: dict[str, str]) -> None:
    # Upstream's labelReconcileInfo and reconcileNodeLabels (cloud-provider v0.35.4
    # controllers/node/node_controller.go:60-89, 324-344): the beta label is the source of
    # truth; a differing GA label is corrected and a missing one added.
    assert nodeinfo.ga_label_fixes(labels) == written
