"""Test support for DigitalOcean: run the emulator, and make droplets through its API.

Used by this package's tests and usable by demos and cross-package tests (install the
``emulator`` extra). Everything goes through the emulator's API as a user's would: droplets are
created with ``POST /v2/droplets`` and powered off with droplet actions, never planted in its
state. Nothing here talks to anything but the loopback emulator it is pointed at.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyccm_digitalocean.emulator.app import EmulatorApp
from polyccm_digitalocean.emulator.control import EmulatorControl
from polyccm_digitalocean.plugin import CA_BUNDLE_VARIABLE, emulator_launch

#: How fast things happen in a test emulator unless a test asks otherwise (seconds).
TEST_LB_ACTIVE_DELAY = 0.3


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_pki(state_dir: Path) -> None:
    """A CA and a serving certificate for 127.0.0.1 in ``state_dir/pki``, as the local control
    plane has them (made here when no control plane made them)."""
    from polyccm_testing.devenv.pki import Pki, generate
    from polyccm_testing.devenv.state import PKI_DIR

    keys = Pki.in_directory(state_dir / PKI_DIR)
    if not (keys.ca_cert.exists() and keys.serving_cert.exists() and keys.serving_key.exists()):
        generate(state_dir / PKI_DIR)


@contextmanager
def running_emulator(
    state_dir: Path, *, lb_active_delay: float = TEST_LB_ACTIVE_DELAY, args: Sequence[str] = ()
) -> Iterator[Mapping[str, str]]:
    """Run the emulator as the plugin registers it (TLS, the fake token), checking every answer
    against the OpenAPI document; yield the environment that reaches it (``DO_OVERRIDE_URL``,
    ``DO_ACCESS_TOKEN``, ``REQUESTS_CA_BUNDLE``)."""
    ensure_pki(state_dir)
    port = free_port()
    extra = ("--lb-active-delay", str(lb_active_delay), "--validate-responses", *args)
    launch = emulator_launch(port, state_dir, extra_args=extra)
    log_path = state_dir / "digitalocean-emulator.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(list(launch.argv), stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(f"http://127.0.0.1:{port}{launch.health_path}", process, log_path)
            yield dict(launch.env)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"DigitalOcean emulator did not start; see {log_path}") from None
            time.sleep(0.1)


def control(env: Mapping[str, str]) -> EmulatorControl:
    """The control client of the emulator ``env`` reaches (over https, trusting its CA)."""
    return EmulatorControl(env["DO_OVERRIDE_URL"], ca_file=env[CA_BUNDLE_VARIABLE])


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: Any


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, answer: Answer) -> None:
        super().__init__(f"{method} {path}: HTTP {answer.status} {answer.body}")
        self.answer = answer


class _Requests:
    """What both API clients offer on top of their ``call``."""

    def call(self, method: str, path: str, body: object | None = None) -> Answer:
        raise NotImplementedError

    def ok(self, method: str, path: str, body: object | None = None) -> Any:
        """The body of a successful request; :class:`ApiError` otherwise."""
        answer = self.call(method, path, body)
        if answer.status >= 400:
            raise ApiError(method, path, answer)
        return answer.body

    def create_droplets(
        self,
        count: int,
        *,
        prefix: str = "node",
        region: str = "nyc3",
        size: str = "s-1vcpu-1gb",
        image: str = "ubuntu-24-04-x64",
        tags: Sequence[str] = (),
        **extra: Any,
    ) -> list[dict[str, Any]]:
        """``count`` droplets named ``prefix-0``, ``prefix-1``, ... (ten per request, the API's
        maximum), as created (status ``new``)."""
        names = [f"{prefix}-{index}" for index in range(count)]
        created: list[dict[str, Any]] = []
        for start in range(0, count, 10):
            body = {"names": names[start : start + 10], "region": region, "size": size,
                    "image": image, "tags": list(tags), **extra}  # fmt: skip
            created.extend(self.ok("POST", "/v2/droplets", body)["droplets"])
        return created

    def droplet(self, droplet_id: int) -> dict[str, Any]:
        droplet: dict[str, Any] = self.ok("GET", f"/v2/droplets/{droplet_id}")["droplet"]
        return droplet

    def action(self, droplet_id: int, kind: str) -> dict[str, Any]:
        """Start a droplet action (``power_off``, ``power_on``, ``shutdown``, ``reboot``)."""
        body = self.ok("POST", f"/v2/droplets/{droplet_id}/actions", {"type": kind})
        action: dict[str, Any] = body["action"]
        return action

    def wait_for_status(
        self, path: str, key: str, status: str, *, timeout: float = 10.0
    ) -> dict[str, Any]:
        """Poll ``GET path`` until ``body[key]["status"] == status``; return ``body[key]``."""
        deadline = time.monotonic() + timeout
        while True:
            item: dict[str, Any] = self.ok("GET", path)[key]
            if item["status"] == status or time.monotonic() > deadline:
                if item["status"] != status:
                    raise TimeoutError(f"{path} still {item['status']} after {timeout} s")
                return item
            time.sleep(0.05)

    def delete_droplet(self, droplet_id: int) -> None:
        self.ok("DELETE", f"/v2/droplets/{droplet_id}")


class DigitalOceanApi(_Requests):
    """A minimal client of the DigitalOcean API (the emulator's, or any with the same paths),
    for setting up tests: plain JSON over https with a bearer token, nothing hidden."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.endpoint = env["DO_OVERRIDE_URL"].rstrip("/")
        self._token = env["DO_ACCESS_TOKEN"]
        self._context = ssl.create_default_context(cafile=env.get(CA_BUNDLE_VARIABLE))

    def call(self, method: str, path: str, body: object | None = None) -> Answer:
        """One request; any status comes back as an :class:`Answer`."""
        request = urllib.request.Request(
            self.endpoint + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self._token}",
                     "Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30, context=self._context) as response:
                raw, status, headers = response.read(), response.status, response.headers
        except urllib.error.HTTPError as error:
            raw, status, headers = error.read(), error.code, error.headers
        parsed = json.loads(raw) if raw else None
        return Answer(status, {k.lower(): v for k, v in headers.items()}, parsed)


class LocalApi(_Requests):
    """The same requests answered in-process by an :class:`EmulatorApp` (no socket, no TLS
    handshake: for fast tests of the emulator itself). ``token`` and ``scheme`` may be changed
    per call to see how the API answers a missing token or plain http."""

    TOKEN = "dop_v1_local0test0token"

    def __init__(self, app: EmulatorApp) -> None:
        from werkzeug.test import Client

        self.app = app
        self.client = Client(app)
        self.last: Any = None
        """The last werkzeug test response."""
        self.sent: Any = None
        """The last request, as a werkzeug request whose body can still be read."""

    def call(
        self,
        method: str,
        path: str,
        body: object | None = None,
        *,
        token: str | None = TOKEN,
        scheme: str = "https",
    ) -> Answer:
        from werkzeug.test import EnvironBuilder
        from werkzeug.wrappers import Request

        headers = [("Authorization", f"Bearer {token}")] if token is not None else []

        def build() -> EnvironBuilder:
            return EnvironBuilder(
                path,
                method=method,
                base_url=f"{scheme}://127.0.0.1:8443",
                headers=headers,
                data=None if body is None else json.dumps(body),
                content_type="application/json" if body is not None else None,
            )

        self.sent = Request(build().get_environ())
        response = self.client.open(build())
        raw = response.get_data()
        self.last = response
        return Answer(
            response.status_code,
            {k.lower(): v for k, v in response.headers.items()},
            json.loads(raw) if raw else None,
        )


# -- the provider on the emulator ------------------------------------------------------------

#: The region test droplets and load balancers live in.
TEST_REGION = "nyc3"


def provider_for(env: Mapping[str, str], **overrides: str) -> Any:
    """The provider built from ``env`` (the emulator's variables) as ``polyccm`` builds it from
    the process environment, with ``REGION`` set (``overrides`` win)."""
    from polyccm_digitalocean.provider import DigitalOceanProvider

    return DigitalOceanProvider.from_environment({"REGION": TEST_REGION, **env, **overrides})


#: operationIds of the emulator that only read.
_READ_OPERATIONS = ("_get", "_list")


class DigitalOceanCloudUnderTest:
    """The DigitalOcean provider on the emulator, for :mod:`polyccm_testing.conformance` (a
    ``CloudUnderTest``): droplets made with ``POST /v2/droplets`` and powered off with droplet
    actions, load balancers and their forwarding rules read back through the API.

    ``env`` must point this process at a reset emulator (its CA in ``REQUESTS_CA_BUNDLE``)."""

    cluster_name = "kubernetes"

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.api = DigitalOceanApi(env)
        self.control = control(env)
        self.provider = provider_for(env)
        self._ids: dict[str, int] = {}

    def create_instance(self, name: str) -> str:
        (droplet,) = self.api.create_droplets(1, prefix=name, region=TEST_REGION)
        self._ids[droplet["name"]] = int(droplet["id"])
        return str(droplet["name"])

    def delete_instance(self, name: str) -> None:
        self.api.delete_droplet(self._ids[name])

    def stop_instance(self, name: str) -> None:
        droplet_id = self._ids[name]
        self.api.action(droplet_id, "power_off")
        self.api.wait_for_status(f"/v2/droplets/{droplet_id}", "droplet", "off")

    def load_balancers(self) -> list[dict[str, Any]]:
        balancers: list[dict[str, Any]] = self.api.ok("GET", "/v2/load_balancers?per_page=200")[
            "load_balancers"
        ]
        return balancers

    def load_balancer_resources(self) -> frozenset[str]:
        """Each load balancer and each of its forwarding rules."""
        found: set[str] = set()
        for balancer in self.load_balancers():
            found.add(f"lb:{balancer['name']}")
            for rule in balancer["forwarding_rules"]:
                found.add(
                    f"lb:{balancer['name']}:{rule['entry_protocol']}:{rule['entry_port']}"
                    f"->{rule['target_protocol']}:{rule['target_port']}"
                )
        return frozenset(found)

    def write_calls(self) -> int:
        return sum(
            count
            for operation, count in self.control.calls().items()
            if not operation.endswith(_READ_OPERATIONS)
        )

    def _balancer(self, service: Any) -> dict[str, Any] | None:
        name = self.provider.load_balancer().get_load_balancer_name(self.cluster_name, service)
        wanted = service.annotations.get("service.beta.kubernetes.io/do-loadbalancer-name", name)
        for balancer in self.load_balancers():
            if balancer["name"] == wanted:
                return balancer
        return None

    def delete_load_balancer_out_of_band(self, service: Any) -> None:
        balancer = self._balancer(service)
        if balancer is not None:
            self.api.ok("DELETE", f"/v2/load_balancers/{balancer['id']}")

    def backends(self, service: Any) -> frozenset[str]:
        """Droplet ids behind the service's load balancer."""
        balancer = self._balancer(service)
        return frozenset(str(i) for i in (balancer or {}).get("droplet_ids", ()))
