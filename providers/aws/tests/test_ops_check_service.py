"""``polyccm check-service --provider aws``: every annotation the provider knows, walked through
the command, offline. The table below must list exactly the provider's annotation table
(``annotations.KNOWN``), so an annotation added there fails here until it has a case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from polyccm_aws import annotations as ann
from polyccm_testing.opstools import (
    assert_refused,
    clean_manifest,
    malformed_manifests,
    run_polyccm,
    unreadable_files,
)

# annotation -> (a value, "error" / "warning" it must draw, or "" for a value it accepts)
CASES: dict[str, tuple[str, str]] = {
    ann.TYPE: ("alb", "warning"),
    ann.INTERNAL: ("False", "warning"),
    ann.SUBNETS: (" , ", "error"),
    ann.SECURITY_GROUPS: ("default", "error"),
    ann.EXTRA_SECURITY_GROUPS: ("web", "error"),
    ann.SSL_CERT: ("my-certificate", "error"),
    ann.SSL_PORTS: ("443", "warning"),
    ann.SSL_NEGOTIATION_POLICY: ("ELBSecurityPolicy-TLS-1-2-2017-01", ""),
    ann.BACKEND_PROTOCOL: ("HTTP", "warning"),
    ann.PROXY_PROTOCOL: ("true", "error"),
    ann.CONNECTION_DRAINING_ENABLED: ("yes", "error"),
    ann.CONNECTION_DRAINING_TIMEOUT: ("0", "error"),
    ann.CONNECTION_IDLE_TIMEOUT: ("5000", "error"),
    ann.CROSS_ZONE: ("maybe", "error"),
    ann.ACCESS_LOG_ENABLED: ("true", "error"),
    ann.ACCESS_LOG_EMIT_INTERVAL: ("ten", "error"),
    ann.ACCESS_LOG_BUCKET: ("my-logs", ""),
    ann.ACCESS_LOG_PREFIX: ("web/", ""),
    ann.ADDITIONAL_TAGS: ("aws:owner=me", "error"),
    ann.HC_PROTOCOL: ("UDP", "error"),
    ann.HC_PORT: ("http", "error"),
    ann.HC_PATH: ("/ready", "warning"),
    ann.HC_INTERVAL: ("1", "error"),
    ann.HC_TIMEOUT: ("100", "error"),  # a classic ELB's timeout must be below its interval
    ann.HC_HEALTHY: ("1", "error"),
    ann.HC_UNHEALTHY: ("11", "error"),
    ann.TARGET_GROUP_ATTRIBUTES: ("preserve_client_ip.enabled=true", "error"),
    ann.EIP_ALLOCATIONS: ("eipalloc-1", "warning"),
    ann.PRIVATE_IPV4_ADDRESSES: ("10.0.0.10", "warning"),
    ann.TARGET_NODE_LABELS: ("pool=web", ""),
}


def service(name: str, annotations: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "shop", "annotations": annotations},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80}]},
    }


def test_the_cases_are_the_providers_annotation_table() -> None:
    assert set(CASES) == ann.KNOWN


def test_every_annotation_is_checked_with_the_controllers_message(tmp_path: Path) -> None:
    names = {annotation: f"s{index}" for index, annotation in enumerate(sorted(CASES))}
    manifest = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            service(names[annotation], {annotation: value})
            for annotation, (value, _) in CASES.items()
        ]
        + [service("unknown", {f"{ann.PREFIX}colour": "blue"})],
    }
    path = tmp_path / "services.json"
    path.write_text(json.dumps(manifest))

    result = run_polyccm(["check-service", "--provider=aws", "-f", str(path)])

    assert result.status == 1, result.stderr
    lines: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        key, rest = line.split(": ", 1)
        lines.setdefault(key.removeprefix("shop/"), []).append(rest)
    for annotation, (value, severity) in CASES.items():
        said = lines.get(names[annotation], [])
        if not severity:
            assert said == [], f"{annotation}={value!r} drew {said}"
            continue
        assert said, f"{annotation}={value!r} drew no {severity}"
        assert all(s.startswith(f"{severity}: ") and annotation in s for s in said), said
    assert lines["unknown"] == [
        f"warning: annotation {ann.PREFIX}colour is not known to the AWS provider; ignored"
    ]


def test_a_clean_service_and_the_nlb_warning_that_needs_the_cloud_config(tmp_path: Path) -> None:
    path = tmp_path / "service.json"
    groups = {ann.TYPE: ann.NLB, ann.SECURITY_GROUPS: "sg-0123"}
    path.write_text(
        json.dumps({"kind": "List", "items": [service("clean", {}), service("nlb", groups)]})
    )
    managed = tmp_path / "cloud.conf"
    managed.write_text("[Global]\nNLBSecurityGroupMode = Managed\n")

    default = run_polyccm(["check-service", "--provider=aws", "-f", str(path)])
    with_config = run_polyccm(
        ["check-service", "--provider=aws", f"--cloud-config={managed}", "-f", str(path)]
    )

    assert default.stdout == (
        f"shop/nlb: warning: annotation {ann.SECURITY_GROUPS}='sg-0123': no effect on an NLB "
        "unless the cloud config sets NLBSecurityGroupMode = Managed\n"
    )
    assert (with_config.status, with_config.stdout) == (0, "")


@pytest.mark.parametrize("value", ["nlb-ip", "external"])
def test_services_of_the_aws_load_balancer_controller_are_not_checked(
    value: str, tmp_path: Path
) -> None:
    path = tmp_path / "service.json"
    path.write_text(json.dumps(service("lbc", {ann.TYPE: value, ann.HC_INTERVAL: "1"})))

    result = run_polyccm(["check-service", "--provider=aws", "-f", str(path)])

    assert (result.status, result.stdout) == (0, "")


def test_a_malformed_cloud_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "service.json"
    path.write_text(json.dumps(service("web", {})))
    config = tmp_path / "cloud.conf"
    config.write_text("[Global]\nNoSuchKey = 1\nRegion\n= eu-west-1\n")  # a value alone

    result = run_polyccm(
        ["check-service", "--provider=aws", f"--cloud-config={config}", "-f", str(path)]
    )

    assert result.status == 2
    assert result.stderr.startswith(f"polyccm check-service: error: {config}")
    assert len(result.stderr.splitlines()) == 1


# -- bad input: one line, exit 2 (the core refuses it before this provider's checks) ------------


def test_malformed_manifests_are_one_line_and_exit_2(tmp_path: Path) -> None:
    # Wrong types crashed this provider's checks (a traceback) or passed them (exit 0); the
    # API server refuses every one of these Services (core/tests/test_ops_check_service.py).
    for name, case in malformed_manifests(tmp_path, ann.INTERNAL).items():
        result = run_polyccm(["check-service", "--provider=aws", "-f", str(case.path)])

        assert_refused(result, "check-service", case, name)


def test_an_unreadable_cloud_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    manifest = clean_manifest(tmp_path)
    for name, case in unreadable_files(tmp_path, "cloud config").items():
        argv = ["--provider=aws", f"--cloud-config={case.path}", "-f", str(manifest)]
        result = run_polyccm(["check-service", *argv])

        assert_refused(result, "check-service", case, name)
