"""The metrics a running polyccm really exports on /metrics, scraped over its secure port
against the real API server and the clouds' emulators: the build, the process, the Kubernetes
API client and each cloud's API calls, under upstream's names where upstream has them."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from polyccm.kube.api import KubeApi
from polyccm_aws_emulator.control import EmulatorControl
from polyccm_aws_emulator.testing import CLUSTER, World, isolated_environment
from polyccm_gce_emulator.testing import CLUSTER as GCE_CLUSTER
from polyccm_gce_emulator.testing import REGION as GCE_REGION
from polyccm_gce_emulator.testing import emulator_process, operator_config
from polyccm_testing.kubeobjects import make_node, make_service, wait_for
from polyccm_testing.scrape import Running, running_polyccm, samples, value

AWS_LATENCY = "cloudprovider_aws_api_request_duration_seconds"
AWS_ERRORS = "cloudprovider_aws_api_request_errors"
AWS_THROTTLED = "cloudprovider_aws_api_throttled_requests_total"
GCE_LATENCY = "cloudprovider_gce_api_request_duration_seconds"
GCE_ERRORS = "cloudprovider_gce_api_request_errors"


def aws_command(control_plane: Any) -> list[str]:
    return [
        sys.executable,
        "-m",
        "polyccm.cli",
        "--provider=aws",
        f"--kubeconfig={control_plane.kubeconfig}",
        f"--cluster-name={CLUSTER}",
        "--leader-elect=false",
        "--configure-cloud-routes=false",
    ]


def aws_world(kube_api: KubeApi, namespace: str) -> None:
    """Two instances registered as nodes and a LoadBalancer Service: work for every
    controller, so that each kind of call is made."""
    world = World()
    hosts = world.instances(1, "us-east-1a", ccm_host=True)  # the cluster id is in its tags
    for instance in (*hosts, *world.instances(1, "us-east-1b")):
        make_node(kube_api, str(instance["PrivateDnsName"]))
    make_service(kube_api, namespace, "web")


def test_aws_metrics_under_upstreams_names(
    kube_api: KubeApi,
    namespace: str,
    aws: EmulatorControl,
    emulator: Mapping[str, str],
    control_plane: Any,
    clean_nodes: None,
    tmp_path: Path,
) -> None:
    aws_world(kube_api, namespace)
    # One throttled DescribeInstances (retried by the SDK, then answered) and one ELB call
    # refused outright (the service controller retries it later).
    aws.inject("DescribeInstances", count=1, code="RequestLimitExceeded")
    aws.inject("DescribeLoadBalancers", count=1, code="AccessDenied", status=403, service="elb")
    env = {**os.environ, **isolated_environment(emulator)}
    with running_polyccm(aws_command(control_plane), env, tmp_path / "polyccm.log") as ccm:

        def scraped() -> list[Any] | None:
            found = samples(ccm.scrape())
            wanted = (
                value(found, AWS_ERRORS, request="describe_load_balancers"),
                value(found, f"{AWS_LATENCY}_count", request="describe_instances"),
                value(found, AWS_THROTTLED, operation_name="DescribeInstances"),
            )
            return found if all(wanted) else None

        found = wait_for(scraped, timeout=60, what=f"the AWS call metrics (log: {ccm.log})")
    # cloud-provider-aws pkg/providers/v1/aws_metrics.go (63ec440c) lines 31-53: the names and
    # labels; its latency is observed only for answered calls (lines 65-71).
    assert value(found, "cloudprovider_aws_api_request_duration_seconds_bucket", le="+Inf")
    assert (
        value(found, "cloudprovider_aws_api_request_errors", request="describe_load_balancers") == 1
    )
    # retry_handler.go lines 190-193: a RequestLimitExceeded counts under the SDK's name.
    assert value(found, AWS_THROTTLED, operation_name="DescribeInstances") == 1
    # polyccm's own, for every provider alike.
    assert value(found, "polyccm_cloud_api_request_duration_seconds_count", provider="aws")
    assert (
        value(found, "polyccm_cloud_api_errors_total", operation="elb:DescribeLoadBalancers") == 1
    )
    _common(found, ccm, "aws", control_plane)


def _common(found: list[Any], ccm: Running, provider: str, control_plane: Any) -> None:
    """What every provider's polyccm exports: the build, the process, the API client."""
    # As component-base's kubernetes_build_info (metrics/prometheus/version/metrics.go):
    # a constant 1 labelled with what runs.
    assert (
        value(
            found,
            "polyccm_build_info",
            version=metadata.version("polyccm"),
            python_version=platform.python_version(),
            provider=provider,
        )
        == 1
    )
    # prometheus_client's ProcessCollector: the process_* names every Go component exports.
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ):
        assert value(found, name), name
    # client-go's rest_client metrics (component-base metrics/prometheus/restclient/metrics.go
    # lines 36-41, 90-94): code, method and host; verb and host.
    host = control_plane.kubeconfig and _api_host(control_plane)
    assert value(found, "rest_client_requests_total", code="200", method="GET", host=host)
    assert value(found, "rest_client_request_duration_seconds_count", verb="GET", host=host)
    assert value(found, "rest_client_request_duration_seconds_bucket", le="0.005") is not None


