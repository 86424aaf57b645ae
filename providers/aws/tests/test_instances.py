"""InstancesV2 against the emulator: metadata, existence, shutdown, bulk cost and throttling."""

from __future__ import annotations

import threading

import pytest
from polyccm.cloud import EXTERNAL_IP, HOSTNAME, INTERNAL_DNS, INTERNAL_IP
from polyccm.errors import InstanceNotFound
from polyccm_aws.api import AwsApiError
from polyccm_aws.config import CloudConfig
from polyccm_aws.provider import AwsProvider
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World


def test_metadata_of_instances_in_two_zones(world: World, provider: AwsProvider) -> None:
    east_a = world.instances(2, "us-east-1a", "m5.large")
    east_b = world.instances(1, "us-east-1b", "c5.xlarge")
    instances = provider.instances_v2()
    nodes = [world.node(i) for i in east_a] + [world.node(east_b[0], by_name=True)]

    results = instances.instances_metadata(nodes)

    for node, instance in zip(nodes, [*east_a, *east_b], strict=True):
        metadata = results[node.name]
        assert not isinstance(metadata, Exception)
        zone = instance["Placement"]["AvailabilityZone"]
        assert metadata.provider_id == f"aws:///{zone}/{instance['InstanceId']}"
        assert metadata.zone == zone
        assert metadata.region == "us-east-1"
        assert metadata.instance_type == instance["InstanceType"]
        assert metadata.additional_labels["topology.k8s.aws/zone-id"].startswith("use1-az")
        addresses = {(a.type, a.address) for a in metadata.node_addresses}
        assert (INTERNAL_IP, instance["PrivateIpAddress"]) in addresses
        assert (INTERNAL_DNS, instance["PrivateDnsName"]) in addresses
        assert (HOSTNAME, instance["PrivateDnsName"]) in addresses
    zone_ids = {results[n.name].additional_labels["topology.k8s.aws/zone-id"] for n in nodes}  # type: ignore[union-attr]
    assert len(zone_ids) == 2


def test_public_address_is_external_ip(world: World, provider: AwsProvider) -> None:
    instance = world.instances()[0]
    address = world.ec2.allocate_address(Domain="vpc")
    world.ec2.associate_address(
        InstanceId=instance["InstanceId"], AllocationId=address["AllocationId"]
    )

    metadata = provider.instances_v2().instance_metadata(world.node(instance))

    assert (EXTERNAL_IP, address["PublicIp"]) in [
        (a.type, a.address) for a in metadata.node_addresses
    ]


def test_provider_id_forms_accepted(world: World, provider: AwsProvider) -> None:
    instance = world.instances()[0]
    instance_id = instance["InstanceId"]
    for form in (f"aws:////{instance_id}", instance_id, f"aws://us-east-1a/{instance_id}"):
        node = world.node(instance, provider_id=form)
        metadata = provider.instances_v2().instance_metadata(node)
        assert metadata.provider_id == form  # an existing providerID is never rewritten
        assert metadata.zone == "us-east-1a"


def test_terminated_instance_does_not_exist(world: World, provider: AwsProvider) -> None:
    alive, gone = world.instances(2)
    world.ec2.terminate_instances(InstanceIds=[gone["InstanceId"]])
    instances = provider.instances_v2()

    assert instances.instance_exists(world.node(alive))
    assert not instances.instance_exists(world.node(gone))
    assert not instances.instance_exists(world.node(gone, by_name=True))
    with pytest.raises(InstanceNotFound):
        instances.instance_metadata(world.node(gone))


def test_unknown_instance_does_not_exist(world: World, provider: AwsProvider) -> None:
    real = world.instances()[0]
    ghost = dict(real, InstanceId="i-0123456789abcdef0", PrivateDnsName="ip-10-9-9-9.ec2.internal")
    instances = provider.instances_v2()

    result = instances.instances_exist(
        [world.node(real), world.node(ghost), world.node(ghost, by_name=True)]
    )

    assert result == {real["PrivateDnsName"]: True, ghost["PrivateDnsName"]: False}


def test_gone_instance_is_not_shut_down(world: World, provider: AwsProvider) -> None:
    # Upstream answers "not shut down" for an instance EC2 no longer lists, so that the node is
    # judged by existence alone: cloud-provider-aws v1.37.1 pkg/providers/v1/aws.go:951-956,
    # and instances_v2.go:68-78 (InstanceNotFound from the lookup by name is "false" too).
    real, gone = world.instances(2)
    world.ec2.terminate_instances(InstanceIds=[gone["InstanceId"]])
    ghost = dict(real, InstanceId="i-0123456789abcdef0", PrivateDnsName="ip-10-9-9-9.ec2.internal")
    instances = provider.instances_v2()

    assert instances.instance_shutdown(world.node(ghost)) is False
    assert instances.instance_shutdown(world.node(ghost, by_name=True)) is False
    assert instances.instance_shutdown(world.node(gone)) is False
    states = instances.instances_shutdown([world.node(ghost), world.node(gone), world.node(real)])
    assert states == {n: False for n in (ghost["PrivateDnsName"], gone["PrivateDnsName"],
                                         real["PrivateDnsName"])}  # fmt: skip


