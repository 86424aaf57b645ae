"""``polyccm check-service --provider gce``: every annotation the provider knows, walked through
the command offline, each message compared with the one ensure raises against the emulator.
The table below must list exactly the provider's annotation table
(``service_spec.KNOWN_ANNOTATIONS``), so an annotation added there fails here until it has a
case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service
from polyccm_gce.service_spec import INTERNAL_ANNOTATIONS, KNOWN_ANNOTATIONS
from polyccm_gce_emulator.testing import CLUSTER, RunningEmulator, gce_provider, node_for
from polyccm_testing.opstools import (
    assert_refused,
    clean_manifest,
    malformed_manifests,
    run_polyccm,
    unreadable_files,
)

# annotation -> (a value it refuses, a value it accepts). The load-balancer-type annotations
# refuse nothing since the internal load balancer is built (polyccm_gce.internal_lb).
CASES: dict[str, tuple[str, str]] = {
    # gce_annotations.go:160-176@v36.3.8; k8s.io/cloud-provider service/helpers/helper.go:61-85.
    "cloud.google.com/network-tier": ("Gold", "Standard"),
    "service.beta.kubernetes.io/load-balancer-source-ranges": ("office", "192.0.2.0/24"),
}


def manifest(name: str, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    """A Service as a user writes it (no namespace, no node ports, no protocols)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80}], **spec},
    }


def ensure_refuses(emulator: RunningEmulator, raw: dict[str, Any]) -> str:
    """The message ensure_load_balancer raises for ``raw`` (completed as the API server
    would) against the emulator."""
    raw = json.loads(json.dumps(raw))
    raw["metadata"].update(namespace="default", uid="5f0e1d2c-3b4a-5968-7788-99aabbccddee")
    for index, port in enumerate(raw["spec"]["ports"]):
        port.setdefault("protocol", "TCP")
        port["nodePort"] = 30000 + index
    emulator.api().create_instance("check-a")
    with pytest.raises(InvalidServiceSpec) as refused:
        gce_provider(emulator.endpoint).load_balancer().ensure_load_balancer(
            CLUSTER, Service(raw), [node_for("check-a")]
        )
    return str(refused.value)


def test_the_cases_are_the_providers_annotation_table() -> None:
    assert set(CASES) == KNOWN_ANNOTATIONS


@pytest.mark.parametrize("annotation", sorted(CASES))
def test_every_annotation_is_checked_with_the_controllers_message(
    annotation: str, emulator: RunningEmulator
) -> None:
    refused, accepted = CASES[annotation]
    documents = [
        manifest("refused", {annotation: refused}),
        manifest("accepted", {annotation: accepted}),
    ]

    result = run_polyccm(
        ["check-service", "--provider=gce", "-f", "-"], stdin=yaml.safe_dump_all(documents)
    )

    assert result.status == 1, result.stderr
    message = ensure_refuses(emulator, documents[0])
    assert result.stdout == f"default/refused: error: {message}\n"
    assert emulator.control.calls().get("compute.forwardingRules.insert") is None


def test_what_the_network_load_balancer_cannot_serve_is_reported_and_a_clean_service_is_not(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    mixed = manifest(
        "mixed",
        {},
        ports=[{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "http", "port": 80}],
    )
    mixed["metadata"]["namespace"] = "shop"
    clean = tmp_path / "clean.yaml"
    clean.write_text(yaml.safe_dump(manifest("web", {}, externalTrafficPolicy="Local")))
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [mixed]}))

    fine = run_polyccm(["check-service", "--provider=gce", "-f", str(clean)])
    found = run_polyccm(["check-service", "--provider=gce", "-f", str(both)])

    assert (fine.status, fine.stdout, fine.stderr) == (0, "", "")
    assert found.status == 1
    assert found.stdout == f"shop/mixed: error: {ensure_refuses(emulator, mixed)}\n"


def test_a_broken_gce_conf_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "gce.conf"
    config.write_text("[global]\nproject = typo\nregional = sometimes\n")
    clean = tmp_path / "web.yaml"
    clean.write_text(yaml.safe_dump(manifest("web", {})))

    result = run_polyccm(
        ["check-service", "--provider=gce", f"--cloud-config={config}", "-f", str(clean)]
    )

    assert result.status == 2
    assert "regional must be true or false, not 'sometimes'" in result.stderr
    assert result.stderr.count("\n") == 1


# -- bad input: one line, exit 2 (the core refuses it before this provider's checks) ------------


def test_malformed_manifests_are_one_line_and_exit_2(tmp_path: Path) -> None:
    # Wrong types crashed this provider's checks (a traceback) or passed them (exit 0); the
    # API server refuses every one of these Services (core/tests/test_ops_check_service.py).
    for name, case in malformed_manifests(tmp_path, INTERNAL_ANNOTATIONS[0]).items():
        result = run_polyccm(["check-service", "--provider=gce", "-f", str(case.path)])

        assert_refused(result, "check-service", case, name)


def test_an_unreadable_cloud_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    manifest = clean_manifest(tmp_path)
    for name, case in unreadable_files(tmp_path, "cloud config").items():
        argv = ["--provider=gce", f"--cloud-config={case.path}", "-f", str(manifest)]
        result = run_polyccm(["check-service", *argv])

        assert_refused(result, "check-service", case, name)
