"""Test support for GCE: run the emulator, and make VMs through its API as a user would.

* :func:`emulator_thread` serves the emulator in this process (fast: for unit tests);
  :func:`emulator_process` runs it as ``polyccm-dev up --cloud gce`` does.
* :class:`ComputeApi` is a plain-HTTP client of the compute API (standard library only) with
  helpers that create, stop, start and delete instances and wait for their operations.
* :func:`sdk_client` builds a google-cloud-compute client aimed at the emulator, with its
  operation polling aimed there too (the SDK's own polling clients ignore a custom endpoint).

Nothing here talks to anything but the loopback emulator it is given.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from polyccm_gce_emulator.control import EmulatorControl
from polyccm_gce_emulator.settings import EmulatorSettings

PROJECT = EmulatorSettings().project
ZONE = "us-central1-a"
REGION = "us-central1"
#: Any bearer token passes the emulator; the metadata server hands out others.
TEST_TOKEN = "polyccm-test-token"

#: Settings for tests: operations that take tens of milliseconds, not seconds.
FAST = EmulatorSettings(
    pending_seconds=0.01,
    running_seconds=0.03,
    route_running_seconds=0.05,
    route_inserts_per_second=1000.0,
    route_insert_burst=1000,
)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningEmulator:
    """An emulator that answers on ``endpoint`` (``http://127.0.0.1:PORT``)."""

    endpoint: str
    env: Mapping[str, str] = field(default_factory=dict)
    """The variables ``polyccm-dev`` exports for it (only for :func:`emulator_process`)."""
    app: Any = None
    """The :class:`~polyccm_gce_emulator.app.ComputeEmulator` (only in-process)."""

    @property
    def control(self) -> EmulatorControl:
        return EmulatorControl(self.endpoint)

    def api(self, project: str = PROJECT) -> ComputeApi:
        return ComputeApi(self.endpoint, project)


@contextmanager
def emulator_thread(settings: EmulatorSettings | None = None) -> Iterator[RunningEmulator]:
    """The emulator served from a thread of this process on a free loopback port."""
    import copy

    from werkzeug.serving import make_server

    from polyccm_gce_emulator.app import ComputeEmulator

    app = ComputeEmulator(copy.deepcopy(settings or FAST))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.05},
        name="gce-emulator",
        daemon=True,
    )
    thread.start()
    try:
        yield RunningEmulator(f"http://127.0.0.1:{server.server_port}", app=app)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def emulator_process(state_dir: Path) -> Iterator[RunningEmulator]:
    """The emulator as the plugin launches it for ``polyccm-dev up --cloud gce``."""
    from polyccm_gce_emulator.plugin import emulator_launch

    port = free_port()
    launch = emulator_launch(port, state_dir)
    log_path = state_dir / "gce-emulator.log"
    endpoint = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        process = subprocess.Popen(list(launch.argv), stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(endpoint + launch.health_path, timeout=2):
                        break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"GCE emulator did not start; see {log_path}") from None
                    time.sleep(0.1)
            for name, content in launch.files.items():  # as polyccm-dev writes them
                (state_dir / name).write_text(content)
            yield RunningEmulator(endpoint, env=dict(launch.env))
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class ComputeApiError(Exception):
    """An error answer of the API: HTTP ``status`` and Google's error ``body``."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        error = body.get("error", {}) if isinstance(body, dict) else {}
        reasons = [item.get("reason") for item in error.get("errors", [])]
        self.reason = reasons[0] if reasons else None
        super().__init__(f"{status} {self.reason}: {error.get('message', body)}")


class OperationError(Exception):
    """An operation ended DONE with ``error`` set."""

    def __init__(self, operation: dict[str, Any]) -> None:
        self.operation = operation
        self.codes = [item.get("code") for item in operation["error"].get("errors", [])]
        super().__init__(f"operation {operation['name']} failed: {operation['error']}")


class ComputeApi:
    """A plain-HTTP client of the emulated compute v1 API for one project."""

    def __init__(self, endpoint: str, project: str = PROJECT, token: str = TEST_TOKEN) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.project = project
        self.token = token

    @property
    def base(self) -> str:
        return f"{self.endpoint}/compute/v1/projects/{self.project}/"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """Call ``path`` (below ``projects/<project>/``, or a full URL); the decoded answer, or
        :class:`ComputeApiError`."""
        url = path if path.startswith("http") else self.base + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        request = urllib.request.Request(
            url,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            payload = error.read()
            try:
                decoded = json.loads(payload)
            except ValueError:
                decoded = {"raw": payload.decode("utf-8", "replace")}
            raise ComputeApiError(error.code, decoded) from None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None)

    def list_all(self, path: str, **params: Any) -> list[dict[str, Any]]:
        """Every item of a list, following nextPageToken."""
        items: list[dict[str, Any]] = []
        while True:
            page = self.get(path, **params)
            items += page.get("items", [])
            if not page.get("nextPageToken"):
                return items
            params["pageToken"] = page["nextPageToken"]

    def wait(self, operation: dict[str, Any], *, check: bool = True) -> dict[str, Any]:
        """``operations.wait`` until DONE; :class:`OperationError` if it failed (``check``)."""
        while operation["status"] != "DONE":
            operation = self.request("POST", operation["selfLink"] + "/wait")
        if check and operation.get("error"):
            raise OperationError(operation)
        return operation

    def do(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """A mutation, waited for."""
        return self.wait(self.request(method, path, body))

    def create_instance(
        self,
        name: str,
        *,
        zone: str = ZONE,
        machine_type: str = "e2-medium",
        external_ip: bool = True,
        labels: Mapping[str, str] | None = None,
        tags: list[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        can_ip_forward: bool = True,
        network: str | None = None,
        subnetwork: str | None = None,
        ipv6: str = "",
        alias_ip_ranges: Sequence[Mapping[str, str]] = (),
    ) -> dict[str, Any]:
        """``instances.insert``, waited for; the instance as ``get`` shows it (RUNNING).
        ``ipv6`` (``INTERNAL`` or ``EXTERNAL``, the subnetwork's IPv6 access type) makes its
        interface dual-stack.
        ``alias_ip_ranges`` are the interface's ``aliasIpRanges`` (VPC-native pod ranges)."""
        nic: dict[str, Any] = {}
        if network:
            nic["network"] = network
        if subnetwork:
            nic["subnetwork"] = subnetwork
        if ipv6:
            nic["stackType"] = "IPV4_IPV6"
        if ipv6 == "EXTERNAL":
            nic["ipv6AccessConfigs"] = [{"type": "DIRECT_IPV6", "name": "external-ipv6"}]
        if alias_ip_ranges:
            nic["aliasIpRanges"] = [dict(alias) for alias in alias_ip_ranges]
        if external_ip:
            nic["accessConfigs"] = [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]
        body: dict[str, Any] = {
            "name": name,
            "machineType": f"zones/{zone}/machineTypes/{machine_type}",
            "networkInterfaces": [nic],
            "disks": [
                {
                    "boot": True,
                    "autoDelete": True,
                    "initializeParams": {
                        "sourceImage": "projects/debian-cloud/global/images/debian-12"
                    },
                }
            ],
            "canIpForward": can_ip_forward,
        }
        if labels:
            body["labels"] = dict(labels)
        if tags:
            body["tags"] = {"items": list(tags)}
        if metadata:
            body["metadata"] = {"items": [{"key": k, "value": v} for k, v in metadata.items()]}
        self.do("POST", f"zones/{zone}/instances", body)
        instance: dict[str, Any] = self.get(f"zones/{zone}/instances/{name}")
        return instance

    def delete_instance(self, name: str, *, zone: str = ZONE) -> None:
        self.do("DELETE", f"zones/{zone}/instances/{name}")

    def stop_instance(self, name: str, *, zone: str = ZONE) -> None:
        self.do("POST", f"zones/{zone}/instances/{name}/stop")

    def start_instance(self, name: str, *, zone: str = ZONE) -> None:
        self.do("POST", f"zones/{zone}/instances/{name}/start")


_Client = TypeVar("_Client")


def sdk_client(client_class: type[_Client], endpoint: str, credentials: Any = None) -> _Client:
    """A google-cloud-compute client (``compute_v1.InstancesClient``...) for the emulator at
    ``endpoint``, over REST, whose ExtendedOperation polling reaches the emulator as well.

    The SDK builds its polling clients (zone, region, global operations) lazily with default
    options, which would send ``operation.result()`` to compute.googleapis.com; they are built
    here with the same endpoint and credentials instead. ``credentials`` defaults to a fixed
    bearer token. It is the provider's own :func:`polyccm_gce.api.compute_client`, so its
    requests are counted by :mod:`polyccm.cloudcalls` too.
    """
    from google.oauth2.credentials import Credentials
    from polyccm_gce.api import compute_client

    if credentials is None:
        credentials = Credentials(token=TEST_TOKEN)  # type: ignore[no-untyped-call]
    return compute_client(client_class, endpoint, credentials)


#: The cluster name the provider tests and the conformance kit use.
CLUSTER = "polyccm-test"
#: Method ids (last segment) that read: everything else the emulator counts writes.
_READS = ("get", "list", "aggregatedList", "listInstances", "wait")


def gce_provider(
    endpoint: str,
    *,
    cluster_name: str = CLUSTER,
    zone: str = ZONE,
    node_tags: tuple[str, ...] = (),
    route_inserts_per_second: float = 1000.0,
    network_project_id: str = "",
    stack_type: str = "",
) -> Any:
    """A :class:`~polyccm_gce.provider.GceProvider` on the emulator at ``endpoint``, configured
    as gce.conf would configure it (project, network ``default``, ``local-zone``), with a fixed
    bearer token and short retry pauses."""
    from google.oauth2.credentials import Credentials
    from polyccm_gce.api import GceApi
    from polyccm_gce.config import CloudConfig
    from polyccm_gce.provider import GceProvider

    config = CloudConfig(
        project_id=PROJECT,
        network_name="default",
        local_zone=zone,
        node_tags=node_tags,
        network_project_id=network_project_id,
        api_endpoint=f"{endpoint}/compute/v1/",
        stack_type=stack_type,
    )
    credentials = Credentials(token=TEST_TOKEN)  # type: ignore[no-untyped-call]
    api = GceApi(PROJECT, config.endpoint, credentials, backoff=0.02)
    return GceProvider(
        config,
        api=api,
        local_zone=zone,
        cluster_name=cluster_name,
        route_inserts_per_second=route_inserts_per_second,
        route_insert_burst=int(route_inserts_per_second),
    )


def operator_config(emulator: RunningEmulator, directory: Path) -> Path:
    """The gce.conf (in ``directory``) with which ``polyccm plan|orphans --provider gce``
    reaches ``emulator``: its project, network, ``api-endpoint`` and ``local-zone``."""
    from polyccm_gce_emulator.devconfig import dev_config

    config = directory / "gce.conf"
    config.write_text(
        dev_config(int(emulator.endpoint.rsplit(":", 1)[1])) + f"local-zone = {ZONE}\n"
    )
    return config


def write_calls(calls: Mapping[str, int]) -> int:
    """Mutating calls in an emulator call count (``compute.routes.insert``...)."""
    return sum(n for method, n in calls.items() if method.rsplit(".", 1)[-1] not in _READS)


class GceCloudUnderTest:
    """The GCE provider on the emulator, for :mod:`polyccm_testing.conformance`: instances
    made with ``instances.insert`` (the node name is the instance name, as on GCE), and every
    load-balancer resource read back through the API."""

    cluster_name = CLUSTER

    def __init__(self, emulator: RunningEmulator) -> None:
        self.emulator = emulator
        self.compute = emulator.api()
        self.provider = gce_provider(emulator.endpoint)

    def create_instance(self, name: str) -> str:
        self.compute.create_instance(name, tags=[name])  # a tag prefixing its name
        return name

    def delete_instance(self, name: str) -> None:
        self.compute.delete_instance(name)

    def stop_instance(self, name: str) -> None:
        self.compute.stop_instance(name)

    def load_balancer_resources(self) -> frozenset[str]:
        """Forwarding rules, target pools with their health checks, firewalls with their
        rules, HTTP health checks and addresses."""
        found: set[str] = set()
        for rule in self.compute.list_all(f"regions/{REGION}/forwardingRules"):
            found.add(f"forwardingRule:{rule['name']}:{rule.get('portRange')}")
        for pool in self.compute.list_all(f"regions/{REGION}/targetPools"):
            found.add(f"targetPool:{pool['name']}")
            found.update(
                f"targetPool:{pool['name']}:check:{c}" for c in pool.get("healthChecks", ())
            )
        for firewall in self.compute.list_all("global/firewalls"):
            found.add(f"firewall:{firewall['name']}:{firewall.get('sourceRanges')}")
            found.update(
                f"firewall:{firewall['name']}:{a.get('IPProtocol')}:{a.get('ports')}"
                for a in firewall.get("allowed", ())
            )
        for check in self.compute.list_all("global/httpHealthChecks"):
            found.add(f"httpHealthCheck:{check['name']}:{check.get('port')}")
        for address in self.compute.list_all(f"regions/{REGION}/addresses"):
            found.add(f"address:{address['name']}")
        return frozenset(found)

    def write_calls(self) -> int:
        return write_calls(self.emulator.control.calls())

    def delete_load_balancer_out_of_band(self, service: Any) -> None:
        """Delete the forwarding rule, as from the console; the pool and the rest stay."""
        name = self.provider.load_balancer().get_load_balancer_name(CLUSTER, service)
        self.compute.do("DELETE", f"regions/{REGION}/forwardingRules/{name}")

    def backends(self, service: Any) -> frozenset[str]:
        """Instance names in the service's target pool."""
        name = self.provider.load_balancer().get_load_balancer_name(CLUSTER, service)
        try:
            pool = self.compute.get(f"regions/{REGION}/targetPools/{name}")
        except ComputeApiError as error:
            if error.status == 404:
                return frozenset()
            raise
        return frozenset(url.rsplit("/", 1)[-1] for url in pool.get("instances", ()))


class GceFaultCloudUnderTest(GceCloudUnderTest):
    """The fault-conformance adapter (a ``FaultCloudUnderTest``): ``polyccm --provider gce``
    on the emulator (its gce.conf and the variables ``polyccm-dev`` exports), every kind of
    resource the provider makes (forwarding rules, target pools, firewalls, HTTP and other
    health checks, addresses, instance groups, backend services), and write faults answered
    400 ``invalid`` as GCE refuses a request."""

    held_until_deleted = frozenset({"address"})
    """The static address ``<lb>`` an interrupted edit leaves stays until the Service is
    deleted, as upstream's does (see the provider's tests/test_faults.py)."""

    def launch(self, workdir: Path) -> Any:
        import os
        import sys

        from polyccm_testing.conformance.faults import Launch

        from polyccm_gce_emulator.devconfig import launch_environment

        port = int(self.emulator.endpoint.rsplit(":", 1)[1])
        config = operator_config(self.emulator, workdir)
        (workdir / "gcloud").mkdir(exist_ok=True)
        env = {**os.environ, **launch_environment(port, workdir)}
        env["POLYCCM_GCE_CLOUD_CONFIG"] = str(config)
        return Launch(
            argv=(
                sys.executable,
                "-m",
                "polyccm.cli",
                "--provider=gce",
                f"--cloud-config={config}",
                f"--cluster-name={CLUSTER}",
            ),
            env=env,
            warm_imports=("google.auth", "google.cloud.compute_v1"),  # imported lazily
        )

    def cluster_resources(self) -> frozenset[str]:
        found = set(self.load_balancer_resources())
        for group in self.compute.list_all(f"zones/{ZONE}/instanceGroups"):
            found.add(f"instanceGroup:{group['name']}")
        for backend in self.compute.list_all(f"regions/{REGION}/backendServices"):
            found.add(f"backendService:{backend['name']}")
        for check in self.compute.list_all("global/healthChecks"):
            found.add(f"healthCheck:{check['name']}")
        return frozenset(found)

    def load_balancers_per_service(self) -> Mapping[str, int]:
        from collections import Counter

        counts: Counter[str] = Counter()
        for rule in self.compute.list_all(f"regions/{REGION}/forwardingRules"):
            try:
                owner = json.loads(rule.get("description") or "{}")
            except ValueError:
                owner = {}
            counts[str(owner.get("kubernetes.io/service-name", rule["name"]))] += 1
        return counts

    def fail_write(self, after: int) -> None:
        self.emulator.control.inject(
            "*", status=400, reason="invalid", after=after, writes_only=True
        )

    def clear_faults(self) -> None:
        self.emulator.control.clear_faults()

    def calls_by_process(self) -> list[tuple[float, str, str]]:
        """The calls whose ``x-goog-api-client`` (the SDK's ``client_info``) or User-Agent
        named a ``polyccm`` process, from the emulator's call log."""
        return self.emulator.control.calls_by_caller()

    def throttle(self, seconds: float) -> None:
        """Every call answered 403 ``rateLimitExceeded``, as GCE's per-project API rate
        limits answer, until ``clear_faults`` (the kit calls it when the stretch of
        ``seconds`` is over)."""
        del seconds
        self.emulator.control.inject(
            "*",
            count=0,
            status=403,
            reason="rateLimitExceeded",
            message="Rate Limit Exceeded",
        )

    def all_calls(self) -> int:
        return sum(self.emulator.control.calls().values())


def node_for(
    name: str, *, zone: str = ZONE, uid: str = "", pod_cidr: str = "", provider_id: bool = True
) -> Any:
    """A :class:`~polyccm.objects.Node` as the route and service controllers hand it over:
    registered for instance ``name`` (with its providerID unless ``provider_id`` is false)."""
    import uuid

    from polyccm.objects import Node

    spec: dict[str, Any] = {}
    if provider_id:
        spec["providerID"] = f"gce://{PROJECT}/{zone}/{name}"
    if pod_cidr:
        spec["podCIDR"] = pod_cidr
        spec["podCIDRs"] = [pod_cidr]
    return Node(
        {
            "metadata": {"name": name, "uid": uid or str(uuid.uuid4())},
            "spec": spec,
            "status": {},
        }
    )


def service_for(
    name: str = "web",
    *,
    namespace: str = "default",
    ports: tuple[tuple[int, str], ...] = ((80, "TCP"),),
    annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> Any:
    """A ``type: LoadBalancer`` :class:`~polyccm.objects.Service` (extra ``spec`` fields by
    their API names: ``loadBalancerIP``, ``externalTrafficPolicy``...)."""
    import uuid

    from polyccm.objects import Service

    return Service(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "annotations": dict(annotations or {}),
            },
            "spec": {
                "type": "LoadBalancer",
                "ports": [
                    {"name": f"p{port}", "port": port, "protocol": protocol, "nodePort": 30000 + i}
                    for i, (port, protocol) in enumerate(ports)
                ],
                **spec,
            },
        }
    )
