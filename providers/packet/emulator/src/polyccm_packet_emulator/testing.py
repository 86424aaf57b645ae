"""Test support for Equinix Metal: run the emulator, and make devices through its API.

Used by the provider's and the emulator's tests and usable by demos and cross-package tests.
Everything goes through the emulator's API as a user's would: devices are created with ``POST
/projects/{id}/devices`` and powered off with device actions, never planted in its state.
Nothing here talks to anything but the loopback emulator it is pointed at.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from polyccm_testing.emulation.testing import (
    Answer,
    ApiError,  # noqa: F401 (kept importable from here)
    InProcessApi,
    JsonApi,
    free_port,
    http_call,
    launched,
)

from polyccm_packet_emulator.app import EmulatorApp
from polyccm_packet_emulator.control import EmulatorControl
from polyccm_packet_emulator.plugin import API_URL_VARIABLE, emulator_launch


@contextmanager
def running_emulator(state_dir: Path, *, args: Sequence[str] = ()) -> Iterator[Mapping[str, str]]:
    """Run the emulator as the plugin registers it (the fake key, a fresh project), checking
    every answer against the OpenAPI document; yield the environment that reaches it
    (``METAL_API_URL``, ``METAL_API_KEY``, ``METAL_PROJECT_ID``, ``METAL_METRO``, ...)."""
    port = free_port()
    launch = emulator_launch(port, state_dir, extra_args=("--validate-responses", *args))
    log_path = state_dir / "packet-emulator.log"
    with launched(launch, port, log_path, name="Metal emulator") as env:
        yield env


def control(env: Mapping[str, str]) -> EmulatorControl:
    """The control client of the emulator ``env`` reaches."""
    return EmulatorControl(env[API_URL_VARIABLE])


class _Requests(JsonApi):
    """What both API clients offer on top of their ``call``; paths are relative to the API's
    base URL (``/devices/{id}``, not ``/metal/v1/devices/{id}``)."""

    project_id: str

    def create_devices(
        self,
        count: int,
        *,
        prefix: str = "node",
        metro: str = "da",
        plan: str = "c3.small.x86",
        operating_system: str = "ubuntu_24_04",
        tags: Sequence[str] = (),
        **extra: Any,
    ) -> list[dict[str, Any]]:
        """``count`` devices named ``prefix-0``, ``prefix-1``, ..., as created (``queued``)."""
        created = []
        for index in range(count):
            body = {"hostname": f"{prefix}-{index}", "metro": metro, "plan": plan,
                    "operating_system": operating_system, "tags": list(tags), **extra}  # fmt: skip
            created.append(self.ok("POST", f"/projects/{self.project_id}/devices", body))
        return created

    def device(self, device_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.ok("GET", f"/devices/{device_id}")
        return found

    def action(self, device_id: str, kind: str) -> None:
        """Start a device action (``power_off``, ``power_on``, ``reboot``)."""
        self.ok("POST", f"/devices/{device_id}/actions", {"type": kind})

    def request_ip(self, *, metro: str = "da", tags: Sequence[str] = (), quantity: int = 1) -> Any:
        """Reserve ``quantity`` public IPv4 addresses (an Elastic IP block) in ``metro``."""
        body = {"type": "public_ipv4", "quantity": quantity, "metro": metro, "tags": list(tags)}
        return self.ok("POST", f"/projects/{self.project_id}/ips", body)

    def enable_bgp(self, asn: int = 65000, md5: str | None = None) -> None:
        body: dict[str, Any] = {"asn": asn, "deployment_type": "local"}
        if md5 is not None:
            body["md5"] = md5
        self.ok("POST", f"/projects/{self.project_id}/bgp-configs", body)


class MetalApi(_Requests):
    """A minimal client of the Metal API (the emulator's, or any with the same paths), for
    setting up tests: plain JSON with an ``X-Auth-Token``, nothing hidden."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.endpoint = env[API_URL_VARIABLE].rstrip("/")
        self.project_id = env["METAL_PROJECT_ID"]
        self._token = env["METAL_API_KEY"]

    def call(self, method: str, path: str, body: object | None = None) -> Answer:
        """One request; any status comes back as an :class:`Answer`."""
        return http_call(method, self.endpoint + path, body, {"X-Auth-Token": self._token})


class LocalApi(_Requests, InProcessApi):
    """The same requests answered in-process by an :class:`EmulatorApp` (no socket: for fast
    tests of the emulator itself). ``token`` may be changed per call."""

    TOKEN = "local-test-token"

    def __init__(self, app: EmulatorApp) -> None:
        super().__init__(app)
        self.project_id = app.backend.project_id

    def call(
        self,
        method: str,
        path: str,
        body: object | None = None,
        *,
        token: str | None = TOKEN,
        headers: Mapping[str, str] | None = None,
        base: str = "/metal/v1",
    ) -> Answer:
        sent = [("X-Auth-Token", token)] if token is not None else []
        sent += list((headers or {}).items())
        return self.local_call(
            method, base + path, body, base_url="http://127.0.0.1:8080", headers=sent
        )


#: Operations that change nothing (the rest are counted as writes by the conformance adapter).
_READ_PREFIXES = ("find", "get", "metadata")


def provider_for(env: Mapping[str, str], **overrides: str) -> Any:
    """The provider built from ``env`` (plus ``overrides``) as ``polyccm --provider packet``
    builds it from its environment; its cluster id is ``kubernetes`` unless ``overrides`` name
    one (with no term, nothing reads the ``kube-system`` UID)."""
    from polyccm_packet.provider import MetalProvider

    return MetalProvider.from_environment({"METAL_CLUSTER_ID": "kubernetes", **env, **overrides})


class MetalCloudUnderTest:
    """The Equinix Metal provider on the emulator, for :mod:`polyccm_testing.conformance` (a
    ``CloudUnderTest``): devices made with ``POST /projects/{id}/devices`` and powered off with
    device actions; the load-balancer resources are the project's Elastic IPs the provider
    tags (``usage=cloud-provider-equinix-metal-auto``). ``env`` points at a reset emulator."""

    cluster_name = "kubernetes"

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.api = MetalApi(env)
        self.control = control(env)
        self.provider = provider_for(env)
        self._ids: dict[str, str] = {}

    def create_instance(self, name: str) -> str:
        (device,) = self.api.create_devices(1, prefix=name)
        self._ids[device["hostname"]] = str(device["id"])
        return str(device["hostname"])

    def delete_instance(self, name: str) -> None:
        self.api.ok("DELETE", f"/devices/{self._ids[name]}")

    def stop_instance(self, name: str) -> None:
        device_id = self._ids[name]
        self.api.action(device_id, "power_off")
        deadline = time.monotonic() + 10
        while self.api.device(device_id)["state"] != "inactive":
            if time.monotonic() > deadline:
                raise TimeoutError(f"device {device_id} did not power off")
            time.sleep(0.05)

    def elastic_ips(self) -> list[dict[str, Any]]:
        """The project's reservations tagged by the provider."""
        found = self.api.ok("GET", f"/projects/{self.api.project_id}/ips?types=public_ipv4")
        return [
            ip
            for ip in found["ip_addresses"]
            if "usage=cloud-provider-equinix-metal-auto" in (ip.get("tags") or ())
        ]

    def load_balancer_resources(self) -> frozenset[str]:
        return frozenset(f"eip:{ip['address']}/{ip['cidr']}:{sorted(ip['tags'])}"
                         for ip in self.elastic_ips())  # fmt: skip

    def write_calls(self) -> int:
        return sum(
            count
            for operation, count in self.control.calls().items()
            if not operation.startswith(_READ_PREFIXES)
        )

    def delete_load_balancer_out_of_band(self, service: Any) -> None:
        from polyccm_packet.load_balancer import service_tag

        for ip in self.elastic_ips():
            if service_tag(service) in ip["tags"]:
                self.api.ok("DELETE", f"/ips/{ip['id']}")

    def backends(self, service: Any) -> frozenset[str]:
        """An Elastic IP has no backends in the cloud: every node's BGP speaker announces it."""
        return frozenset()


class MetalFaultCloudUnderTest(MetalCloudUnderTest):
    """The fault-conformance adapter (a ``FaultCloudUnderTest``): ``polyccm --provider
    packet`` on the emulator, the provider's Elastic IPs, and write faults answered 422 as the
    Metal API refuses a request."""

    def launch(self, workdir: Path) -> Any:
        import os
        import sys

        from polyccm_testing.conformance.faults import Launch

        del workdir
        return Launch(
            argv=(sys.executable, "-m", "polyccm.cli", "--provider=packet"),
            env={**os.environ, "METAL_CLUSTER_ID": self.cluster_name, **self.env},
            warm_imports=("urllib3", "equinix.services.metalv1"),  # the SDK, imported lazily
        )

    def cluster_resources(self) -> frozenset[str]:
        return frozenset(f"eip:{ip['id']}" for ip in self.elastic_ips())

    def load_balancers_per_service(self) -> Mapping[str, int]:
        from collections import Counter

        counts: Counter[str] = Counter()
        for ip in self.elastic_ips():
            for tag in ip.get("tags") or ():
                if tag.startswith("service="):
                    counts[tag] += 1
        return counts

    def fail_write(self, after: int) -> None:
        self.control.inject("*", status=422, after=after, writes_only=True)

    def clear_faults(self) -> None:
        self.control.clear_faults()

    def calls_by_process(self) -> list[tuple[float, str, str]]:
        """The calls whose User-Agent (the SDK's ``user_agent``) named a ``polyccm`` process,
        from the emulator's call log."""
        return self.control.calls_by_caller()

    def throttle(self, seconds: float) -> None:
        """Every call answered 429 with ``Retry-After: 1`` and ``X-RateLimit-*`` (the
        emulator's 429), until ``clear_faults`` (the kit calls it when the stretch of
        ``seconds`` is over)."""
        del seconds
        self.control.inject("*", status=429, count=THROTTLED_CALLS)

    def all_calls(self) -> int:
        return sum(self.control.calls().values())


THROTTLED_CALLS = 1_000_000
"""Calls a throttling stretch's fault answers (more than any stretch makes)."""
