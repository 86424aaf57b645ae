"""Hook implementations that register the ``packet`` provider and its emulator with polyccm.

Imported for every polyccm command, so it imports no cloud SDK (and nothing of the emulator
until ``polyccm-dev up --cloud packet`` asks for it).
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from polyccm.hookspecs import hookimpl
from polyccm.plugins import (
    ControllerRegistry,
    EmulatorLaunch,
    EmulatorRegistry,
    ProviderRegistry,
    ProviderSettings,
)
from polyccm.rbac import PolicyRule

if TYPE_CHECKING:
    from polyccm.cloud import CloudProvider
    from polyccm.controllers import Controller, ControllerContext
    from polyccm.ops.contract import ServiceChecker

PROVIDER = "packet"
#: The API key the emulator launched by polyccm-dev accepts (and the only one): fake.
EMULATOR_API_KEY = "polyccm-emulator-fake-metal-api-key"
#: The Metal API's base URL (``https://api.equinix.com/metal/v1`` on Equinix Metal). Upstream's
#: CCM takes it only from its JSON config's ``base-url``; polyccm also reads this variable.
API_URL_VARIABLE = "METAL_API_URL"
#: The device metadata service (``https://metadata.platformequinix.com`` on Metal, formerly
#: ``https://metadata.packet.net``): ``GET $METAL_METADATA_URL/metadata``.
METADATA_URL_VARIABLE = "METAL_METADATA_URL"
#: The metro the launched environment names (Dallas).
EMULATOR_METRO = "da"
#: The upstream-style JSON config (``--cloud-config``) written beside ``DIR/env``.
CLOUD_CONFIG_FILE = "metal-cloud-config.json"


@hookimpl
def polyccm_register_providers(registry: ProviderRegistry) -> None:
    """Register the provider name ``packet``."""
    registry.register("packet", "Equinix Metal, formerly Packet (devices, elastic IPs over BGP)")


#: What ``packet-bgp`` needs beyond the core's rules: patching the nodes' peer annotations.
BGP_RBAC_RULES = (PolicyRule(("",), ("nodes",), ("get", "patch")),)


#: What ``packet-metallb`` needs: MetalLB's objects, its legacy ConfigMap and the Secret of the
#: BGP password. A ClusterRole cannot name a namespace, and ``create`` cannot name an object:
#: the ConfigMap and Secret rules are cluster-wide (bind a Role instead to narrow them).
METALLB_RBAC_RULES = (
    PolicyRule(("metallb.io",), ("ipaddresspools", "bgppeers", "bgpadvertisements"),
               ("get", "list", "create", "update", "delete")),
    PolicyRule(("",), ("configmaps",), ("get", "create", "update")),
    PolicyRule(("",), ("secrets",), ("get", "create", "update")),
)  # fmt: skip


@hookimpl
def polyccm_register_controllers(provider: str, registry: ControllerRegistry) -> None:
    """Register ``packet-bgp``: BGP on the project, a session per node and the nodes' peer
    annotations (started only in the ``metallb://`` and ``kube-vip://`` modes); and
    ``packet-metallb``: MetalLB's configuration (only in the ``metallb://`` mode)."""
    if provider != PROVIDER:
        return

    def build(context: ControllerContext) -> Controller | None:
        from polyccm_packet.bgp import BgpController  # imports the SDK: only when running

        return BgpController.for_term(context)

    registry.register("packet-bgp", build, enabled_by_default=True, rbac_rules=BGP_RBAC_RULES)

    def build_metallb(context: ControllerContext) -> Controller | None:
        from polyccm_packet.metallb import MetalLbController

        return MetalLbController.for_term(context)

    registry.register(
        "packet-metallb", build_metallb, enabled_by_default=True, rbac_rules=METALLB_RBAC_RULES
    )


@hookimpl
def polyccm_build_provider(settings: ProviderSettings) -> CloudProvider | None:
    """Build the Equinix Metal provider from ``--cloud-config`` and the ``METAL_*`` variables
    (``None`` for other providers)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_packet.provider import MetalProvider

    return MetalProvider.from_settings(settings)


@hookimpl
def polyccm_build_service_checker(settings: ProviderSettings) -> ServiceChecker | None:
    """The offline Service check of ``polyccm check-service``: from ``--cloud-config`` and the
    ``METAL_METRO``/``METAL_FACILITY`` variables, without the SDK, a key or any call."""
    if settings.provider != PROVIDER:
        return None
    import os

    from polyccm_packet.checker import MetalServiceChecker

    return MetalServiceChecker.from_settings(settings.cloud_config, os.environ)


def emulator_launch(
    port: int, state_dir: Path, *, extra_args: tuple[str, ...] = ()
) -> EmulatorLaunch:
    """The emulator on ``http://127.0.0.1:port`` serving a project made for this launch, and
    the variables that reach it: ``METAL_API_URL`` (the API's base URL, ``.../metal/v1``),
    ``METAL_API_KEY`` (and ``PACKET_AUTH_TOKEN``, the older name), ``METAL_PROJECT_ID``,
    ``METAL_METRO`` (and upstream's ``METAL_METRO_NAME``), ``METAL_METADATA_URL``; plus
    ``metal-cloud-config.json``, the same in upstream's JSON config keys (``apiKey``,
    ``projectId``, ``metro``, ``base-url``). ``extra_args`` go to the emulator's command line."""
    project_id = str(uuid.uuid4())
    base = f"http://127.0.0.1:{port}"
    api_url = f"{base}/metal/v1"
    argv = [
        sys.executable, "-m", "polyccm_packet.emulator",
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
        },
        health_path="/_polyccm/health",
        files={CLOUD_CONFIG_FILE: json.dumps(config, indent=2) + "\n"},
    )


@hookimpl
def polyccm_register_emulators(registry: EmulatorRegistry) -> None:
    """Register the ``packet`` emulator for ``polyccm-dev up --cloud packet``."""
    registry.register(PROVIDER, emulator_launch)
