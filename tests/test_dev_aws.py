"""`polyccm-dev up --cloud aws`: the real command, the real control plane and moto's server, with
the standard variables boto3 reads (the instance metadata endpoint included) written to the state
dir's env file."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from polyccm_aws.provider import own_instance_id
from polyccm_aws_emulator.metadata import CCM_HOST_TAG


def dev(*args: str) -> subprocess.CompletedProcess[str]:
    command = shutil.which("polyccm-dev")
    assert command, "polyccm-dev is installed in the workspace environment"
    return subprocess.run([command, *args], capture_output=True, text=True, timeout=180)


def read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.removeprefix("export ").strip(): value.strip("'\"") for key, value in pairs}


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "dev"
    yield directory
    dev("down", "--state-dir", str(directory))


def test_up_with_aws_starts_moto_and_writes_what_boto3_needs(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = dev("up", "--state-dir", str(state_dir), "--cloud", "aws")
    assert result.returncode == 0, result.stdout + result.stderr
    env = read_env(state_dir / "env")
    for key in (
        "KUBECONFIG",
        "AWS_ENDPOINT_URL",
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
    ):
        assert env.get(key), f"{key} missing from the env file"
    assert env["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
    for key in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    ec2 = boto3.client("ec2")  # nothing but the variables: the endpoint comes from the env file
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    assert vpc in {v["VpcId"] for v in ec2.describe_vpcs()["Vpcs"]}
    # The instance tagged as polyccm's host is the one the instance metadata service names.
    (host,) = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": CCM_HOST_TAG, "Value": "true"}]}
        ],
    )["Instances"]
    assert own_instance_id() == host["InstanceId"]

    status = dev("status", "--state-dir", str(state_dir))
    assert status.returncode == 0
    assert "aws" in status.stdout
    assert dev("down", "--state-dir", str(state_dir)).returncode == 0
    assert dev("status", "--state-dir", str(state_dir)).returncode != 0
    assert not os.path.exists(state_dir / "env")
