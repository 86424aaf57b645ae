"""Hook implementations that register the ``packet`` provider and its controllers with polyccm
(its emulator registers itself from ``polyccm-packet-emulator``).

Imported for every polyccm command, so it imports no cloud SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from polyccm.hookspecs import hookimpl
from polyccm.plugins import ControllerRegistry, ProviderRegistry, ProviderSettings
from polyccm.rbac import PolicyRule

if TYPE_CHECKING:
    from polyccm.cloud import CloudProvider
    from polyccm.controllers import Controller, ControllerContext
    from polyccm.ops.contract import ServiceChecker

PROVIDER = "packet"


@hookimpl
def polyccm_register_providers(registry: ProviderRegistry) -> None:
    """Register the provider name ``packet``."""
    registry.register(PROVIDER, "Equinix Metal, formerly Packet (devices, elastic IPs over BGP)")


#: What ``packet-bgp`` needs beyond the core's rules: patching the nodes' peer annotations; and
#: what the provider needs in every term (there are no provider-wide rules, and BGP runs
#: whenever Elastic IPs do): reading namespace kube-system, whose UID tags the Elastic IPs.
BGP_RBAC_RULES = (
    PolicyRule(("",), ("nodes",), ("get", "patch")),
    PolicyRule(("",), ("namespaces",), ("get",)),
)


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
    annotations (in the ``metallb://``, ``kube-vip://`` and ``empty://`` modes);
    ``packet-metallb``: MetalLB's configuration (only in the ``metallb://`` mode); and
    ``packet-control-plane``: the control plane's Elastic IP (only with ``eipTag``)."""
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

    def build_control_plane(context: ControllerContext) -> Controller | None:
        from polyccm_packet.control_plane import ControlPlaneEndpoint

        return ControlPlaneEndpoint.for_term(context)

    registry.register(
        "packet-control-plane", build_control_plane, enabled_by_default=True,
        rbac_rules=CONTROL_PLANE_RBAC_RULES,
    )  # fmt: skip


#: What ``packet-control-plane`` needs: the external Service (and its status) and its
#: EndpointSlice, applied server-side, and ``default/kubernetes``'s EndpointSlice watched.
CONTROL_PLANE_RBAC_RULES = (
    PolicyRule(("",), ("services",), ("create", "patch")),
    PolicyRule(("",), ("services/status",), ("patch",)),
    PolicyRule(("discovery.k8s.io",), ("endpointslices",),
               ("get", "list", "watch", "create", "patch")),
)  # fmt: skip


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
    """The offline Service check of ``polyccm check-service`` (no SDK, no key, no call)."""
    if settings.provider != PROVIDER:
        return None
    from polyccm_packet.checker import MetalServiceChecker

    return MetalServiceChecker.from_settings(settings)
