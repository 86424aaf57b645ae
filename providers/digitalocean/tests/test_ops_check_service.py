"""``polyccm check-service --provider digitalocean``: every annotation the provider knows is
walked, and for each the command prints exactly what ensure raises or warns on the emulator
(the same function checks both, so the lines are the Warning events' messages)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from polyccm.errors import InvalidServiceSpec
from polyccm.objects import Service
from polyccm_digitalocean import annotations as ann
from polyccm_digitalocean_emulator.testing import DigitalOceanApi, provider_for
from polyccm_testing.opstools import (
    assert_refused,
    clean_manifest,
    malformed_manifests,
    run_polyccm,
    unreadable_files,
)

ERROR, WARNING, CLEAN = "error", "warning", ""

#: One case per annotation: a value, and whether ensure refuses it, warns about it or takes it.
CASES: dict[str, tuple[str, str]] = {
    ann.NAME: ("web server", ERROR),
    ann.PROTOCOL: ("ftp", ERROR),
    ann.HTTP_PORTS: ("8080", ERROR),
    ann.TLS_PORTS: ("80", ERROR),
    ann.HTTP2_PORTS: ("80", ERROR),
    ann.HTTP3_PORT: ("80,443", ERROR),
    ann.TLS_PASSTHROUGH: ("maybe", ERROR),
    ann.CERTIFICATE_ID: ("c0ffee00-0000-4000-8000-000000000001", WARNING),
    ann.CERTIFICATE_NAME: ("web", WARNING),
    ann.HOSTNAME: ("web.example.com", CLEAN),
    ann.REDIRECT_HTTP_TO_HTTPS: ("true", WARNING),
    ann.DISABLE_LETS_ENCRYPT_DNS_RECORDS: ("nope", ERROR),
    ann.SIZE_SLUG: ("lb-huge", ERROR),
    ann.SIZE_UNIT: ("0", ERROR),
    ann.STICKY_TYPE: ("cookies", ERROR),
    ann.STICKY_COOKIE_NAME: ("session", WARNING),
    ann.STICKY_COOKIE_TTL: ("soon", ERROR),
    ann.PROXY_PROTOCOL: ("on", ERROR),
    ann.BACKEND_KEEPALIVE: ("on", ERROR),
    ann.IDLE_TIMEOUT: ("5", ERROR),
    ann.HC_PATH: ("/ready", WARNING),
    ann.HC_PORT: ("80", WARNING),
    ann.HC_PROTOCOL: ("tcp", WARNING),
    # The four figures apply with or without the override (loadbalancers.go:1024-1039@v0.1.68).
    ann.HC_INTERVAL: ("5", CLEAN),
    ann.HC_TIMEOUT: ("1", ERROR),
    ann.HC_UNHEALTHY: ("3", CLEAN),
    ann.HC_HEALTHY: ("3", CLEAN),
    # Present is enough, whatever the value (loadbalancers.go:1006@v0.1.68).
    ann.OVERRIDE_HEALTH_CHECK: ("sure", CLEAN),
    # Deprecated, accepted silently (lb_annotations.go:116-121@v0.1.68).
    ann.ALGORITHM: ("least_connections", CLEAN),
    ann.ALLOW_RULES: ("host:192.0.2.1", ERROR),
    ann.DENY_RULES: ("cidr:300.0.0.0/8", ERROR),
    ann.TYPE: ("GLOBALISH", ERROR),
    ann.NETWORK: ("PUBLIC", ERROR),
    ann.NETWORK_STACK: ("IPV6", ERROR),
    ann.DISOWN: ("perhaps", ERROR),
}


def service_name(annotation: str) -> str:
    return annotation.rsplit("/", 1)[1].removeprefix("do-loadbalancer-")


def manifest(name: str, annotations: Mapping[str, str]) -> dict[str, Any]:
    """A Service as the API server stores it (uid, node port), so ensure can take it too."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()),
                     "annotations": dict(annotations)},
        "spec": {"type": "LoadBalancer",
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}]},
    }  # fmt: skip


