"""Network-node labels from DescribeInstanceTopology, against the emulator: the labels, the
batching, what is remembered, and the node that waits for its topology."""

from __future__ import annotations

from typing import Any

import pytest
from polyccm.errors import ConfigError
from polyccm.kube.api import NODES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT
from polyccm_aws.config import CloudConfig
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World
from polyccm_testing.kubeobjects import make_node, wait_for
from polyccm_testing.manager import manager_options, start_manager

LAYER = "topology.k8s.aws/network-node-layer-"


def aws_provider(**config: str) -> AwsProvider:
    return AwsProvider(CloudConfig(**config), cluster_name=CLUSTER, cache_ttl=0.0, max_attempts=2)  # type: ignore[arg-type]


def test_supported_instances_get_their_layers_in_one_call_and_others_are_asked_once(
    world: World, aws: EmulatorControl
) -> None:
    # Upstream labels topology.k8s.aws/network-node-layer-N from the instance's network nodes
    # (cloud-provider-aws v1.37.1 pkg/providers/v1/instances_v2.go:96-117, well_known_labels.go
    # :26), asks every instance type and remembers for a day a type that has no topology
    # (topology.go:116-128, 148-172). Upstream asks one instance a call; polyccm one call for
    # the batch (the API takes 100 ids), following the pages (20 items each by default).
    trainers = world.instances(22, instance_type="trn1.32xlarge")
    general = world.instances(2, instance_type="m5.large")
    nodes = [world.node(i) for i in trainers + general]
    instances = aws_provider().instances_v2()
    aws.reset_calls()

    results = instances.instances_metadata(nodes)

    assert aws.calls()["DescribeInstanceTopology"] == 2  # one batch, two pages
    answer = world.ec2.describe_instance_topology(InstanceIds=[trainers[0]["InstanceId"]])
    network_nodes = answer["Instances"][0]["NetworkNodes"]
    first = results[nodes[0].name]
    assert not isinstance(first, Exception)
    assert {k: v for k, v in first.additional_labels.items() if k.startswith(LAYER)} == {
        f"{LAYER}1": network_nodes[0],
        f"{LAYER}2": network_nodes[1],
        f"{LAYER}3": network_nodes[2],
    }
    for node in nodes[22:]:
        plain = results[node.name]
        assert not isinstance(plain, Exception)
        assert not any(k.startswith(LAYER) for k in plain.additional_labels)

    aws.reset_calls()
    instances.instances_metadata(nodes[22:])  # m5.large is known to have no topology
    labelled = world.node(trainers[1], labels={f"{LAYER}1": "nn-set"})
    instances.instance_metadata(labelled)  # a node with its labels is not asked again
    assert "DescribeInstanceTopology" not in aws.calls()


def test_a_supported_type_waits_for_its_topology_and_others_go_on(
    world: World, aws: EmulatorControl
) -> None:
    # Upstream fails the metadata of an instance whose type matches
    # SupportedTopologyInstanceTypePattern when the topology call fails, so the node is not
    # initialised until it answers; for other types the failure only costs the labels
    # (instances_v2.go:96-108, topology.go:43 for the default pattern).
    (trainer,) = world.instances(1, instance_type="trn1.32xlarge")
    (general,) = world.instances(1, instance_type="m5.large")
    instances = aws_provider().instances_v2()
    aws.inject("DescribeInstanceTopology", count=4, code="InternalError")

    results = instances.instances_metadata([world.node(trainer), world.node(general)])

    assert isinstance(results[trainer["PrivateDnsName"]], Exception)
    assert not isinstance(results[general["PrivateDnsName"]], Exception)
    aws.clear_faults()
    again = instances.instance_metadata(world.node(trainer))
    assert f"{LAYER}1" in again.additional_labels

    # The pattern from the cloud config decides which types must answer.
    strict = aws_provider(supported_topology_instance_type_pattern=r"^m5\.").instances_v2()
    aws.inject("DescribeInstanceTopology", count=4, code="InternalError")
    results = strict.instances_metadata([world.node(trainer), world.node(general)])
    assert isinstance(results[general["PrivateDnsName"]], Exception)
    assert not isinstance(results[trainer["PrivateDnsName"]], Exception)


def test_a_region_without_the_api_is_not_asked_again(world: World, aws: EmulatorControl) -> None:
    # UnsupportedOperation and UnauthorizedOperation mark the region as without topology: no
    # labels, no error, no further call (topology.go:95-106).
    (trainer,) = world.instances(1, instance_type="p5.48xlarge")
    instances = aws_provider().instances_v2()
    aws.inject("DescribeInstanceTopology", count=1, code="UnauthorizedOperation", status=403)

    metadata = instances.instance_metadata(world.node(trainer))

    assert not any(k.startswith(LAYER) for k in metadata.additional_labels)
    aws.reset_calls()
    instances.instance_metadata(world.node(trainer))
    assert "DescribeInstanceTopology" not in aws.calls()


def test_a_pattern_that_does_not_compile_stops_the_start(aws: EmulatorControl) -> None:
    with pytest.raises(ConfigError, match="SupportedTopologyInstanceTypePattern"):
        aws_provider(supported_topology_instance_type_pattern="(p5")


@pytest.mark.timeout(120)
def test_the_node_of_a_supported_type_is_initialised_only_once_its_topology_answers(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, world: World, aws: EmulatorControl
) -> None:
    # instances_v2.go:96-103: the metadata error keeps the cloud-node controller from
    # initialising the node (it keeps its uninitialized taint and is retried); an m5 node
    # beside it is initialised at once.
    (trainer,) = world.instances(1, instance_type="trn1.32xlarge")
    (general,) = world.instances(1, instance_type="m5.large")
    for instance in (trainer, general):
        make_node(kube_api, instance["PrivateDnsName"],
                  provider_id=f"aws:///us-east-1a/{instance['InstanceId']}")  # fmt: skip
    aws.inject("DescribeInstanceTopology", count=10_000, code="InternalError")
    options = manager_options(
        "aws", control_plane.kubeconfig, controllers=frozenset({"cloud-node"})
    )
    running = start_manager(options, aws_provider())
    try:
        wait_for(lambda: not tainted(kube_api, general["PrivateDnsName"]), 30, "m5 initialised")
        assert tainted(kube_api, trainer["PrivateDnsName"])
        aws.clear_faults()
        wait_for(lambda: not tainted(kube_api, trainer["PrivateDnsName"]), 60, "trn1 initialised")
        labels = kube_api.get(NODES, trainer["PrivateDnsName"])["metadata"]["labels"]
        assert labels[f"{LAYER}1"].startswith("nn-")
        assert (
            f"{LAYER}1" not in kube_api.get(NODES, general["PrivateDnsName"])["metadata"]["labels"]
        )
    finally:
        running.stop()


def tainted(kube_api: KubeApi, name: str) -> bool:
    taints = kube_api.get(NODES, name)["spec"].get("taints") or []
    return any(t["key"] == UNINITIALIZED_TAINT for t in taints)
