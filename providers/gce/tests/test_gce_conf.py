"""gce.conf's keys acted on as cloud-provider-gcp acts on them, the provider built as
``polyccm --provider gce`` builds it against the emulator (its API and its metadata server):
the network from the metadata server, URL forms of the network and subnetwork, a project number,
``token-url``'s token source, ``regional``, and a kube-up gce.conf with every key."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from google.oauth2.credentials import Credentials
from polyccm import plugins
from polyccm_gce import provider as provider_module
from polyccm_gce.api import GceApiError
from polyccm_gce.config import CloudConfig
from polyccm_gce.internal_lb import InternalLoadBalancer
from polyccm_gce.plugin import polyccm_build_provider
from polyccm_gce.provider import GceProvider
from polyccm_gce_emulator.metadata import TOKEN_PREFIX, numeric_project_id
from polyccm_gce_emulator.testing import (
    PROJECT,
    REGION,
    TEST_TOKEN,
    ComputeApi,
    RunningEmulator,
    node_for,
    service_for,
)

#: The access token the test's token-url answers with.
ALT_TOKEN = "alt-token-from-the-token-url-0123456789"


@pytest.fixture
def endpoint(emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> str:
    """The emulator's api-endpoint; its metadata server is the VM's, application-default
    credentials a fixed token."""
    monkeypatch.setenv("GCE_METADATA_HOST", emulator.endpoint.removeprefix("http://"))
    credentials: Any = Credentials(token=TEST_TOKEN)  # type: ignore[no-untyped-call]
    monkeypatch.setattr(
        provider_module, "application_default_credentials", lambda: (credentials, None)
    )
    return f"{emulator.endpoint}/compute/v1/"


def _vpc(api: ComputeApi, name: str = "vpc-a") -> str:
    """A custom-mode network with subnetwork ``nodes`` in the region; the subnetwork's path."""
    api.do("POST", "global/networks", {"name": name, "autoCreateSubnetworks": False})
    api.do(
        "POST",
        f"regions/{REGION}/subnetworks",
        {"name": "nodes", "network": f"global/networks/{name}", "ipCidrRange": "10.40.0.0/24"},
    )
    return f"regions/{REGION}/subnetworks/nodes"


def _host(api: ComputeApi, subnetwork: str, zone: str = "us-central1-b") -> None:
    """The VM polyccm runs on (what the emulator's metadata server answers for)."""
    api.create_instance(
        "ccm-host", zone=zone, subnetwork=subnetwork, labels={"polyccm-ccm-host": "true"}
    )


