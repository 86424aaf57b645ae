"""The metrics a running polyccm really exports on /metrics, scraped over its secure port
against the real API server and the clouds' emulators: the build, the process, the Kubernetes
API client and each cloud's API calls, under upstream's names where upstream has them; and
the Grafana dashboard of deploy/observability, each of whose queries names only metrics found
in those scrapes."""

from __future__ import annotations

import json
import os
import platform
import re
import secrets
import sys
from collections.abc import Iterator, Mapping
from importlib import metadata
from typing import Any
from urllib.parse import urlsplit

import pytest
from polyccm.kube.api import NAMESPACES, SERVICES, KubeApi, load_configuration
from polyccm_aws_emulator.testing import CLUSTER, World, point_boto3_at
from polyccm_aws_emulator.testing import isolated_environment as aws_environment
from polyccm_gce_emulator.testing import CLUSTER as GCE_CLUSTER
from polyccm_gce_emulator.testing import REGION as GCE_REGION
from polyccm_gce_emulator.testing import emulator_process, operator_config
from polyccm_testing.devenv.cleanup import delete_all_nodes, delete_namespace
from polyccm_testing.kubeobjects import make_node, make_service, wait_for
from polyccm_testing.scrape import Sample, running_polyccm, samples, value
from polyccm_testing.workspace import ROOT

AWS_LATENCY = "cloudprovider_aws_api_request_duration_seconds"
AWS_ERRORS = "cloudprovider_aws_api_request_errors"
AWS_THROTTLED = "cloudprovider_aws_api_throttled_requests_total"
GCE_LATENCY = "cloudprovider_gce_api_request_duration_seconds"
GCE_ERRORS = "cloudprovider_gce_api_request_errors"
DASHBOARD = ROOT / "deploy" / "observability" / "grafana-dashboard.json"


@pytest.fixture(scope="module")
def scratch(kube_api: KubeApi) -> Iterator[str]:
    """A namespace of this module's own (the Services, the Lease), and no Node before or
    after."""
    name = f"test-{secrets.token_hex(4)}"
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    kube_api.create(NAMESPACES, namespace)
    delete_all_nodes(kube_api)
    try:
        yield name
    finally:
        delete_namespace(kube_api, name)
        delete_all_nodes(kube_api)


def _command(control_plane: Any, namespace: str, *flags: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "polyccm.cli",
        f"--kubeconfig={control_plane.kubeconfig}",
        "--configure-cloud-routes=false",
        # Leader election on, as deployed: its metric is scraped too.
        f"--leader-elect-resource-namespace={namespace}",
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=1s",
        *flags,
    ]


@pytest.fixture(scope="module")
def aws_scrape(
    kube_api: KubeApi,
    emulator: Mapping[str, str],
    control_plane: Any,
    scratch: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[Sample]]:
    """polyccm for AWS with two nodes and a LoadBalancer Service to serve, one DescribeInstances
    throttled (the SDK retries it) and one DescribeLoadBalancers refused (the controller
    retries it later): its /metrics once each of those shows."""
    with pytest.MonkeyPatch.context() as patch:
        aws = point_boto3_at(emulator, patch.setenv, lambda n: patch.delenv(n, raising=False))
        world = World()
        hosts = world.instances(1, "us-east-1a", ccm_host=True)  # the cluster id is in its tags
        for instance in (*hosts, *world.instances(1, "us-east-1b")):
            make_node(kube_api, str(instance["PrivateDnsName"]))
        make_service(kube_api, scratch, "web")
        aws.inject("DescribeInstances", count=1, code="RequestLimitExceeded")
        aws.inject("DescribeLoadBalancers", count=1, code="AccessDenied", status=403, service="elb")
        env = {**os.environ, **aws_environment(emulator)}
        command = _command(control_plane, scratch, "--provider=aws", f"--cluster-name={CLUSTER}")
        log = tmp_path_factory.mktemp("aws") / "polyccm.log"
        with running_polyccm(command, env, log) as ccm:

            def scraped() -> list[Sample] | None:
                found = samples(ccm.scrape())
                wanted = (
                    value(found, AWS_ERRORS, request="describe_load_balancers"),
                    value(found, f"{AWS_LATENCY}_count", request="describe_instances"),
                    value(found, AWS_THROTTLED, operation_name="DescribeInstances"),
                    value(found, "leader_election_master_status"),
                )
                return found if all(wanted) else None

            yield wait_for(scraped, timeout=90, what=f"the AWS call metrics (log: {log})")
        kube_api.delete(SERVICES, "web", scratch)
        delete_all_nodes(kube_api)


