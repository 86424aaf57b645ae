"""The ``tagging`` controller: its flags on polyccm's command line as upstream reads them, and
the controller against the real API server and the AWS emulator (instances tagged once per set
of tags, nodes labelled with the checksum, tags taken off the instance of a deleted node)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from polyccm.app.commandline import parse_command_line
from polyccm.kube.api import MERGE_PATCH, NODES, KubeApi
from polyccm.plugins import plugin_manager
from polyccm_aws.config import CloudConfig
from polyccm_aws.provider import AwsProvider
from polyccm_aws.tagging_controller import CHECKSUM_LABEL, TaggingController
from polyccm_aws.tagging_options import TaggingOptions, tagging_options
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World
from polyccm_testing.controllers import provider_controllers
from polyccm_testing.kubeobjects import make_node, wait_for
from polyccm_testing.opstools import run_polyccm

# -- the flags ------------------------------------------------------------------------------


def parsed(*flags: str) -> Any:
    return parse_command_line(["--provider=aws", *flags], plugin_manager()).namespace


def test_the_flags_are_upstreams_and_read_as_pflag_reads_them() -> None:
    # cloud-provider-aws v1.37.1 pkg/controllers/options/tagging_controller.go:33-44 (names and
    # defaults: concurrent-node-syncs 1, the rest zero); --tags is pflag's stringToString
    # (pflag v1.0.10 string_to_string.go:25-58: one "=" keeps the commas in the value, more
    # make a CSV list; repeated flags merge) and --resources a stringArray (one per flag).
    flags = ["--tags", "team=ml,infra", "--tags", "env=prod,tier=1", "--tags", "tier=2",
             "--resources", "instance", "--tagging-controller-concurrent-node-syncs=3",
             "--tagging-controller-rate-limit=0.5", "--tagging-controller-burst-limit=4",
             "--tagging-controller-enable-batching"]  # fmt: skip
    options = tagging_options(parsed(*flags))

    assert options == TaggingOptions(
        tags={"team": "ml,infra", "env": "prod", "tier": "2"},
        resources=("instance",),
        rate_limit=0.5,
        burst_limit=4,
        workers=3,
        batching=True,
    )
    # Accepted, and not checked, while the controller is off (upstream validates on start).
    assert parsed("--tags", "a=b").controllers == parsed().controllers
    assert "tagging" not in parsed().controllers
    assert "tagging" in parsed("--controllers=*,tagging").controllers


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ((), "--tags must not be empty and must be a form of key=value"),
        (("--tags=a=b",), "--resources must not be empty"),
        (("--tags=a=b", "--resources=volume"), "'volume' is not a supported resource"),
        (("--tags=a=b", "--resources=instance", "--tagging-controller-burst-limit=-1"),
         "--tagging-controller-burst-limit should not be less than zero"),
        (("--tags=a=b", "--resources=instance", "--tagging-controller-concurrent-node-syncs=0"),
         "--tagging-controller-concurrent-node-syncs must be a positive number"),
        (("--tags=a=b", "--resources=instance", "--tagging-controller-rate-limit=-0.5"),
         "--tagging-controller-rate-limit should not be less than zero"),
        (("--tags=team",), "team must be formatted as key=value"),
    ],
)  # fmt: skip
def test_selected_with_bad_flags_the_start_ends_with_one_line_and_exit_2(
    flags: tuple[str, ...], message: str, cloud_config: Path, aws: EmulatorControl
) -> None:
    # Upstream checks them when the controller starts and stops the process (tagging_controller
    # .go:70-101 and tagging_controller_wrapper.go:38-41); polyccm refuses them before anything
    # runs, as every bad flag.
    result = run_polyccm(
        ["--provider=aws", f"--cloud-config={cloud_config}", "--controllers=*,tagging,-route",
         *flags]
    )  # fmt: skip

    assert result.status == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_selected_with_good_flags_the_start_goes_past_them(
    cloud_config: Path, aws: EmulatorControl, tmp_path: Path
) -> None:
    # upstream main.go:63-79 registers "tagging" as disabled by default and adds its flags.
    result = run_polyccm(
        ["--provider=aws", f"--cloud-config={cloud_config}", "--controllers=*,tagging,-route",
         "--tags=team=ml", "--resources=instance", f"--kubeconfig={tmp_path / 'missing'}"]
    )  # fmt: skip

    assert result.status == 2
    assert "kubeconfig" in result.stderr and "tag" not in result.stderr, result.stderr


# -- the controller -------------------------------------------------------------------------


@contextmanager
def tagging(kube_api: KubeApi, provider: AwsProvider) -> Iterator[TaggingController]:
    """The controller in a term of its own, as the manager runs it."""
    with provider_controllers(kube_api, provider, TaggingController.for_term) as (controller,):
        yield controller


def instance_tags(world: World, instance: dict[str, Any]) -> dict[str, str]:
    found = world.ec2.describe_tags(
        Filters=[{"Name": "resource-id", "Values": [instance["InstanceId"]]}]
    )["Tags"]
    return {t["Key"]: t["Value"] for t in found}


def controller_calls(aws: EmulatorControl) -> dict[str, int]:
    """The calls the controller made (the test's own DescribeTags reads left out)."""
    return {k: v for k, v in aws.calls().items() if k != "DescribeTags"}


def label(kube_api: KubeApi, name: str) -> str | None:
    value = kube_api.get(NODES, name)["metadata"].get("labels", {}).get(CHECKSUM_LABEL)
    return None if value is None else str(value)


def provider_tagging(tags: dict[str, str]) -> AwsProvider:
    provider = AwsProvider(CloudConfig(), cluster_name=CLUSTER, cache_ttl=0.0)
    provider.tagging_options = TaggingOptions(tags=tags)
    return provider


@pytest.mark.timeout(120)
def test_instances_are_tagged_once_nodes_labelled_and_deleted_nodes_untagged(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, world: World, aws: EmulatorControl
) -> None:
    # Upstream: pkg/controllers/tagging/tagging_controller.go: a node is queued on add, and on
    # update only while its label is not the checksum of the tags (162-184, 436-446); tagging
    # is CreateTags then the label (317-367), the checksum MD5 of the sorted "k=v" pairs joined
    # by "," (448-455); a deleted node's instance loses the tags (DeleteTags, 385-409); Fargate
    # nodes are skipped (246-251).
    first, second = world.instances(2)
    for instance in (first, second):
        make_node(kube_api, instance["PrivateDnsName"], tainted=False,
                  provider_id=f"aws:///us-east-1a/{instance['InstanceId']}")  # fmt: skip
    make_node(kube_api, "fargate-ip-10-0-11-7", tainted=False,
              provider_id="aws:///us-east-1a/fargate-ip-10-0-11-7.ec2.internal")  # fmt: skip
    make_node(kube_api, "not-yet-known", tainted=True)
    names = [first["PrivateDnsName"], second["PrivateDnsName"]]
    tags = {"team": "ml", "env": "prod"}
    checksum = hashlib.md5(b"env=prod,team=ml", usedforsecurity=False).hexdigest()
    aws.reset_calls()

    with tagging(kube_api, provider_tagging(tags)):
        wait_for(lambda: all(label(kube_api, n) == checksum for n in names), 30, "labels")
        assert controller_calls(aws) == {"CreateTags": 2}
        assert instance_tags(world, first) == {world.cluster_tag: "owned", **tags}
        assert label(kube_api, "fargate-ip-10-0-11-7") is None

        # Heartbeats of tagged nodes ask AWS nothing.
        for name in names:
            kube_api.patch(NODES, name, {"metadata": {"labels": {"beat": "1"}}},
                           patch_type=MERGE_PATCH)  # fmt: skip
        time.sleep(1.0)
        assert controller_calls(aws) == {"CreateTags": 2}

        # A deleted node's instance loses the tags; the cluster's own tag stays.
        kube_api.delete(NODES, names[0])
        wait_for(lambda: "team" not in instance_tags(world, first), 30, "untagged")
        assert instance_tags(world, first) == {world.cluster_tag: "owned"}
        assert controller_calls(aws) == {"CreateTags": 2, "DeleteTags": 1}

    # New tags: a new checksum, so the remaining node is tagged again (upstream adds the new
    # set; the tag dropped from --tags is left on the instance, as upstream leaves it).
    aws.reset_calls()
    fewer = {"team": "ml", "owner": "ada"}
    with tagging(kube_api, provider_tagging(fewer)):
        renewed = hashlib.md5(b"owner=ada,team=ml", usedforsecurity=False).hexdigest()
        wait_for(lambda: label(kube_api, names[1]) == renewed, 30, "new label")
        assert controller_calls(aws) == {"CreateTags": 1}
        assert instance_tags(world, second)["owner"] == "ada"


@pytest.mark.timeout(120)
def test_with_batching_queued_nodes_share_one_call(
    control_plane: Any, kube_api: KubeApi, clean_nodes: None, world: World, aws: EmulatorControl
) -> None:
    # Upstream's --tagging-controller-enable-batching sends the CreateTags of up to 50 nodes
    # with the same tags as one call (pkg/providers/v1/create_tags_batch.go:36-44, 79-95).
    instances = world.instances(6)
    names = [i["PrivateDnsName"] for i in instances]
    for instance in instances:
        make_node(kube_api, instance["PrivateDnsName"], tainted=False,
                  provider_id=f"aws:///us-east-1a/{instance['InstanceId']}")  # fmt: skip
    provider = provider_tagging({"team": "ml"})
    provider.tagging_options = TaggingOptions(tags={"team": "ml"}, batching=True)
    checksum = hashlib.md5(b"team=ml", usedforsecurity=False).hexdigest()
    aws.reset_calls()

    with tagging(kube_api, provider):
        wait_for(lambda: all(label(kube_api, n) == checksum for n in names), 30, "labels")

    assert controller_calls(aws)["CreateTags"] < len(names)
    assert all(instance_tags(world, i)["team"] == "ml" for i in instances)
