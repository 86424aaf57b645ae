"""The emulator's plugin: registered for polyccm-dev, launched on loopback, importing no moto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from polyccm import plugins
from polyccm_aws_emulator.plugin import emulator_launch


def test_registers_the_aws_emulator() -> None:
    assert "aws" in plugins.installed_emulators(plugins.plugin_manager())


def test_emulator_launch_serves_moto_on_loopback(tmp_path: Path) -> None:
    launch = emulator_launch(45678, tmp_path)

    assert list(launch.argv) == [sys.executable, "-m", "polyccm_aws_emulator", "--port", "45678"]
    assert launch.env == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:45678",
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:45678/",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def test_a_polyccm_command_loads_the_emulator_plugin_without_moto() -> None:
    # Every installed plugin is imported for every command: the emulator's must stay light.
    script = (
        "import sys\n"
        "from polyccm.cli import main\n"
        "try:\n"
        "    main(['--provider', 'aws', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('moto' in sys.modules, 'werkzeug' in sys.modules,"
        " 'polyccm_aws_emulator.plugin' in sys.modules)\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )

    assert result.stdout.strip().splitlines()[-1] == "False False True"