@pytest.fixture(scope="module")
def gce_scrape(
    kube_api: KubeApi,
    control_plane: Any,
    scratch: str,
    aws_scrape: list[Sample],  # after it: one cluster, one cloud at a time
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[Sample]]:
    """polyccm for GCE with two nodes and a LoadBalancer Service to serve: its /metrics once
    a forwarding rule was looked for (404, an error) and made."""
    directory = tmp_path_factory.mktemp("gce")
    with emulator_process(directory) as gce:
        compute = gce.api()
        for name in ("metrics-a", "metrics-b"):
            compute.create_instance(name, tags=["metrics"])
            make_node(kube_api, name)
        make_service(kube_api, scratch, "web-gce")
        env = {**os.environ, **gce.env}
        command = _command(
            control_plane,
            scratch,
            "--provider=gce",
            f"--cloud-config={operator_config(gce, directory)}",
            f"--cluster-name={GCE_CLUSTER}",
            "--leader-elect-resource-name=polyccm-gce",
        )
        log = directory / "polyccm.log"
        with running_polyccm(command, env, log) as ccm:

            def scraped() -> list[Sample] | None:
                found = samples(ccm.scrape())
                wanted = (
                    value(found, GCE_ERRORS, request="forwarding_rules_get"),
                    value(found, f"{GCE_LATENCY}_count", request="forwarding_rules_insert"),
                )
                return found if all(wanted) else None

            yield wait_for(scraped, timeout=90, what=f"the GCE call metrics (log: {log})")


def test_aws_metrics_under_upstreams_names(aws_scrape: list[Sample], control_plane: Any) -> None:
    found = aws_scrape
    # cloud-provider-aws pkg/providers/v1/aws_metrics.go (63ec440c) lines 31-53: the names and
    # labels; the latency is observed only for answered calls (lines 65-71).
    assert value(found, f"{AWS_LATENCY}_bucket", le="+Inf")
    assert value(found, AWS_ERRORS, request="describe_load_balancers") == 1
    # retry_handler.go lines 190-193: a RequestLimitExceeded counts under the SDK's name.
    assert value(found, AWS_THROTTLED, operation_name="DescribeInstances") == 1
    # polyccm's own, for every provider alike.
    assert value(found, "polyccm_cloud_api_request_duration_seconds_count", provider="aws")
    refused = {"operation": "elb:DescribeLoadBalancers"}
    assert value(found, "polyccm_cloud_api_errors_total", **refused) == 1
    _common(found, "aws", control_plane)


def test_gce_metrics_under_upstreams_names(gce_scrape: list[Sample], control_plane: Any) -> None:
    found = gce_scrape
    # cloud-provider-gcp providers/gce/metrics.go (4e245312) lines 38-43 and 88-105: request,
    # region, zone ("<n/a>" when the call names none: line 52) and version.
    regional = {"region": GCE_REGION, "zone": "<n/a>", "version": "v1"}
    assert value(found, GCE_ERRORS, request="forwarding_rules_get", **regional)
    # Upstream observes the latency of failed calls too (metrics.go lines 58-66).
    assert value(found, f"{GCE_LATENCY}_count", request="forwarding_rules_get", **regional)
    assert value(found, f"{GCE_LATENCY}_count", request="forwarding_rules_insert", **regional)
    nowhere = {"region": "<n/a>", "zone": "<n/a>", "version": "v1"}
    assert value(found, f"{GCE_LATENCY}_count", request="instances_aggregated_list", **nowhere)
    assert value(found, f"{GCE_LATENCY}_bucket", le="+Inf")
    _common(found, "gce", control_plane)