def _api_host(control_plane: Any) -> str:
    from urllib.parse import urlsplit

    from polyccm.kube.api import load_configuration

    return urlsplit(load_configuration(str(control_plane.kubeconfig)).host).netloc


def gce_command(control_plane: Any, cloud_config: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "polyccm.cli",
        "--provider=gce",
        f"--cloud-config={cloud_config}",
        f"--kubeconfig={control_plane.kubeconfig}",
        f"--cluster-name={GCE_CLUSTER}",
        "--leader-elect=false",
        "--configure-cloud-routes=false",
    ]


def test_gce_metrics_under_upstreams_names(
    kube_api: KubeApi, namespace: str, control_plane: Any, clean_nodes: None, tmp_path: Path
) -> None:
    with emulator_process(tmp_path) as gce:
        compute = gce.api()
        for name in ("metrics-a", "metrics-b"):
            compute.create_instance(name, tags=["metrics"])
            make_node(kube_api, name)
        make_service(kube_api, namespace, "web")
        # Each forwarding rule is looked for (404: an error, as upstream counts it) first.
        env = {**os.environ, **gce.env}
        command = gce_command(control_plane, operator_config(gce, tmp_path))
        with running_polyccm(command, env, tmp_path / "polyccm.log") as ccm:

            def scraped() -> list[Any] | None:
                found = samples(ccm.scrape())
                wanted = (
                    value(found, GCE_ERRORS, request="forwarding_rules_get"),
                    value(found, f"{GCE_LATENCY}_count", request="forwarding_rules_insert"),
                )
                return found if all(wanted) else None

            found = wait_for(scraped, timeout=90, what=f"the GCE call metrics (log: {ccm.log})")
    # cloud-provider-gcp providers/gce/metrics.go (4e245312) lines 38-43 and 88-105: request,
    # region, zone ("<n/a>" when the call names none: line 52) and version.
    regional = {"region": GCE_REGION, "zone": "<n/a>", "version": "v1"}
    assert value(found, GCE_ERRORS, request="forwarding_rules_get", **regional)
    # Upstream observes the latency of failed calls too (metrics.go lines 58-66).
    assert value(found, f"{GCE_LATENCY}_count", request="forwarding_rules_get", **regional)
    assert value(found, f"{GCE_LATENCY}_count", request="forwarding_rules_insert", **regional)
    nowhere = {"region": "<n/a>", "zone": "<n/a>", "version": "v1"}
    assert value(found, f"{GCE_LATENCY}_count", request="instances_aggregated_list", **nowhere)
    assert value(found, "cloudprovider_gce_api_request_duration_seconds_bucket", le="+Inf")
    _common(found, ccm, "gce", control_plane)
