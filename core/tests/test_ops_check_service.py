"""``polyccm check-service``: a manifest checked offline by the provider's own validation (the
fake provider's here), one line per problem, exit 1 with problems, 0 without, 2 for bad input;
and no cloud call at all."""

from __future__ import annotations

from pathlib import Path

import pytest
from polyccm import cloudcalls
from polyccm.objects import Service
from polyccm.ops.check import completed
from polyccm_testing.fake import REFUSE_ANNOTATION, WARN_ANNOTATION, FakeCloud
from polyccm_testing.fake_main import FakeCloudPlugin
from polyccm_testing.opstools import CommandResult, run_polyccm

MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  annotations: {ANNOTATIONS}
spec:
  type: LoadBalancer
  ports: [{port: 80, targetPort: 8080}]
"""


def check(manifest: str, tmp_path: Path, *extra: str) -> CommandResult:
    path = tmp_path / "service.yaml"
    path.write_text(manifest)
    return run_polyccm(
        ["check-service", "--provider=fake", "-f", str(path), *extra],
        plugins=[FakeCloudPlugin(FakeCloud())],
    )


def test_a_clean_service_exits_0_silently(tmp_path: Path) -> None:
    result = check(MANIFEST.replace("{ANNOTATIONS}", "{}"), tmp_path)

    assert (result.status, result.stdout, result.stderr) == (0, "", "")


def test_each_problem_is_one_line_worded_as_the_controller_words_it(tmp_path: Path) -> None:
    annotations = f'{{"{REFUSE_ANNOTATION}": "x"}}'
    result = check(MANIFEST.replace("{ANNOTATIONS}", annotations), tmp_path)

    assert result.status == 1
    assert result.stdout == (
        f"default/web: error: annotation {REFUSE_ANNOTATION}='x': refused as asked\n"
    )


def test_warnings_count_as_problems(tmp_path: Path) -> None:
    annotations = f'{{"{WARN_ANNOTATION}": "odd"}}'
    result = check(MANIFEST.replace("{ANNOTATIONS}", annotations), tmp_path)

    assert result.status == 1
    assert result.stdout == (
        f"default/web: warning: annotation {WARN_ANNOTATION}='odd': warned as asked\n"
    )


def test_stdin_as_kubectl_takes_it() -> None:
    manifest = MANIFEST.replace("{ANNOTATIONS}", f'{{"{REFUSE_ANNOTATION}": "x"}}')
    result = run_polyccm(
        ["check-service", "--provider=fake", "-f", "-"],
        plugins=[FakeCloudPlugin(FakeCloud())],
        stdin=manifest,
    )

    assert result.status == 1
    assert result.stdout.startswith("default/web: error:")


def test_services_that_get_no_load_balancer_are_passed_over(tmp_path: Path) -> None:
    manifest = MANIFEST.replace("{ANNOTATIONS}", f'{{"{REFUSE_ANNOTATION}": "x"}}')
    result = check(manifest.replace("type: LoadBalancer", "type: ClusterIP"), tmp_path)

    assert (result.status, result.stdout) == (0, "")


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("kind: [", "service.yaml:1: "),
        ("apiVersion: v1\nkind: ConfigMap\n", "no Service (apiVersion v1) in it"),
        ("apiVersion: v1\nkind: Service\nspec: {}\n", "a Service without metadata.name"),
    ],
)
def test_bad_manifests_are_one_line_and_exit_2(manifest: str, message: str, tmp_path: Path) -> None:
    result = check(manifest, tmp_path)

    assert result.status == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_flags_and_unknown_providers_exit_2(tmp_path: Path) -> None:
    fake = [FakeCloudPlugin(FakeCloud())]
    missing = run_polyccm(
        ["check-service", "--provider=fake", "-f", str(tmp_path / "none")], plugins=fake
    )
    unknown = run_polyccm(["check-service", "--provider=nope", "-f", "-"], plugins=fake)
    no_file = run_polyccm(["check-service", "--provider=fake"], plugins=fake)

    assert missing.status == unknown.status == no_file.status == 2
    assert "cannot read" in missing.stderr
    assert "the following arguments are required: -f/--filename" in no_file.stderr
    assert "unknown provider 'nope'" in unknown.stderr


class SilentPlugin(FakeCloudPlugin):
    """The fake provider without an offline check."""

    def polyccm_build_service_checker(self, settings: object) -> None:
        return None


def test_a_provider_without_a_checker_is_not_supported(tmp_path: Path) -> None:
    path = tmp_path / "service.yaml"
    path.write_text(MANIFEST.replace("{ANNOTATIONS}", "{}"))

    result = run_polyccm(
        ["check-service", "--provider=fake", "-f", str(path)], plugins=[SilentPlugin()]
    )

    assert result.status == 2
    assert result.stderr == "polyccm check-service: error: not supported by provider fake\n"


def test_no_cloud_call_is_made(tmp_path: Path) -> None:
    before = cloudcalls.calls_made("fake")

    check(MANIFEST.replace("{ANNOTATIONS}", f'{{"{REFUSE_ANNOTATION}": "x"}}'), tmp_path)

    assert cloudcalls.calls_made("fake") == before


def test_the_manifest_is_completed_as_the_api_server_would() -> None:
    raw = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}, {"port": 443, "nodePort": 31443}]},
    }

    service = Service(completed(raw))

    assert service.key == "default/web"
    assert service.uid
    assert [(p.protocol, p.node_port) for p in service.ports] == [("TCP", 30000), ("TCP", 31443)]
    assert raw["metadata"] == {"name": "web"}  # the input is left as written
    unallocated = {**raw, "spec": {**raw["spec"], "allocateLoadBalancerNodePorts": False}}
    assert [p.node_port for p in Service(completed(unallocated)).ports] == [0, 31443]
