"""CustomResourceDefinitions vendored for tests (see SOURCE.md beside this file: where each comes
from, its version and licence), and :func:`install`, which puts one on a control plane so that
the real kube-apiserver validates objects of its kind against its schema.

A CRD installed stays installed (a cluster-scoped object, as on a real cluster, and one that a
deletion would keep terminating for a while): installing it again is a no-op apply.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from polyccm_testing.kubeobjects import wait_for

if TYPE_CHECKING:
    from polyccm.kube.api import KubeApi

HERE = Path(__file__).parent
#: The prometheus-operator release the monitoring.coreos.com CRDs come from.
PROMETHEUS_OPERATOR = "v0.93.0"
PODMONITORS = HERE / "monitoring.coreos.com_podmonitors.yaml"
_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def definition(path: Path) -> dict[str, Any]:
    """The CRD in ``path``, as a dict."""
    (crd,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert crd["kind"] == "CustomResourceDefinition", path
    return dict(crd)


def _established(api: KubeApi, name: str) -> bool:
    status = api.request("GET", f"{_CRDS}/{name}").get("status", {})
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def install(api: KubeApi, path: Path, *, timeout: float = 30.0) -> dict[str, Any]:
    """Server-side apply the CRD in ``path`` and wait until the API server serves its kind;
    returns the CRD."""
    crd = definition(path)
    name = crd["metadata"]["name"]
    api.request(
        "PATCH",
        f"{_CRDS}/{name}",
        query={"fieldManager": "polyccm-tests", "force": True},
        body=crd,
        content_type="application/apply-patch+yaml",
    )
    wait_for(lambda: _established(api, name), timeout, f"CRD {name} Established")
    return crd
