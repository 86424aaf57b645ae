"""The hook that registers the ``gce`` emulator for ``polyccm-dev up --cloud gce`` and the
tests, and how it is launched.

Imported for every polyccm command where this distribution is installed, so it imports no web
framework: the launch runs the emulator in a process of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from polyccm.hookspecs import hookimpl
from polyccm.plugins import EmulatorLaunch, EmulatorRegistry

PROVIDER = "gce"


def emulator_launch(port: int, state_dir: Path) -> EmulatorLaunch:
    """The compute API and metadata emulator on ``127.0.0.1:port``, and the variables that
    point google-auth and google-cloud-compute at it (see
    :func:`polyccm_gce_emulator.devconfig.launch_environment`).

    polyccm-dev writes ``DIR/gce.conf`` (project-id, network-name, api-endpoint) beside the
    ``env`` file, and removes it on ``down``.
    """
    from polyccm_gce_emulator.devconfig import CONFIG_FILE, dev_config, launch_environment

    env = launch_environment(port, state_dir)
    Path(env["CLOUDSDK_CONFIG"]).mkdir(parents=True, exist_ok=True)
    return EmulatorLaunch(
        argv=[sys.executable, "-m", "polyccm_gce_emulator", "--port", str(port)],
        env=env,
        health_path="/_polyccm/health",
        files={CONFIG_FILE: dev_config(port)},
    )


@hookimpl
def polyccm_register_emulators(registry: EmulatorRegistry) -> None:
    """Register the ``gce`` emulator for ``polyccm-dev up --cloud gce``."""
    registry.register(PROVIDER, emulator_launch)
