"""The hook that registers the ``aws`` emulator for ``polyccm-dev up --cloud aws`` and the
tests, and how it is launched.

Imported for every polyccm command where this distribution is installed, so it imports neither
moto nor the emulator: the launch runs it in a process of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from polyccm.hookspecs import hookimpl
from polyccm.plugins import EmulatorLaunch, EmulatorRegistry

PROVIDER = "aws"


def emulator_launch(port: int, state_dir: Path) -> EmulatorLaunch:
    """moto's server with fault injection on ``127.0.0.1:port``, and the variables to reach it:
    the AWS APIs and the instance metadata service (which describes the instance tagged
    ``polyccm.dev/ccm-host=true``) are both served there."""
    del state_dir  # moto keeps its state in memory
    return EmulatorLaunch(
        argv=[sys.executable, "-m", "polyccm_aws_emulator", "--port", str(port)],
        env={
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{port}/",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        },
        health_path="/_polyccm/health",
    )


@hookimpl
def polyccm_register_emulators(registry: EmulatorRegistry) -> None:
    """Register the ``aws`` emulator for ``polyccm-dev up --cloud aws``."""
    registry.register(PROVIDER, emulator_launch)
