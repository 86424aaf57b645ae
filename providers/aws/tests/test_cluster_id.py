"""The cluster id, found as cloud-provider-aws finds it: the cloud config, else the tags of the
instance the instance metadata service names (served by the emulator for the instance tagged
``polyccm.dev/ccm-host=true``), else none."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping

import pytest
from polyccm.errors import ConfigError
from polyccm_aws.config import CloudConfig
from polyccm_aws.provider import AwsProvider, own_instance_id
from polyccm_aws.tagging import OwnInstance, cluster_id_from_tags, resolve_cluster_id
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import World


def instance(*pairs: tuple[str, str]) -> OwnInstance:
    return "i-0123456789abcdef0", [{"Key": k, "Value": v} for k, v in pairs]


def never() -> OwnInstance | None:
    raise AssertionError("the instance was asked although the cloud config names the cluster")


# -- the resolution order, pure ---------------------------------------------------------------


def test_the_cloud_config_wins_and_the_instance_is_not_asked() -> None:
    found = resolve_cluster_id(CloudConfig(kubernetes_cluster_id="prod"), never)

    assert found is not None
    assert (found.value, found.legacy) == ("prod", False)
    assert "KubernetesClusterID" in found.source


def test_the_legacy_config_key_means_legacy_tags() -> None:
    found = resolve_cluster_id(CloudConfig(kubernetes_cluster_tag="old"), never)

    assert found is not None and (found.value, found.legacy) == ("old", True)
    assert found.tagging().owned_tags() == {
        "KubernetesCluster": "old",
        "kubernetes.io/cluster/old": "owned",
    }


def test_else_the_cluster_tag_of_the_own_instance() -> None:
    found = resolve_cluster_id(
        CloudConfig(),
        lambda: instance(("Name", "control-plane-1"), ("kubernetes.io/cluster/prod", "owned")),
    )

    assert found is not None and (found.value, found.legacy) == ("prod", False)
    assert "i-0123456789abcdef0" in found.source


def test_a_shared_cluster_tag_names_the_cluster_too() -> None:
    found = resolve_cluster_id(
        CloudConfig(), lambda: instance(("kubernetes.io/cluster/prod", "shared"))
    )

    assert found is not None and found.value == "prod"


def test_the_legacy_instance_tag_wins_and_means_legacy_tags() -> None:
    found = resolve_cluster_id(
        CloudConfig(),
        lambda: instance(("KubernetesCluster", "prod"), ("kubernetes.io/cluster/prod", "owned")),
    )

    assert found is not None and (found.value, found.legacy) == ("prod", True)


def test_no_instance_or_no_tag_means_no_cluster_id() -> None:
    assert resolve_cluster_id(CloudConfig(), lambda: None) is None
    assert resolve_cluster_id(CloudConfig(), lambda: instance(("Name", "box"))) is None


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (
            (("kubernetes.io/cluster/a", "owned"), ("kubernetes.io/cluster/b", "owned")),
            "several kubernetes.io/cluster/<id> tags",
        ),
        (
            (("KubernetesCluster", "a"), ("kubernetes.io/cluster/b", "owned")),
            "tagged for two clusters",
        ),
    ],
)
def test_an_instance_tagged_for_two_clusters_stops_the_start(
    pairs: tuple[tuple[str, str], ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_cluster_id(CloudConfig(), lambda: instance(*pairs))


def test_cluster_id_from_tags_of_any_resource() -> None:
    assert cluster_id_from_tags(None, "vpc-1") is None
    found = cluster_id_from_tags([{"Key": "kubernetes.io/cluster/blue", "Value": ""}], "vpc-1")
    assert found is not None and found.value == "blue" and "vpc-1" in found.source


def test_a_provider_without_an_id_says_so_and_tags_with_the_cluster_name(
    aws: EmulatorControl,
) -> None:
    provider = AwsProvider(CloudConfig(), cluster_name="fallback")
    named = AwsProvider(CloudConfig(kubernetes_cluster_id="prod"), cluster_name="fallback")

    assert not provider.has_cluster_id()
    assert provider.tagging.tag_key == "kubernetes.io/cluster/fallback"
    assert named.has_cluster_id()
    assert named.tagging.tag_key == "kubernetes.io/cluster/prod"


# -- the emulator's instance metadata service, and discovery through it ----------------------


def imds_get(endpoint: str, path: str, token: str | None) -> tuple[int, str]:
    headers = {"X-aws-ec2-metadata-token": token} if token else {}
    request = urllib.request.Request(f"{endpoint}latest/meta-data/{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def imds_token(endpoint: str) -> str:
    request = urllib.request.Request(
        f"{endpoint}latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return str(response.read().decode())


def test_metadata_service_describes_the_instance_tagged_as_ccm_host(
    world: World, emulator: Mapping[str, str]
) -> None:
    endpoint = emulator["AWS_EC2_METADATA_SERVICE_ENDPOINT"]
    world.instances(2)  # other machines
    (host,) = world.instances(1, "us-east-1b", "c5.large", ccm_host=True)
    token = imds_token(endpoint)

    assert imds_get(endpoint, "instance-id", token) == (200, host["InstanceId"])
    assert imds_get(endpoint, "placement/availability-zone", token) == (200, "us-east-1b")
    assert imds_get(endpoint, "instance-type", token) == (200, "c5.large")
    assert imds_get(endpoint, "instance-id", None)[0] == 401  # IMDSv2: a token is required
    assert own_instance_id() == host["InstanceId"]


def test_no_ccm_host_means_no_instance_id(world: World, emulator: Mapping[str, str]) -> None:
    endpoint = emulator["AWS_EC2_METADATA_SERVICE_ENDPOINT"]
    world.instances(2)

    assert imds_get(endpoint, "instance-id", imds_token(endpoint))[0] == 404
    assert own_instance_id() is None


def test_disabled_metadata_means_no_instance_id(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.instances(1, ccm_host=True)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    assert own_instance_id() is None


def test_discovery_reads_the_tag_of_the_instance_it_runs_on(
    aws: EmulatorControl, world: World
) -> None:
    world.instances(3)
    world.instances(1, tags={"kubernetes.io/cluster/prod": "owned"}, ccm_host=True)
    aws.reset_calls()

    provider = AwsProvider.discover(CloudConfig())

    assert provider.has_cluster_id()
    assert provider.tagging.tag_key == "kubernetes.io/cluster/prod"
    assert aws.calls() == {"DescribeInstances": 1}


def test_discovery_with_a_configured_id_asks_nothing(aws: EmulatorControl, world: World) -> None:
    world.instances(1, tags={"kubernetes.io/cluster/prod": "owned"}, ccm_host=True)
    aws.reset_calls()

    provider = AwsProvider.discover(CloudConfig(kubernetes_cluster_id="blue"))

    assert provider.tagging.tag_key == "kubernetes.io/cluster/blue"
    assert aws.calls() == {}


def test_discovery_on_an_untagged_instance_finds_no_id(aws: EmulatorControl, world: World) -> None:
    world.instances(1, tags={"Name": "bastion"}, ccm_host=True)

    provider = AwsProvider.discover(CloudConfig(), cluster_name="kubernetes")

    assert not provider.has_cluster_id()


def test_an_instance_the_api_does_not_know_stops_the_start(aws: EmulatorControl) -> None:
    def unknown() -> str:
        return "i-00000000000000000"

    with pytest.raises(ConfigError, match=r"i-00000000000000000 .*us-east-1"):
        AwsProvider.discover(CloudConfig(), instance_id=unknown)
