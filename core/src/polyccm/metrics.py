"""Prometheus metrics of the cloud-controller-manager, under the upstream names.

Every metric lives in :data:`REGISTRY` (not the prometheus_client default registry), which the
health server exposes at ``/metrics``. Names, subsystems and buckets follow
k8s.io/cloud-provider and client-go, so dashboards and alerts written for an upstream CCM keep
working: the Python attribute is the upstream ``Name``, the exposed name adds the upstream
``Subsystem`` (``node_controller_``, ``service_controller_``, ``route_controller_``).
Metrics of our own start with ``polyccm_``.

Counter names here omit ``_total``: prometheus_client appends it when exposing them.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)

# No "<name>_created" series beside each counter and histogram: client_golang, which every
# upstream component uses, exports none, and they double the series a scrape stores.
disable_created_metrics()  # type: ignore[no-untyped-call]

REGISTRY = CollectorRegistry()


def _exponential(start: float, factor: float, count: int) -> list[float]:
    """Like Go's ``metrics.ExponentialBuckets``."""
    return [start * factor**i for i in range(count)]


# -- cloud node controller (k8s.io/cloud-provider controllers/node/metrics.go) ------------------

cloud_provider_taint_removal_delay_seconds = Histogram(
    "cloud_provider_taint_removal_delay_seconds",
    "Number of seconds after node creation when NodeController removed the cloud-provider "
    "taint of a single node.",
    subsystem="node_controller",
    buckets=_exponential(1, 4, 6),
    registry=REGISTRY,
)

initial_node_sync_delay_seconds = Histogram(
    "initial_node_sync_delay_seconds",
    "Number of seconds after node creation when NodeController finished the initial "
    "synchronization of a single node.",
    subsystem="node_controller",
    buckets=_exponential(1, 4, 6),
    registry=REGISTRY,
)

# -- service controller (controllers/service/metrics.go) --------------------------------------

loadbalancer_sync_total = Counter(
    "loadbalancer_sync",
    "A metric counting the amount of times any load balancer has been configured, as an "
    "effect of service/node changes on the cluster",
    subsystem="service_controller",
    registry=REGISTRY,
)

nodesync_error_total = Counter(
    "nodesync_error",
    "A metric counting the amount of times any load balancer has been configured and "
    "errored, as an effect of node changes on the cluster",
    subsystem="service_controller",
    registry=REGISTRY,
)

nodesync_latency_seconds = Histogram(
    "nodesync_latency_seconds",
    "A metric measuring the latency for nodesync which updates loadbalancer hosts on cluster "
    "node updates.",
    subsystem="service_controller",
    buckets=_exponential(1, 2, 15),
    registry=REGISTRY,
)

update_loadbalancer_host_latency_seconds = Histogram(
    "update_loadbalancer_host_latency_seconds",
    "A metric measuring the latency for updating each load balancer hosts.",
    subsystem="service_controller",
    buckets=_exponential(1, 2, 15),
    registry=REGISTRY,
)

# -- route controller (controllers/route/metrics.go) ------------------------------------------

route_sync_total = Counter(
    "route_sync",
    "A metric counting the amount of times routes have been synced with the cloud provider.",
    subsystem="route_controller",
    registry=REGISTRY,
)
route_controller_route_sync_total = route_sync_total  # the exposed name, for callers using it

# -- work queues (client-go util/workqueue, component-base workqueue metrics) -----------------

_QUEUE_DURATION_BUCKETS = _exponential(10e-9, 10, 10)

workqueue_depth = Gauge(
    "workqueue_depth", "Current depth of workqueue", ["name"], registry=REGISTRY
)
workqueue_adds_total = Counter(
    "workqueue_adds", "Total number of adds handled by workqueue", ["name"], registry=REGISTRY
)
workqueue_retries_total = Counter(
    "workqueue_retries",
    "Total number of retries handled by workqueue",
    ["name"],
    registry=REGISTRY,
)
workqueue_queue_duration_seconds = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested.",
    ["name"],
    buckets=_QUEUE_DURATION_BUCKETS,
    registry=REGISTRY,
)
workqueue_work_duration_seconds = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    ["name"],
    buckets=_QUEUE_DURATION_BUCKETS,
    registry=REGISTRY,
)
workqueue_unfinished_work_seconds = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has done that is in progress and hasn't been observed by "
    "work_duration. Large values indicate stuck threads.",
    ["name"],
    registry=REGISTRY,
)
workqueue_longest_running_processor_seconds = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    ["name"],
    registry=REGISTRY,
)

# -- leader election (client-go tools/leaderelection metrics) ---------------------------------

leader_election_master_status = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 "
    "indicates master. 'name' is the string used to identify the lease.",
    ["name"],
    registry=REGISTRY,
)

# -- polyccm's own -----------------------------------------------------------------------------

cloud_api_calls_total = Counter(
    "polyccm_cloud_api_calls",
    "Calls made to the cloud provider's API, by provider and operation.",
    ["provider", "operation"],
    registry=REGISTRY,
)
polyccm_cloud_api_calls_total = cloud_api_calls_total  # the exposed name, for callers using it

cloud_api_errors_total = Counter(
    "polyccm_cloud_api_errors",
    "Cloud provider API calls that failed, by provider and operation.",
    ["provider", "operation"],
    registry=REGISTRY,
)

