"""``polyccm check-service --provider packet``: every annotation the provider reads, walked
through the command, offline (no key, no project, no emulator), with the messages ensure gives.
``CASES`` must list exactly the provider's annotation table (``load_balancer.ANNOTATIONS``), so
an annotation added there fails here until it has a case."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service
from polyccm_packet.load_balancer import (
    ANNOTATIONS,
    EIP_FACILITY_ANNOTATION,
    EIP_METRO_ANNOTATION,
)
from polyccm_packet_emulator.testing import provider_for
from polyccm_testing.opstools import (
    CommandResult,
    assert_refused,
    clean_manifest,
    malformed_manifests,
    run_polyccm,
    unreadable_files,
)

# annotation -> a value that says where to reserve (accepted alone: it is the placement)
CASES: dict[str, str] = {
    EIP_METRO_ANNOTATION: "ny",
    EIP_FACILITY_ANNOTATION: "sv15",
}
NO_PLACEMENT = (
    f"error: no metro or facility to reserve an Elastic IP in: annotate the service with "
    f"{EIP_METRO_ANNOTATION} (or {EIP_FACILITY_ANNOTATION}), or configure METAL_METRO (or "
    "METAL_FACILITY)"
)


@pytest.fixture(autouse=True)
def no_metal_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of Metal in the environment: the check runs without key, project or API."""
    import os

    for name in list(os.environ):
        if name.startswith(("METAL_", "PACKET_")):
            monkeypatch.delenv(name)


def service(name: str, annotations: Mapping[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "shop", "annotations": dict(annotations)},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}], **spec},
    }


def check(tmp_path: Path, services: list[dict[str, Any]], *extra: str) -> CommandResult:
    path = tmp_path / "services.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": services}))
    return run_polyccm(["check-service", "--provider=packet", "-f", str(path), *extra])


def lines_by_service(result: CommandResult) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        key, rest = line.split(": ", 1)
        found.setdefault(key.removeprefix("shop/"), []).append(rest)
    return found


def cloud_config(tmp_path: Path, **keys: str) -> Path:
    """Upstream's JSON config: key and project (never read by the check), plus ``keys``."""
    path = tmp_path / "metal-cloud-config.json"
    path.write_text(json.dumps({"apiKey": "not-read", "projectID": "p-1", **keys}))
    return path


def test_the_cases_are_the_providers_annotation_table() -> None:
    assert set(CASES) == set(ANNOTATIONS)


def test_every_annotation_is_checked_with_the_controllers_message(tmp_path: Path) -> None:
    names = {annotation: f"s{index}" for index, annotation in enumerate(sorted(CASES))}
    services = [service("plain", {})]
    for annotation, value in CASES.items():
        services.append(service(names[annotation], {annotation: value}))
        services.append(
            service(f"{names[annotation]}-ip", {annotation: value}, loadBalancerIP="192.0.2.8")
        )
    services.append(service("both", CASES))
    services.append(service("v6", {}, loadBalancerIP="2001:db8::8"))
    # A cloud config without metro or facility: only the annotations say where.
    config = cloud_config(tmp_path)

    result = check(tmp_path, services, f"--cloud-config={config}")

    assert result.status == 1, result.stderr
    said = lines_by_service(result)
    assert said.pop("plain") == [NO_PLACEMENT]
    for annotation in CASES:
        assert names[annotation] not in said, f"{annotation} alone: {said[names[annotation]]}"
        # Beside spec.loadBalancerIP, unused without a word: upstream writes the address back
        # beside them on each Service it serves (metal/loadbalancers.go:485-500@38d15e2).
        assert f"{names[annotation]}-ip" not in said
    assert said.pop("both") == [
        f"warning: annotation {EIP_FACILITY_ANNOTATION} is ignored: {EIP_METRO_ANNOTATION} is "
        "set (a metro is chosen before a facility)"
    ]
    assert said.pop("v6") == [
        "error: spec.loadBalancerIP '2001:db8::8' is not an IPv4 address (an Elastic IP here is "
        "a public IPv4 /32)"
    ]
    assert said == {}


@pytest.mark.parametrize(
    ("how", "environment"),
    [
        ("a cloud config with a metro", {}),
        ("METAL_METRO", {"METAL_METRO": "da"}),
        ("METAL_FACILITY", {"METAL_FACILITY": "da11"}),
        ("nothing said (where the cluster reserves is unknown)", {}),
    ],
)
def test_a_plain_service_is_clean_wherever_a_placement_may_come_from(
    how: str, environment: Mapping[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    extra = [f"--cloud-config={cloud_config(tmp_path, metro='da')}"] if "config" in how else []

    result = check(tmp_path, [service("web", {})], *extra)

    assert (result.status, result.stdout, result.stderr) == (0, "", ""), how


def test_a_malformed_cloud_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "metal.json"
    config.write_text("[1, 2]")

    result = check(tmp_path, [service("web", {})], f"--cloud-config={config}")

    assert result.status == 2
    assert result.stderr == f"polyccm check-service: error: {config}: must be a JSON object\n"


def test_the_messages_are_ensures_own(
    metal: Mapping[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    both = service("both", CASES)
    plain = service("plain", {})
    for name in ("METAL_METRO", "METAL_METRO_NAME"):  # neither the provider nor the check
        monkeypatch.delenv(name)
    balancer = provider_for({k: v for k, v in metal.items() if "METRO" not in k}).load_balancer()

    status = balancer.ensure_load_balancer("k", Service(both), [])
    with pytest.raises(InvalidServiceSpec) as refused:
        balancer.ensure_load_balancer("k", Service(plain), [])
    result = check(tmp_path, [both, plain], f"--cloud-config={cloud_config(tmp_path)}")

    assert lines_by_service(result) == {
        "both": [f"warning: {w}" for w in status.warnings],
        "plain": [f"error: {refused.value}"],
    }


# -- bad input: one line, exit 2 (the core refuses it before this provider's checks) ------------


def test_malformed_manifests_are_one_line_and_exit_2(tmp_path: Path) -> None:
    # Wrong types crashed this provider's checks (a traceback) or passed them (exit 0); the
    # API server refuses every one of these Services (core/tests/test_ops_check_service.py).
    for name, case in malformed_manifests(tmp_path, EIP_METRO_ANNOTATION).items():
        result = run_polyccm(["check-service", "--provider=packet", "-f", str(case.path)])

        assert_refused(result, "check-service", case, name)


def test_an_unreadable_cloud_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    manifest = clean_manifest(tmp_path)
    for name, case in unreadable_files(tmp_path, "cloud config").items():
        result = run_polyccm(
            [
                "check-service",
                "--provider=packet",
                f"--cloud-config={case.path}",
                "-f",
                str(manifest),
            ]
        )

        assert_refused(result, "check-service", case, name)
