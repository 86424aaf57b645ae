"""Which controller builds a Service's external load balancer: cloud-provider-gcp's rule
(``shouldProcessNetLB``), pure."""

from __future__ import annotations

from typing import Any

import pytest
from polyccm.errors import ImplementedElsewhere
from polyccm_gce.checker import GceServiceChecker
from polyccm_gce.service_spec import (
    LEGACY_FINALIZER,
    RBS_ANNOTATION,
    implemented_elsewhere,
    validate_service,
)
from polyccm_gce_emulator.testing import service_for

V2 = "gke.networking.io/l4-netlb-v2"


def with_finalizers(service: Any, *finalizers: str) -> Any:
    service.raw["metadata"]["finalizers"] = list(finalizers)
    return service


@pytest.mark.parametrize(
    ("service", "owner"),
    [
        (service_for(), None),
        (service_for(annotations={RBS_ANNOTATION: "enabled"}), "annotation"),
        (service_for(annotations={RBS_ANNOTATION: "Enabled"}), None),  # upstream: exactly
        (service_for(annotations={RBS_ANNOTATION: "disabled"}), None),
        (with_finalizers(service_for(), V2), "finalizer"),
        (with_finalizers(service_for(), "gke.networking.io/l4-netlb-v3"), "finalizer"),
        # Upstream's own finalizer keeps the Service with the target-pool load balancer.
        (
            with_finalizers(service_for(annotations={RBS_ANNOTATION: "enabled"}), LEGACY_FINALIZER),
            None,
        ),
        (with_finalizers(service_for(), LEGACY_FINALIZER, V2), None),
    ],
)
def test_the_regional_backend_service_controllers_services_are_left_to_it(
    service: Any, owner: str | None
) -> None:
    reason = implemented_elsewhere(service)

    assert (reason or "").split(" ")[0] == (owner or "")
    checked = GceServiceChecker().check_service(service)
    assert checked == []  # nothing wrong with either: skipped or valid


def test_a_forwarding_rule_with_a_backend_service_is_the_other_controllers() -> None:
    service = service_for()
    backend = "regions/us-central1/backendServices/k8s2-abc"

    assert implemented_elsewhere(service, rule_backend_service=backend) == (
        f"its forwarding rule sends to backend service {backend}"
    )
    kept = with_finalizers(service_for(), LEGACY_FINALIZER)
    assert implemented_elsewhere(kept, rule_backend_service=backend) is None


def test_the_internal_scheme_is_decided_before_the_owner_and_the_owner_before_ports() -> None:
    internal = service_for(
        annotations={RBS_ANNOTATION: "enabled", "networking.gke.io/load-balancer-type": "Internal"}
    )
    mixed = service_for(ports=((53, "UDP"), (80, "TCP")), annotations={RBS_ANNOTATION: "enabled"})

    # gce_loadbalancer.go:199-203@v36.3.8: the scheme is decided first, and only the external
    # path asks shouldProcessNetLB (gce_loadbalancer_external.go:67): an internal Service is
    # this controller's whatever the RBS annotation says.
    assert validate_service(internal) == ("TCP", ["80"])
    with pytest.raises(ImplementedElsewhere, match=RBS_ANNOTATION):
        validate_service(mixed)
    assert GceServiceChecker().check_service(mixed) == []
