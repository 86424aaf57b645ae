"""Memory and parse time of an informer cache of 5,000 nodes and 5,000 services.

Compares what polyccm's Informer keeps (plain JSON dicts, slimmed) with what the official
client's ``kubernetes.informer.SharedInformer`` keeps (the generated pydantic models), for the
two ways objects arrive: one list response (read in pages of 500) and one watch event per
object. Objects are synthetic but shaped like a kubelet-registered node (labels, annotations,
managedFields, conditions, addresses, nodeInfo, 30 images) and a LoadBalancer service.

Each scenario runs in a fresh interpreter, twice: once under tracemalloc for the memory the
cache retains (the response text is freed first), once without it for the parse time (best of
three). Run from the workspace root:

    uv run python core/benchmarks/bench_informer_memory.py [--nodes 5000] [--services 5000]

With ``--apiserver KUBECONFIG`` it instead measures the whole path against a real API server:
it creates the synthetic nodes there (label ``polyccm-bench=1``; ``--cleanup`` deletes them
afterwards), then times how long each informer takes from start to a full cache and how much
resident memory the process gained:

    uv run python core/benchmarks/bench_informer_memory.py --apiserver .state/dev/kubeconfig

The results are quoted in core/DESIGN-NOTES-machinery.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

PAGE = 500

# -- synthetic objects --------------------------------------------------------------------------

_FIELDS_V1_KUBELET = {
    "f:metadata": {
        "f:annotations": {
            ".": {},
            "f:volumes.kubernetes.io/controller-managed-attach-detach": {},
        },
        "f:labels": {
            ".": {},
            "f:beta.kubernetes.io/arch": {},
            "f:beta.kubernetes.io/os": {},
            "f:kubernetes.io/arch": {},
            "f:kubernetes.io/hostname": {},
            "f:kubernetes.io/os": {},
        },
    }
}
_FIELDS_V1_STATUS = {
    "f:status": {
        "f:allocatable": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}},
        "f:capacity": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}},
        "f:conditions": {
            f'k:{{"type":"{kind}"}}': {"f:lastHeartbeatTime": {}, "f:status": {}}
            for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
        },
        "f:images": {},
        "f:nodeInfo": {"f:bootID": {}, "f:kernelVersion": {}},
    }
}


def make_node(i: int) -> dict[str, Any]:
    name = f"ip-10-0-{i // 250}-{i % 250}.ec2.internal"
    ip = f"10.0.{i // 250}.{i % 250}"
    stamp = "2026-06-01T12:00:00Z"
    conditions = [
        {
            "type": kind,
            "status": "False",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
            "reason": f"KubeletHas{reason}",
            "message": f"kubelet has {reason.lower()}",
        }
        for kind, reason in (
            ("MemoryPressure", "SufficientMemory"),
            ("DiskPressure", "NoDiskPressure"),
            ("PIDPressure", "SufficientPID"),
        )
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    )
    images = [
        {
            "names": [
                f"registry.example.com/team{j % 7}/app{j}@sha256:{(i * 31 + j):064x}",
                f"registry.example.com/team{j % 7}/app{j}:v1.{j}.0",
            ],
            "sizeBytes": 10_000_000 + j * 1_234_567,
        }
        for j in range(30)
    ]
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"{i:08x}-1111-2222-3333-444455556666",
            "resourceVersion": str(100_000 + i),
            "creationTimestamp": stamp,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/instance-type": "m5.xlarge",
                "beta.kubernetes.io/os": "linux",
                "failure-domain.beta.kubernetes.io/region": "us-east-1",
                "failure-domain.beta.kubernetes.io/zone": f"us-east-1{'abc'[i % 3]}",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "m5.xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": f"us-east-1{'abc'[i % 3]}",
                "node-role.kubernetes.io/worker": "",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-{i:017x}"}),
                "alpha.kubernetes.io/provided-node-ip": ip,
            },
            "managedFields": [
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": stamp,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": _FIELDS_V1_KUBELET,
                },
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": stamp,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": _FIELDS_V1_STATUS,
                    "subresource": "status",
                },
                {
                    "manager": "cloud-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": stamp,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:providerID": {}}},
                },
            ],
        },
        "spec": {
            "podCIDR": f"10.244.{i % 256}.0/24",
            "podCIDRs": [f"10.244.{i % 256}.0/24"],
            "providerID": f"aws:///us-east-1{'abc'[i % 3]}/i-{i:017x}",
        },
        "status": {
            "capacity": {
                "cpu": "4",
                "ephemeral-storage": "83873772Ki",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "15896436Ki",
                "pods": "58",
            },
            "allocatable": {
                "cpu": "3920m",
                "ephemeral-storage": "76224326324",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "14879604Ki",
                "pods": "58",
            },
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": name},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{i:032x}",
                "systemUUID": f"ec2{i:05x}-0000-0000-0000-000000000000",
                "bootID": f"{i:08x}-aaaa-bbbb-cccc-dddddddddddd",
                "kernelVersion": "6.1.90-99.173.amzn2023.x86_64",
                "osImage": "Amazon Linux 2023.4.20240611",
                "containerRuntimeVersion": "containerd://1.7.11",
                "kubeletVersion": "v1.35.4",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": images,
        },
    }


def make_service(i: int) -> dict[str, Any]:
    stamp = "2026-06-01T12:00:00Z"
    name = f"svc-{i}"
    namespace = f"team-{i % 50}"
    spec = {
        "ports": [
            {
                "name": "http",
                "protocol": "TCP",
                "port": 80,
                "targetPort": 8080,
                "nodePort": 30000 + i % 2000,
            },
            {
                "name": "https",
                "protocol": "TCP",
                "port": 443,
                "targetPort": 8443,
                "nodePort": 32000 + i % 700,
            },
        ],
        "selector": {"app": name},
        "type": "LoadBalancer",
        "externalTrafficPolicy": "Local",
        "healthCheckNodePort": 31000 + i % 1000,
    }
    last_applied = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )
    return {
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"{i:08x}-9999-8888-7777-666655554444",
            "resourceVersion": str(200_000 + i),
            "creationTimestamp": stamp,
            "labels": {"app": name, "team": f"team-{i % 50}"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": last_applied,
                "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
            },
            "finalizers": ["service.kubernetes.io/load-balancer-cleanup"],
            "managedFields": [
                {
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": stamp,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:ports": {}, "f:selector": {}, "f:type": {}}},
                },
                {
                    "manager": "cloud-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": stamp,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:loadBalancer": {"f:ingress": {}}}},
                    "subresource": "status",
                },
            ],
        },
        "spec": {
            **spec,
            "clusterIP": f"172.20.{i // 250}.{i % 250}",
            "clusterIPs": [f"172.20.{i // 250}.{i % 250}"],
            "sessionAffinity": "None",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "allocateLoadBalancerNodePorts": True,
            "internalTrafficPolicy": "Cluster",
        },
        "status": {
            "loadBalancer": {
                "ingress": [{"hostname": f"a{i:031x}-123456789.us-east-1.elb.amazonaws.com"}]
            }
        },
    }


def list_pages(kind: str, count: int) -> list[str]:
    """The list response as the API server sends it, in pages of 500."""
    make = make_node if kind == "Node" else make_service
    pages = []
    for start in range(0, count, PAGE):
        items = []
        for i in range(start, min(count, start + PAGE)):
            item = make(i)
            del item["kind"], item["apiVersion"]  # list items carry neither
            items.append(item)
        pages.append(
            json.dumps(
                {
                    "kind": f"{kind}List",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": "300000"},
                    "items": items,
                }
            )
        )
    return pages


def watch_lines(kind: str, count: int) -> list[str]:
    """One watch event line per object, as in the stream after the list."""
    make = make_node if kind == "Node" else make_service
    return [json.dumps({"type": "ADDED", "object": make(i)}) for i in range(count)]


# -- the caches ---------------------------------------------------------------------------------


def ours_from_list(pages: list[str], kind: str, slim: str) -> dict[str, Any]:
    from polyccm.kube.api import NODES, SERVICES
    from polyccm.kube.informer import Informer, default_slim, slim_node

    informer = Informer.__new__(Informer)  # only the page absorption, no API
    informer.resource = NODES if kind == "Node" else SERVICES
    informer.slim = _SLIMS[slim](default_slim, slim_node)
    cache: dict[str, Any] = {}
    for page in pages:
        informer._absorb_page(json.loads(page), cache)
    return cache


def ours_from_watch(lines: list[str], kind: str, slim: str) -> dict[str, Any]:
    from polyccm.kube.informer import default_slim, object_key, slim_node

    slim_function = _SLIMS[slim](default_slim, slim_node)
    cache: dict[str, Any] = {}
    for line in lines:
        obj = slim_function(json.loads(line)["object"])
        cache[object_key(obj)] = obj
    return cache


def official_from_list(pages: list[str], kind: str, slim: str) -> dict[str, Any]:
    from kubernetes import client

    api_client = client.ApiClient()
    cache: dict[str, Any] = {}
    for page in pages:
        # What CoreV1Api.list_node() does with the response body.
        result = api_client.deserialize(page, f"V1{kind}List", "application/json")
        for item in result.items:
            key = item.metadata.name
            if item.metadata.namespace:
                key = f"{item.metadata.namespace}/{key}"
            cache[key] = item
    return cache


def official_from_watch(lines: list[str], kind: str, slim: str) -> dict[str, Any]:
    from kubernetes import watch

    stream = watch.Watch()
    cache: dict[str, Any] = {}
    for line in lines:
        # What Watch.stream() does per line before SharedInformer caches event["object"].
        event = stream.unmarshal_event(line, f"V1{kind}")
        item = event["object"]
        key = item.metadata.name
        if item.metadata.namespace:
            key = f"{item.metadata.namespace}/{key}"
        cache[key] = item
    return cache


_SLIMS: dict[str, Callable[[Any, Any], Callable[[Any], Any]]] = {
    "none": lambda default, node: lambda obj: obj,
    "default": lambda default, node: default,
    "node": lambda default, node: node,
}

SCENARIOS: dict[str, tuple[Callable[[list[str], str, str], dict[str, Any]], str, str]] = {
    "polyccm list, no slim": (ours_from_list, "list", "none"),
    "polyccm list, default slim": (ours_from_list, "list", "default"),
    "polyccm list, slim_node": (ours_from_list, "list", "node"),
    "polyccm watch, default slim": (ours_from_watch, "watch", "default"),
    "polyccm watch, slim_node": (ours_from_watch, "watch", "node"),
    "official list (V1 models)": (official_from_list, "list", "none"),
    "official watch (V1 models)": (official_from_watch, "watch", "none"),
}


# -- measuring ----------------------------------------------------------------------------------


def run_one(scenario: str, kind: str, count: int, measure: str) -> dict[str, float]:
    build, arrival, slim = SCENARIOS[scenario]
    if kind == "Service" and slim == "node":
        slim = "default"
    inputs = list_pages(kind, count) if arrival == "list" else watch_lines(kind, count)
    input_bytes = sum(len(text) for text in inputs)
    # Import and warm up outside the measurement (models, pydantic validators).
    build(list_pages(kind, 2) if arrival == "list" else watch_lines(kind, 2), kind, slim)
    gc.collect()
    if measure == "memory":
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        cache = build(inputs, kind, slim)
        del inputs
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - base
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        assert len(cache) == count
        return {"retained": retained, "peak": peak, "input": input_bytes}
    timings = {}
    for label, collect in (("seconds", True), ("seconds_nogc", False)):
        best = float("inf")
        for _ in range(3):
            gc.collect()
            if not collect:
                gc.disable()
            started = time.perf_counter()
            cache = build(inputs, kind, slim)
            best = min(best, time.perf_counter() - started)
            gc.enable()
            assert len(cache) == count
            del cache
        timings[label] = best
    return {**timings, "input": input_bytes}


# -- against a real API server ------------------------------------------------------------------

BENCH_LABEL = "polyccm-bench"


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def ensure_nodes(kubeconfig: str, count: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from polyccm.kube.api import NODES, ApiError, KubeApi

    api = KubeApi.from_kubeconfig(kubeconfig, qps=0)
    have, query = 0, {"labelSelector": f"{BENCH_LABEL}=1", "limit": 500}
    while True:
        page = api.list(NODES, **query)
        have += len(page["items"])
        if not page["metadata"].get("continue"):
            break
        query["continue"] = page["metadata"]["continue"]
    if have >= count:
        return

    def create(i: int) -> None:
        node = make_node(i)
        node["metadata"] = {
            key: value
            for key, value in node["metadata"].items()
            if key not in ("uid", "resourceVersion", "creationTimestamp", "managedFields")
        }
        node["metadata"]["labels"][BENCH_LABEL] = "1"
        try:
            api.create(NODES, node)  # a kubelet registers its node with its status
        except ApiError as error:
            if not error.conflict:
                raise

    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(count)))
    print(f"created {count} nodes in {time.perf_counter() - started:.1f}s")


def delete_nodes(kubeconfig: str) -> None:
    from polyccm.kube.api import KubeApi

    api = KubeApi.from_kubeconfig(kubeconfig, qps=0)
    api.request("DELETE", "/api/v1/nodes", query={"labelSelector": f"{BENCH_LABEL}=1"})


def sync_one(kubeconfig: str, which: str, count: int) -> dict[str, float]:
    """Start one informer on the bench nodes; time to a full cache and RSS gained."""
    # Both clients are imported before measuring, for a fair baseline.
    import kubernetes.client
    import kubernetes.config
    import kubernetes.informer
    from polyccm.kube.api import NODES, KubeApi
    from polyccm.kube.informer import Informer, default_slim, slim_node

    gc.collect()
    rss = _rss_bytes()
    started = time.perf_counter()
    if which == "official":
        kubernetes.config.load_kube_config(config_file=kubeconfig)
        official = kubernetes.informer.SharedInformer(
            kubernetes.client.CoreV1Api().list_node, label_selector=f"{BENCH_LABEL}=1"
        )
        official.start()
        while len(official.cache.list_keys()) < count:
            time.sleep(0.005)
        seconds = time.perf_counter() - started
        cache_size = len(official.cache.list_keys())
    else:
        informer = Informer(
            KubeApi.from_kubeconfig(kubeconfig, qps=0),
            NODES,
            label_selector=f"{BENCH_LABEL}=1",
            slim=slim_node if which == "polyccm slim_node" else default_slim,
        )
        informer.start()
        informer.wait_for_sync(600)
        seconds = time.perf_counter() - started
        cache_size = len(informer)
    gc.collect()
    assert cache_size >= count, cache_size
    return {"seconds": seconds, "rss": _rss_bytes() - rss}


def against_apiserver(kubeconfig: str, count: int, cleanup: bool) -> None:
    ensure_nodes(kubeconfig, count)
    print(f"\n{count} Nodes from a real kube-apiserver (list in pages, then watch)")
    print(f"{'informer':32} {'sync s':>7} {'RSS gained MiB':>15}")
    for which in ("polyccm default slim", "polyccm slim_node", "official"):
        output = subprocess.run(
            [sys.executable, __file__, "--sync-one", kubeconfig, which, str(count)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        result = json.loads(output.strip().splitlines()[-1])
        print(f"{which:32} {result['seconds']:7.2f} {result['rss'] / 2**20:15.1f}")
    if cleanup:
        delete_nodes(kubeconfig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--services", type=int, default=5000)
    parser.add_argument(
        "--one", nargs=4, metavar=("SCENARIO", "KIND", "COUNT", "MEASURE"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--apiserver",
        metavar="KUBECONFIG",
        help="measure informers against this API server instead",
    )
    parser.add_argument(
        "--cleanup", action="store_true", help="with --apiserver: delete the bench nodes afterwards"
    )
    parser.add_argument("--sync-one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sync_one:
        kubeconfig, which, count = args.sync_one
        print(json.dumps(sync_one(kubeconfig, which, int(count))), flush=True)
        # The informers' daemon threads sit in socket reads; interpreter shutdown under them
        # can abort. The measurement is printed: leave at once.
        os._exit(0)
    if args.apiserver:
        against_apiserver(args.apiserver, args.nodes, args.cleanup)
        return
    if args.one:
        scenario, kind, count, measure = args.one
        print(json.dumps(run_one(scenario, kind, int(count), measure)))
        return

    import kubernetes

    print(
        f"Python {platform.python_version()}, kubernetes {kubernetes.__version__}, "
        f"{platform.machine()}"
    )
    for kind, count in (("Node", args.nodes), ("Service", args.services)):
        print(f"\n{count} {kind}s")
        print(
            f"{'scenario':32} {'retained MiB':>12} {'peak MiB':>9} {'KiB/obj':>8} "
            f"{'parse s':>8} {'us/obj':>7} {'no-GC s':>8}"
        )
        for scenario in SCENARIOS:
            if kind == "Service" and "slim_node" in scenario:
                continue
            results = {}
            for measure in ("memory", "time"):
                output = subprocess.run(
                    [sys.executable, __file__, "--one", scenario, kind, str(count), measure],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                results.update(json.loads(output))
            print(
                f"{scenario:32} {results['retained'] / 2**20:12.1f} "
                f"{results['peak'] / 2**20:9.1f} {results['retained'] / count / 1024:8.2f} "
                f"{results['seconds']:8.2f} {results['seconds'] / count * 1e6:7.0f} "
                f"{results['seconds_nogc']:8.2f}"
            )
        print(
            f"(JSON as received: {results['input'] / 2**20:.1f} MiB, "
            f"{results['input'] / count / 1024:.2f} KiB per object)"
        )


if __name__ == "__main__":
    main()
