"""cloud-provider-gcp's L4 load-balancer gauges (providers/gce/gce_loadbalancer_metrics.go:37-60
@v36.3.8), set as polyccm ensures and deletes load balancers on the emulator, read from the
registry ``/metrics`` serves."""

from __future__ import annotations

from typing import Any

import pytest
from polyccm import metrics
from polyccm.errors import CloudError
from polyccm_gce_emulator.testing import (
    ComputeApi,
    RunningEmulator,
    gce_provider,
    node_for,
    service_for,
)

INTERNAL = {"networking.gke.io/load-balancer-type": "Internal"}
GLOBAL_ACCESS = "networking.gke.io/internal-load-balancer-allow-global-access"


@pytest.fixture
def provider(emulator: RunningEmulator, api: ComputeApi) -> Any:
    built = gce_provider(emulator.endpoint)
    built._cluster_id = "cafe0123"
    api.create_instance("m-a", tags=["m"])
    return built


def netlbs(status: str, deny: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "number_of_l4_netlbs", {"status": status, "deny_firewall": deny}
    )


def ilbs(feature: str) -> float | None:
    return metrics.REGISTRY.get_sample_value("number_of_l4_ilbs", {"feature": feature})


def test_number_of_l4_netlbs_counts_by_status_and_deny_firewall(provider: Any) -> None:
    # gce_loadbalancer_external.go:76-85 (Error until the end, DISABLED with the cleanup
    # alone), :311-315 (Success, IPv4 with the deny firewall), :442 (gone on delete).
    lb = provider.load_balancer()
    lb.deny_firewall = lb.deny_cleanup = True
    web = service_for("web")

    lb.ensure_load_balancer("c", web, [node_for("m-a")])

    assert netlbs("Success", "IPv4") == 1
    lb.deny_firewall = False
    with pytest.raises(CloudError):  # no instance for the node: upstream counts it in Error
        lb.ensure_load_balancer("c", service_for("broken"), [node_for("gone")])
    assert netlbs("Error", "DISABLED") == 1
    assert netlbs("Success", "IPv4") == 1

    lb.ensure_load_balancer_deleted("c", web)

    assert netlbs("Success", "IPv4") is None
    assert netlbs("Error", "DISABLED") == 1


def test_number_of_l4_ilbs_counts_features(provider: Any) -> None:
    # gce_loadbalancer_metrics.go:187-216 (every feature label, zero included) and
    # gce_loadbalancer_internal.go:90-96, 256-265, 469.
    lb = provider.load_balancer()
    service = service_for("ilb", annotations={**INTERNAL, GLOBAL_ACCESS: "true"})

    lb.ensure_load_balancer("c", service, [node_for("m-a")])

    assert {f: ilbs(f) for f in ("L4ILBService", "L4ILBInSuccess", "L4ILBInError",
                                 "L4ILBGlobalAccess", "L4ILBCustomSubnet")} == {
        "L4ILBService": 1, "L4ILBInSuccess": 1, "L4ILBInError": 0, "L4ILBGlobalAccess": 1,
        "L4ILBCustomSubnet": 0,
    }  # fmt: skip

    lb.ensure_load_balancer_deleted("c", service)

    assert (ilbs("L4ILBService"), ilbs("L4ILBGlobalAccess")) == (0, 0)
