"""No credential reaches the log, even at the highest verbosity.

The real ``polyccm --provider aws --v=10`` process runs against the real kube-apiserver (bearer
token kubeconfig) and the AWS emulator, with a cloud config whose ``RoleARN`` makes it exchange
its keys for STS session credentials. It initialises nodes and serves a load balancer, so boto3
and urllib3 log their wire traffic; its whole output must hold none of the secrets: the AWS
secret key, the STS secret key and session token the emulator issued, the Kubernetes token.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm.kube.api import NODES, KubeApi
from polyccm.objects import UNINITIALIZED_TAINT, Node
from polyccm_aws_emulator.testing import (
    CLUSTER,
    FOREIGN_VARIABLES,
    World,
    isolated_environment,
    point_boto3_at,
)
from polyccm_testing.kubeobjects import ingress_hostname, make_node, make_service, wait_for

ROLE_ARN = "arn:aws:iam::123456789012:role/polyccm-controller"


def issued_sts_credentials(endpoint: str) -> list[dict[str, Any]]:
    """The session credentials the emulator's STS handed out (moto's own state dump)."""
    with urllib.request.urlopen(f"{endpoint}/moto-api/data.json", timeout=10) as answer:
        data = json.load(answer)
    return list(data.get("sts", {}).get("AssumedRole", []))


def bearer_token(kubeconfig: Path) -> str:
    config = yaml.safe_load(kubeconfig.read_text())
    (user,) = config["users"]
    return str(user["user"]["token"])


@pytest.mark.timeout(180)
def test_highest_verbosity_logs_the_wire_traffic_but_no_secret(
    kube_api: KubeApi,
    control_plane: Any,
    namespace: str,
    clean_nodes: None,
    emulator: Mapping[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    point_boto3_at(emulator, monkeypatch.setenv, lambda n: monkeypatch.delenv(n, raising=False))
    world = World()
    instances = world.instances(2, "us-east-1a")
    names = [str(i["PrivateDnsName"]) for i in instances]
    for name in names:
        make_node(kube_api, name)
    cloud_config = tmp_path / "cloud.conf"
    cloud_config.write_text(
        f"[Global]\nRegion = us-east-1\nKubernetesClusterID = {CLUSTER}\nRoleARN = {ROLE_ARN}\n"
    )
    # Keys of the polyccm process alone, unlike anything else in its output.
    access_key_id = "AKIA" + secrets.token_hex(8).upper()
    secret_access_key = secrets.token_urlsafe(30)
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_VARIABLES}
    env.update(isolated_environment(emulator))
    env.update(AWS_ACCESS_KEY_ID=access_key_id, AWS_SECRET_ACCESS_KEY=secret_access_key)
    command = [
        sys.executable,
        "-m",
        "polyccm.cli",
        "--provider=aws",
        "--v=10",
        f"--cloud-config={cloud_config}",
        f"--kubeconfig={control_plane.kubeconfig}",
        f"--cluster-name={CLUSTER}",
        "--leader-elect=false",
        "--configure-cloud-routes=false",
        "--secure-port=0",
    ]
    log_path = tmp_path / "polyccm.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:

        def initialised() -> bool:
            nodes = [Node(kube_api.get(NODES, n)) for n in names]
            return all(not n.has_taint(UNINITIALIZED_TAINT) and n.provider_id for n in nodes)

        wait_for(initialised, 60, "both nodes initialised")
        make_service(kube_api, namespace, "web")
        wait_for(lambda: ingress_hostname(kube_api, namespace, "web"), 60, "the ELB's hostname")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    output = log_path.read_text(errors="replace")

    issued = issued_sts_credentials(emulator["AWS_ENDPOINT_URL"])
    assert issued, "the process assumed the role through STS"
    assert {role["role_arn"] for role in issued} == {ROLE_ARN}
    # The highest level really prints the wire traffic: the STS exchange and the signed calls.
    assert "AssumeRole" in output and "CreateLoadBalancer" in output, output[-3000:]
    assert "Response body" in output, "botocore's DEBUG wire log is on at --v=10"

    leaked = {
        "the AWS secret access key": secret_access_key,
        "the Kubernetes bearer token": bearer_token(control_plane.kubeconfig),
    }
    for number, role in enumerate(issued):
        leaked[f"STS SecretAccessKey #{number}"] = role["secret_access_key"]
        leaked[f"STS SessionToken #{number}"] = role["session_token"]
    found = [what for what, value in leaked.items() if value in output]
    assert not found, f"secrets in the log: {', '.join(found)} (log: {log_path})"
