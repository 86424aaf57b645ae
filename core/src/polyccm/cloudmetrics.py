"""The cloud API metrics each upstream CCM exports, under upstream's names and labels, fed by
:mod:`polyccm.cloudcalls` from the calls every provider already passes through it.

* AWS (cloud-provider-aws pkg/providers/v1/aws_metrics.go): the latency of answered calls and
  the count of failed ones by ``request`` (the action in snake_case: ``ec2:DescribeInstances``
  is ``describe_instances``), throttled requests by ``operation_name`` (``DescribeInstances``).
* GCE (cloud-provider-gcp providers/gce/metrics.go): latency of every call and count of failed
  ones by ``request`` (``compute.targetPools.addInstance`` is ``target_pools_add_instance``),
  ``region``, ``zone`` (``<n/a>`` when the call has none) and ``version`` (``v1``).
* DigitalOcean and Equinix Metal: their upstream CCMs export no metric of their API calls
  (DigitalOcean's only its firewall controller's ``firewall_*``), so these have only polyccm's
  own ``polyccm_cloud_api_*``, as every provider does.

Each call is timed from :func:`polyccm.cloudcalls.record` (just before it is sent) to its
answer or failure on the same thread; a retried call is timed per attempt.
"""

from __future__ import annotations

import re

from polyccm import metrics

_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake(name: str) -> str:
    """``DescribeInstances`` and ``addInstance`` as ``describe_instances``, ``add_instance``."""
    return _WORD.sub("_", name).lower()


def _aws_request(operation: str) -> str:
    return snake(operation.rsplit(":", 1)[-1])


def _gce_request(operation: str) -> str:
    parts = operation.split(".")
    return "_".join(snake(part) for part in parts[1:] or parts)


def _gce_labels(operation: str, region: str, zone: str) -> dict[str, str]:
    return {
        "request": _gce_request(operation),
        "region": region or metrics.GCE_UNUSED_LABEL,
        "zone": zone or metrics.GCE_UNUSED_LABEL,
        "version": "v1",
    }


def answered(provider: str, operation: str, seconds: float, region: str, zone: str) -> None:
    """``operation`` answered after ``seconds``."""
    metrics.cloud_api_request_duration_seconds.labels(
        provider=provider, operation=operation
    ).observe(seconds)
    if provider == "aws":
        metrics.aws_api_request_duration_seconds.labels(request=_aws_request(operation)).observe(
            seconds
        )
    elif provider == "gce":
        labels = _gce_labels(operation, region, zone)
        metrics.gce_api_request_duration_seconds.labels(**labels).observe(seconds)


def failed(provider: str, operation: str, seconds: float | None, region: str, zone: str) -> None:
    """``operation`` failed (after ``seconds``, when its start is known)."""
    if provider == "aws":
        metrics.aws_api_request_errors.labels(request=_aws_request(operation)).inc()
    elif provider == "gce":
        labels = _gce_labels(operation, region, zone)
        if seconds is not None:
            # Upstream observes the latency of failed calls too (metrics.go Observe).
            metrics.gce_api_request_duration_seconds.labels(**labels).observe(seconds)
        metrics.gce_api_request_errors.labels(**labels).inc()


def throttled(provider: str, operation: str) -> None:
    """The cloud refused ``operation`` for its request rate."""
    if provider == "aws":
        name = operation.rsplit(":", 1)[-1]
        metrics.aws_api_throttled_requests_total.labels(operation_name=name).inc()
