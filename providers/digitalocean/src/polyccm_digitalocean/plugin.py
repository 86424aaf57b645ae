"""Hook implementations that register the ``digitalocean`` provider and its emulator with
polyccm.

Imported for every polyccm command, so it imports no cloud SDK (and nothing of the emulator
until ``polyccm-dev up --cloud digitalocean`` asks for it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from polyccm.hookspecs import hookimpl
from polyccm.plugins import EmulatorLaunch, EmulatorRegistry, ProviderRegistry, ProviderSettings

if TYPE_CHECKING:
    from polyccm.cloud import CloudProvider
    from polyccm.ops.contract import ServiceChecker

PROVIDER = "digitalocean"
#: The bearer token the emulator launched by polyccm-dev accepts (and the only one): fake, and
#: shaped like DigitalOcean's personal access tokens.
EMULATOR_TOKEN = "dop_v1_polyccm0emulator0fake0token0000000000000000000000000000000000"
#: The variable naming the CA the provider's client (:class:`~polyccm_digitalocean.api.RestClient`)
#: trusts, as requests-based clients (DigitalOcean's SDK among them) read it.
CA_BUNDLE_VARIABLE = "REQUESTS_CA_BUNDLE"


@hookimpl
def polyccm_register_providers(registry: ProviderRegistry) -> None:
    """Register the provider name ``digitalocean``."""
    registry.register(PROVIDER, "DigitalOcean (droplets and load balancers)")


@hookimpl
def polyccm_build_provider(settings: ProviderSettings) -> CloudProvider | None:
    """Build the DigitalOcean provider from the environment (``None`` for other providers)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_digitalocean.provider import DigitalOceanProvider

    return DigitalOceanProvider.from_environment()


@hookimpl
def polyccm_build_service_checker(settings: ProviderSettings) -> ServiceChecker | None:
    """The offline Service check of ``polyccm check-service`` (no token, no API needed; the
    default type from ``DEFAULT_LB_TYPE``, as the controller reads it)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_digitalocean.checker import DigitalOceanServiceChecker
    from polyccm_digitalocean.config import default_lb_type

    return DigitalOceanServiceChecker(default_lb_type(os.environ))


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
        sys.executable, "-m", "polyccm_digitalocean.emulator",
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
