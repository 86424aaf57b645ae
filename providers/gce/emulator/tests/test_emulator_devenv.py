"""``polyccm-dev up --cloud gce``: the plugin's launcher starts the emulator as a process, and
the variables and gce.conf it leaves are all google-auth and a provider need to reach it."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

from polyccm_gce_emulator.devconfig import CONFIG_FILE
from polyccm_gce_emulator.metadata import TOKEN_PREFIX
from polyccm_gce_emulator.plugin import emulator_launch
from polyccm_gce_emulator.testing import emulator_process
from polyccm_testing.devenv.controlplane import resolve_emulators

# Run in a fresh interpreter: google-auth reads GCE_METADATA_HOST when it is imported.
_CLIENT = r"""
import configparser, json, sys
import google.auth
from google.auth.transport.requests import AuthorizedSession, Request

config = configparser.ConfigParser()
config.read(sys.argv[1])
endpoint = config["global"]["api-endpoint"]
project_id = config["global"]["project-id"]
credentials, project = google.auth.default()
credentials.refresh(Request())
session = AuthorizedSession(credentials)
zones = session.get(f"{endpoint}projects/{project_id}/zones").json()
print(json.dumps({
    "credentials": type(credentials).__module__,
    "project": project,
    "token": credentials.token,
    "zones": len(zones["items"]),
}))
"""


def test_polyccm_dev_finds_the_gce_emulator_through_the_plugin() -> None:
    assert resolve_emulators(["gce"]) == {"gce": emulator_launch}


def test_the_launch_environment_and_gce_conf_reach_the_emulator_with_google_auth(
    tmp_path: Path,
) -> None:
    with emulator_process(tmp_path) as running:
        config = configparser.ConfigParser()
        config.read(tmp_path / CONFIG_FILE)
        assert dict(config["global"]) == {
            "project-id": "polyccm-dev",
            "network-name": "default",
            "api-endpoint": f"{running.endpoint}/compute/v1/",
        }
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("GOOGLE_", "GCE_", "CLOUDSDK_"))
        }
        env.update(running.env)
        env["HOME"] = str(tmp_path)  # no developer's gcloud credentials
        result = subprocess.run(
            [sys.executable, "-c", _CLIENT, str(tmp_path / CONFIG_FILE)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        answer = json.loads(result.stdout)
        # Application-default credentials are the emulated VM's, from its metadata server.
        assert answer["credentials"] == "google.auth.compute_engine.credentials"
        assert answer["project"] == "polyccm-dev"
        assert answer["token"].startswith(TOKEN_PREFIX)
        assert answer["zones"] == 10
