"""Test support for DigitalOcean: run the emulator, and make droplets through its API.

Used by the provider's and the emulator's tests and usable by demos and cross-package tests.
Everything goes through the emulator's API as a user's would: droplets are created with ``POST
/v2/droplets`` and powered off with droplet actions, never planted in its state. Nothing here
talks to anything but the loopback emulator it is pointed at.
"""

from __future__ import annotations

import ssl
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

from polyccm_digitalocean_emulator.app import EmulatorApp
from polyccm_digitalocean_emulator.control import EmulatorControl
from polyccm_digitalocean_emulator.plugin import CA_BUNDLE_VARIABLE, emulator_launch

#: How fast things happen in a test emulator unless a test asks otherwise (seconds).
TEST_LB_ACTIVE_DELAY = 0.3


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
    with launched(launch, port, log_path, name="DigitalOcean emulator") as env:
        yield env


def control(env: Mapping[str, str]) -> EmulatorControl:
    """The control client of the emulator ``env`` reaches (over https, trusting its CA)."""
    return EmulatorControl(env["DO_OVERRIDE_URL"], ca_file=env[CA_BUNDLE_VARIABLE])


class _Requests(JsonApi):
    """What both API clients offer on top of their ``call``."""

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
        headers = {"Authorization": f"Bearer {self._token}"}
        return http_call(method, self.endpoint + path, body, headers, context=self._context)


class LocalApi(_Requests, InProcessApi):
    """The same requests answered in-process by an :class:`EmulatorApp` (no socket, no TLS
    handshake: for fast tests of the emulator itself). ``token`` and ``scheme`` may be changed
    per call to see how the API answers a missing token or plain http."""

    TOKEN = "dop_v1_local0test0token"

    def __init__(self, app: EmulatorApp) -> None:
        super().__init__(app)

    def call(
        self,
        method: str,
        path: str,
        body: object | None = None,
        *,
        token: str | None = TOKEN,
        scheme: str = "https",
    ) -> Answer:
        headers = [("Authorization", f"Bearer {token}")] if token is not None else []
        return self.local_call(
            method, path, body, base_url=f"{scheme}://127.0.0.1:8443", headers=headers
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


def upstream_load_balancer(
    api: JsonApi,
    name: str,
    droplet_ids: Sequence[int],
    node_ports: Mapping[int, int],
    *,
    protocol: str = "tcp",
    **fields: Any,
) -> dict[str, Any]:
    """Create, through the API, the load balancer upstream's CCM makes for a Service whose ports
    map to ``node_ports`` (its rules' targets): its request as ``buildLoadBalancerRequest``
    words it, with kube-proxy's health check and upstream's health-check defaults. REGIONAL
    (releases before v0.1.61, or ``DEFAULT_LB_TYPE=REGIONAL``: targets are node ports) unless
    ``type="REGIONAL_NETWORK"`` (the current default: targets are the service ports); no
    annotations beyond ``protocol`` and ``fields``. The health check's ``proxy_protocol: false``
    is godo's (buildHealthCheck, loadbalancers.go:1001@v0.1.68). Left out: the ``k8s:<cluster
    id>`` tag."""
    body: dict[str, Any] = {
        "name": name,
        "region": TEST_REGION,
        "droplet_ids": list(droplet_ids),
        "forwarding_rules": [
            {"entry_protocol": protocol, "entry_port": port, "target_protocol": protocol,
             "target_port": node_port}
            for port, node_port in node_ports.items()
        ],
        "health_check": {"protocol": "http", "port": 10256, "path": "/healthz",
                         "proxy_protocol": False, "check_interval_seconds": 3,
                         "response_timeout_seconds": 5, "unhealthy_threshold": 3,
                         "healthy_threshold": 5},
        "sticky_sessions": {"type": "none"},
        "algorithm": "round_robin",
        "redirect_http_to_https": False,
        "enable_proxy_protocol": False,
        "enable_backend_keepalive": False,
        "disable_lets_encrypt_dns_records": False,
        "firewall": {"allow": [], "deny": []},
        "type": "REGIONAL",
        "network": "EXTERNAL",
        "network_stack": "IPV4",
        **fields,
    }  # fmt: skip
    balancer: dict[str, Any] = api.ok("POST", "/v2/load_balancers", body)["load_balancer"]
    return balancer


class DigitalOceanFaultCloudUnderTest(DigitalOceanCloudUnderTest):
    """The fault-conformance adapter (a ``FaultCloudUnderTest``): ``polyccm --provider
    digitalocean`` on the emulator, the cluster's load balancers (with their rules) and
    firewalls, and write faults answered 422 as DigitalOcean refuses a request."""

    poll_interval = 1.0
    """Looks for doubled load balancers spend DigitalOcean's 250 requests a minute too."""
    leader_environment = {
        "PUBLIC_ACCESS_FIREWALL_NAME": "k8s-public-access-lead",
        "PUBLIC_ACCESS_FIREWALL_TAGS": "k8s-lead",
        "DO_CLUSTER_ID": "lead-cluster",
    }
    """The leader test runs the provider's own controllers that write to DigitalOcean too: the
    public-access firewall and the cluster tags (``firewall``, ``cluster-tags``)."""

    def launch(self, workdir: Path) -> Any:
        import os
        import sys

        from polyccm_testing.conformance.faults import Launch

        del workdir
        return Launch(
            argv=(sys.executable, "-m", "polyccm.cli", "--provider=digitalocean"),
            env={**os.environ, "REGION": TEST_REGION, **self.env},
        )

    def cluster_resources(self) -> frozenset[str]:
        firewalls = self.api.ok("GET", "/v2/firewalls?per_page=200").get("firewalls", [])
        return self.load_balancer_resources() | {f"firewall:{f['name']}" for f in firewalls}

    def load_balancers_per_service(self) -> Mapping[str, int]:
        from collections import Counter

        return Counter(str(b["name"]) for b in self.load_balancers())

    def fail_write(self, after: int) -> None:
        self.control.inject("*", status=422, after=after, writes_only=True)

    def clear_faults(self) -> None:
        self.control.clear_faults()
        self.control.configure(throttled_until=0.0)

    def calls_by_process(self) -> list[tuple[float, str, str]]:
        """The calls whose User-Agent (pydo's ``user_agent``) named a ``polyccm`` process,
        from the emulator's call log."""
        return self.control.calls_by_caller()

    def throttle(self, seconds: float) -> None:
        """Every call answered 429 with ``ratelimit-remaining: 0`` and ``ratelimit-reset`` at
        the stretch's end, as DigitalOcean answers once a token's budget is spent."""
        self.control.configure(throttled_until=time.time() + seconds)

    def all_calls(self) -> int:
        return sum(self.control.calls().values())
