"""The hook that registers the ``packet`` emulator for ``polyccm-dev up --cloud packet`` and the
tests, and how it is launched.

Imported for every polyccm command where this distribution is installed, so it imports nothing
of the emulator: the launch runs it in a process of its own.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

from polyccm.hookspecs import hookimpl
from polyccm.plugins import EmulatorLaunch, EmulatorRegistry

PROVIDER = "packet"
#: The API key the emulator launched by polyccm-dev accepts (and the only one): fake.
EMULATOR_API_KEY = "polyccm-emulator-fake-metal-api-key"
#: The Metal API's base URL (``https://api.equinix.com/metal/v1`` on Equinix Metal), which
#: polyccm reads. Upstream's CCM has that URL compiled in: its config's ``base-url`` is parsed
#: and never read (config.go), so it reaches an emulator only through an HTTPS proxy.
API_URL_VARIABLE = "METAL_API_URL"
#: The device metadata service (``https://metadata.platformequinix.com`` on Metal, formerly
#: ``https://metadata.packet.net``): ``GET $METAL_METADATA_URL/metadata``.
METADATA_URL_VARIABLE = "METAL_METADATA_URL"
#: The metro the launched environment names (Dallas).
EMULATOR_METRO = "da"
#: The upstream-style JSON config (``--cloud-config``) written beside ``DIR/env``.
CLOUD_CONFIG_FILE = "metal-cloud-config.json"


def emulator_launch(
    port: int, state_dir: Path, *, extra_args: tuple[str, ...] = ()
) -> EmulatorLaunch:
    """The emulator on ``http://127.0.0.1:port`` serving a project made for this launch, and
    the variables that reach it: ``METAL_API_URL`` (the API's base URL, ``.../metal/v1``),
    ``METAL_API_KEY`` (and ``PACKET_AUTH_TOKEN``, the older name), ``METAL_PROJECT_ID``,
    ``METAL_METRO`` (and upstream's ``METAL_METRO_NAME``), ``METAL_METADATA_URL``,
    ``METAL_LOAD_BALANCER=empty://`` (Elastic IPs and BGP peers, no speaker: unset, load
    balancing would be off, as upstream has it); plus
    ``metal-cloud-config.json``, the same in upstream's JSON config keys (``apiKey``,
    ``projectId``, ``metro``, ``base-url``). ``extra_args`` go to the emulator's command line."""
    project_id = str(uuid.uuid4())
    base = f"http://127.0.0.1:{port}"
    api_url = f"{base}/metal/v1"
    argv = [
        sys.executable, "-m", "polyccm_packet_emulator",
        "--port", str(port),
        "--project-id", project_id,
        "--token", EMULATOR_API_KEY,
        *extra_args,
    ]  # fmt: skip
    config = {"apiKey": EMULATOR_API_KEY, "projectId": project_id,
              "metro": EMULATOR_METRO, "base-url": api_url}  # fmt: skip
    return EmulatorLaunch(
        argv=argv,
        env={
            API_URL_VARIABLE: api_url,
            "METAL_API_KEY": EMULATOR_API_KEY,
            "PACKET_AUTH_TOKEN": EMULATOR_API_KEY,
            "METAL_PROJECT_ID": project_id,
            "METAL_METRO": EMULATOR_METRO,
            "METAL_METRO_NAME": EMULATOR_METRO,
            METADATA_URL_VARIABLE: base,
            "METAL_LOAD_BALANCER": "empty://",
        },
        health_path="/_polyccm/health",
        files={CLOUD_CONFIG_FILE: json.dumps(config, indent=2) + "\n"},
    )


@hookimpl
def polyccm_register_emulators(registry: EmulatorRegistry) -> None:
    """Register the ``packet`` emulator for ``polyccm-dev up --cloud packet``."""
    registry.register(PROVIDER, emulator_launch)