informer_lists_total = Counter(
    "polyccm_informer_lists",
    "Full lists made by informers (the first one and each relist after 410 Gone).",
    ["informer"],
    registry=REGISTRY,
)
informer_watches_total = Counter(
    "polyccm_informer_watches",
    "Watch requests made by informers (each one resumes from the last resourceVersion).",
    ["informer"],
    registry=REGISTRY,
)
informer_bookmarks_total = Counter(
    "polyccm_informer_bookmarks",
    "Watch bookmarks received by informers (each moves the resume point forward).",
    ["informer"],
    registry=REGISTRY,
)
informer_watch_errors_total = Counter(
    "polyccm_informer_watch_errors",
    "Watches that ended with an error other than 410 Gone (each is retried with backoff).",
    ["informer"],
    registry=REGISTRY,
)
informer_cached_objects = Gauge(
    "polyccm_informer_cached_objects",
    "Objects held in an informer's cache.",
    ["informer"],
    registry=REGISTRY,
)
events_dropped_total = Counter(
    "polyccm_events_dropped",
    "Kubernetes Events that could not be recorded (queue full or API errors).",
    registry=REGISTRY,
)

# -- cloud-provider-gcp's L4 load-balancer usage (providers/gce/gce_loadbalancer_metrics.go) ----
# No subsystem upstream: exposed under these names. Only the GCE provider sets them.

number_of_l4_ilbs = Gauge(
    "number_of_l4_ilbs",
    "Number of L4 ILBs",
    ["feature"],
    registry=REGISTRY,
)

number_of_l4_netlbs = Gauge(
    "number_of_l4_netlbs",
    "Metric containing the number of NetLBs that can be filtered by feature labels and status",
    ["status", "deny_firewall"],
    registry=REGISTRY,
)

# -- the process (prometheus_client's collector: process_cpu_seconds_total,
# process_resident_memory_bytes, process_open_fds, process_start_time_seconds...), as every
# Kubernetes component exports them through component-base's legacy registry ----------------

ProcessCollector(registry=REGISTRY)

# -- the Kubernetes API client (k8s.io/component-base metrics/prometheus/restclient/metrics.go,
# kubernetes-1.14.0-beta.0-2016-g349fbe0: lines 36-41 and 90-94; client-go's labels: code is the
# HTTP status or "<error>" when no answer came, method and verb the HTTP method, host the API
# server's host:port) ---------------------------------------------------------------------------

rest_client_request_duration_seconds = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host.",
    ["verb", "host"],
    buckets=[0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0],
    registry=REGISTRY,
)
rest_client_requests_total = Counter(
    "rest_client_requests",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ["code", "method", "host"],
    registry=REGISTRY,
)

# -- cloud API calls under upstream's names (fed by polyccm.cloudcalls) --------------------------
# Upstream's two error counters have no "_total" (client_golang adds none); prometheus_client
# would add it to a Counter, so they are Gauges under the exact name, only ever increased.
#
# cloud-provider-aws pkg/providers/v1/aws_metrics.go (63ec440c, lines 30-53): default buckets
# (component-base's HistogramOpts without Buckets takes prometheus.DefBuckets), the request label
# the snake_case action ("describe_instances"), the throttles by the SDK's operation name.

aws_api_request_duration_seconds = Histogram(
    "cloudprovider_aws_api_request_duration_seconds",
    "Latency of AWS API calls",
    ["request"],
    registry=REGISTRY,
)
aws_api_request_errors = Gauge(
    "cloudprovider_aws_api_request_errors",
    "AWS API errors",
    ["request"],
    registry=REGISTRY,
)
aws_api_throttled_requests_total = Counter(
    "cloudprovider_aws_api_throttled_requests",
    "AWS API throttled requests",
    ["operation_name"],
    registry=REGISTRY,
)

# cloud-provider-gcp providers/gce/metrics.go (4e245312, lines 33-40 and 88-105): labels request
# ("<resource>_<verb>", "instances_get"), region and zone ("<n/a>" when the call has none),
# version (the API version, "v1").

GCE_UNUSED_LABEL = "<n/a>"
_GCE_LABELS = ["request", "region", "zone", "version"]
gce_api_request_duration_seconds = Histogram(
    "cloudprovider_gce_api_request_duration_seconds",
    "Latency of a GCE API call",
    _GCE_LABELS,
    registry=REGISTRY,
)
gce_api_request_errors = Gauge(
    "cloudprovider_gce_api_request_errors",
    "Number of errors for an API call",
    _GCE_LABELS,
    registry=REGISTRY,
)

# Latency of every cloud's calls, for the clouds whose upstream has no such metric
# (DigitalOcean, Equinix Metal) and for dashboards that cover every provider alike.
cloud_api_request_duration_seconds = Histogram(
    "polyccm_cloud_api_request_duration_seconds",
    "Latency of cloud provider API calls that were answered, by provider and operation.",
    ["provider", "operation"],
    registry=REGISTRY,
)

# -- the build (as component-base's kubernetes_build_info: a constant 1 whose labels say what
# runs; set once the provider is known) ---------------------------------------------------------

build_info = Gauge(
    "polyccm_build_info",
    "A metric with a constant '1' value labeled by the polyccm version, the Python version "
    "and platform it runs on, and the cloud provider it runs for.",
    ["version", "python_version", "platform", "provider"],
    registry=REGISTRY,
)