def _common(found: list[Sample], provider: str, control_plane: Any) -> None:
    """What every provider's polyccm exports: the build, the process, the API client."""
    # As component-base's kubernetes_build_info (metrics/prometheus/version/metrics.go):
    # a constant 1 labelled with what runs.
    build = {
        "version": metadata.version("polyccm"),
        "python_version": platform.python_version(),
        "provider": provider,
    }
    assert value(found, "polyccm_build_info", **build) == 1
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
    host = urlsplit(load_configuration(str(control_plane.kubeconfig)).host).netloc
    assert value(found, "rest_client_requests_total", code="200", method="GET", host=host)
    assert value(found, "rest_client_request_duration_seconds_count", verb="GET", host=host)
    assert value(found, "rest_client_request_duration_seconds_bucket", le="0.005") is not None
    assert not [s.name for s in found if s.name.endswith("_created")]  # as client_golang


# -- the dashboard --------------------------------------------------------------------------

# PromQL's functions, aggregations and keywords: every other name in a query is a metric.
_PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "rate", "irate", "increase",
    "histogram_quantile", "topk", "bottomk", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "time", "label_values", "clamp_min", "abs", "offset", "bool",
    "delta", "deriv", "changes", "resets", "vector", "scalar", "le", "e", "inf", "nan",
}  # fmt: skip


def metric_names(query: str) -> set[str]:
    """The metric names a PromQL query selects."""
    text = re.sub(r"\{[^}]*\}", " ", query)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    text = re.sub(r'"[^"]*"', " ", text)  # strings
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", text)  # grouping labels
    text = re.sub(r"\blabel_values\(([^,)]*),[^)]*\)", r"\1", text)  # Grafana's: the label
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text))
    return {w for w in words if w.lower() not in _PROMQL_WORDS}


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", ()) if "expr" in t]
    queries += [v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
                for v in board["templating"]["list"] if v.get("type") == "query"]  # fmt: skip
    return queries


def test_every_dashboard_query_names_only_metrics_polyccm_exports(
    aws_scrape: list[Sample], gce_scrape: list[Sample]
) -> None:
    exported = {s.name for s in (*aws_scrape, *gce_scrape)}
    queries = dashboard_queries()
    assert len(queries) >= 15
    used: set[str] = set()
    for query in queries:
        names = metric_names(query)
        assert names, f"no metric in {query!r}"
        missing = names - exported
        assert not missing, f"{query!r} names {sorted(missing)}, which polyccm does not export"
        used |= names
    # The panels a team running an upstream CCM looks for.
    for wanted in (
        "process_resident_memory_bytes",
        "rest_client_requests_total",
        "rest_client_request_duration_seconds_bucket",
        "workqueue_depth",
        "leader_election_master_status",
        f"{AWS_LATENCY}_bucket",
        AWS_ERRORS,
        AWS_THROTTLED,
        f"{GCE_LATENCY}_bucket",
        GCE_ERRORS,
        "polyccm_build_info",
    ):
        assert wanted in used, wanted


def test_the_query_reader_finds_metric_names() -> None:
    query = 'histogram_quantile(0.99, sum by (le, verb) (rate(rest_client_request_duration_seconds_bucket{pod=~"$pod"}[5m])))'  # noqa: E501
    assert metric_names(query) == {"rest_client_request_duration_seconds_bucket"}
    ratio = "sum(rate(a_total[5m])) / sum(rate(b_total[5m]))"
    assert metric_names(ratio) == {"a_total", "b_total"}