def check_service(*manifests: Mapping[str, Any]) -> tuple[int, list[str]]:
    text = yaml.safe_dump_all(list(manifests))
    result = run_polyccm(["check-service", "--provider=digitalocean", "-f", "-"], stdin=text)
    assert not result.stderr, result
    return result.status, result.stdout.splitlines()


def test_the_cases_walk_every_annotation_the_provider_knows() -> None:
    assert set(CASES) == ann.KNOWN | {ann.DISOWN}


def test_each_annotation_gets_exactly_what_ensure_raises_or_warns(
    do: Mapping[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A REGIONAL default, where every annotation means something: check-service reads it as
    # the controller does.
    monkeypatch.setenv("DEFAULT_LB_TYPE", "REGIONAL")
    # certificate-name is looked up by ensure (only): let it name a certificate that exists.
    DigitalOceanApi(do).ok("POST", "/v2/certificates", {
        "name": "web", "type": "custom", "private_key": "k", "leaf_certificate": "c",
    })  # fmt: skip
    manifests = {a: manifest(service_name(a), {a: value}) for a, (value, _) in CASES.items()}

    status, lines = check_service(*manifests.values())

    balancer = provider_for(do, DEFAULT_LB_TYPE="REGIONAL").load_balancer()
    expected: list[str] = []
    for annotation, raw in manifests.items():
        prefix = f"default/{service_name(annotation)}: "
        try:
            answer = balancer.ensure_load_balancer("kubernetes", Service(raw), [])
        except InvalidServiceSpec as error:
            said = [f"{prefix}error: {error}"]
        else:
            said = [f"{prefix}warning: {warning}" for warning in answer.warnings]
        severity = CASES[annotation][1]
        assert [line.split(": ")[1] for line in said] == ([severity] if severity else []), said
        assert all(annotation in line for line in said), said
        expected += said
    assert lines == expected
    assert status == 1


def test_a_misspelled_annotation_is_named_and_a_clean_service_passes() -> None:
    misspelled = ann.PREFIX + "sizeslug"

    status, lines = check_service(manifest("typo", {misspelled: "lb-small"}))
    clean_status, clean_lines = check_service(manifest("web", {ann.SIZE_UNIT: "3"}))

    assert status == 1
    assert lines == [
        f"default/typo: warning: annotation {misspelled} is not a DigitalOcean load-balancer "
        "annotation; ignored (misspelled?)"
    ]
    assert (clean_status, clean_lines) == (0, [])


def test_by_default_what_a_regional_network_load_balancer_ignores_is_a_warning(
    do: Mapping[str, str],
) -> None:
    asked = manifest("web", {ann.PROTOCOL: "http", ann.TLS_PORTS: "80"})

    status, lines = check_service(asked)

    warnings = (
        provider_for(do)
        .load_balancer()
        .ensure_load_balancer("kubernetes", Service(asked), [])
        .warnings
    )
    assert status == 1 and len(lines) == 2
    assert lines == [f"default/web: warning: {warning}" for warning in warnings]
    assert all("REGIONAL_NETWORK" in line for line in lines)


# -- bad input: one line, exit 2 (the core refuses it before this provider's checks) ------------


def test_malformed_manifests_are_one_line_and_exit_2(tmp_path: Path) -> None:
    # Wrong types crashed this provider's checks (a traceback) or passed them (exit 0); the
    # API server refuses every one of these Services (core/tests/test_ops_check_service.py).
    for name, case in malformed_manifests(tmp_path, ann.PROTOCOL).items():
        result = run_polyccm(["check-service", "--provider=digitalocean", "-f", str(case.path)])

        assert_refused(result, "check-service", case, name)


def test_an_unreadable_cloud_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    manifest = clean_manifest(tmp_path)
    for name, case in unreadable_files(tmp_path, "cloud config").items():
        result = run_polyccm(
            [
                "check-service",
                "--provider=digitalocean",
                f"--cloud-config={case.path}",
                "-f",
                str(manifest),
            ]
        )

        assert_refused(result, "check-service", case, name)