def test_stopped_instance_exists_and_is_shut_down(world: World, provider: AwsProvider) -> None:
    running, stopped = world.instances(2)
    world.ec2.stop_instances(InstanceIds=[stopped["InstanceId"]])
    instances = provider.instances_v2()

    assert instances.instance_exists(world.node(stopped))
    assert instances.instance_shutdown(world.node(stopped))
    assert not instances.instance_shutdown(world.node(running))


def test_shutdown_state_of_many_instances_costs_one_call(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    running, stopped = world.instances(2)
    world.ec2.stop_instances(InstanceIds=[stopped["InstanceId"]])
    ghost = dict(running, InstanceId="i-0123456789abcdef0", PrivateDnsName="ip-10-9-9-9.x")
    aws.reset_calls()

    states = provider.instances_v2().instances_shutdown(
        [world.node(running), world.node(stopped), world.node(ghost)]
    )

    assert states[running["PrivateDnsName"]] is False
    assert states[stopped["PrivateDnsName"]] is True
    assert states[ghost["PrivateDnsName"]] is False  # gone: not shut down, as upstream
    # An unknown id fails the batched call once; the known ids are then asked again together.
    assert aws.calls().get("DescribeInstances", 0) == 2
    aws.reset_calls()
    fresh = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=0.0)
    fresh.instances_v2().instances_shutdown([world.node(running), world.node(stopped)])
    assert aws.calls().get("DescribeInstances", 0) == 1


def test_invalid_provider_id_is_reported_per_node(world: World, provider: AwsProvider) -> None:
    instance = world.instances()[0]
    good = world.node(instance)
    bad = world.node(instance, provider_id="gce://project/zone/vm")
    bad.raw["metadata"]["name"] = "bad"  # type: ignore[index]

    results = provider.instances_v2().instances_metadata([good, bad])

    assert not isinstance(results[good.name], Exception)
    assert isinstance(results["bad"], ValueError)


def test_500_nodes_cost_a_handful_of_calls(world: World, aws: EmulatorControl) -> None:
    created = world.instances(250, "us-east-1a") + world.instances(250, "us-east-1b")
    provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=60.0)
    instances = provider.instances_v2()
    with_id = [world.node(i) for i in created]
    by_name = [world.node(i, by_name=True) for i in created]

    aws.reset_calls()
    results = instances.instances_metadata(with_id)
    by_id_calls = aws.calls().get("DescribeInstances", 0)
    aws.reset_calls()
    fresh = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=60.0)
    name_results = fresh.instances_v2().instances_metadata(by_name)
    by_name_calls = aws.calls().get("DescribeInstances", 0)
    aws.reset_calls()
    instances.instances_exist(with_id)
    instances.instances_metadata(with_id)
    cached_calls = aws.calls().get("DescribeInstances", 0)

    assert all(not isinstance(r, Exception) for r in results.values())
    assert all(not isinstance(r, Exception) for r in name_results.values())
    assert by_id_calls == 1  # upstream without batching: 500
    assert by_name_calls == 3  # 200 names per private-dns-name filter
    assert cached_calls == 0  # within the cache lifetime every capability shares the answer


def test_a_gone_instance_in_a_batch_costs_one_extra_call(
    world: World, aws: EmulatorControl
) -> None:
    created = world.instances(20)
    world.ec2.terminate_instances(InstanceIds=[created[0]["InstanceId"]])
    ghost = dict(created[1], InstanceId="i-0fedcba9876543210", PrivateDnsName="ghost")
    provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=60.0)

    aws.reset_calls()
    result = provider.instances_v2().instances_exist([world.node(i) for i in [*created, ghost]])

    assert result[created[0]["PrivateDnsName"]] is False
    assert result["ghost"] is False
    assert sum(result.values()) == 19
    assert aws.calls()["DescribeInstances"] == 2  # upstream falls back to one call per node


def test_concurrent_lookups_are_merged(world: World, aws: EmulatorControl) -> None:
    created = world.instances(20)
    provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=60.0)
    instances = provider.instances_v2()
    errors: list[BaseException] = []
    start = threading.Barrier(len(created))

    def look_up(instance: dict[str, object]) -> None:
        start.wait()
        try:
            instances.instance_metadata(world.node(instance))
        except BaseException as error:  # noqa: BLE001 - collected for the assertion
            errors.append(error)

    aws.reset_calls()
    threads = [threading.Thread(target=look_up, args=(i,)) for i in created]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert not errors
    assert aws.calls()["DescribeInstances"] <= 3


