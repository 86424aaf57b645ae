"""The cluster's id in each Elastic IP's ``cluster=`` tag: the ``kube-system`` namespace's UID.

Upstream's CCM tags every reservation ``cluster=<UID of kube-system>`` (it reads the namespace
when its load balancer starts), so two clusters in one project never take or release each
other's addresses, and a cluster that switches CCM keeps its own. polyccm reads the same UID:
once per leadership term in :meth:`~polyccm_packet.provider.MetalProvider.initialize` (the
term's API), and, for the operator commands that run no term (``polyccm plan``, ``orphans``),
once through the command's own kubeconfig. ``METAL_CLUSTER_ID`` (or ``clusterID`` in the
cloud config), polyccm's own setting, replaces the UID when set.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from polyccm.errors import ConfigError
from polyccm.kube.api import NAMESPACES, ApiError, KubeApi, load_configuration

SYSTEM_NAMESPACE = "kube-system"


def system_namespace_uid(api: KubeApi) -> str:
    """The UID of the ``kube-system`` namespace; :class:`ConfigError` when it cannot be read
    (upstream stops too: its tags would be wrong)."""
    try:
        found = api.get(NAMESPACES, SYSTEM_NAMESPACE)
    except ApiError as error:
        raise ConfigError(
            f"cannot read namespace {SYSTEM_NAMESPACE}, whose UID tags the Elastic IPs "
            f"(set METAL_CLUSTER_ID to name another id): {error}"
        ) from None
    uid = str(found.get("metadata", {}).get("uid") or "")
    if not uid:
        raise ConfigError(f"namespace {SYSTEM_NAMESPACE} has no UID")
    return uid


def uid_from_kubeconfig(kubeconfig: str | None, master: str | None) -> str:
    """:func:`system_namespace_uid` through a connection of its own (``--kubeconfig``,
    ``--master``), for the operator commands."""
    api = KubeApi(load_configuration(kubeconfig, master), user_agent="polyccm-packet")
    try:
        return system_namespace_uid(api)
    finally:
        api.close()


class ClusterId:
    """``METAL_CLUSTER_ID`` when set, else the UID a term (or ``source``) read."""

    def __init__(self, override: str = "", source: Callable[[], str] | None = None) -> None:
        self.override = override
        self._source = source
        self._uid = ""
        self._lock = threading.Lock()

    def learn(self, api: KubeApi) -> None:
        """Read the UID through a term's API (nothing to read with an override)."""
        if not self.override:
            uid = system_namespace_uid(api)
            with self._lock:
                self._uid = uid

    def __call__(self) -> str:
        if self.override:
            return self.override
        with self._lock:
            if not self._uid and self._source is not None:
                self._uid = self._source()
            if not self._uid:
                raise ConfigError(
                    f"the cluster id (the UID of namespace {SYSTEM_NAMESPACE}) is not known yet"
                )
            return self._uid
