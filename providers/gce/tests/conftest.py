"""Fixtures of the GCE provider's tests: an in-process emulator and its API client; for the
operator commands' tests, the environment and gce.conf of a ``polyccm`` run on the emulator,
and the cluster id ConfigMap."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.oauth2.credentials import Credentials
from polyccm.kube.api import CONFIGMAPS, ApiError, KubeApi
from polyccm_gce import provider as provider_module
from polyccm_gce_emulator.testing import (
    TEST_TOKEN,
    ComputeApi,
    RunningEmulator,
    emulator_thread,
    operator_config,
)


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    """A fresh in-process emulator with fast operations."""
    with emulator_thread() as running:
        yield running


@pytest.fixture
def api(emulator: RunningEmulator) -> ComputeApi:
    return emulator.api()


@pytest.fixture
def gce_conf(emulator: RunningEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """gce.conf for ``polyccm ... --provider gce`` run in this process against ``emulator``;
    the provider's application-default credentials are a fixed token (google-auth reads the
    metadata server's address once per process, so it cannot follow one emulator per test)."""
    credentials: Any = Credentials(token=TEST_TOKEN)  # type: ignore[no-untyped-call]
    monkeypatch.setattr(
        provider_module, "application_default_credentials", lambda: (credentials, None)
    )
    return operator_config(emulator, tmp_path)


@pytest.fixture
def cluster_id(kube_api: KubeApi) -> Iterator[str]:
    """The cluster id in ConfigMap ``kube-system/ingress-uid`` (made for the test when the
    session has none yet, and removed after it)."""
    try:
        found = kube_api.get(CONFIGMAPS, "ingress-uid", "kube-system")
    except ApiError as error:
        if not error.not_found:
            raise
    else:
        yield str(found["data"]["uid"])
        return
    made = "0ddba11c0ffee123"
    kube_api.create(
        CONFIGMAPS,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "ingress-uid", "namespace": "kube-system"},
            "data": {"uid": made, "provider-uid": made},
        },
        "kube-system",
    )
    try:
        yield made
    finally:
        kube_api.delete(CONFIGMAPS, "ingress-uid", "kube-system")
