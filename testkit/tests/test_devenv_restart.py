"""The development environment can take its API server down and bring it back as a real control
plane's upgrade would: same etcd, port and certificates, so clients reconnect on their own and
the data is all there. Restarts the session's API server, which is healthy again after."""

from __future__ import annotations

from typing import Any

import pytest
import urllib3
from polyccm.kube.api import CONFIGMAPS, NO_RETRIES, KubeApi


def pids(plane: Any) -> dict[str, int]:
    return {item.name: item.pid for item in plane.status() if item.alive}


def test_the_api_server_comes_back_on_the_same_port_with_its_data(
    control_plane: Any, kube_api: KubeApi, namespace: str
) -> None:
    kube_api.create(
        CONFIGMAPS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept"}, "data": {"a": "1"}},
        namespace,
    )
    before = pids(control_plane)
    impatient = control_plane.kube_api(qps=0.0, retry=NO_RETRIES)
    with (
        control_plane.apiserver_stopped(),
        pytest.raises(urllib3.exceptions.NewConnectionError),
    ):
        impatient.get(CONFIGMAPS, "kept", namespace)
    after = pids(control_plane)
    assert after["etcd"] == before["etcd"], "etcd kept running"
    assert after["kube-apiserver"] != before["kube-apiserver"], "a new API server process"
    # The clients made before the restart work again, at the same URL, with the same CA.
    assert impatient.get(CONFIGMAPS, "kept", namespace)["data"] == {"a": "1"}
    assert kube_api.get(CONFIGMAPS, "kept", namespace)["data"] == {"a": "1"}
    impatient.close()