def test_without_network_name_the_network_is_the_metadata_servers_not_default(
    endpoint: str, api: ComputeApi
) -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce.go:492-504 (absent: getNetworkNameViaMetadata,
    # :1041-1051, instance/network-interfaces/0/network).
    _host(api, _vpc(api))

    built = GceProvider.discover(CloudConfig(project_id=PROJECT, api_endpoint=endpoint))

    assert built.network_url == f"{endpoint}projects/{PROJECT}/global/networks/vpc-a"
    assert built.load_balancer_impl.network_url == built.network_url


def test_network_and_subnetwork_may_be_urls(endpoint: str) -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce.go:492-514: a value holding "/" is the URL.
    config = CloudConfig(
        project_id=PROJECT,
        local_zone="us-central1-b",
        api_endpoint=endpoint,
        network_name="https://www.googleapis.com/compute/v1/projects/host-1/global/networks/shared",
        subnetwork_name="projects/host-1/regions/us-central1/subnetworks/k8s-nodes",
    )

    built = GceProvider.discover(config)

    assert built.network_url == f"{endpoint}projects/host-1/global/networks/shared"
    internal = service_for("ilb", annotations={"networking.gke.io/load-balancer-type": "Internal"})
    ilb = InternalLoadBalancer(built.load_balancer_impl)
    assert ilb.subnetwork_url(internal) == (
        f"{endpoint}projects/host-1/regions/us-central1/subnetworks/k8s-nodes"
    )


def test_a_project_number_is_turned_into_the_projects_name(endpoint: str, api: ComputeApi) -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce.go:593-594 tryConvertToProjectNames and
    # :1068-1076 getProjectID (projects.get, its name).
    api.create_instance("worker-1")
    number = numeric_project_id(PROJECT)
    config = CloudConfig(
        project_id=number, local_zone="us-central1-a", network_name="default", api_endpoint=endpoint
    )

    built = GceProvider.discover(config)

    assert built.api.project == PROJECT
    metadata = built.instances_v2().instance_metadata(node_for("worker-1", provider_id=False))
    assert metadata.provider_id == f"gce://{PROJECT}/us-central1-a/worker-1"


def test_regional_means_every_zone_of_the_region_as_multizone(endpoint: str) -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce.go:486-490: Multizone || Regional, all the
    # region's zones.
    config = CloudConfig(
        project_id=PROJECT,
        local_zone="us-central1-b",
        network_name="default",
        api_endpoint=endpoint,
    )

    regional = GceProvider.discover(CloudConfig(**{**config.__dict__, "regional": True}))

    assert set(regional.lookup.zones) == {f"{REGION}-{z}" for z in "abcf"}


class _TokenServer(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((self.path, self.headers.get("Authorization", ""), body))
        if b"refuse" in body:
            self.send_response(403)
            self.end_headers()
            return
        answer = json.dumps({"accessToken": ALT_TOKEN, "expireTime": "2099-01-01T00:00:00Z"})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def token_url() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    """A token endpoint as upstream's token-url (answers accessToken/expireTime); its URL and
    the requests it got."""
    seen: list[tuple[str, str, bytes]] = []
    handler = type("Handler", (_TokenServer,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/token", seen
    finally:
        server.shutdown()
        server.server_close()


def test_token_url_is_upstreams_token_source(
    endpoint: str, api: ComputeApi, token_url: tuple[str, list[tuple[str, str, bytes]]]
) -> None:
    # cloud-provider-gcp v36.3.8 providers/gce/gce.go:440-448 and token_source.go:84-130: each
    # token is a POST of token-body to token-url, authorised by the metadata server's token;
    # the answer's accessToken is the compute API's bearer token.
    url, seen = token_url
    api.create_instance("worker-1")
    config = CloudConfig(
        project_id=PROJECT,
        local_zone="us-central1-a",
        network_name="default",
        api_endpoint=endpoint,
        token_url=url,
        token_body='{"scope": ["https://www.googleapis.com/auth/compute"]}',
    )

    built = GceProvider.discover(config)
    assert built.instances_v2().instance_exists(node_for("worker-1")) is True

    assert built.api.credentials.token == ALT_TOKEN
    assert len(seen) == 1
    path, authorization, body = seen[0]
    assert path == "/v1/token"
    assert authorization.startswith(f"Bearer {TOKEN_PREFIX}")
    assert json.loads(body) == {"scope": ["https://www.googleapis.com/auth/compute"]}


def test_a_token_url_that_refuses_fails_the_call_in_one_line_without_the_body(
    endpoint: str, token_url: tuple[str, list[tuple[str, str, bytes]]]
) -> None:
    url, seen = token_url
    config = CloudConfig(
        project_id=PROJECT,
        local_zone="us-central1-a",
        network_name="default",
        api_endpoint=endpoint,
        token_url=url,
        token_body='{"refuse": "s3cret-body-value"}',
    )
    built = GceProvider.discover(config)

    with pytest.raises(GceApiError) as raised:
        built.instances_v2().instance_exists(node_for("worker-1"))

    assert f"token-url {url} answered 403" in str(raised.value)
    assert "s3cret" not in str(raised.value)
    assert seen


def test_a_kube_up_gce_conf_with_every_key_starts(
    endpoint: str,
    api: ComputeApi,
    token_url: tuple[str, list[tuple[str, str, bytes]]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # cloud-provider-gcp v36.3.8 cluster/gce/gci/configure-helper.sh:881-975 writes these keys
    # (each when its variable is set; no local-zone: the metadata server's zone is used).
    subnetwork = _vpc(api)
    _host(api, subnetwork, zone="us-central1-c")
    api.create_instance("kubernetes-minion-1", zone="us-central1-f", subnetwork=subnetwork)
    url, seen = token_url
    config = tmp_path / "gce.conf"
    config.write_text(
        "[global]\n"
        f"api-endpoint = {endpoint}\n"
        f"token-url = {url}\n"
        'token-body = {"scope": "compute"}\n'
        "container-api-endpoint = https://container.googleapis.com/\n"
        f"project-id = {numeric_project_id(PROJECT)}\n"
        f"network-project-id = {numeric_project_id(PROJECT)}\n"
        "stack-type = IPV4\n"
        "network-name = vpc-a\n"
        "subnetwork-name = nodes\n"
        "node-instance-prefix = kubernetes-minion\n"
        "node-tags = kubernetes-minion\n"
        "node-tags = extra\n"
        "multizone = true\n"
        "regional = true\n"
        "alpha-features = NetLB_RBS\n"
        "alpha-features = ILBCustomSubnet\n"
        "secondary-range-name = pods-default\n"
    )

    with caplog.at_level(logging.WARNING):
        built = polyccm_build_provider(plugins.ProviderSettings("gce", config, "kubernetes"))

    assert isinstance(built, GceProvider)
    assert (built.api.project, built.local_zone) == (PROJECT, "us-central1-c")
    assert built.network_url == f"{endpoint}projects/{PROJECT}/global/networks/vpc-a"
    assert set(built.lookup.zones) == {f"{REGION}-{z}" for z in "abcf"}
    metadata = built.instances_v2().instance_metadata(
        node_for("kubernetes-minion-1", provider_id=False)
    )
    assert metadata.provider_id == f"gce://{PROJECT}/us-central1-f/kubernetes-minion-1"
    assert seen, "the token came from token-url"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    keys = [m for m in warnings if "is ignored: polyccm does not implement it" in m]
    alpha = [m for m in warnings if "alpha feature in [global] is ignored" in m]
    assert len(keys) + len(alpha) == len(warnings), warnings
    assert {m.split("'")[1] for m in keys} == {"container-api-endpoint", "secondary-range-name"}
    # alpha-features is read (ILBSubsets is honoured); each other feature is one warning that
    # names its line, not its value.
    assert [m.split(":")[1] for m in alpha] == ["16", "17"]
