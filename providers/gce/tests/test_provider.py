"""Building the provider as ``polyccm --provider gce`` does: what gce.conf leaves out comes from
the credentials and the metadata server, what cannot be found stops the start clearly, and
google-cloud-compute is loaded in the background rather than before the provider is built."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.oauth2.credentials import Credentials
from polyccm import plugins
from polyccm.errors import ConfigError
from polyccm_gce import provider as provider_module
from polyccm_gce.config import CloudConfig
from polyccm_gce.plugin import polyccm_build_provider
from polyccm_gce.provider import GceProvider
from polyccm_gce_emulator.testing import PROJECT, TEST_TOKEN, ComputeApi, RunningEmulator
from polyccm_testing.opstools import run_polyccm


@pytest.fixture
def on_the_emulators_vm(emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> str:
    """Application-default credentials and the metadata server of the emulator."""
    monkeypatch.setenv("GCE_METADATA_HOST", emulator.endpoint.removeprefix("http://"))
    credentials: Any = Credentials(token=TEST_TOKEN)  # type: ignore[no-untyped-call]
    monkeypatch.setattr(
        provider_module, "application_default_credentials", lambda: (credentials, None)
    )
    return f"{emulator.endpoint}/compute/v1/"


def test_project_and_zones_come_from_the_metadata_server(
    on_the_emulators_vm: str, api: ComputeApi
) -> None:
    api.create_instance("ccm-host", zone="us-central1-b", labels={"polyccm-ccm-host": "true"})

    built = GceProvider.discover(CloudConfig(api_endpoint=on_the_emulators_vm, multizone=True))

    assert built.api.project == PROJECT
    assert built.local_zone == "us-central1-b"
    assert built.region == "us-central1"
    assert "us-central1-a" in built.lookup.zones
    assert all(zone.startswith("us-central1-") for zone in built.lookup.zones)


def test_without_a_zone_the_start_stops_naming_local_zone(on_the_emulators_vm: str) -> None:
    config = CloudConfig(project_id=PROJECT, api_endpoint=on_the_emulators_vm)

    with pytest.raises(ConfigError, match="set local-zone"):
        GceProvider.discover(config)


def test_a_gce_conf_with_an_unknown_key_starts_with_a_warning_naming_it(
    on_the_emulators_vm: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # upstream readConfig (providers/gce/gce.go, gcfg.FatalOnly) starts with such a file:
    # see test_config for gcfg's lines.
    config = tmp_path / "gce.conf"
    config.write_text(
        f"[global]\nproject-id = {PROJECT}\nlocal-zone = us-central1-b\n"
        f"api-endpoint = {on_the_emulators_vm}\nnetwork-name = default\n"
        "node-tag = typo-of-node-tags\n"
    )

    with caplog.at_level(logging.WARNING):
        built = polyccm_build_provider(plugins.ProviderSettings("gce", config, "kubernetes"))

    assert isinstance(built, GceProvider) and built.local_zone == "us-central1-b"
    assert caplog.messages == [f"{config}:6: unknown key 'node-tag' in [global] is ignored"]


def test_a_syntax_error_in_gce_conf_ends_the_start_with_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    config = tmp_path / "gce.conf"
    config.write_text("[global]\nproject-id = p\nnode-tags: a\n")

    result = run_polyccm(["--provider=gce", f"--cloud-config={config}"])

    assert result.status == 2
    assert result.stderr == (
        f"polyccm: error: {config}:3: expected 'key = value', got 'node-tags: a'\n"
    )


def test_google_cloud_compute_loads_in_the_background_not_before_the_provider_is_built() -> None:
    code = (
        "import sys, time\n"
        "from polyccm.cli import main\n"
        "from polyccm_gce import provider, sdk\n"
        "print('imported', 'google.cloud.compute_v1' in sys.modules)\n"
        "sdk.load_in_background().join(120)\n"
        "print('loaded', 'google.cloud.compute_v1' in sys.modules)\n"
        "print('client', sdk.compute_v1.RoutesClient.__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["imported False", "loaded True", "client RoutesClient"]
