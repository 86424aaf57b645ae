"""What ``polyccm-dev up --cloud gce`` gives the provider: the variables and the gce.conf.

:func:`launch_environment` is what the plugin's launcher exports in ``DIR/env``;
:func:`dev_config` is the ``DIR/gce.conf`` text, in upstream's format, for
``polyccm --provider gce --cloud-config DIR/gce.conf``.
"""

from __future__ import annotations

from pathlib import Path

from polyccm_gce_emulator.settings import EmulatorSettings

#: The file ``polyccm-dev`` should write beside ``env``.
CONFIG_FILE = "gce.conf"


def api_endpoint(port: int) -> str:
    """The compute API base as upstream's ``api-endpoint`` takes it (``.../compute/v1/``)."""
    return f"http://127.0.0.1:{port}/compute/v1/"


def dev_config(port: int, *, project: str | None = None, network: str | None = None) -> str:
    """The gce.conf of a provider run against the emulator on ``port``."""
    defaults = EmulatorSettings()
    return (
        "# Written for the polyccm GCE emulator on 127.0.0.1; upstream's gce.conf format.\n"
        "[global]\n"
        f"project-id = {project or defaults.project}\n"
        f"network-name = {network or defaults.network}\n"
        f"api-endpoint = {api_endpoint(port)}\n"
    )


def launch_environment(port: int, state_dir: Path) -> dict[str, str]:
    """Variables that point google-auth and google-cloud-compute at the emulator alone.

    ``GCE_METADATA_HOST`` / ``GCE_METADATA_IP`` send google-auth's metadata probe and token
    requests to the emulator (so application-default credentials are the emulated VM's);
    ``CLOUDSDK_CONFIG`` points at an empty gcloud directory so that no developer's own
    credentials are found first; ``GOOGLE_CLOUD_PROJECT`` names the project. The SDK has no
    variable for its endpoint: the provider reads ``api-endpoint`` from gce.conf (also given
    here as ``POLYCCM_GCE_API_ENDPOINT``, and to gcloud as its compute override).
    """
    defaults = EmulatorSettings()
    gcloud = state_dir / "gcloud"
    return {
        "GCE_METADATA_HOST": f"127.0.0.1:{port}",
        "GCE_METADATA_IP": f"127.0.0.1:{port}",
        "GOOGLE_CLOUD_PROJECT": defaults.project,
        "CLOUDSDK_CONFIG": str(gcloud),
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE": api_endpoint(port),
        "POLYCCM_GCE_API_ENDPOINT": f"http://127.0.0.1:{port}",
        "POLYCCM_GCE_CLOUD_CONFIG": str(state_dir / CONFIG_FILE),
    }
