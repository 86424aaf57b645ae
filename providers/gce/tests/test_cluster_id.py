"""The cluster id read from ConfigMap ``kube-system/ingress-uid`` as cloud-provider-gcp reads it
(gce_clusterid.go@v36.3.8), seen where a user sees it: the shared health check's name."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from polyccm.errors import ConfigError
from polyccm.kube.api import CONFIGMAPS, ApiError, KubeApi
from polyccm_gce_emulator.testing import ComputeApi, RunningEmulator, gce_provider, node_for
from polyccm_gce_emulator.testing import service_for as gce_service

NAMESPACE, NAME = "kube-system", "ingress-uid"


class _NoNodes:
    """A node cache that never calls back (the test hands the nodes over itself)."""

    def add_handler(self, **_handlers: Any) -> None:
        return None


def _context(api: KubeApi) -> Any:
    return SimpleNamespace(
        api=api, nodes=_NoNodes(), services=None, recorder=None, stop=threading.Event()
    )


@pytest.fixture
def config_map(kube_api: KubeApi) -> Iterator[Any]:
    """Writes ``kube-system/ingress-uid`` with the data given; what was there is put back."""
    try:
        before = kube_api.get(CONFIGMAPS, NAME, NAMESPACE)
    except ApiError as error:
        if not error.not_found:
            raise
        before = None

    def write(data: dict[str, str]) -> None:
        try:
            kube_api.delete(CONFIGMAPS, NAME, NAMESPACE)
        except ApiError as error:
            if not error.not_found:
                raise
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": NAME, "namespace": NAMESPACE}, "data": data}  # fmt: skip
        kube_api.create(CONFIGMAPS, body, NAMESPACE)

    yield write
    try:
        kube_api.delete(CONFIGMAPS, NAME, NAMESPACE)
    except ApiError as error:
        if not error.not_found:
            raise
    if before is not None:
        write(dict(before.get("data") or {}))


def test_the_provider_uid_names_the_shared_health_check(
    emulator: RunningEmulator, api: ComputeApi, kube_api: KubeApi, config_map: Any
) -> None:
    # gce_clusterid.go:126-144@v36.3.8 GetID: provider-uid when set, else uid. Before: polyccm
    # read uid and made a second shared check k8s-<uid>-node beside upstream's.
    config_map({"uid": "0000aaaa1111bbbb", "provider-uid": "2222cccc3333dddd"})
    provider = gce_provider(emulator.endpoint)
    provider.initialize(_context(kube_api))
    api.create_instance("cid-a", tags=["cid"])

    provider.load_balancer().ensure_load_balancer("c", gce_service(), [node_for("cid-a")])

    checks = {item["name"] for item in api.list_all("global/httpHealthChecks")}
    assert checks == {"k8s-2222cccc3333dddd-node"}


def test_a_config_map_without_an_id_is_an_error_not_a_new_id_at_each_start(
    emulator: RunningEmulator, kube_api: KubeApi, config_map: Any
) -> None:
    # gce_clusterid.go:131-134@v36.3.8: no uid in the ConfigMap, no id ("Could not retrieve
    # cluster id"); upstream never rewrites it. Before: polyccm used a random id per start, so
    # each restart named (and made) another shared health check.
    config_map({"other": "x"})
    provider = gce_provider(emulator.endpoint)

    with pytest.raises(ConfigError, match="neither provider-uid nor uid"):
        provider.initialize(_context(kube_api))

    assert kube_api.get(CONFIGMAPS, NAME, NAMESPACE)["data"] == {"other": "x"}