def test_workers_wanting_the_same_many_instances_share_one_lookup(
    world: World, aws: EmulatorControl
) -> None:
    # Four service workers ensuring load balancers at once each want every backend: one
    # DescribeInstances answers them all (each asked alone before: 4 calls of 300 ids).
    nodes = [world.node(i) for i in world.instances(150) + world.instances(150, "us-east-1b")]
    instances = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=60.0).instances_v2()
    start = threading.Barrier(4)
    answers: list[int] = []

    def look_up() -> None:
        start.wait()
        found = instances.instances_exist(nodes)
        answers.append(sum(found.values()))

    aws.reset_calls()
    threads = [threading.Thread(target=look_up) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert answers == [300] * 4
    assert aws.calls()["DescribeInstances"] == 1


def test_throttling_is_retried_then_succeeds(
    world: World, aws: EmulatorControl, provider: AwsProvider
) -> None:
    instance = world.instances()[0]
    aws.reset_calls()
    aws.inject("DescribeInstances", count=2, code="RequestLimitExceeded")

    metadata = provider.instances_v2().instance_metadata(world.node(instance))

    assert metadata.zone == "us-east-1a"
    assert aws.calls()["DescribeInstances"] == 3


def test_server_errors_are_retried(
    world: World, aws: EmulatorControl, provider: AwsProvider
) -> None:
    instance = world.instances()[0]
    aws.inject("DescribeInstances", count=1, code="ServiceUnavailable")

    assert provider.instances_v2().instance_exists(world.node(instance))


def test_persistent_throttling_surfaces_as_a_clear_error(
    world: World, aws: EmulatorControl, provider: AwsProvider
) -> None:
    instance = world.instances()[0]
    aws.inject("DescribeInstances", count=10, code="RequestLimitExceeded")

    with pytest.raises(
        AwsApiError, match=r"DescribeInstances failed after 3 attempts \(throttled\)"
    ):
        provider.instances_v2().instance_exists(world.node(instance))
    results = provider.instances_v2().instances_metadata([world.node(instance)])

    assert isinstance(results[instance["PrivateDnsName"]], AwsApiError)
    aws.clear_faults()


def test_unknown_zone_id_is_an_error_not_a_missing_label(
    world: World, provider: AwsProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Upstream fails the node's metadata when the zone id cannot be found, so the node is
    # retried instead of initialised without topology.k8s.aws/zone-id: cloud-provider-aws
    # v1.37.1 pkg/providers/v1/instances_v2.go:85-92 and zones.go:47-50.
    instance = world.instances(1, "us-east-1a")[0]
    listed = provider.zones.get
    # EC2 answering DescribeAvailabilityZones without the instance's zone.
    monkeypatch.setattr(
        provider.zones, "get", lambda name: None if name == "us-east-1a" else listed(name)
    )
    node = world.node(instance)

    with pytest.raises(Exception, match="zone id of zone 'us-east-1a'"):
        provider.instances_v2().instance_metadata(node)
    result = provider.instances_v2().instances_metadata([node])[node.name]
    assert isinstance(result, Exception)


def test_fargate_nodes_are_recognised_and_left_alone(
    world: World, provider: AwsProvider, aws: EmulatorControl
) -> None:
    # Upstream's "fargate" variant takes aws:///<zone>/fargate-<ip> (instances.go:79-87,
    # variant/fargate/fargate.go:55-57): such a node is never looked up as an EC2 instance;
    # its zone and addresses come from the network interface attached with its IP
    # (fargate.go:67-82, 135-163). polyccm never calls it gone (it runs on no instance).
    host = world.instances(1, "us-east-1b")[0]
    interface = world.ec2.create_network_interface(
        SubnetId=world.private["us-east-1b"], PrivateIpAddress="10.0.11.77"
    )["NetworkInterface"]
    world.ec2.attach_network_interface(
        NetworkInterfaceId=interface["NetworkInterfaceId"],
        InstanceId=host["InstanceId"],
        DeviceIndex=1,
    )
    pod = world.node(host, provider_id="aws:///us-east-1b/fargate-10.0.11.77")
    orphan = world.node(
        dict(host, PrivateDnsName="fargate-ip-10-0-11-99.ec2.internal"),
        provider_id="aws:///us-east-1b/fargate-ip-10-0-11-99.ec2.internal",
    )
    instances = provider.instances_v2()
    aws.reset_calls()

    assert instances.instances_exist([pod, orphan]) == {pod.name: True, orphan.name: True}
    assert instances.instance_exists(orphan)
    assert instances.instances_shutdown([pod, orphan]) == {pod.name: False, orphan.name: False}
    assert aws.calls() == {}, "existence and shutdown of Fargate nodes ask AWS nothing"
    metadata = instances.instance_metadata(pod)
    assert metadata.provider_id == "aws:///us-east-1b/fargate-10.0.11.77"
    assert (metadata.zone, metadata.instance_type) == ("us-east-1b", "")
    assert (INTERNAL_IP, "10.0.11.77") in [(a.type, a.address) for a in metadata.node_addresses]
    assert metadata.additional_labels["topology.k8s.aws/zone-id"].startswith("use1-az")
    gone = instances.instance_metadata(orphan)
    assert [(a.type, a.address) for a in gone.node_addresses] == [(INTERNAL_IP, "10.0.11.99")]
    assert "DescribeInstances" not in aws.calls()
