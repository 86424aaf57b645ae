"""The hook that registers the ``digitalocean`` emulator for ``polyccm-dev up --cloud
digitalocean`` and the tests, and how it is launched.

Imported for every polyccm command where this distribution is installed, so it imports nothing
of the emulator: the launch runs it in a process of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from polyccm.hookspecs import hookimpl
from polyccm.plugins import EmulatorLaunch, EmulatorRegistry

PROVIDER = "digitalocean"
#: The bearer token the emulator launched by polyccm-dev accepts (and the only one): fake, and
#: shaped like DigitalOcean's personal access tokens.
EMULATOR_TOKEN = "dop_v1_polyccm0emulator0fake0token0000000000000000000000000000000000"
#: The variable naming the CA the provider's client (:class:`~polyccm_digitalocean.api.RestClient`)
#: trusts, as requests-based clients (DigitalOcean's SDK among them) read it.
CA_BUNDLE_VARIABLE = "REQUESTS_CA_BUNDLE"


def emulator_launch(
    port: int, state_dir: Path, *, extra_args: tuple[str, ...] = ()
) -> EmulatorLaunch:
    """The emulator on ``127.0.0.1:port``, serving the API over TLS with the certificate of the
    local control plane in ``state_dir/pki`` (valid for 127.0.0.1, signed by its CA), and the
    variables that reach it: ``DO_OVERRIDE_URL`` (the override upstream's CCM honours),
    ``DO_ACCESS_TOKEN`` and ``REQUESTS_CA_BUNDLE`` (the CA file, so TLS is verified, not
    skipped). ``extra_args`` go to the emulator's command line (``--lb-active-delay 0.2``)."""
    from polyccm_testing.devenv.pki import Pki
    from polyccm_testing.devenv.state import PKI_DIR

    keys = Pki.in_directory(state_dir / PKI_DIR)
    argv = [
        sys.executable, "-m", "polyccm_digitalocean_emulator",
        "--port", str(port),
        "--tls-cert", str(keys.serving_cert),
        "--tls-key", str(keys.serving_key),
        "--token", EMULATOR_TOKEN,
        *extra_args,
    ]  # fmt: skip
    return EmulatorLaunch(
        argv=argv,
        env={
            "DO_OVERRIDE_URL": f"https://127.0.0.1:{port}",
            "DO_ACCESS_TOKEN": EMULATOR_TOKEN,
            CA_BUNDLE_VARIABLE: str(keys.ca_cert),
            # The droplet metadata service (plain http, as DigitalOcean's link-local one).
            "DO_METADATA_URL": f"http://127.0.0.1:{port}/metadata/v1/",
        },
        health_path="/_polyccm/health",
    )


@hookimpl
def polyccm_register_emulators(registry: EmulatorRegistry) -> None:
    """Register the ``digitalocean`` emulator for ``polyccm-dev up --cloud digitalocean``."""
    registry.register(PROVIDER, emulator_launch)
